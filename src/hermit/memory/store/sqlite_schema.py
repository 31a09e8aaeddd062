"""The SQLite memory index's schema: its numbered migrations (`pragma user_version` counts those applied).

Each runs in one transaction when an index is opened for writing (hermit.db.migrate), so an index written by
an older Hermit is upgraded in place: a migration adds what is new and keeps every chunk and vector.
"""

from __future__ import annotations

from hermit.db import Connection
from hermit.memory.search.fts import FTS_TOKENIZER
from hermit.memory.store import token_counts
from hermit.memory.store.api import script_class


def _script(conn: Connection, sql: str) -> None:
    # executescript() would COMMIT the migration's transaction early; run statements one by one.
    for stmt in sql.split(";"):
        if stmt.strip():
            conn.execute(stmt)


def _m1(conn: Connection) -> None:
    _script(
        conn,
        f"""
        create table meta(key text primary key, value text not null);
        create table files(
            path text primary key, source text not null, hash text not null,
            mtime integer not null, size integer not null, embedded integer not null default 1,
            indexed_at integer not null);
        create table chunks(
            id integer primary key, path text not null, source text not null,
            start_line integer not null, end_line integer not null, hash text not null,
            model text, text text not null, updated_at integer not null, gen integer not null default 0);
        create index chunks_path on chunks(path);
        create index chunks_gen on chunks(gen);
        create virtual table chunks_fts using fts5(text, tokenize='{FTS_TOKENIZER}');
        create table embedding_cache(
            provider text not null, model text not null, provider_key text not null, hash text not null,
            embedding blob not null, dims integer not null, updated_at integer not null,
            primary key(provider, model, provider_key, hash));
        """
    )


def _m2(conn: Connection) -> None:
    # Message count of an indexed session transcript (re-index after 50 new messages).
    conn.execute("alter table files add column messages integer not null default 0")


def _m3(conn: Connection) -> None:
    # Whether a chunk holds CJK text: search only embeds a translated query when the other language exists.
    conn.execute("alter table chunks add column cjk integer not null default 0")
    conn.execute("update chunks set cjk = 1 where text glob '*[一-鿿]*' or text glob '*[぀-ヿ]*' or text glob '*[가-힯]*'")


def _m4(conn: Connection) -> None:
    # cjk becomes a language class (see script_class): 0 no CJK, 1 mixed, 2 mostly CJK.
    rows = conn.execute("select id, text from chunks").fetchall()
    conn.executemany("update chunks set cjk=? where id=?", [(script_class(t), i) for i, t in rows])


def _m5(conn: Connection) -> None:
    # A vector per non-blank line (memory.index.line_vectors), float16, kept by replace_file with the chunks. A
    # rowid table with an index rather than WITHOUT ROWID: count(*) reads the small index (36 → ~1 ms at
    # 10k chunks), not every vector.
    conn.execute("create table line_vectors(path text not null, line integer not null, embedding blob not null)")
    conn.execute("create unique index line_vectors_at on line_vectors(path, line)")


def _m6(conn: Connection) -> None:
    # Chunks per FTS5 token (memory.store.token_counts), so a search's word counts are key lookups.
    token_counts.create(conn)


def _m7(conn: Connection) -> None:
    # Each file's identity beside its mtime and size (memory.store.api.file_ident): a file replaced by one of the
    # same size and mtime is read again. "" for the files indexed before: the next sync checks each once by its
    # hash (no embedding when it is unchanged) and records its identity then.
    if "ident" not in {r[1] for r in conn.execute("pragma table_info(files)")}:  # an index migrated back by hand
        conn.execute("alter table files add column ident text not null default ''")


def _m8(conn: Connection) -> None:
    # Delete means delete on disk too (memory.store.sqlite: residue). FTS5's secure-delete takes a removed
    # chunk's tokens out of the segments at once (kept in chunks_fts_config, so every later writer does the
    # same), instead of a delete marker beside them until a merge. 'optimize' merges what an older Hermit left
    # (the tokens of text removed before). cache_unused holds the hashes of the chunks a write removed, until
    # the end of the sync drops their cache rows that nothing uses (residue.settle; the two hash indexes make
    # that a few key lookups); the rows already orphaned go now. The freed pages are zeroed by
    # `pragma secure_delete`; the file is vacuumed once after this migration (IndexStore, meta residue_vacuum).
    conn.execute("insert into chunks_fts(chunks_fts, rank) values ('secure-delete', 1)")
    conn.execute("insert into chunks_fts(chunks_fts) values ('optimize')")
    conn.execute("create index if not exists chunks_hash on chunks(hash)")
    conn.execute("create index if not exists embedding_cache_hash on embedding_cache(hash)")
    conn.execute("create table if not exists cache_unused(hash text primary key) without rowid")
    conn.execute("delete from embedding_cache where hash not in (select hash from chunks)")
    conn.execute("insert or replace into meta(key, value) values ('residue_vacuum', 'pending')")


MIGRATIONS = [_m1, _m2, _m3, _m4, _m5, _m6, _m7, _m8]
