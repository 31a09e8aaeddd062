"""The exec tool: run a shell command in the workspace with a timeout and a head+tail output cap.

The command runs under `/bin/sh` in its own process group, so a timeout (or Ctrl-C on the turn)
kills it and everything it started. The shell gets it in its environment, never as an argument, which every
local user can read (os_sandbox.RUN_COMMAND). Output (stdout and stderr interleaved) is read as it comes and
only the first and last parts are kept in memory, so a command printing gigabytes cannot exhaust
the process. A non-zero exit code is reported but is not a tool error (the model decides what it
means); a timeout is.

A non-owner session's command runs in room mode (room_sandbox.py): an unprivileged uid, no
capabilities, a size-limited copy of its room whose changes are merged back when it ends. The owner's
main session, when `sandbox.mode: all` confines it, has its command line checked by PathResolver first
(a clear early message), then runs in the bind-mode sandbox (os_sandbox.py), which is the guarantee.
The environment is built from a whitelist, never by removing known secrets: the main session gets the
ordinary variables a shell needs (PATH, HOME, LANG, LC_*, TERM, …) plus the names the owner allows in
`sandbox.env_allow`; a sandboxed command gets PATH, HOME, LANG and TERM only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Annotated

from pydantic import Field

from hermit.errors import ToolError
from hermit.redaction import mask, mask_cut
from hermit.tools.base import Tool, ToolOutput, make_tool
from hermit.tools.exec_marks import OwnerExecMarks
from hermit.tools.os_sandbox import COMMAND_VARIABLE, RUN_COMMAND, OsSandbox
from hermit.tools.room_end import END_SECONDS
from hermit.tools.room_limits import ROOM_IN_BYTES_PER_SECOND as ROOM_IN_BYTES_PER_SECOND
from hermit.tools.room_limits import ROOM_IN_ENTRIES_PER_SECOND as ROOM_IN_ENTRIES_PER_SECOND
from hermit.tools.room_limits import ROOM_START_SECONDS as ROOM_START_SECONDS
from hermit.tools.room_limits import quota_seconds
from hermit.tools.room_sandbox import PACK_SECONDS, SETUP_FAILED, SNAPSHOT_SECONDS, RoomRun, RoomSandbox
from hermit.tools.sandbox import PathResolver

DEFAULT_TIMEOUT_SECONDS = 120.0
MAX_TIMEOUT_SECONDS = 1800.0
DEFAULT_MAX_OUTPUT_CHARS = 20_000
# Room mode. The way in (the wrapper unpacks the room before the command starts, so the command cannot stretch it)
# gets what the room's quota may hold at a rate far below what this machine does (room_limits.quota_seconds). Once
# the room is in, the wrapper ends within the command's time plus ROOM_GRACE_SECONDS (room_sandbox.WRAPPER): its note
# of the room as it came in (SNAPSHOT_SECONDS and its `timeout -k 1`), `timeout -k 2`, the time left counted in whole
# seconds (1), the pack's own least time (PACK_SECONDS) and its `timeout -k 1`, plus 5 s for the machine's load. The
# merge after it has a time of its own (room_merge.py).
ROOM_GRACE_SECONDS = SNAPSHOT_SECONDS + 1.0 + 2.0 + 1.0 + PACK_SECONDS + 1.0 + 5.0
POLL_SECONDS = 0.1  # how often the output reader looks whether it should stop
# What a shell needs and nothing that is usually secret; everything else must be allowed by name.
ENV_WHITELIST = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ",
                           "TMPDIR", "COLUMNS", "LINES", "NO_COLOR"})


def minimal_environment(source: Mapping[str, str], allow: frozenset[str] = frozenset()) -> dict[str, str]:
    """The whitelisted part of `source`: the variables above, LC_* locale settings, and `allow`."""
    return {k: v for k, v in source.items() if k in ENV_WHITELIST or k in allow or k.startswith("LC_")}


class _CappedBuffer:
    """Keeps the first `head` and last `tail` bytes of a stream plus the total length."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        kept = len(self.head) + len(self.tail)
        if self.total <= kept:
            return head + self.tail.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        # Whole secrets are masked in each part first (a key across the margin's inner edge would otherwise
        # keep its outer part), then a fixed margin next to the cut goes, so no half of a key stays there.
        head, tail = mask(head), mask(tail)
        short_head, short_tail = mask_cut(head, tail)
        omitted = self.total - kept + len(head) - len(short_head) + len(tail) - len(short_tail)
        return f"{short_head}\n[… {omitted:,} bytes of output omitted …]\n{short_tail}"


