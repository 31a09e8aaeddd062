"""Hostile files where notes are expected: FIFOs, sockets and directories named *.md never hang or crash
Hermit (index, search, get, the watcher, the agent's read / memory_get, the bootstrap files), and notes
saved in Latin-1, cp1252 or GBK are decoded by detecting their encoding."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.errors import PathPolicyError
from hermit.memory.index.sync import SyncReport
from hermit.memory.index.watch import watch_memory
from hermit.messages import ToolCallPart
from hermit.textfile import NotRegularFile, decode_text, read_regular
from hermit.tools import ToolRunner
from hermit.tools.files import FileTools
from hermit.tools.memory import MemoryTools
from hermit.tools.sandbox import PathResolver
from hermit.workspace import read_bootstrap
from memhelpers import HashEmbedder, service
from prochelpers import PROC_TIMEOUT

T = TypeVar("T")


def finishes(fn: Callable[[], T], fifo: Path | None = None, timeout: float = 20.0) -> T:
    """fn()'s result, failing (instead of hanging the suite) when it does not return in time. A reader
    stuck on `fifo` is released by opening its write end, so a failing run still ends."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread below
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        if fifo is not None:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"still blocked after {timeout:.0f}s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


@pytest.fixture
def fifo_ws(workspace: Path) -> Iterator[Path]:
    write(workspace / "MEMORY.md", "# Memory\n- The database is Postgres 16.\n")
    write(workspace / "memory" / "2026-12-01.md", "# 2026-12-01\n- Deployed the billing service.\n")
    os.mkfifo(workspace / "memory" / "x.md")
    yield workspace


def test_read_regular_refuses_fifo_socket_and_directory_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.md")
    (tmp_path / "dir.md").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock.md"))
    try:
        for name, kind in (("pipe.md", "a FIFO"), ("dir.md", "a directory"), ("sock.md", "a socket")):
            with pytest.raises(NotRegularFile) as err:
                finishes(lambda n=name: read_regular(tmp_path / n), tmp_path / name)
            assert err.value.kind == kind
    finally:
        sock.close()
    write(tmp_path / "ok.md", "fine\n")
    assert read_regular(tmp_path / "ok.md") == b"fine\n"


def test_index_and_search_skip_a_fifo_with_a_warning(fifo_ws: Path, tmp_path: Path) -> None:
    svc = service(fifo_ws, tmp_path / "index.sqlite", HashEmbedder())
    try:
        report = finishes(svc.sync, fifo_ws / "memory" / "x.md")
        assert (report.files_seen, report.files_indexed, report.files_skipped) == (3, 2, 1)  # the counts add up
        assert any("memory/x.md: skipped, it is a FIFO" in w for w in report.warnings)
        res = finishes(lambda: svc.search("billing service"), fifo_ws / "memory" / "x.md")
        assert res["results"][0]["path"] == "memory/2026-12-01.md"
    finally:
        svc.close()


def test_memory_get_on_fifo_and_directory_is_a_clear_error(fifo_ws: Path, tmp_path: Path) -> None:
    (fifo_ws / "memory" / "dir.md").mkdir()
    svc = service(fifo_ws, tmp_path / "index.sqlite", HashEmbedder())
    try:
        with pytest.raises(PathPolicyError, match="memory/x.md is a FIFO, not a memory file"):
            finishes(lambda: svc.get("memory/x.md"), fifo_ws / "memory" / "x.md")
        with pytest.raises(PathPolicyError, match="memory/dir.md is a directory, not a memory file"):
            svc.get("memory/dir.md")
        # The agent's memory_get turns it into an error result for the model, not a crash.
        runner = ToolRunner(MemoryTools(svc).tools())
        run = finishes(lambda: runner.run(ToolCallPart("c1", "memory_get", {"path": "memory/x.md"})),
                       fifo_ws / "memory" / "x.md")
        assert run.result.is_error and "is a FIFO" in run.result.content
        run = runner.run(ToolCallPart("c2", "memory_get", {"path": "memory/dir.md"}))
        assert run.result.is_error and "is a directory" in run.result.content
        assert "Traceback" not in run.result.content
    finally:
        svc.close()


