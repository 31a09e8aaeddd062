"""`hermit gateway restart`: restart the running gateway of this state dir in place (gateway/supervisor.py
`request_restart`: SIGUSR1 — it stops as for Ctrl-C, letting running turns finish, then starts again in the same process
keeping its listening sockets, so its port is never free for another program meanwhile; gateway/listen.py).

The gateway signalled is the one that holds this state dir's lock file (gateway/state.py) — the pid it published is
checked, not trusted: the process must be this user's and have that very lock file open (by inode, /proc/<pid>/fd),
and it is signalled through a pidfd taken before the checks, so a pid reused meanwhile is never signalled. Then it
waits until the gateway has published a new start and answers on its port, and prints the result. Linux only (it reads
/proc); under launchd: `launchctl kickstart -k`.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from hermit.cli.context import CliContext
from hermit.errors import HermitError
from hermit.gateway.state import lock_path, read_lock_info

POLL_SECONDS = 0.1
EXTRA_WAIT_SECONDS = 120.0  # beyond the grace period turns get: the new image's start (models, indexes)


def register(gs: Any) -> None:
    p = gs.add_parser("restart", help="restart the running gateway in place (SIGUSR1): its port stays taken, running "
                      "turns may finish; waits until it answers again")
    p.set_defaults(func=cmd_restart)


def _holds_lock(pid: int, lock: Path) -> bool:
    """Whether process `pid` has the file `lock` open (the same inode)."""
    want = os.stat(lock)
    folder = f"/proc/{pid}/fd"
    for name in os.listdir(folder):
        try:
            st = os.stat(f"{folder}/{name}")
        except OSError:
            continue
        if (st.st_ino, st.st_dev) == (want.st_ino, want.st_dev):
            return True
    return False


def _ours(ctx: CliContext, pid: int) -> None:
    """HermitError unless process `pid` is this user's and holds this state dir's gateway lock."""
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        raise HermitError(f"the gateway (pid {pid}) on {ctx.home} has just exited", "nothing to restart: start it "
                          "(`hermit service start`, or `hermit gateway run`)") from None
    if owner != os.getuid():
        raise HermitError(f"process {pid}, which {ctx.home}'s gateway lock names, is not yours: not signalled",
                          "run `hermit gateway restart` as the user the gateway runs as")
    try:
        holds = _holds_lock(pid, lock_path(ctx.home))
    except OSError:  # its fds cannot be read (it exited meanwhile, or is not dumpable): not known to be the gateway
        holds = False
    if not holds:
        raise HermitError(f"process {pid}, which {ctx.home}'s gateway lock names, does not hold that lock: it is not "
                          "this state dir's gateway, and was not signalled", "see `hermit gateway status`")


def _answers(host: str, port: int) -> str:
    """The status line the gateway answers a request for its favicon with ("" when it closed without one). It
    carries nothing secret: sent before the port's holder is known to be the gateway."""
    with socket.create_connection((host, port), timeout=30) as conn:
        conn.sendall(f"GET /favicon.ico HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        head = b""
        while b"\r\n" not in head and (chunk := conn.recv(1024)):
            head += chunk
    return head.split(b"\r\n", 1)[0].decode("latin-1")


def _wait_restarted(ctx: CliContext, pidfd: int, pid: int, before: Any) -> dict[str, Any]:
    """The lock info the restarted gateway published; HermitError when it exited instead or took too long."""
    import select

    wait = ctx.config().config.gateway.shutdown_grace_seconds + EXTRA_WAIT_SECONDS
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if select.select([pidfd], [], [], POLL_SECONDS)[0]:  # a pidfd is readable once its process exited
            raise HermitError(f"the gateway (pid {pid}) exited instead of starting again", "see why: `hermit logs`; "
                              "start it: `hermit service start` (or `hermit gateway run`)")
        info = read_lock_info(ctx.home) or {}
        if info.get("pid") == pid and "port" in info and not info.get("stopping") and info.get("started") != before:
            return info
    raise HermitError(f"the gateway (pid {pid}) did not answer again within {wait:.0f} s", "see `hermit logs` and "
                      "`hermit gateway status`")


def cmd_restart(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.gateway import _client_host, _running

    if not os.path.isdir("/proc/self/fd"):
        raise HermitError("`hermit gateway restart` needs Linux's /proc to tell which process is the gateway",
                          "under launchd: `launchctl kickstart -k gui/$(id -u)/com.hermit.gateway`")
    info = _running(ctx)  # none running, or starting / stopping: said, with what to do
    from hermit.gateway.owner_routes import check_start

    check_start(ctx.home, ctx.config())  # the restarted gateway would refuse an owner move and stay down: said now
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        raise HermitError(f"the gateway lock of {ctx.home} names no process", "see `hermit gateway status`")
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise HermitError(f"the gateway (pid {pid}) on {ctx.home} has just exited", "start it: `hermit service "
                          "start` (or `hermit gateway run`)") from None
    try:
        _ours(ctx, pid)  # after the pidfd is taken: the process checked is the one signalled
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGUSR1)
        except ProcessLookupError:  # it exited between the checks and the signal: nothing was signalled
            raise HermitError(f"the gateway (pid {pid}) on {ctx.home} exited before it could be restarted",
                              "start it: `hermit service start` (or `hermit gateway run`)") from None
        print(f"restarting the gateway (pid {pid}) in place: running turns may finish first…", flush=True)
        info = _wait_restarted(ctx, pidfd, pid, info.get("started"))
    finally:
        os.close(pidfd)
    host, port = _client_host(str(info.get("host"))), int(info["port"])
    try:
        status = _answers(host, port)
    except OSError as e:
        status = str(e)
    if not status.startswith("HTTP/1.1 "):
        raise HermitError(f"the gateway (pid {pid}) started again but does not answer on its port {port} ({status})",
                          "see `hermit logs`")
    devices = info.get("devices") or {}
    print(f"restarted: the gateway (pid {pid}) answers again at {info.get('url')}")
    if isinstance(devices, dict) and devices.get("why"):
        print(f"web app devices: {devices['why']}")
    return 0
