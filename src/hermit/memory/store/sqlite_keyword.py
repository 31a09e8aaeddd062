"""The SQLite store's keyword reads (memory/store/sqlite.py): FTS5's ranked search (bm25()), its counts of
matching chunks (one-token words from token_docs: memory.store.token_counts), the totals and document lengths BM25
needs, read from FTS5's own records (`read_varint`), and the scores of given chunks.

These are IndexStore's methods (`fts_search`, `fts_counts`, `fts_stats`, ...), kept here so sqlite.py holds the
schema, the writes, the embedding cache and the vectors; each takes the store first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hermit.memory.search.keyword import FtsTokens
from hermit.memory.store import token_counts

if TYPE_CHECKING:
    from hermit.memory.store.sqlite import IndexStore


_ONE_PHRASE = re.compile(r'"((?:[^"]|"")*)"')


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """SQLite's big-endian varint (FTS5 stores its counts this way): (value, next position)."""
    v = 0
    for k in range(9):
        if pos >= len(buf):
            break
        b = buf[pos]
        pos += 1
        if k == 8:
            return (v << 8) | b, pos
        v = (v << 7) | (b & 0x7F)
        if not b & 0x80:
            break
    return v, pos


def fts_search(store: IndexStore, match: str, limit: int, min_rowid: int | None = None) -> list[tuple[int, float]]:
    """(chunk id, relevance ≥ 0) best first. FTS5 bm25() is negative, more negative = better.

    `min_rowid` limits the scan to newer chunks (FTS5 seeks its doclists to the range)."""
    where = "" if min_rowid is None else f" and rowid >= {int(min_rowid)}"
    rows = store.conn.execute(
        f"select rowid, bm25(chunks_fts) as r from chunks_fts where chunks_fts match ?{where} order by r limit ?",
        (match, limit),
    ).fetchall()
    return [(int(i), max(0.0, -float(r))) for i, r in rows]


def fts_count(store: IndexStore, match: str) -> int:
    return store.fts_counts([match])[0]


def fts_counts(store: IndexStore, matches: Sequence[str]) -> list[int]:
    """Chunks matching each expression: one quoted word of one token is looked up in token_docs
    (memory.store.token_counts; the words of a query in one statement), anything else FTS5 counts by
    walking the doclists (no ranking, so ~20× cheaper than fts_search)."""
    if store._tokens is None:
        store._tokens = FtsTokens()
    words: dict[int, str] = {}
    for k, match in enumerate(matches):
        one = _ONE_PHRASE.fullmatch(match)
        toks = store._tokens.tokens([one.group(1).replace('""', '"')])[0] if one else ()
        if len(toks) == 1:
            words[k] = toks[0]
    docs = token_counts.lookup(store.conn, set(words.values())) if words else None
    return [docs.get(words[k], 0) if docs is not None and k in words else
            int(store.conn.execute("select count(*) from chunks_fts where chunks_fts match ?", (m,)).fetchone()[0])
            for k, m in enumerate(matches)]


def fts_stats(store: IndexStore) -> tuple[int, float]:
    """(rows, average tokens per row) as FTS5's bm25() sees them, from its averages record."""
    row = store.conn.execute("select block from chunks_fts_data where id = 1").fetchone()
    if not row or not row[0]:
        return 0, 0.0
    n, pos = read_varint(row[0], 0)
    total, _ = read_varint(row[0], pos)
    return n, (total / n if n else 0.0)


def fts_doc_lengths(store: IndexStore, ids: Sequence[int]) -> dict[int, int]:
    """Tokens per chunk as FTS5 counted them (its docsize table)."""
    out: dict[int, int] = {}
    for i in range(0, len(ids), 500):
        part = list(ids[i:i + 500])
        marks = ",".join("?" * len(part))
        for cid, blob in store.conn.execute(f"select id, sz from chunks_fts_docsize where id in ({marks})", part):
            out[int(cid)] = read_varint(blob, 0)[0] if blob else 0
    return out



def fts_scores(store: IndexStore, match: str, ids: Sequence[int]) -> dict[int, float]:
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = store.conn.execute(
        f"select rowid, bm25(chunks_fts) from chunks_fts where chunks_fts match ? and rowid in ({marks})",
        (match, *ids),
    ).fetchall()
    return {int(i): max(0.0, -float(r)) for i, r in rows}
