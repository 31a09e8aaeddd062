"""Indexing: incremental sync (edit, add, delete, rename), rebuilds on identity change, bad files."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import write
from hermit.config.schema import MemorySearchConfig
from memhelpers import HashEmbedder, chunk_rows, service, sql


def test_incremental_sync_edit_add_delete_rename(workspace: Path, tmp_path: Path, store_backend: str) -> None:
    emb = HashEmbedder()
    write(workspace / "MEMORY.md", "# Memory\n- likes tea\n")
    write(workspace / "memory" / "2026-01-01.md", "# Jan 1\n- met Bob\n")
    svc = service(workspace, tmp_path / "idx.sqlite", emb)
    r = svc.sync()
    assert (r.files_seen, r.files_indexed, r.rebuilt) == (2, 2, True)
    assert svc.store.counts()["chunks"] == 2

    r = svc.sync()
    assert (r.files_indexed, r.files_unchanged, r.embedded) == (0, 2, 0)

    write(workspace / "memory" / "2026-01-01.md", "# Jan 1\n- met Bob\n- and Carol\n")
    write(workspace / "memory" / "sub" / "2026-01-02.md", "# Jan 2\n- flew to Oslo\n")
    r = svc.sync()
    assert (r.files_indexed, r.files_unchanged, r.files_deleted) == (2, 1, 0)
    assert ("memory/sub/2026-01-02.md", 1, 2) in chunk_rows(svc)
    assert svc.search("Carol")["results"][0]["path"] == "memory/2026-01-01.md"

    os.rename(workspace / "memory" / "sub" / "2026-01-02.md", workspace / "memory" / "2026-01-03.md")
    r = svc.sync()
    assert r.files_deleted == 1 and r.files_indexed == 1
    assert r.embedded == 0 and r.cache_hits >= 1, "a renamed file's chunks come from the embedding cache"
    paths = {p for p, _, _ in chunk_rows(svc)}
    assert paths == {"MEMORY.md", "memory/2026-01-01.md", "memory/2026-01-03.md"}

    (workspace / "MEMORY.md").unlink()
    r = svc.sync()
    assert r.files_deleted == 1
    assert svc.search("tea")["results"] == []
    svc.close()


def test_touch_without_change_is_not_reindexed(workspace: Path, tmp_path: Path, store_backend: str) -> None:
    emb = HashEmbedder()
    f = write(workspace / "MEMORY.md", "# M\n- fact\n")
    svc = service(workspace, tmp_path / "idx.sqlite", emb)
    svc.sync()
    calls = emb.calls
    os.utime(f, None)
    r = svc.sync()
    assert r.files_unchanged == 1 and r.files_indexed == 0 and emb.calls == calls
    svc.close()


def test_model_change_rebuilds_without_mixing_vectors(workspace: Path, tmp_path: Path, e5: object, store_backend: str) -> None:
    write(workspace / "MEMORY.md", "# M\n- the deploy key rotates monthly\n")
    db = tmp_path / "idx.sqlite"
    a = service(workspace, db, HashEmbedder())
    a.sync()
    assert a.store.identity()["model"] == "hash-test"
    a.close()

    b = service(workspace, db, e5)  # type: ignore[arg-type]
    # Before re-indexing, the index holds another model's vectors: search must not use them.
    outcome = b.searcher.search("deploy key", 6, 0.0)
    assert outcome.mode == "keyword-only" and "hash-test" in (outcome.reason or "")
    r = b.sync()
    assert r.rebuilt
    ident = b.store.identity()
    assert ident["model"] == "multilingual-e5-small"
    assert b.store.meta()["dims"] == "384"
    [(n,)] = sql(b, "select count(*) from {t}chunks where model != 'multilingual-e5-small'")
    assert n == 0
    assert b.search("deploy key")["results"][0]["path"] == "MEMORY.md"
    assert "mode" not in b.search("deploy key")
    b.close()


def test_chunk_setting_change_rebuilds(workspace: Path, tmp_path: Path, store_backend: str) -> None:
    write(workspace / "MEMORY.md", "\n".join(f"- fact number {i} about things" for i in range(200)))
    db = tmp_path / "idx.sqlite"
    a = service(workspace, db, HashEmbedder())
    a.sync()
    before = a.store.counts()["chunks"]
    a.close()
    cfg = MemorySearchConfig.model_validate({"chunking": {"tokens": 100, "overlap": 20}})
    b = service(workspace, db, HashEmbedder(), cfg)
    assert b.indexer.is_dirty()
    r = b.sync()
    assert r.rebuilt and b.store.counts()["chunks"] > before
    b.close()


def test_bad_files_warn_and_never_crash(workspace: Path, tmp_path: Path) -> None:
    write(workspace / "memory" / "good.md", "# ok\n- fine\n")
    (workspace / "memory" / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR")
    (workspace / "memory" / "latin1.md").write_bytes(b"# caf\xe9\nline two\nthe word zebra\n")
    write(workspace / "memory" / "empty.md", "")
    write(workspace / "memory" / "huge.md", "x" * 20_000)
    (workspace / "memory" / "notes.txt").write_text("not markdown")
    cfg = MemorySearchConfig.model_validate({"max_file_bytes": 10_000})
    svc = service(workspace, tmp_path / "idx.sqlite", HashEmbedder(), cfg)
    r = svc.sync()
    joined = "\n".join(r.warnings)
    assert "binary.md: skipped, looks binary" in joined
    assert "huge.md: skipped" in joined and "max_file_bytes" in joined
    assert "latin1.md" not in joined  # Latin-1 is detected and decoded, not replaced
    paths = {p for p, _, _ in chunk_rows(svc)}
    assert paths == {"memory/good.md", "memory/latin1.md"}
    hit = svc.search("zebra")["results"][0]
    assert hit["path"] == "memory/latin1.md" and hit["startLine"] <= 3 <= hit["endLine"]
    assert "# café" in svc.get("memory/latin1.md")["text"]
    svc.close()


def test_symlinked_memory_file_is_skipped(workspace: Path, tmp_path: Path) -> None:
    secret = write(tmp_path / "outside" / "secret.md", "# secret\n- password hunter2\n")
    os.symlink(secret, workspace / "memory" / "link.md")
    svc = service(workspace, tmp_path / "idx.sqlite", HashEmbedder())
    r = svc.sync()
    assert any("symlink" in w for w in r.warnings)
    assert svc.search("hunter2")["results"] == []
    svc.close()


def test_extra_paths_are_indexed(workspace: Path, tmp_path: Path) -> None:
    write(tmp_path / "notes" / "projects.md", "# Projects\n- Falcon launches in March\n")
    cfg = MemorySearchConfig.model_validate({"extra_paths": [str(tmp_path / "notes")]})
    svc = service(workspace, tmp_path / "idx.sqlite", HashEmbedder(), cfg)
    svc.sync()
    res = svc.search("Falcon")["results"]
    assert res and res[0]["path"].endswith("notes/projects.md")
    assert "Falcon" in svc.get(res[0]["path"])["text"]
    svc.close()


def test_provider_none_indexes_keyword_only(workspace: Path, tmp_path: Path, store_backend: str) -> None:
    write(workspace / "MEMORY.md", "# M\n- POSTGRES_URL lives in the vault\n")
    cfg = MemorySearchConfig.model_validate({"provider": "none"})
    svc = service(workspace, tmp_path / "idx.sqlite", None, cfg)
    svc.sync()
    res = svc.search("POSTGRES_URL")
    assert res["mode"] == "keyword-only" and "provider" in res["reason"]
    assert res["results"][0]["path"] == "MEMORY.md"
    svc.close()
