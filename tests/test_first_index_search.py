"""A search after a first index stopped midway (H9): the keyword index was complete, no chunk embedded yet, and
`hermit memory search` first embedded the whole backlog — minutes of the model on CPU, nothing printed. A
search now answers at once from what is stored (keyword hits for the notes without vectors), says how much is
still to embed, and the CLI says how to finish (`hermit memory index`). A file whose text changed is still
indexed before the search, as before; `hermit memory index` embeds the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import test_setup as setup_cli  # hermit(): the CLI in a subprocess, with its own HERMIT_HOME
from conftest import write
from hermit.cli.context import CliContext
from hermit.config.schema import MemorySearchConfig
from hermit.memory.service import MemoryService
from hermit.testing import FunctionModel
from memhelpers import service, sql
from sessionhelpers import runtime, small_config

FILES = 12  # 3 chunks each at 60 tokens: more than one embedding batch (32), so the index goes keyword-first
# Small chunks and no vector per line: a backlog of a few dozen chunks, embedded in seconds at the end.
SMALL = {"line_vectors": False, "chunking": {"tokens": 60, "overlap": 0}}


class Stopped(KeyboardInterrupt):
    """A Ctrl-C at the moment the keyword index is complete and the first embedding batch is about to start."""


def stop_when_keyword_ready(files: int, chunks: int) -> None:
    raise Stopped


def daily_notes(ws: Path) -> None:
    write(ws / "MEMORY.md", "# Facts\n\n- Dana prefers oat milk\n")
    for i in range(FILES):
        day = f"2026-03-{i + 1:02d}"
        body = "\n".join(f"- {day} item {n}: called the plumber about the leaking kitchen tap, quote {i * 100 + n} EUR"
                         for n in range(8))
        write(ws / "memory" / f"{day}.md", f"# {day}\n\n{body}\n")


def stopped_first_index(svc: MemoryService) -> int:
    """Run a first index stopped before any embedding; the number of chunks left without vectors."""
    with pytest.raises(Stopped):
        svc.sync(ready=stop_when_keyword_ready)
    pending = svc.status()["chunks_without_vectors"]
    assert pending > 32, pending  # every chunk stored keyword-only, none embedded
    return int(pending)


def after_a_stopped_first_index(workspace: Path, tmp_path: Path, e5: object) -> tuple[MemoryService, int]:
    """The daily notes indexed by a first index stopped before any embedding, and the service of the next
    command (a new process) on that index, with the number of chunks left without vectors."""
    daily_notes(workspace)
    db = tmp_path / "index.sqlite"
    cfg = MemorySearchConfig.model_validate(SMALL)
    first = service(workspace, db, e5, cfg)  # type: ignore[arg-type]
    pending = stopped_first_index(first)
    first.close()
    return service(workspace, db, e5, cfg), pending  # type: ignore[arg-type]


def test_a_search_after_a_stopped_first_index_answers_without_embedding_the_backlog(
        workspace: Path, tmp_path: Path, e5: object) -> None:
    svc, pending = after_a_stopped_first_index(workspace, tmp_path, e5)
    res = svc.search("quote 307 EUR")
    assert res["results"] and res["results"][0]["path"] == "memory/2026-03-04.md", res
    assert res["indexing"] == {"filesPending": FILES + 1, "chunksPending": pending}
    assert any(w.startswith(f"still embedding {pending:,} chunks") for w in res["warnings"]), res
    assert svc.status()["chunks_without_vectors"] == pending  # the search embedded nothing of the backlog

    # A note whose text changed is indexed before the search, as always (it alone, embedded: one small file).
    edited = "memory/2026-03-07.md"
    had = sql(svc, "select count(*) from {t}chunks where path = ?", (edited,))[0][0]
    write(workspace / edited, "# 2026-03-07\n\n- the spare boiler key hangs behind the pantry door\n")
    svc.mark_dirty()
    res = svc.search("spare boiler key pantry")
    assert res["results"][0]["path"] == edited, res
    assert svc.status()["chunks_without_vectors"] == pending - had  # the rest still waits

    report = svc.sync()  # what `hermit memory index` runs: the backlog is embedded
    assert report.embedded == pending - had, report
    done = svc.search("quote 307 EUR")
    assert "indexing" not in done and done["results"][0]["path"] == "memory/2026-03-04.md"
    assert svc.status()["chunks_without_vectors"] == 0
    svc.close()


def test_hermit_memory_search_says_how_to_finish_the_embedding(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert setup_cli.hermit(home, "init").returncode == 0
    cfg = home / "hermit.yaml"
    cfg.write_text(cfg.read_text().replace("line_vectors: auto", "line_vectors: false")
                   .replace("tokens: 400", "tokens: 60").replace("overlap: 80", "overlap: 0"))
    daily_notes(home / "workspace")
    svc = CliContext(home=home, environ=setup_cli.env_for(home)).memory_service()
    try:
        pending = stopped_first_index(svc)  # as `hermit memory index` stopped with Ctrl-C leaves it
    finally:
        svc.close()

    found = setup_cli.hermit(home, "memory", "search", "quote 307 EUR")
    assert found.returncode == 0 and "memory/2026-03-04.md" in found.stdout, found.stdout + found.stderr
    assert f"still embedding {pending:,} chunks of {FILES + 1} files" in found.stderr, found.stderr
    assert "nothing is embedding them now: run `hermit memory index` to finish" in found.stderr, found.stderr
    status = json.loads(setup_cli.hermit(home, "memory", "status", "--json").stdout)
    assert status["chunks_without_vectors"] == pending and status["dirty"]  # `status` still says to index


def test_a_new_session_after_a_stopped_first_index_starts_without_embedding_the_backlog(
        workspace: Path, tmp_path: Path, e5: object) -> None:
    """A session's start syncs memory too (sync.on_session_start): the first turn of `hermit chat` after a
    stopped first index embedded the whole backlog before it answered. It leaves it, as a search does."""
    svc, pending = after_a_stopped_first_index(workspace, tmp_path, e5)
    rt = runtime(small_config(tmp_path / "home"), FunctionModel(lambda _req: "hello"), memory=svc)
    assert rt.run_turn("agent:main:main", "hi").reply == "hello"
    assert svc.status()["chunks_without_vectors"] == pending
