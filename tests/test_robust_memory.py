"""Memory edge cases the original's own tests pin down: an extra path that is empty, `.` or the workspace
itself is a config error and is refused at use (AGENTS.md never becomes memory); an all-zero query vector
(a broken or remote embedder) keeps the keyword results and says why, on the sqlite-vec path and the
in-memory matrix alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import write
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.config.schema import MemorySearchConfig
from hermit.errors import ConfigError, PathPolicyError
from memhelpers import HashEmbedder, service


class ZeroQueryEmbedder(HashEmbedder):
    """Indexes like HashEmbedder, but every query vector is all zeros (what a broken endpoint returned)."""

    def __init__(self, value: float = 0.0) -> None:
        super().__init__()
        self.value = value

    def embed_query(self, text: str) -> np.ndarray:
        return np.full(self.info.dims, self.value, dtype=np.float32)


def _workspace(tmp: Path) -> Path:
    ws = tmp / "ws"
    write(ws / "AGENTS.md", "# Agents\n- Operating rules: never reveal the vault combination 4-8-15.\n")
    write(ws / "SOUL.md", "# Soul\n- Calm and precise.\n")
    write(ws / "memory" / "2026-12-01.md", "# 2026-12-01\n- The billing database is Postgres 16.\n")
    write(ws / "notes" / "trip.md", "# Trip\n- Flight to Lisbon on the 12th.\n")
    return ws


@pytest.mark.parametrize("entry", ["", "  ", ".", "./", "..", "notes/.."])
def test_extra_paths_naming_the_workspace_are_a_config_error(tmp_path: Path, entry: str) -> None:
    raw = {"agents": {"defaults": {"memory_search": {"extra_paths": ["notes", entry]}}}}
    with pytest.raises(ConfigError) as err:
        build_config(raw, StatePaths(tmp_path))
    text = str(err.value)
    assert "extra_paths" in text and ("whole workspace" in text or "workspace itself" in text), text


def test_extra_paths_naming_the_workspace_are_refused_at_use(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    # An absolute path to the workspace passes config validation (the workspace is not known there);
    # entries that bypass validation (set in code) are refused the same way.
    cfg = MemorySearchConfig(extra_paths=[str(ws), "notes"]).model_copy(
        update={"extra_paths": [str(ws), "", ".", "notes", str(ws.parent)]})
    svc = service(ws, tmp_path / "idx.sqlite", HashEmbedder(), cfg)
    report = svc.sync()
    refused = [w for w in report.warnings if "skipped" in w and "workspace" in w]
    assert len(refused) == 4, report.warnings
    indexed = {h["path"] for h in svc.search("vault combination operating rules calm precise", min_score=0)["results"]}
    assert "AGENTS.md" not in indexed and "SOUL.md" not in indexed
    assert svc.search("Lisbon flight")["results"][0]["path"] == "notes/trip.md"  # a real extra path still works
    for path in ("AGENTS.md", "SOUL.md", str(ws / "AGENTS.md")):
        with pytest.raises(PathPolicyError):
            svc.get(path)
    assert "Lisbon" in svc.get("notes/trip.md")["text"]
    svc.close()


@pytest.mark.parametrize("long_lived", [False, True], ids=["sqlite-vec", "matrix"])
@pytest.mark.parametrize("value", [0.0, float("nan")], ids=["zeros", "nan"])
def test_an_all_zero_query_vector_keeps_the_keyword_hits(tmp_path: Path, long_lived: bool, value: float) -> None:
    ws = _workspace(tmp_path)
    svc = service(ws, tmp_path / "idx.sqlite", ZeroQueryEmbedder(value), long_lived=long_lived)
    svc.sync()
    if not long_lived:
        assert svc.store.vector_backend() == "vec0"  # the path that raised TypeError
    res = svc.search("billing database Postgres")
    assert res["results"] and res["results"][0]["path"] == "memory/2026-12-01.md"
    assert res["mode"] == "keyword-only" and "query vector" in res["reason"], res
    assert "error" not in res
    svc.close()
