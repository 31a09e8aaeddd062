"""One control group per sandboxed command: the memory and the tasks of the whole command, bounded together.

RLIMIT_AS bounds each process, not the command: 128 tasks of 1 GB each could hold 128 GB. Where the
machine lets Hermit make control groups, every room-mode command runs in a fresh one of its own
(`hermit-exec-<pid>-<n>`, below Hermit's own cgroup) with

- cgroup v2: `memory.max` = the bound, `memory.swap.max` 0, `pids.max` = the task limit;
- cgroup v1 (the memory and pids hierarchies): `memory.limit_in_bytes` and
  `memory.memsw.limit_in_bytes` = the bound, `pids.max` = the task limit.

The child joins it before it drops to the sandbox's uid and execs bubblewrap (room_sandbox.py), so every
process of the command is inside from the start; when the command ends, whatever is left is killed and
the group removed. Where no cgroup can be made (no delegation, a read-only /sys/fs/cgroup), `find_site()`
says why and room_sandbox.py falls back to a lower task limit and a smaller address space per process
(see `fallback_limits`), which still bounds the total. bubblewrap has no cgroup option of its own.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from hermit.locks import hold_made, left_unheld

PREFIX = "hermit-exec-"
_counter = itertools.count()
# Without a cgroup: at most this many tasks, each with a quarter of exec_memory_mb of address space, so
# a command's processes together map at most FALLBACK_TASKS * exec_memory_mb / 4 = 4 x exec_memory_mb.
FALLBACK_TASKS = 16
FALLBACK_SHARE = 4
MIN_PROCESS_MB = 64  # python3 -m pip --version needs about 48 MB of address space


def fallback_limits(memory_mb: int, max_processes: int) -> tuple[int, int]:
    """(tasks, address space per process in MB) when no cgroup bounds the command."""
    return min(max_processes, FALLBACK_TASKS), max(MIN_PROCESS_MB, memory_mb // FALLBACK_SHARE)


@functools.lru_cache(maxsize=1)
def nproc_per_namespace(release: str | None = None) -> bool:
    """Whether RLIMIT_NPROC counts the tasks of a uid in each user namespace apart (Linux 5.14 and later:
    ucounts): then a limit set inside the sandbox's fresh namespace is a number of tasks of the command alone.
    Before, it counted every task of the uid, so the sandbox's limit had to be the uid's count plus the
    command's share, and tasks the owner's programs ended meanwhile were the command's to take."""
    found = re.match(r"(\d+)\.(\d+)", release if release is not None else os.uname().release)
    return found is not None and (int(found.group(1)), int(found.group(2))) >= (5, 14)


@dataclass(frozen=True)
class Site:
    """Where commands' cgroups are made: v2 one folder for both; v1 the memory and the pids folders."""

    version: int
    memory_parent: Path
    pids_parent: Path

    def describe(self) -> str:
        return f"cgroup v{self.version}"


def _own_paths(text: str) -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; the v2 hierarchy is "" ."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for ctrl in parts[1].split(",") if parts[1] else [""]:
                out[ctrl] = parts[2]
    return out


def _mounts(text: str) -> list[tuple[str, str, str, set[str]]]:
    """/proc/self/mountinfo's cgroup mounts as (root, mount point, fs type, super options)."""
    out = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) >= 5 and len(r) >= 3 and r[0] in ("cgroup", "cgroup2"):
            out.append((f[3], f[4].replace("\\040", " "), r[0], set(r[2].split(","))))
    return out


def _dir_for(own: str, root: str, mount_point: str) -> Path | None:
    """The folder of the cgroup `own` under a mount of the hierarchy's `root`, if it is visible there."""
    rel = os.path.relpath(own, root) if root != "/" else own.lstrip("/")
    if rel.startswith(".."):
        return None
    return Path(mount_point) / (rel if rel != "." else "")