class ExecTool:
    def __init__(self, paths: PathResolver, *, env: Mapping[str, str] | None = None,
                 env_allow: frozenset[str] = frozenset(), sandbox: OsSandbox | RoomSandbox | None = None,
                 default_timeout: float = DEFAULT_TIMEOUT_SECONDS,
                 max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS, shell: str = "/bin/sh",
                 marks: OwnerExecMarks | None = None) -> None:
        self.paths = paths
        self.marks = marks if sandbox is None else None  # a sandbox mounts memory read-only
        source = os.environ if env is None else env
        self.sandbox = sandbox
        self.env = sandbox.environment(source) if sandbox is not None else minimal_environment(source, env_allow)
        self.default_timeout = default_timeout
        self.max_output_chars = max_output_chars
        self.shell = shell

    def tools(self) -> list[Tool]:
        return [make_tool(self.exec, name="exec")]

    def _program_dirs(self) -> list[Path]:
        env_path = self.env.get("PATH")
        return [Path(p) for p in (env_path or os.defpath).split(os.pathsep) if p]

    def exec(
        self,
        command: Annotated[str, Field(description="Shell command line (sh -c)")],
        timeout: Annotated[float | None, Field(gt=0, description="Seconds before the command is killed")] = None,
        cwd: Annotated[str | None, Field(description="Working directory, relative to the workspace")] = None,
    ) -> ToolOutput:
        """Run a shell command in the workspace; returns exit code and output (long output is cut)."""
        if not command.strip():
            raise ToolError("empty command", "pass a shell command line")
        limit = min(timeout or self.default_timeout, MAX_TIMEOUT_SECONDS)
        if isinstance(self.sandbox, RoomSandbox):
            slots = self.sandbox.slots
            if slots is not None and not slots.acquire(blocking=False):
                raise ToolError("this agent's chats are running as many commands as they may at once "
                                "(sandbox.max_commands)", "try again once one of them has finished")
            try:
                return self._in_room(self.sandbox, command, cwd, limit)
            finally:
                if slots is not None:
                    slots.release()
        workdir = self.paths.resolve(cwd, what="cwd").real if cwd else self.paths.root
        if not workdir.is_dir():
            raise ToolError(f"cwd {cwd!r} is not a directory", "pass a folder inside the workspace")
        self.paths.check_command(command, self._program_dirs(), workdir)
        argv = [self.shell, "-c", RUN_COMMAND]  # the command in its environment: `ps` shows arguments to all
        preexec = None
        if self.sandbox is not None:
            # CPU time can never exceed the wall-clock limit, so the CPU limit follows the timeout.
            jail = replace(self.sandbox, limits=replace(self.sandbox.limits, cpu_seconds=int(limit) + 1))
            argv = jail.wrap(argv, workdir)
            preexec = jail.preexec()
        buf = self._buffer()
        seen = self.marks.before() if self.marks is not None else None
        guard = self.sandbox.link_guard() if self.sandbox is not None else None
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, cwd=workdir, env={**self.env, COMMAND_VARIABLE: command}, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec,
            )
            timed_out = _wait(proc, buf, limit)
        finally:  # however the command ended (a timeout, Ctrl-C), what it wrote into memory is the owner's
            notes = self.marks.after(seen) if self.marks is not None and seen is not None else []
            notes += guard.undo() if guard is not None else []
        return _result(proc, buf, time.monotonic() - started, timed_out, limit, notes)

    def _buffer(self) -> _CappedBuffer:
        head = int(self.max_output_chars * 0.4)
        return _CappedBuffer(head, self.max_output_chars - head)

    def _in_room(self, jail: RoomSandbox, command: str, cwd: str | None, limit: float) -> ToolOutput:
        """Room mode: the wrapper times the command itself and packs the room afterwards; the host waits a
        little longer and keeps the room's changes only when the wrapper got to pack them."""
        where = jail.view.locate(cwd, "cwd") if cwd else None
        if where is not None and not jail.view.is_dir(where):
            raise ToolError(f"cwd {cwd!r} is not a directory", "pass a folder inside the workspace")
        limits = replace(jail.limits, cpu_seconds=int(limit) + 1)
        run: RoomRun = replace(jail, limits=limits).launch(command, where, limit)
        buf = self._buffer()
        started = time.monotonic()
        try:
            proc = subprocess.Popen(run.argv, stdout=subprocess.PIPE, start_new_session=True,
                                    **run.popen_kwargs(self.env))  # type: ignore[call-overload]
        except BaseException:
            run.finish(apply=False)
            raise
        finished = False
        try:
            run.started(proc)
            stuck = _wait(proc, buf, limit + ROOM_GRACE_SECONDS, run.ended, (run.fed, way_in_seconds(run)))
            elapsed = time.monotonic() - started
            code = proc.returncode
            timed_out = stuck or code == 124 or (code in (137, -9) and elapsed >= limit)
            notes = run.finish(apply=not stuck and code != SETUP_FAILED)
            if stuck:
                notes.append("[the command's files were not kept: the room was not handed back in the command's "
                             "time — what the room held before is unchanged]")
            finished = True
        finally:
            if not finished:  # cancelled: the copy is dropped, the room stays as it was
                _kill_group(proc)
                run.finish(apply=False)
        return _result(proc, buf, elapsed, timed_out, limit, notes)


