"""Indexing progress counts chunks (with rate and time left) on a terminal only; the summary reads right."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from conftest import write
from hermit.cli.progress import IndexProgress
from hermit.config.schema import MemorySearchConfig
from memhelpers import HashEmbedder, service
from prochelpers import PROC_TIMEOUT

SMALL_CHUNKS = MemorySearchConfig.model_validate({"chunking": {"tokens": 40, "overlap": 0}})


def notes(ws: Path, files: int = 6, lines: int = 30) -> None:
    for i in range(files):
        body = "\n".join(f"- note {i}.{n}: the kiwi tree by the garage needs water on day {n}" for n in range(lines))
        write(ws / "memory" / f"2026-11-{i + 10:02d}.md", f"# 2026-11-{i + 10:02d}\n\n{body}\n")


def test_chunk_progress_announces_the_total_then_counts_up(workspace: Path, tmp_path: Path) -> None:
    notes(workspace)
    svc = service(workspace, tmp_path / "i.sqlite", HashEmbedder(), SMALL_CHUNKS)
    chunks: list[tuple[int, int]] = []
    files: list[tuple[int, int]] = []
    report = svc.sync(progress=lambda d, t, _: files.append((d, t)), chunk_progress=lambda d, t: chunks.append((d, t)))
    total = report.chunks_indexed
    assert total > 64  # more than two embedding batches
    assert chunks[0] == (0, total) and chunks[-1] == (total, total)
    assert [d for d, _ in chunks] == sorted(d for d, _ in chunks) and len(chunks) > 2
    assert files[-1] == (6, 6)
    chunks.clear()
    assert svc.sync(chunk_progress=lambda d, t: chunks.append((d, t))).chunks_indexed == 0
    assert chunks == []  # nothing to embed: no bar, no notice
    svc.close()


def test_terminal_bar_shows_chunks_rate_time_left_and_the_cpu_notice(workspace: Path, tmp_path: Path) -> None:
    notes(workspace)
    svc = service(workspace, tmp_path / "i.sqlite", HashEmbedder(), SMALL_CHUNKS)
    out = io.StringIO()
    with IndexProgress(out, force_terminal=True, slow_notice_chunks=50) as bar:
        report = svc.sync(progress=bar.files, chunk_progress=bar.chunks)
    svc.close()
    text = out.getvalue()
    n = report.chunks_indexed
    assert f"embedding {n} chunks with the local model on CPU: a first index of a large memory takes a while" in text
    assert f"{n}/{n}" in text and "chunks/s" in text and "left" in text and "embedding chunks" in text


def test_summary_says_indexed_first_then_synced_or_rebuilt_with_plurals(workspace: Path, tmp_path: Path) -> None:
    write(workspace / "MEMORY.md", "# Memory\n- Alice leads the data team.\n")
    svc = service(workspace, tmp_path / "i.sqlite", HashEmbedder())
    first = svc.sync().summary()
    assert first.startswith("indexed: 1 file (1 indexed, 0 unchanged, 0 removed), 1 chunk, 1 embedded, 0 cache hits")
    write(workspace / "memory" / "2026-11-20.md", "# 2026-11-20\n- Bob moved the database.\n")
    assert svc.sync().summary().startswith("synced: 2 files (1 indexed, 1 unchanged")
    rebuilt = svc.sync(force=True).summary()
    assert rebuilt.startswith("rebuilt: 2 files") and "2 chunks" in rebuilt and "2 cache hits" in rebuilt
    svc.close()


def test_piped_index_output_has_no_progress_noise(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    hermit = [sys.executable, "-m", "hermit"]
    assert subprocess.run([*hermit, "init"], env=env, capture_output=True, timeout=PROC_TIMEOUT).returncode == 0
    cfg = home / "hermit.yaml"
    cfg.write_text(cfg.read_text().replace("provider: local", "provider: none"))
    notes(home / "workspace", files=2, lines=5)
    for args in (["memory", "index"], ["memory", "index", "--json"]):
        r = subprocess.run([*hermit, *args], env=env, capture_output=True, text=True, timeout=PROC_TIMEOUT)
        assert r.returncode == 0, r.stderr
        assert r.stderr == "" and "\r" not in r.stdout and "\x1b" not in r.stdout
    r = subprocess.run([*hermit, "memory", "index", "--force"], env=env, capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert r.stdout.startswith("rebuilt: 3 files")