def _candidates() -> list[Site]:
    try:
        own = _own_paths(Path("/proc/self/cgroup").read_text())
        mounts = _mounts(Path("/proc/self/mountinfo").read_text())
    except OSError:
        return []
    sites: list[Site] = []
    for root, point, kind, _ in mounts:
        if kind == "cgroup2" and "" in own:
            d = _dir_for(own[""], root, point)
            if d is not None and {"memory", "pids"} <= set(_read(d / "cgroup.controllers").split()):
                sites.append(Site(2, d, d))
    v1 = {c: _dir_for(own[c], root, point) for root, point, kind, opts in mounts if kind == "cgroup"
          for c in ("memory", "pids") if c in opts and c in own}
    if v1.get("memory") is not None and v1.get("pids") is not None:
        sites.append(Site(1, v1["memory"], v1["pids"]))  # type: ignore[arg-type]
    return sites


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@functools.lru_cache(maxsize=1)
def find_site() -> tuple[Site | None, str]:
    """Where this process can make a command's cgroup (tried once: a test group made, limited, removed),
    or None and why not."""
    reasons = []
    for site in _candidates():
        _remove_stale(site)
        try:
            probe = CommandCgroup.create(site, 64 << 20, 8)
        except OSError as e:
            reasons.append(f"{site.describe()} at {site.memory_parent}: {e.strerror or e}")
            continue
        probe.remove()
        return site, f"{site.describe()} at {site.memory_parent}"
    return None, "; ".join(reasons) or "no cgroup with the memory and pids controllers is writable here"


def remove_stale_groups() -> None:
    """Remove the empty groups killed Hermit processes left where this one makes its own (done once when a
    process first looks for its site; call it again after killing one)."""
    site, _ = find_site()
    if site is not None:
        _remove_stale(site)


def _remove_stale(site: Site) -> None:
    """Groups a killed Hermit left behind (empty ones only: rmdir refuses the others): those no process holds
    (locks.left_unheld; a live Hermit holds its group from its making to its removal, whatever its pid)."""
    for parent in {site.memory_parent, site.pids_parent}:
        for stale in left_unheld(parent, PREFIX):
            with contextlib.suppress(OSError):
                os.rmdir(stale)


@dataclass
class CommandCgroup:
    """One command's group(s): made before the command starts, removed after it ends."""

    site: Site
    dirs: tuple[Path, ...]
    memory_bytes: int
    tasks: int

    held: tuple[int, ...] = ()  # each folder's descriptor, locked until it is removed (locks.hold_made)

    @classmethod
    def create(cls, site: Site, memory_bytes: int, tasks: int) -> CommandCgroup:
        # The pid is for people; a random part keeps two Hermits with one pid (pid namespaces) apart.
        name = f"{PREFIX}{os.getpid()}-{next(_counter)}-{secrets.token_hex(4)}"
        made: list[Path] = []
        held: list[int] = []
        try:
            for parent in dict.fromkeys((site.memory_parent, site.pids_parent)):
                (parent / name).mkdir(mode=0o755)
                made.append(parent / name)
                held.append(os.open(parent / name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
                if not hold_made(held[-1], parent / name):
                    raise FileNotFoundError(f"{parent / name} was removed as it was made")
            group = cls(site, tuple(made), memory_bytes, tasks, tuple(held))
            group._limit()
        except OSError:
            for d in made:
                with contextlib.suppress(OSError):
                    d.rmdir()
            for fd in held:
                os.close(fd)
            raise
        return group

    @property
    def memory_dir(self) -> Path:
        return self.dirs[0]

    @property
    def pids_dir(self) -> Path:
        return self.dirs[-1]

    def _limit(self) -> None:
        m, p = self.memory_dir, self.pids_dir
        if self.site.version == 2:
            _write(m / "memory.max", self.memory_bytes)
            if (m / "memory.swap.max").exists():
                _write(m / "memory.swap.max", 0)
        else:
            _write(m / "memory.limit_in_bytes", self.memory_bytes)
            if (m / "memory.memsw.limit_in_bytes").exists():  # swap accounting on: no swap either
                _write(m / "memory.memsw.limit_in_bytes", self.memory_bytes)
        _write(p / "pids.max", self.tasks)

    def procs_files(self) -> tuple[str, ...]:
        """The files the child writes "0" to (itself) to join, before it drops its uid."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the command for passing the memory bound."""
        name = "memory.events" if self.site.version == 2 else "memory.oom_control"
        for line in _read(self.memory_dir / name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False

    def kill(self) -> None:
        """SIGKILL every process in the group now."""
        for d in self.dirs:
            for pid in _read(d / "cgroup.procs").split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        """Kill whatever is left in the group and remove it (a few tries: exiting tasks leave it late)."""
        for attempt in range(100):
            left = False
            self.kill()
            for d in self.dirs:
                if not d.exists():
                    continue
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    left = True
            if not left:
                break
            time.sleep(0.01 if attempt < 20 else 0.05)
        for fd in self.held:  # removed, or given up on: then the next Hermit's sweep may remove it
            os.close(fd)
        self.held = ()


def _write(path: Path, value: int) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def join(procs_files: tuple[str, ...]) -> None:
    """In the child, before exec: move this process into the command's group (async-signal-safe enough
    for preexec_fn: os calls only)."""
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