def way_in_seconds(run: RoomRun) -> float:
    """The most a room's way in may take (see ROOM_START_SECONDS): what its quota holds, and the read-only copies."""
    room = run.sandbox.view.room
    seed = sum(len(data) for _, data, _ in run.seed)
    return quota_seconds(max(room.quota_bytes, 0) + seed, room.max_entries + len(run.seed))


def _wait(proc: subprocess.Popen[bytes], buf: _CappedBuffer, limit: float,
          ended: Callable[[], None] | None = None, first: tuple[threading.Event, float] | None = None) -> bool:
    """Wait for `proc` while its output is read; kill its process group after `limit` seconds (True) or
    when the turn is cancelled (re-raised). `first` (room mode: the event that the room is in, and how long that
    may take): `limit` counts from then, and `proc` is killed (True) if it does not come in time. `ended` runs once
    the command is over, however it ended (room mode: kill what is left of the sandbox). Returns a few seconds
    after `limit` whatever holds the output pipe: the reader polls the raw descriptor and is told to stop, and
    that descriptor is closed, never waited for (a buffered reader's close would wait for a read that never ends)."""
    assert proc.stdout is not None
    stdout = proc.stdout
    stop = threading.Event()
    reader = threading.Thread(target=_pump, args=(stdout.fileno(), buf, stop), daemon=True)
    reader.start()
    timed_out = False
    try:
        try:
            if first is not None:
                _await(proc, *first)
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=END_SECONDS)
    except BaseException:
        _kill_group(proc)  # Ctrl-C cancels the turn: nothing it started may linger
        raise
    finally:
        try:
            if ended is not None:
                ended()
        finally:
            reader.join(timeout=0.5)
            if reader.is_alive():
                # A background child still holds the output pipe open: it belongs to this command.
                _kill_group(proc)
                reader.join(timeout=2)
            stop.set()
            reader.join(timeout=2 * POLL_SECONDS)
            with contextlib.suppress(OSError, ValueError):
                stdout.close()
    return timed_out


def _await(proc: subprocess.Popen[bytes], event: threading.Event, seconds: float) -> None:
    """Wait for `event`, or for `proc` to end, for at most `seconds` (then TimeoutExpired)."""
    deadline = time.monotonic() + seconds
    while not event.wait(POLL_SECONDS):
        if proc.poll() is not None:
            return
        if time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, seconds)


def _result(proc: subprocess.Popen[bytes], buf: _CappedBuffer, elapsed: float, timed_out: bool, limit: float,
            notes: list[str]) -> ToolOutput:
    output = buf.text().rstrip("\n") or "(no output)"
    if notes:
        output += "\n" + "\n".join(notes)
    if timed_out:
        return ToolOutput(f"timed out after {limit:g}s; the command was killed\n{output}", is_error=True)
    code = proc.returncode
    status = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    return ToolOutput(f"{status} ({elapsed:.1f}s)\n{output}")


def _pump(fd: int, buf: _CappedBuffer, stop: threading.Event) -> None:
    """Read `fd` into `buf` until its end or `stop`: polled, so a writer that never closes it (a process the
    command left) cannot keep this thread, or whoever waits for it, forever."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    with contextlib.suppress(OSError, ValueError):
        while not stop.is_set():
            if not poller.poll(POLL_SECONDS * 1000):
                continue
            data = os.read(fd, 65536)
            if not data:
                return
            buf.feed(data)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(proc.pid, signal.SIGKILL)
