"""A removed chunk's vector leaves the embedding cache on PostgreSQL too, as on SQLite (memory.store.residue).

The embedding cache holds a vector per chunk text, and an embedding can be partly inverted to its text. SQLite's
index drops the cache rows of removed chunks that no chunk uses any more at the end of the sync that removed
them (tests/test_index_residue.py). Before, the PostgreSQL store kept them as live rows for good — the line
edited out, a deleted chat message scrubbed from a note, a deleted file: `select … from embedding_cache` gave
each one's vector back (here 1 of 1 removed chunks, and after a rebuild every chunk of the old index) until the
cache cap (50,000 by default) pushed it out. Now the hashes a write removes are noted in its transaction and
dropped at the end of the sync, and a rebuild swaps in only the cache rows its chunks use. Run on both stores."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import write
from hermit.memory.service import MemoryService
from memhelpers import HashEmbedder, service, sql

SECRET_LINE = "- the garage door code is 4111, ask Quixwell at the Brambledown lodge\n"
NOTE = "memory/2026-03-04.md"


def _hashes(svc: MemoryService, path: str) -> set[str]:
    return {str(r[0]) for r in sql(svc, "select hash from {t}chunks where path = ?", (path,))}


def _cached(svc: MemoryService) -> set[str]:
    return {str(r[0]) for r in sql(svc, "select hash from {t}embedding_cache")}


def test_an_edited_out_line_leaves_the_embedding_cache(workspace: Path, tmp_path: Path, store_backend: str) -> None:
    write(workspace / NOTE, "# March 4\n" + SECRET_LINE)
    write(workspace / "MEMORY.md", "# Memory\n- likes green tea\n")
    svc = service(workspace, tmp_path / "idx.sqlite", HashEmbedder())
    try:
        svc.sync()
        old, kept = _hashes(svc, NOTE), _hashes(svc, "MEMORY.md")
        assert old and old <= _cached(svc)

        write(workspace / NOTE, "# March 4\n- a quiet day\n")
        svc.sync()
        cached = _cached(svc)
        assert not old & cached, f"{len(old & cached)} of {len(old)} removed chunks' vectors are still cached"
        assert kept <= cached, "the chunks still indexed keep theirs"
        assert svc.sync().embedded == 0, "nothing unchanged is embedded again"
    finally:
        svc.close()


def test_a_renamed_note_still_comes_from_the_cache_and_a_deleted_one_leaves_it(
        workspace: Path, tmp_path: Path, store_backend: str) -> None:
    write(workspace / NOTE, "# March 4\n" + SECRET_LINE)
    svc = service(workspace, tmp_path / "idx.sqlite", HashEmbedder())
    try:
        svc.sync()
        old = _hashes(svc, NOTE)
        os.replace(workspace / NOTE, workspace / "memory" / "garage.md")
        report = svc.sync()
        assert report.embedded == 0 and report.cache_hits >= len(old), "a renamed note is not embedded again"
        assert old <= _cached(svc)

        (workspace / "memory" / "garage.md").unlink()
        svc.sync()
        assert not old & _cached(svc), "a deleted note's vectors are still cached"
    finally:
        svc.close()


def test_a_rebuild_keeps_only_the_cache_rows_its_chunks_use(workspace: Path, tmp_path: Path,
                                                           store_backend: str) -> None:
    write(workspace / NOTE, "# March 4\n" + SECRET_LINE)
    svc = service(workspace, tmp_path / "idx.sqlite", HashEmbedder())
    try:
        svc.sync()
        old = _hashes(svc, NOTE)
        # A kill after the write, before the end of the sync: the rows wait for the next sync's end, or a rebuild.
        svc.store.delete_file(NOTE)
        (workspace / NOTE).unlink()
        write(workspace / "memory" / "other.md", "# Other\n- bought apples\n")
        svc.sync(force=True)
        cached = _cached(svc)
        assert not old & cached, "a rebuild kept the old index's cache rows of chunks gone since"
        assert _hashes(svc, "memory/other.md") <= cached
    finally:
        svc.close()
