"""How many chunks hold each FTS5 token, kept beside the SQLite index by every write (a key lookup for BM25).

Every search needs, per query word, the number of chunks holding it (BM25's idf, the keyword leg's plan).
FTS5 answers `count(*) … match '"word"'` by walking the word's whole doclist: ~1 ms for a typical word
at 100k chunks and 10–40 ms for one in most chunks, paid again for every new word after each write.
This table holds the same number, exactly: FTS5's own tokenizer counts the tokens of the chunks a write
adds and removes (their text goes through a scratch FTS5 table on the writing connection, read back
through fts5vocab), in the write's transaction, so a kill leaves old or new, never half. An index made
before the table existed gets it filled from the index's own vocabulary when it is opened (migration 6).
PostgreSQL keeps the same table (memory.store.postgres.schema token_df).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hermit.db import Connection, DatabaseError
from hermit.memory.search.fts import FTS_TOKENIZER


def create(conn: Connection) -> None:
    """The table, filled from the FTS index's vocabulary (one pass over it, in C)."""
    conn.execute("create table token_docs(token text primary key, docs integer not null) without rowid")
    conn.execute("create virtual table temp.chunks_vocab_fill using fts5vocab(main, chunks_fts, row)")
    try:
        conn.execute("insert into token_docs(token, docs) select term, doc from temp.chunks_vocab_fill")
    finally:
        conn.execute("drop table temp.chunks_vocab_fill")


def _scratch(conn: Connection) -> None:
    # Contentless: it only needs the postings, and 'delete-all' empties it without re-reading each row.
    conn.execute("create virtual table if not exists temp.token_scratch using fts5(text, content='',"
                 f" tokenize='{FTS_TOKENIZER}')")
    conn.execute("create virtual table if not exists temp.token_scratch_vocab using fts5vocab(temp, token_scratch, row)")


def count_removed(conn: Connection, ids: Sequence[int]) -> None:
    """Before chunks `ids` leave chunks_fts: take their tokens off (their indexed text, as FTS5 holds it)."""
    if ids:
        _scratch(conn)
        for at in range(0, len(ids), 500):
            part = ids[at:at + 500]
            conn.execute("insert into temp.token_scratch(text) select text from chunks_fts"
                         f" where rowid in ({','.join('?' * len(part))})", part)
        _apply(conn, -1)


def count_added(conn: Connection, texts: Sequence[str]) -> None:
    """After chunks with these indexed texts (fts.index_text) went into chunks_fts: add their tokens."""
    if texts:
        _scratch(conn)
        conn.executemany("insert into temp.token_scratch(text) values (?)", [(t,) for t in texts])
        _apply(conn, 1)


def _apply(conn: Connection, sign: int) -> None:
    conn.execute("insert into token_docs(token, docs) select term, ? * doc from temp.token_scratch_vocab where true"
                 " on conflict(token) do update set docs = docs + excluded.docs", (sign,))
    if sign < 0:
        conn.execute("delete from token_docs where docs <= 0 and token in (select term from temp.token_scratch_vocab)")
    conn.execute("insert into temp.token_scratch(token_scratch) values ('delete-all')")


def lookup(conn: Connection, tokens: Iterable[str]) -> dict[str, int] | None:
    """Chunks holding each of `tokens` (FTS5 tokens: lower-cased, porter-stemmed; a token in none is
    absent); None when this index has no table yet (opened read-only before a writer migrated it: the
    caller counts through FTS5)."""
    want = list(tokens)
    try:
        return {str(t): int(d) for t, d in conn.execute(
            f"select token, docs from token_docs where token in ({','.join('?' * len(want))})", want)}
    except DatabaseError:
        return None
