"""A first index is useful before it is finished: every file is stored keyword-only first, vectors follow
newest notes first, and a search during the index finds keyword hits and says how much is still being
embedded (issue 25, goal 2). The embedder is gated on events, so the test looks mid-index without sleeps."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import write
from hermit.memory.embedders.base import EmbedderInfo
from hermit.memory.index.sync import SyncReport
from memhelpers import HashEmbedder, service
from prochelpers import PROC_TIMEOUT

NEWEST = dt.date(2026, 6, 30)
PHRASE = "the lighthouse key is under the blue heron mug"


class GatedEmbedder:
    """HashEmbedder whose document calls wait for `release` after the first one has started."""

    def __init__(self) -> None:
        self.inner = HashEmbedder()
        self.started = threading.Event()
        self.release = threading.Event()
        self.batches: list[list[str]] = []

    @property
    def info(self) -> EmbedderInfo:
        return self.inner.info

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.batches.append(texts)
        self.started.set()
        assert self.release.wait(PROC_TIMEOUT), "the test never released the embedder"
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def _years_of_logs(ws: Path, days: int = 90) -> None:
    write(ws / "MEMORY.md", "# Facts\n\n- Dana prefers oat milk\n")
    for k in range(days):
        day = NEWEST - dt.timedelta(days=k)
        body = "\n".join(f"- {day} item {i}: groceries, the car service and the garden on day {k}" for i in range(30))
        if k == 0:
            body += f"\n- {PHRASE}"
        write(ws / "memory" / f"{day.isoformat()}.md", f"# {day}\n\n{body}\n")


def test_a_search_during_the_first_index_finds_keyword_hits(workspace: Path, tmp_path: Path,
                                                            store_backend: str) -> None:
    _years_of_logs(workspace)
    emb = GatedEmbedder()
    svc = service(workspace, tmp_path / "index.sqlite", emb)  # type: ignore[arg-type]
    ready: list[tuple[int, int]] = []
    out: list[SyncReport] = []
    t = threading.Thread(target=lambda: out.append(svc.sync(ready=lambda f, c: ready.append((f, c)))))
    t.start()
    try:
        assert emb.started.wait(PROC_TIMEOUT)
        # Mid-index: every file is stored, none has vectors yet; this thread's search does not wait.
        assert ready and ready[0][0] == 91
        assert svc.syncing
        res = svc.search(PHRASE)
        assert res["results"] and res["results"][0]["path"] == f"memory/{NEWEST.isoformat()}.md"
        assert PHRASE in res["results"][0]["snippet"]
        assert res["indexing"]["chunksPending"] > 0 and res["indexing"]["filesPending"] == 91
        assert any("still embedding" in w for w in res["warnings"])
        st = svc.status()
        assert st["syncing"] and st["dirty"] and st["chunks_without_vectors"] == res["indexing"]["chunksPending"]
        # Newest first: MEMORY.md, then the newest daily log, are in the first batch sent to the model.
        first = emb.batches[0]
        assert "oat milk" in first[0] and str(NEWEST) in first[1]
    finally:
        emb.release.set()
        t.join(60)
    report = out[0]
    assert report.first and report.keyword_first == 91 and report.files_indexed == 91
    done = svc.search(PHRASE)
    assert "indexing" not in done and done["results"][0]["path"] == f"memory/{NEWEST.isoformat()}.md"
    assert svc.status()["chunks_without_vectors"] == 0
    svc.close()


def test_a_killed_first_index_keeps_its_keyword_index_and_resumes(workspace: Path, tmp_path: Path) -> None:
    _years_of_logs(workspace, days=20)

    class Dies(HashEmbedder):
        def embed_documents(self, texts: list[str]) -> np.ndarray:
            raise KeyboardInterrupt  # a Ctrl-C or kill mid-embedding

    db = tmp_path / "index.sqlite"
    svc = service(workspace, db, Dies())
    with pytest.raises(KeyboardInterrupt):
        svc.sync()
    svc.close()
    emb = HashEmbedder()
    again = service(workspace, db, emb)
    assert again.status()["chunks_without_vectors"] > 0  # stored, waiting for vectors
    # A search answers from what is stored, by keyword, without embedding the backlog (H9: minutes on CPU);
    # the next index resumes it (tests/test_first_index_search.py has the same with the real model).
    hits = again.search(PHRASE, min_score=0.0)
    assert hits["results"][0]["path"] == f"memory/{NEWEST.isoformat()}.md"
    assert hits["indexing"]["chunksPending"] > 0 and emb.calls == 0
    again.sync()
    hits = again.search(PHRASE, min_score=0.0)
    assert hits["results"][0]["path"] == f"memory/{NEWEST.isoformat()}.md"
    assert "indexing" not in hits and again.status()["chunks_without_vectors"] == 0
    again.close()


def test_a_small_sync_writes_each_file_once(workspace: Path, tmp_path: Path) -> None:
    write(workspace / "memory" / "2026-06-30.md", f"- {PHRASE}\n")
    svc = service(workspace, tmp_path / "index.sqlite", HashEmbedder())
    report = svc.sync()
    assert report.keyword_first == 0 and report.files_indexed == 1
    svc.close()