def test_agent_read_tool_refuses_a_fifo(fifo_ws: Path) -> None:
    runner = ToolRunner(FileTools(PathResolver(fifo_ws, True)).tools())
    run = finishes(lambda: runner.run(ToolCallPart("c1", "read", {"path": "memory/x.md"})),
                   fifo_ws / "memory" / "x.md")
    assert run.result.is_error and "memory/x.md is a FIFO, not a regular file" in run.result.content
    run = finishes(lambda: runner.run(ToolCallPart("c2", "write", {"path": "memory/x.md", "content": "x"})),
                   fifo_ws / "memory" / "x.md")
    assert run.result.is_error and stat_is_fifo(fifo_ws / "memory" / "x.md")


def stat_is_fifo(p: Path) -> bool:
    import stat

    return stat.S_ISFIFO(os.lstat(p).st_mode)


def test_a_fifo_bootstrap_file_does_not_hang_the_next_turn(fifo_ws: Path) -> None:
    (fifo_ws / "SOUL.md").unlink(missing_ok=True)
    os.mkfifo(fifo_ws / "SOUL.md")
    files = finishes(lambda: read_bootstrap(fifo_ws, include_memory=True), fifo_ws / "SOUL.md")
    soul = next(f for f in files if f.name == "SOUL.md")
    assert soul.text is None  # treated as missing
    assert next(f for f in files if f.name == "MEMORY.md").text == "# Memory\n- The database is Postgres 16.\n"


def test_watcher_syncs_past_a_fifo_created_while_watching(workspace: Path, tmp_path: Path) -> None:
    write(workspace / "memory" / "a.md", "# a\n- alpha note\n")
    svc = service(workspace, tmp_path / "index.sqlite", HashEmbedder())
    reports: list[SyncReport] = []
    stop = threading.Event()
    watching = threading.Event()
    watcher = threading.Thread(target=watch_memory, args=(workspace, [], svc.sync),
                               kwargs={"debounce_ms": 100, "stop": stop, "on_report": reports.append,
                                       "on_ready": watching.set}, daemon=True)
    try:
        svc.sync()
        watcher.start()
        assert watching.wait(PROC_TIMEOUT)  # watching: the FIFO and the note made now are seen
        os.mkfifo(workspace / "memory" / "x.md")
        write(workspace / "memory" / "b.md", "# b\n- beta note\n")
        deadline = time.monotonic() + PROC_TIMEOUT
        while time.monotonic() < deadline and not any(r.files_indexed for r in reports):
            time.sleep(0.05)
        assert any(r.files_indexed == 1 for r in reports), reports
        assert any("memory/x.md: skipped, it is a FIFO" in w for r in reports for w in r.warnings)
    finally:
        stop.set()
        watcher.join(10)
        if watcher.is_alive():  # a sync stuck on the FIFO: release it so the suite goes on
            with contextlib.suppress(OSError):
                os.close(os.open(workspace / "memory" / "x.md", os.O_WRONLY | os.O_NONBLOCK))
        svc.close()
    assert not watcher.is_alive()


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, text=True,
                          capture_output=True, timeout=PROC_TIMEOUT)


