"""The `hermit doctor` check for the exec sandbox: which OS sandbox non-main sessions get and the proof that it
confines them (probed inside it: the uid, no capabilities, mounts refused), or that they get no exec."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermit.cli.checks import Check, check
from hermit.cli.context import CliContext
from hermit.errors import HermitError

if TYPE_CHECKING:
    from hermit.tools.os_sandbox import Backend

FIX = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) to give them a sandboxed exec"


def memory_bound(memory_mb: int, max_processes: int) -> str:
    """What one sandboxed command's processes may hold together, on this machine (exec_cgroup.py)."""
    import os

    from hermit.tools.exec_cgroup import fallback_limits, find_site, nproc_per_namespace

    site, why = find_site()
    if site is not None:
        return (f"memory: {memory_mb} MB for the whole command plus its tmpfs copies, {max_processes} tasks "
                f"({why})")
    tasks, each = fallback_limits(memory_mb, max_processes)
    if not nproc_per_namespace():  # the limit is the uid's count at the start plus `tasks` (room_sandbox.py)
        return (f"memory: no cgroup ({why}), and this kernel ({os.uname().release}; before 5.14) counts tasks per "
                f"uid, not per sandbox: a command may run {tasks} tasks more than the uid runs when it starts, plus "
                f"as many as the uid's other programs end meanwhile, each of {each} MB address space; no bound on "
                "their total")
    return (f"memory: no cgroup ({why}), so at most {tasks} tasks of {each} MB address space each, "
            f"{tasks * each} MB together plus its tmpfs copies")


def describe(backend: Backend, memory: str = "") -> str | Check:
    if backend.available:
        proof = f" ({'; '.join(backend.proof)})" if backend.proof else ""
        return (f"{backend.detail}: non-main sessions run exec sandboxed in their own room (no network, "
                f"no capabilities, limited processes and disk){proof}{'; ' + memory if memory else ''}")
    return Check("exec sandbox", "warn", f"{backend.detail}: exec is not offered to non-main sessions (groups, "
                                         "channels, other people's DMs); the main session is not affected",
                 backend.fix or FIX)


@check("exec sandbox", fix=FIX)
def exec_sandbox(ctx: CliContext) -> str | Check:
    from hermit.tools.os_sandbox import detect  # the tools package is heavy: only when doctor runs

    try:
        settings = ctx.config().agent().settings.sandbox
        uid, memory_mb, tasks = settings.uid, settings.exec_memory_mb, settings.exec_max_processes
    except HermitError:  # a broken config is the config check's to report; probe with the defaults
        uid, memory_mb, tasks = 65534, 1024, 128
    backend = detect(sandbox_uid=uid)
    return describe(backend, memory_bound(memory_mb, tasks) if backend.name == "bwrap" else "")
