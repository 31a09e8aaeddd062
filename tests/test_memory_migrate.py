"""`hermit memory migrate`: SQLite → PostgreSQL → SQLite with identical search results, nothing re-embedded,
the source untouched, a non-empty target refused without --replace."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest
import yaml

from conftest import write
from hermit.cli.main import main
from hermit.config.schema import MemorySearchConfig
from hermit.errors import StoreError
from hermit.memory.service import MemoryKey, MemoryService
from hermit.memory.store.migrate import counts, migrate_index
from hermit.memory.store.postgres.schema import schema_name
from hermit.memory.store.postgres.store import PgStore
from hermit.memory.store.sqlite import IndexStore
from memhelpers import HashEmbedder

QUERIES = ["postgres migration plan", "what did Alice decide about the billing service", "Kenji ramen Tokyo",
           "周末 跑步", "API_TIMEOUT_MS", "backup replicas", "nothing like this exists anywhere"]
ENV = "HERMIT_TEST_MIGRATE_DSN"


WORDS = ["backup", "replicas", "audit", "log", "billing", "service", "Postgres", "Kafka", "staging", "Tokyo", "ramen", "Alice", "Kenji", "budget", "garden", "tomatoes", "insurance", "invoice", "Lisbon", "flight", "dentist", "hiking", "Oslo", "report", "deadline"]


def _workspace(ws: Path) -> None:
    """Notes whose chunks all differ (no two score the same: ties may break differently per backend)."""
    r = random.Random(15)
    write(ws / "MEMORY.md", "# MEMORY\n\n## People\nAlice decided to move the billing service to Postgres.\n"
                            "Kenji recommends the ramen place near Tokyo station.\n")
    for day in range(1, 8):
        lines = [f"# 2026-06-0{day}", "", f"- Postgres migration plan step {day}: copy the replicas first.",
                 f"- set API_TIMEOUT_MS={day * 100} in staging", "- 周末去公园跑步，感觉很好。" * day,
                 *(f"- note {day}.{i}: " + " ".join(r.choices(WORDS, k=r.randint(4, 12))) for i in range(40))]
        write(ws / "memory" / f"2026-06-0{day}.md", "\n".join(lines) + "\n")
    write(ws / "memory" / "empty.md", "")


def _pg_cfg(dsn_env: str = ENV) -> MemorySearchConfig:
    return MemorySearchConfig.model_validate({"store": {"backend": "postgres", "postgres": {"dsn_env": dsn_env}},
                                              "line_vectors": True})


def _lite_cfg() -> MemorySearchConfig:
    # Line vectors on with the test embedder too ("auto" gives them to local models only), so they are copied.
    return MemorySearchConfig.model_validate({"line_vectors": True})


def _results(svc: MemoryService) -> list[list[tuple[str, int, int, float]]]:
    out = []
    for q in QUERIES:
        res = svc.search(q)
        out.append([(r["path"], r["startLine"], r["endLine"], r["score"]) for r in res["results"]])
    return out


def _same(a: list[list[tuple[str, int, int, float]]], b: list[list[tuple[str, int, int, float]]]) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):
        assert [x[:3] for x in ra] == [x[:3] for x in rb]
        assert all(abs(x[3] - y[3]) <= 1e-6 for x, y in zip(ra, rb, strict=True))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pg_counts(dsn: str, schema: str,
               tables: tuple[str, ...] = ("files", "chunks", "chunks_vec", "embedding_cache", "line_vectors"),
               ) -> dict[str, int]:
    import psycopg

    with psycopg.connect(dsn) as c:
        return {t: int(c.execute(f'select count(*) from "{schema}".{t}').fetchone()[0]) for t in tables}


def test_round_trip_keeps_search_results_and_embeds_nothing(tmp_path: Path, workspace: Path, pg_dsn: str) -> None:
    _workspace(workspace)
    env = {ENV: pg_dsn}
    emb = HashEmbedder()
    db = tmp_path / "main.sqlite"
    svc = MemoryService(MemoryKey("main", workspace), db, _lite_cfg(), emb)
    svc.sync()
    before = _results(svc)
    assert any(before) and sum(len(r) for r in before) >= 6
    svc.close()
    calls = emb.calls

    # SQLite → PostgreSQL: the SQLite file is byte-for-byte untouched.
    sha = _sha(db)
    src = IndexStore(db, readonly=True)
    schema = schema_name("hermit_", "main")
    dst = PgStore(pg_dsn, schema, _pg_cfg().store.postgres, dsn_env=ENV)
    report = migrate_index(src, dst, batch=7)  # small batches: files straddle batch boundaries
    want = counts(src)
    src.close()
    dst.close()
    assert _sha(db) == sha
    assert report.copied == want and want.chunks > 0 and want.vectors == want.chunks and want.cache_entries > 0
    assert want.line_vectors > want.chunks  # several lines per chunk, copied in pages of 7 as well
    assert _pg_counts(pg_dsn, schema) == {"files": want.files, "chunks": want.chunks, "chunks_vec": want.vectors,
                                          "embedding_cache": want.cache_entries, "line_vectors": want.line_vectors}

    pg_svc = MemoryService(MemoryKey("main", workspace), db, _pg_cfg(), emb, environ=env)
    sync = pg_svc.sync()
    assert sync.files_indexed == 0 and not sync.rebuilt  # nothing to do: every file is up to date
    _same(before, _results(pg_svc))
    pg_svc.close()
    assert emb.calls == calls  # neither the migration nor the next sync embedded a chunk

    # PostgreSQL → a fresh SQLite file: PostgreSQL's rows are unchanged, results identical again.
    rows = _pg_counts(pg_dsn, schema)
    back_db = tmp_path / "back.sqlite"
    src_pg = PgStore(pg_dsn, schema, _pg_cfg().store.postgres, dsn_env=ENV, create=False)
    back = IndexStore(back_db)
    migrate_index(src_pg, back, batch=7)
    src_pg.close()
    back.close()
    assert _pg_counts(pg_dsn, schema) == rows
    back_svc = MemoryService(MemoryKey("main", workspace), back_db, _lite_cfg(), emb)
    assert back_svc.sync().files_indexed == 0
    _same(before, _results(back_svc))
    back_svc.close()
    assert emb.calls == calls


def test_non_empty_target_is_refused_without_replace(tmp_path: Path, workspace: Path, pg_dsn: str) -> None:
    _workspace(workspace)
    emb = HashEmbedder()
    db = tmp_path / "main.sqlite"
    svc = MemoryService(MemoryKey("main", workspace), db, _lite_cfg(), emb)
    svc.sync()
    svc.close()
    schema = schema_name("hermit_", "main")
    src = IndexStore(db, readonly=True)
    dst = PgStore(pg_dsn, schema, _pg_cfg().store.postgres, dsn_env=ENV)
    migrate_index(src, dst)
    rows = _pg_counts(pg_dsn, schema)
    with pytest.raises(StoreError, match="is not empty") as e:
        migrate_index(src, dst)
    assert "--replace" in (e.value.hint or "")
    assert _pg_counts(pg_dsn, schema) == rows
    # One note removed from the source: --replace makes the target exactly the source again.
    (workspace / "memory" / "2026-06-07.md").unlink()
    src.close()
    svc = MemoryService(MemoryKey("main", workspace), db, _lite_cfg(), emb)
    svc.sync()
    svc.close()
    src = IndexStore(db, readonly=True)
    report = migrate_index(src, dst, replace=True)
    assert _pg_counts(pg_dsn, schema)["files"] == report.copied.files == rows["files"] - 1
    src.close()
    dst.close()


def test_cli_migrates_every_agent_and_says_which_config_line_to_change(
    tmp_path: Path, pg_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    cfg = {"agents": {"defaults": {"memory_search": {"provider": "none", "store": {"postgres": {"dsn_env": ENV}}}},
                      "list": [{"id": "main"}, {"id": "work"}]}}
    home.mkdir()
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
    for ws in (home / "workspace", home / "workspace-work"):
        _workspace(ws)
    monkeypatch.setenv("HERMIT_HOME", str(home))
    monkeypatch.setenv(ENV, pg_dsn)
    for agent in ("main", "work"):
        assert main(["--agent", agent, "memory", "index"]) == 0
    capsys.readouterr()
    shas = {p: _sha(p) for p in (home / "memory").glob("*.sqlite")}
    assert len(shas) == 2

    assert main(["memory", "migrate", "--to", "postgres"]) == 0
    out, err = capsys.readouterr()
    assert "main:" in out and "work:" in out
    assert "memory_search:\n      store:\n        backend: postgres" in out
    assert pg_dsn not in out + err
    assert {p: _sha(p) for p in shas} == shas
    assert _pg_counts(pg_dsn, "hermit_work", ("chunks",))["chunks"] > 0  # keyword-only: no vectors

    assert main(["memory", "migrate", "--to", "postgres", "--agent", "work"]) == 1
    out, err = capsys.readouterr()
    assert "is not empty" in err and "--replace" in err
    assert main(["memory", "migrate", "--to", "postgres", "--agent", "work", "--replace"]) == 0