def test_cli_index_search_get_with_a_fifo_and_a_directory_named_md(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = home / "workspace"
    write(home / "hermit.yaml", "agents:\n  defaults:\n    memory_search:\n      provider: none\n")
    write(ws / "memory" / "2026-12-01.md", "# 2026-12-01\n- Deployed the billing service.\n")
    os.mkfifo(ws / "memory" / "x.md")
    (ws / "memory" / "dir.md").mkdir()
    try:
        r = _cli(home, "memory", "index")
        assert r.returncode == 0, r.stderr
        assert "warning: memory/x.md: skipped, it is a FIFO" in r.stderr
        r = _cli(home, "memory", "search", "billing", "--json")
        assert json.loads(r.stdout)["results"][0]["path"] == "memory/2026-12-01.md"
        r = _cli(home, "memory", "get", "memory/x.md")
        assert r.returncode == 1 and "error: memory/x.md is a FIFO, not a memory file" in r.stderr
        r = _cli(home, "memory", "get", "memory/dir.md")
        assert r.returncode == 1 and "error: memory/dir.md is a directory, not a memory file" in r.stderr
        assert "Traceback" not in r.stderr
    except subprocess.TimeoutExpired:
        pytest.fail("the CLI blocked on the FIFO")


@pytest.mark.parametrize("encoding, text, query", [
    ("latin-1", "# Notes\nMy naïve résumé draft is in the café folder.\n", "naïve résumé"),
    ("cp1252", "# Notes\nHe called it “naïve” – the résumé costs €5.\n", "résumé"),
    ("gbk", "# 笔记\n数据库迁移计划：周五完成，负责人是张伟。\n", "张伟"),
])
def test_non_utf8_notes_are_decoded_and_found(workspace: Path, tmp_path: Path, encoding: str, text: str,
                                              query: str) -> None:
    (workspace / "memory" / "old.md").write_bytes(text.encode(encoding))
    assert decode_text(text.encode(encoding)).text == text
    svc = service(workspace, tmp_path / "index.sqlite", None,
                  MemorySearchConfig.model_validate({"provider": "none"}))
    try:
        report = svc.sync()
        assert not [w for w in report.warnings if "old.md" in w]  # decoded, nothing replaced
        res = svc.search(query)
        assert res["results"] and res["results"][0]["path"] == "memory/old.md"
        assert query in res["results"][0]["snippet"] and "\ufffd" not in res["results"][0]["snippet"]
        assert svc.get("memory/old.md")["text"] == text
    finally:
        svc.close()


def test_decoding_never_fails_and_keeps_lines() -> None:
    d = decode_text(b"ok line\n\xff\xfe\xfa\x00\x81 \x8d\x8f\x90\x9d\n")
    assert d.text.startswith("ok line\n") and d.text.count("\n") == 2
    assert decode_text("héllo".encode()).encoding == "utf-8"
    assert decode_text(b"\xef\xbb\xbfbom\n").text == "bom\n"


CUT_SHORT = """
import resource, signal, sys
from datetime import datetime, timezone
from pathlib import Path
from hermit.memory.policy.daily_log import append_daily_note
from hermit.messages import ToolCallPart
from hermit.tools import FileTools, PathResolver, ToolRunner

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
ws = Path(sys.argv[1])
log = ws / "memory" / "2026-01-20.md"
resource.setrlimit(resource.RLIMIT_FSIZE, (log.stat().st_size + 40, resource.RLIM_INFINITY))
note = "- Réservé : table pour 4 à 20 h, près de la fenêtre, côté jardin, au nom de Zoë"
res = ToolRunner(FileTools(PathResolver(ws, False)).tools()).run(
    ToolCallPart("c", "write", {"path": "memory/2026-01-20.md", "content": note, "append": True})).result
print("tool:", res.is_error, str(res.content).splitlines()[0])
try:
    append_daily_note(ws, note, datetime(2026, 1, 20, 12, tzinfo=timezone.utc))
except OSError as e:
    print("append_daily_note:", e.errno)
"""


def test_a_note_cut_short_by_a_full_disk_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    """A write stopped part-way (a full disk, a file-size limit) used to leave half a note, an unclosed
    block and half a UTF-8 character at the end of the log; that one byte made the whole log decode as
    another encoding, and the next edit wrote the mojibake back for good. Now the append is undone."""
    ws = tmp_path / "ws"
    before = "# 2026-01-20\n\n- Dîner chez Zoë : café crème, 45 €.\n"
    write(ws / "memory" / "2026-01-20.md", before)
    r = subprocess.run([sys.executable, "-c", CUT_SHORT, str(ws)], capture_output=True, text=True, timeout=120)
    assert "tool: True" in r.stdout and "append_daily_note: 27" in r.stdout, r.stdout + r.stderr
    assert (ws / "memory" / "2026-01-20.md").read_bytes() == before.encode("utf-8")


def test_a_file_whose_last_character_was_cut_off_still_reads_as_utf8() -> None:
    text = "- Dîner chez Zoë : café crème, 45 €.\n- Réserv"
    cut = text.encode("utf-8") + "é".encode()[:1]
    got = decode_text(cut)
    assert got.encoding == "utf-8" and got.text == text + "\ufffd" and got.replaced


def test_a_run_logged_after_a_torn_line_is_kept_on_its_own_line(tmp_path: Path) -> None:
    """A crash mid-write leaves a job's run log ending in half a line; the next run's record used to be
    glued to it and both read as unreadable."""
    from hermit.scheduler.store import JobStore, RunRecord

    store = JobStore(tmp_path, fsync=False)
    first = RunRecord("r-1", "j-1", "2026-01-20T08:00:00+00:00", "2026-01-20T08:00:05+00:00", "ok", "schedule")
    store.append_run(first)
    with open(store.run_log_path("j-1"), "a", encoding="utf-8") as f:
        f.write('{"run_id": "r-2", "job_id": "j-1", "sta')  # torn by a kill
    store.append_run(RunRecord("r-3", "j-1", "2026-01-20T09:00:00+00:00", "2026-01-20T09:00:04+00:00", "error",
                               "schedule", error="boom"))
    runs = store.runs("j-1")
    assert [r.get("run_id") for r in runs] == ["r-1", None, "r-3"]
    assert runs[1]["status"] == "unreadable" and runs[2]["error"] == "boom"


def test_the_temp_files_a_killed_rewrite_left_are_removed_by_the_next_one(tmp_path: Path) -> None:
    """A process killed between writing a file's temp copy and renaming it leaves `.NAME.tmp-<pid>-…`
    behind; nothing ever removed them. The next rewrite of that file removes those no live writer holds
    (tests/test_held_leftovers.py: by the writer's lock, not the pid in the name)."""
    from hermit.durable import held_temp, write_atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    store = tmp_path / "sessions.json"
    left = tmp_path / f".sessions.json.tmp-{dead}-1a2b3c4d"
    fd, alive = held_temp(store)  # a writer still at work: kept
    other = tmp_path / f".jobs.json.tmp-{dead}-9c0d1e2f"  # another file's: not this rewrite's to judge
    for p in (left, other):
        p.write_text("{}")
    try:
        write_atomic(store, "{\"sessions\": {}}")
        assert store.read_text() == "{\"sessions\": {}}"
        assert not left.exists() and alive.exists() and other.exists()
    finally:
        os.close(fd)


SLUG_CUT_SHORT = """
import resource, signal, sys
from pathlib import Path
from hermit.agent.session_memory import write_memory_file

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (200, resource.RLIM_INFINITY))
try:
    write_memory_file(Path(sys.argv[1]), "2026-01-20-trip-plans", "<!-- origin -->\\n" + "- a line\\n" * 100)
except OSError as e:
    print("write_memory_file:", e.errno)
"""


def test_a_session_file_cut_short_leaves_no_partial_file_under_its_name(tmp_path: Path) -> None:
    """`/new` writes the end of a session to `memory/<date>-<slug>.md`, created exclusively. A write cut
    short (a full disk, a kill) used to leave the first part of the file under that name: a torn origin
    block the indexer read, and the name taken. Now the name appears only with the whole file."""
    from hermit.agent.session_memory import write_memory_file

    mem = tmp_path / "memory"
    mem.mkdir()
    r = subprocess.run([sys.executable, "-c", SLUG_CUT_SHORT, str(mem)], capture_output=True, text=True, timeout=120)
    assert "write_memory_file: 27" in r.stdout, r.stdout + r.stderr
    assert os.listdir(mem) == []
    done = write_memory_file(mem, "2026-01-20-trip-plans", "whole\n")
    assert done.name == "2026-01-20-trip-plans.md" and done.read_text() == "whole\n"
    assert done.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("unnamed", [True, False], ids=["O_TMPFILE", "temp-name"])
def test_racing_creators_of_one_name_never_overwrite_each_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                unnamed: bool) -> None:
    from hermit.durable import create_new

    if not unnamed:  # a file system or OS without O_TMPFILE: a temp name linked into place
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    target = tmp_path / "note.md"
    won: list[int] = []
    gate = threading.Barrier(8)

    def create(i: int) -> None:
        gate.wait()
        if create_new(target, f"writer {i}\n" * 1000):
            won.append(i)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and target.read_text() == f"writer {won[0]}\n" * 1000
    assert os.listdir(tmp_path) == ["note.md"]


def test_a_memory_file_swapped_for_a_symlink_after_listing_is_not_followed(tmp_path: Path) -> None:
    """The listing skips symlinks, but a file replaced by one between the listing and the read (pointing at
    a file the owner never put in memory) was followed: the index reads beneath the workspace's descriptor,
    no link followed, now."""
    from hermit.memory.index.sources import MemoryReader, SourceFile

    outside = tmp_path / "shadow"
    outside.write_text("root:secret-hash:19000\n")
    note = tmp_path / "memory" / "note.md"
    note.parent.mkdir()
    note.symlink_to(outside)  # what the read meets after the swap
    with MemoryReader(tmp_path) as reader:
        got = reader.read(SourceFile("memory/note.md", str(note), "memory", str(tmp_path)), 1 << 20)
    assert got.text is None and got.warning == ("memory/note.md: skipped, it is a symlink or under a symlinked "
                                                "folder; memory files must be regular files")
    assert read_regular(note) == outside.read_bytes()  # other callers (a symlinked hermit.yaml) still follow
