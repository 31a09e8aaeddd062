"""A non-owner session's exec: bubblewrap, an unprivileged uid, no capabilities, and a size-limited copy of its room.

The command never touches the host's disk. Inside a fresh bubblewrap sandbox (new user, pid, network,
ipc and uts namespaces; the system dirs read-only; no capabilities; nested user namespaces disabled)
`/workspace` (views.ROOM_ROOT, never the workspace's host path: that would show a chat the owner's login name and
folders, in `pwd`, $HOME, /proc/self/mountinfo and bubblewrap's own command line) is a size-limited tmpfs holding:

- a copy of the session's room (rooms.py), which the command may change,
- the instruction files (AGENTS.md, SOUL.md …) and `memory/` as this session may see them (its own
  size-limited tmpfs), read-only copies.

Hermit streams that content in as a tar on a socket; a small shell wrapper unpacks it, runs the command
under `timeout`, kills whatever the command left running, and streams the room's part back out as a
tar (of what the command changed; what it left as it was is only named: room_wrapper.py) on another socket (a socket, not a pipe: a pipe the wrapper holds could be reopened through
/proc/<pid>/fd by the command, which runs as the same uid, and fed a tar of its own). Hermit unpacks
that tar trusting none of it (room_unpack.py `unpack`: folders, regular files and links only, within a byte budget) into
a staging folder (`.incoming-<pid>-…`) that it holds locked from its making to its removal, so that the next
run removes one a killed Hermit left, and never one a live Hermit uses (in another pid namespace, say), then merges the changes into the room (room_merge.py: planned first, within a time), under the room's lock and only below
the room's descriptor. So:

- disk use is bounded by the tmpfs sizes (`sandbox.room_mb`, `sandbox.exec_tmp_mb`), not a check;
- nothing the command creates can land outside the room or become an instruction file, during the
  command or after a crash (a killed gateway loses the copy, never the owner's files);
- a command racing another session's file tool has nothing to race: it only ever sees its copy.

When Hermit runs as root, the sandbox runs as a uid no account uses (os_sandbox.unused_uid: `sandbox.uid`
unless an account has it, else one from 2,000,000,000 up; never `nobody`, whose other processes could read
a room through /proc/<pid>/root): root keeps its capabilities inside a user namespace (`CapEff
000001fffeffffff`), and root is exempt from the task limit (RLIMIT_NPROC). The wrapper sets that limit inside the
sandbox's own user namespace, where Linux 5.14 and later count the command's tasks apart from the uid's other
ones: the whole sandbox holds at most `sandbox.exec_max_processes` tasks (bubblewrap's own included), however
many the owner's programs start or end meanwhile. An older kernel counts every task of the uid, so there the
limit is the uid's task count at the start plus that number. The memory of all the command's processes together
is bounded by a cgroup of its own where the machine allows one, else by fewer tasks with less address
space each (exec_cgroup.py); when the command ends, however it ends, bubblewrap's pid 1 is killed (and with it
everything in the sandbox's pid namespace) and so is what is left in its cgroup (room_end.py); the kernel keyring is refused by a seccomp filter (seccomp.py); what comes
back is merged only as far as the room's quota, which charges every entry (rooms.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import socket
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from hermit.errors import HermitError, PathPolicyError, ToolError
from hermit.tools import room_journal, safe_fs
from hermit.tools.exec_cgroup import CommandCgroup, fallback_limits, find_site, nproc_per_namespace
from hermit.tools.os_sandbox import (
    COMMAND_VARIABLE,
    READ_ONLY_BASE,
    SANDBOX_PATH,
    Backend,
    SandboxLimits,
    host_uid,
    room_mode_args,
)
from hermit.tools.room_end import SandboxInit, join_while_busy
from hermit.tools.room_limits import child_limits, quota_seconds, tasks_of
from hermit.tools.room_merge import apply_incoming
from hermit.tools.room_unpack import MAX_DEPTH as MAX_DEPTH
from hermit.tools.room_unpack import MAX_PATH_BYTES as MAX_PATH_BYTES
from hermit.tools.room_unpack import RESERVED_TOP as RESERVED_TOP
from hermit.tools.room_unpack import STAGING_PREFIX as STAGING_PREFIX
from hermit.tools.room_unpack import OverBudget as OverBudget
from hermit.tools.room_unpack import OverTime, Seen, add_unchanged
from hermit.tools.room_unpack import new_staging as new_staging
from hermit.tools.room_unpack import sweep_staging as sweep_staging
from hermit.tools.room_unpack import unpack as unpack
from hermit.tools.room_wrapper import LIST_DIGITS as LIST_DIGITS
from hermit.tools.room_wrapper import PACK_SECONDS as PACK_SECONDS
from hermit.tools.room_wrapper import PACKED as PACKED
from hermit.tools.room_wrapper import SNAPSHOT_SECONDS as SNAPSHOT_SECONDS
from hermit.tools.room_wrapper import WRAPPER as WRAPPER
from hermit.tools.rooms import ENTRY_BYTES, MOVED, Manifest, Merge, Room, RoomMoved, SeedEntry, stamp_of
from hermit.tools.seccomp import filter_fd, filter_program
from hermit.tools.views import MEMORY_DIR, ROOM_INSTRUCTIONS, ROOM_ROOT, Located, RoomView

SETUP_FAILED = 125  # the wrapper's exit code when it could not unpack the room
MAX_INSTRUCTION_BYTES = 20_000_000  # as the read tool's limit: a larger instruction file is left out


def sandbox_uid(configured: int) -> int | None:
    """The uid a sandboxed command runs as: when Hermit is root one no account uses (`configured` unless
    an account has it, os_sandbox.unused_uid), else Hermit's own (None)."""
    return host_uid(configured)


class _Hashing(io.RawIOBase):
    """A file object that hashes what is read through it (the seed manifest's signature)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = os.read(self.fd, len(b))
        b[: len(data)] = data
        self.sha.update(data)
        return len(data)


class Channels:
    """The two sockets that carry the room in (the wrapper's stdin) and back out (its stderr, kept as fd 3).
    Sockets, not pipes: /proc/<pid>/fd/N reopens a pipe (so the command, the wrapper's uid, could write
    its own tar into the way back) but not a socket (ENXIO)."""

    def __init__(self) -> None:
        self.feed, self.feed_child = socket.socketpair()
        self.back, self.back_child = socket.socketpair()

    def started(self) -> None:
        """The child holds its ends now: close Hermit's copies, and each direction not used."""
        for s in (self.feed_child, self.back_child):
            s.close()
        with contextlib.suppress(OSError):
            self.feed.shutdown(socket.SHUT_RD)
            self.back.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Wake a thread blocked on either socket (room_end.join_while_busy)."""
        for s in (self.feed, self.back):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for s in (self.feed, self.feed_child, self.back, self.back_child):
            s.close()


@dataclass
class RoomRun:
    """One sandboxed command: its command line, the sockets that carry the room in and out, and the merge."""

    sandbox: RoomSandbox
    argv: list[str]
    seed: list[tuple[str, bytes, int]]  # (path in the view, content, mode) for the read-only parts
    limit: float
    preexec: Callable[[], None]
    user: int | None
    spool: IO[bytes]
    seccomp_fd: int = -1  # the filter's pipe (seccomp.py), closed once the sandbox started
    info: tuple[int, int] = (-1, -1)  # bubblewrap's --info-fd pipe (read, write): which process is its pid 1
    group: CommandCgroup | None = None  # the command's cgroup (exec_cgroup.py), removed in finish
    passed: dict[str, str] = field(default_factory=dict)  # the command and its cwd, for the environment
    channels: Channels = field(default_factory=Channels)
    manifest: Manifest = field(default_factory=dict)
    out_bytes: int = 0
    overflow: bool = False
    _threads: list[threading.Thread] = field(default_factory=list)
    fed: threading.Event = field(default_factory=threading.Event)  # the room is in (or its way in failed)
    init: SandboxInit = field(default_factory=SandboxInit)  # bubblewrap's pid 1, killed when the command ends

    def popen_kwargs(self, env: Mapping[str, str]) -> dict[str, object]:
        """How to start it: the room goes in on stdin and comes back on stderr (the wrapper's fd 3), sockets both;
        `env` and the command's text and cwd, which the wrapper takes out of it (WRAPPER)."""
        return {"stdin": self.channels.feed_child.fileno(), "stderr": self.channels.back_child.fileno(),
                "preexec_fn": self.preexec, "cwd": "/", "env": {**env, **self.passed},
                "pass_fds": (self.seccomp_fd, self.info[1])}  # the child drops to `user` itself, after joining its cgroup

    def _close_filter(self) -> None:
        for fd in (self.seccomp_fd, self.info[1]):
            if fd >= 0:
                os.close(fd)
        self.seccomp_fd, self.info = -1, (self.info[0], -1)

    def started(self, proc: subprocess.Popen[bytes]) -> None:
        """Feed the room in and collect it back out while the command runs."""
        self._close_filter()
        self.channels.started()
        self._threads = [threading.Thread(target=self._feed, daemon=True, name="sandbox-feed"),
                         threading.Thread(target=self._collect, daemon=True, name="sandbox-collect")]
        for t in self._threads:
            t.start()
        self.init = SandboxInit.read(self.info[0], proc.pid)

    def _feed(self) -> None:
        try:
            self._send()
        finally:
            self.fed.set()

    def _send(self) -> None:
        with contextlib.suppress(OSError, ValueError, tarfile.TarError, HermitError), \
                self.channels.feed.makefile("wb") as out, \
                tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            with self.sandbox.view.room.fd() as room:
                self._add_room(tar, room)
            for path, data, mode in self.seed:
                info = tarfile.TarInfo(path)
                # A fixed time: the copy's says nothing of when the owner last wrote (its memory/ folder alike).
                info.size, info.mode, info.mtime = len(data), mode, 0
                tar.addfile(info, io.BytesIO(data))
            dirs = sorted({p.rsplit("/", 1)[0] for p, _, _ in self.seed if "/" in p} | {MEMORY_DIR})
            for d in dirs:  # after their files: tar applies a directory's mode when it is done with it
                info = tarfile.TarInfo(d)
                info.type, info.mode = tarfile.DIRTYPE, 0o555
                tar.addfile(info)
        with contextlib.suppress(OSError):  # the wrapper's tar reads to the end: tell it where that is
            self.channels.feed.shutdown(socket.SHUT_WR)

    def _add_room(self, tar: tarfile.TarFile, room: int) -> None:
        for rel, st in safe_fs.walk_beneath(room):
            if rel.split("/", 1)[0] in RESERVED_TOP:
                continue
            info = tarfile.TarInfo(rel)
            info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                self.manifest[rel] = SeedEntry(("d", ""), stamp_of(st))
            elif stat.S_ISLNK(st.st_mode):
                target = safe_fs.readlink_beneath(room, rel)
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
                self.manifest[rel] = SeedEntry(("l", target), stamp_of(st))
            elif stat.S_ISREG(st.st_mode):
                try:
                    fd = safe_fs.open_beneath(room, rel, os.O_RDONLY | os.O_NONBLOCK)
                except (OSError, HermitError):  # gone or swapped since the walk: not part of the copy
                    continue
                try:
                    fst = os.fstat(fd)
                    if not stat.S_ISREG(fst.st_mode):
                        continue
                    info.size = fst.st_size
                    reader = _Hashing(fd)
                    tar.addfile(info, io.BufferedReader(reader))
                    self.manifest[rel] = SeedEntry(("f", reader.sha.hexdigest()), stamp_of(fst))
                finally:
                    os.close(fd)

    def _collect(self) -> None:
        cap = self.sandbox.out_cap
        with contextlib.suppress(OSError, ValueError):
            while True:
                block = self.channels.back.recv(1 << 16)
                if not block:
                    return
                self.out_bytes += len(block)
                if self.out_bytes > cap:
                    self.overflow = True  # more than the room can hold: not from the wrapper's tar
                    self.channels.back.shutdown(socket.SHUT_RD)  # its writes fail now (EPIPE)
                    return
                self.spool.write(block)

    def ended(self) -> None:
        """The command is over, however it ended: kill whatever is left of it (its pid namespace, its cgroup)."""
        self.init.kill()
        if self.group is not None:
            self.group.kill()

    def finish(self, apply: bool) -> list[str]:
        """Wait for the pipes; when `apply`, merge the packed room into the room. Returns notes."""
        self._close_filter()
        self.ended()
        join_while_busy(self._threads, lambda: self.out_bytes, self.channels.cut)
        self.channels.close()
        notes = self._told()
        try:
            if not apply:
                return notes
            if self.overflow:
                return [*notes, f"[the command's files were not kept: more than {self.sandbox.out_cap:,} bytes came back]"]
            if self.group is not None and self.group.oom_killed():
                notes.append(f"[a process was killed: the command's processes together may hold "
                             f"{self.sandbox.limits.memory_mb} MB (sandbox.exec_memory_mb)]")
            merge = self._apply()
            if isinstance(merge, str):
                return [*notes, merge]
            changed = merge.changed
            if changed:
                shown = ", ".join(c.lstrip("-") + (" (deleted)" if c.startswith("-") else "") for c in changed[:20])
                more = f" and {len(changed) - 20} more" if len(changed) > 20 else ""
                notes.append(f"[kept in this chat's room: {shown}{more}]")
            if merge.too_deep:
                shown = ", ".join(_short(n) for n in merge.too_deep[:3]) + (
                    f" and {len(merge.too_deep) - 3:,} more" if len(merge.too_deep) > 3 else "")
                notes.append(f"[not kept, nested too deep: {shown} — a path in this chat's room may have at most "
                             f"{MAX_DEPTH} parts and {MAX_PATH_BYTES:,} bytes]")
            if merge.refused:
                shown = ", ".join(_short(n) for n in merge.refused[:5]) + (
                    f" and {len(merge.refused) - 5:,} more" if len(merge.refused) > 5 else "")
                notes.append(f"[links removed: {shown} — followed through this chat's other links they lead out of "
                             "its room (or loop)]")
            if merge.meanwhile:
                shown = ", ".join(_short(n) for n in merge.meanwhile[:5]) + (
                    f" and {len(merge.meanwhile) - 5:,} more" if len(merge.meanwhile) > 5 else "")
                notes.append(f"[not kept, written in this chat's room while the command ran (by a file tool or "
                             f"another command of this chat): {shown} — that version stays]")
            if merge.skipped:
                room = self.sandbox.view.room
                shown = ", ".join(merge.skipped[:5]) + (f" and {len(merge.skipped) - 5:,} more"
                                                       if len(merge.skipped) > 5 else "")
                notes.append(f"[not kept, this chat's room is full: {shown} — its quota of "
                             f"{room.quota_bytes >> 20} MB counts every file and folder as at least "
                             f"{ENTRY_BYTES // 1024} KiB (at most {room.max_entries:,} entries); what the room "
                             "held before is unchanged]")
            return notes
        finally:
            self.spool.close()
            self.init.close()
            if self.info[0] >= 0:
                os.close(self.info[0])
                self.info = (-1, -1)
            if self.group is not None:
                self.group.remove()

    def _told(self) -> list[str]:
        """What the room's chat is to be told of an earlier merge a stopped Hermit left (room_journal.tell): finished
        when this command's room went in, or its staging folder removed then."""
        try:
            return room_journal.told(self.sandbox.view.room)
        except RoomMoved:  # said by the merge's own note (`_apply`)
            return []

    def _packed(self) -> bool:
        """The wrapper's tar finished (WRAPPER: PACKED follows it): a pack cut short is never merged."""
        if self.out_bytes < len(PACKED):
            return False
        self.spool.seek(-len(PACKED), os.SEEK_END)
        done = self.spool.read() == PACKED
        self.spool.seek(0)
        return done

    def _unchanged(self) -> bytes | None:
        """The list of unchanged paths before PACKED (WRAPPER: the list, then its length in LIST_DIGITS digits), cut
        off the spool so that only the tar is left in it; None when what is there is not such a list."""
        end = self.out_bytes - len(PACKED) - LIST_DIGITS
        if end < 0:
            return None
        self.spool.seek(end)
        digits = self.spool.read(LIST_DIGITS)
        if len(digits) != LIST_DIGITS or not digits.isdigit() or int(digits) > end:
            return None
        start = end - int(digits)
        self.spool.seek(start)
        same = self.spool.read(int(digits))
        self.spool.truncate(start)
        self.spool.seek(0)
        return same

    def _apply(self) -> Merge | str:
        self.spool.seek(0)
        if not self.out_bytes:
            return Merge([], [])
        if not self._packed():
            return ("[the command's files were not kept: the room was not handed back in full in the command's time "
                    "— what the room held before is unchanged]")
        same = self._unchanged()
        if same is None:
            return "[the command's files were not kept: the room could not be read back (its pack does not end right)]"
        room = self.sandbox.view.room
        seconds = merge_seconds(room)
        deadline = time.monotonic() + seconds
        # Held from its making to its removal: what a killed process left is removed by the next run
        # (sweep_staging, which tells the room's chat: room_journal.mark_staging), never what a live one uses.
        staging, fd = new_staging(room.base)
        too_deep: list[str] = []
        seen: dict[str, Seen] = {}
        try:
            room_journal.mark_staging(fd, room.path.name)
            try:
                with tarfile.open(fileobj=self.spool, mode="r:") as tar:
                    # The room's copy may hold any number of empty files (a tmpfs counts bytes, not
                    # inodes): no more than the quota's entries, and no more bytes than came back
                    # (out_cap), are unpacked on the host's disk; and of those only files new or changed.
                    over = unpack(tar, fd, room.max_entries, keep=self.manifest, max_bytes=self.sandbox.out_cap,
                                  too_deep=too_deep, seen=seen, deadline=deadline)
                add_unchanged(same, self.manifest, seen, deadline)
            except (tarfile.TarError, OSError, ValueError) as e:
                return f"[the command's files were not kept: the room could not be read back ({_reason(e)})]"
            asked = time.monotonic()
            with room.locked() as room_fd:
                # Its time counts from when it has the room: waiting for another merge of this room (or finishing
                # one a stopped Hermit left) is not this one's.
                deadline += time.monotonic() - asked
                try:
                    merge = apply_incoming(room_fd, staging, self.manifest, room.quota_bytes, seen, deadline,
                                           carry=room_journal.carry_path(room.base, room.path.name))
                except (OSError, HermitError, RecursionError) as e:
                    # What came back is read in full, and the merge planned, before the room is touched
                    # (room_merge.py): the room is as it was — unless the error came while the plan was carried
                    # out: then the rest of it is carried out now, or the chat told what the room holds.
                    cause = f"the command's files met an error as they were kept in this chat's room ({_reason(e)})"
                    return room_journal.recover(room_fd, room.base, room.path.name, cause) or (
                        f"[the command's files were not kept: they could not be merged into the room ({_reason(e)})]")
        except OverTime:  # reading what came back, or planning, passed the merge's time: the room is untouched
            return _over_time(seconds, seen, self.manifest)
        except RoomMoved:  # the room this command's copy came from is gone from its name: none of it goes elsewhere
            return f"[the command's files were not kept: {MOVED}]"
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            os.close(fd)  # the lock goes after the folder
        merge.skipped += over
        merge.too_deep = too_deep
        return merge


def _over_time(seconds: float, seen: Mapping[str, Seen], seed: Manifest) -> str:
    """What the chat is told of a merge that would pass its time (bench/results/room_merge.md: a full rewrite of a
    room of 65,000 files, on a disk others load, can): nothing is kept, and how to get the work done is said."""
    changed = sum(1 for rel, e in seen.items() if rel not in seed or seed[rel].sig != e.sig)
    many = f" ({changed:,} entries came back changed)" if changed else ""
    return (f"[the command's files were not kept: merging them back into this chat's room would take longer than its "
            f"{seconds:.0f} s{many} — what the room held before is unchanged. Run the command again (the disk may be "
            "busy now), or change fewer files per command (a folder at a time), or keep many small files in one "
            "archive (tar)]")


def merge_seconds(room: Room) -> float:
    """How long the merge after a command may take (room_merge.py): what the room's quota may hold, at the rates
    its way in is given."""
    return quota_seconds(room.quota_bytes, room.max_entries)


def _reason(e: BaseException) -> str:
    """An error as the session may see it: what went wrong, never a host path."""
    if isinstance(e, OSError) and e.errno is not None:
        return os.strerror(e.errno)
    if isinstance(e, OSError | RecursionError):
        return type(e).__name__
    text = str(e)
    return "an entry could not be read" if "/" in text else text


def _short(name: str) -> str:
    return name if len(name) <= 80 else f"{name[:60]}…({len(name):,} characters)"


@dataclass(frozen=True)
class RoomSandbox:
    """How a non-owner session's exec runs (Linux, bubblewrap)."""

    backend: Backend
    view: RoomView
    limits: SandboxLimits
    scratch: Path  # <agent dir>/sandbox: spool files for what comes back
    run_as: int | None = None  # the uid to run as (Hermit is root); None: Hermit's own uid
    # The agent's commands running now, at most sandbox.max_commands (agent/confinement.py); None: unbounded.
    slots: threading.BoundedSemaphore | None = None

    @property
    def out_cap(self) -> int:
        """The most a command may hand back: its room's tmpfs, plus room for tar's headers."""
        return self.view.room.quota_bytes + (32 << 20)

    def environment(self, source: Mapping[str, str]) -> dict[str, str]:
        # MALLOC_ARENA_MAX: glibc reserves 64 MB of address space per thread arena, which a per-process
        # address-space limit (exec_cgroup.fallback_limits) would refuse to a program with a few threads.
        return {"PATH": SANDBOX_PATH, "HOME": ROOM_ROOT, "LANG": source.get("LANG") or "C.UTF-8",
                "TERM": source.get("TERM") or "dumb", "MALLOC_ARENA_MAX": "2"}

    def cwd_of(self, loc: Located | None) -> str:
        """Where the command starts inside the sandbox (the view keeps the workspace's layout, at ROOM_ROOT)."""
        return ROOM_ROOT if loc is None or not loc.rel else f"{ROOM_ROOT}/{loc.rel}"

    def _seed(self) -> list[tuple[str, bytes, int]]:
        seed: list[tuple[str, bytes, int]] = []
        for name in ROOM_INSTRUCTIONS:  # not BOOTSTRAP.md: the owner's first-run script is no room's
            with contextlib.suppress(OSError, PathPolicyError):  # missing, not a regular file, a link: left out
                # as this session may see it: what the owner's chat wrote in it is withheld (views.py)
                seed.append((name, self.view.read(Located("instruction", name, name), MAX_INSTRUCTION_BYTES), 0o444))
        seed += [(rel, data, 0o444) for rel, data in self.view.memory.files()]
        return seed

    def launch(self, command: str, cwd: Located | None, timeout: float) -> RoomRun:
        if self.backend.name != "bwrap" or self.backend.program is None:
            raise ToolError(f"no OS sandbox: {self.backend.detail}", "install bubblewrap")
        # A room over its quota (possible only by a little, see out_cap) still gets its own size, so the
        # command can delete files; it cannot grow further.
        room_bytes = max(self.view.room.quota_bytes, self.view.room.usage())
        sweep_staging(self.view.room.base)
        seed = self._seed()
        instructions = sum(len(d) + 4096 for p, d, _ in seed if "/" not in p)
        memory = sum(len(d) + 4096 for p, d, _ in seed if "/" in p)
        bpf = filter_program()
        if bpf is None:
            raise ToolError("no OS sandbox: no seccomp filter for this machine", "see hermit doctor")
        ws = ROOM_ROOT
        self.scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        spool = tempfile.SpooledTemporaryFile(max_size=8 << 20, mode="w+b", dir=str(self.scratch))  # noqa: SIM115 - closed in finish
        tmpfs = room_bytes + instructions + memory + (self.limits.tmp_mb << 20) + (4 << 20)
        group, tasks, per_process = self._memory_bound(tmpfs)
        if group is None:  # nothing would bound memfds and SysV shared memory: refused (seccomp.SHARED_MEMORY)
            bpf = filter_program(shared_memory=False) or bpf
        fd = filter_fd(bpf)
        # The task limit: inside the sandbox's namespace where the kernel counts it apart (bubblewrap's outer
        # process is the one task outside), else the uid's count now plus the command's share (the docstring).
        inside = nproc_per_namespace()
        outside = None if inside else tasks_of(self.run_as if self.run_as is not None else os.getuid()) + tasks
        args = room_mode_args(self.backend.program, self.limits.tmp_mb << 20, fd)
        args += ["--size", str(room_bytes + instructions + (1 << 20)), "--tmpfs", ws,
                 "--size", str(memory + (1 << 20)), "--tmpfs", f"{ws}/{MEMORY_DIR}", *READ_ONLY_BASE,
                 "--chdir", ws, "--", "/bin/sh", "-c", WRAPPER, "hermit-sandbox", ws, str(max(1, int(timeout))),
                 str(tasks - 1) if inside else ""]
        setup = child_limits(self.limits, outside, per_process, group, self.run_as)
        info = os.pipe()  # bubblewrap names its pid 1 there, which ends the command for good (room_end.py)
        args[1:1] = ["--info-fd", str(info[1])]
        return RoomRun(self, args, seed, timeout, setup, self.run_as, spool, fd, info, group,
                       passed={COMMAND_VARIABLE: command, "HERMIT_CWD": self.cwd_of(cwd)})

    def _memory_bound(self, tmpfs: int) -> tuple[CommandCgroup | None, int, int]:
        """(the command's cgroup or None, the tasks it may add, address space per process in bytes).
        With a cgroup its processes together hold at most exec_memory_mb, plus what its tmpfs copies may
        hold (`tmpfs`: their pages are charged to it too); without one, see exec_cgroup.fallback_limits."""
        lim = self.limits
        site, _ = find_site()
        if site is not None:
            with contextlib.suppress(OSError):  # could not make one now: the fallback still bounds it
                group = CommandCgroup.create(site, (lim.memory_mb << 20) + tmpfs, lim.max_processes)
                return group, lim.max_processes, lim.memory_mb << 20
        tasks, per_process_mb = fallback_limits(lim.memory_mb, lim.max_processes)
        return None, tasks, per_process_mb << 20
