"""Re-audit 21 (t14): `remember_devices: auto` turns devices on only while the port cannot go free, attacked through the
restart in place (SIGUSR1, gateway/listen.py `exec_in_place`).

A gateway run by hand whose parent went away (started with nohup or `&` from an ssh session that closed) is reparented
to init. On a systemd machine init is `systemd`, run by root: a normal user cannot read its fds, and `parent_holds`
trusted a parent it could not read when it was named `systemd` (meant for a system unit's manager). So the restart in
place — the gateway handing itself its own sockets through LISTEN_FDS — was taken for a socket unit's gateway: `held`
true, devices on, while the port still goes free the moment that gateway stops. Here a root process named `systemd`
that reaps orphans (PR_SET_CHILD_SUBREAPER) plays init; the gateway's part runs as uid 65534."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from gatewayhelpers import free_port, running_gateway
from prochelpers import PROC_TIMEOUT, python_as, pythonpath

NOBODY = {"user": 65534, "group": 65534, "extra_groups": []}
OUT_FD = 50  # the result's pipe, out of the way of the fds exec_in_place puts at 3…

# Run as uid 65534 by the "systemd" below: binds as a gateway run by hand does, and leaves a child that restarts in
# place once it has been reparented (its parent exits at once).
BY_HAND = """
import os, sys
from hermit.gateway.listen import exec_in_place, listen_sockets
def bind(host, port):
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((host, port)); s.listen(8)
    return s
socks = listen_sockets("127.0.0.1", 0, bind)  # and [::1] at its port, as the gateway does
first = os.getpid()
if os.fork():
    os._exit(0)  # the shell that started the gateway goes away
while os.getppid() == first:  # until the kernel hands this process to the reaper
    os.sched_yield()
exec_in_place([os.dup(s.fileno()) for s in socks], ["python", "-c", sys.argv[1]])
"""

# What the new image of the restart sees (the gateway's open_listeners, as supervisor.serve calls it).
AFTER = f"""
import json, os
from hermit.gateway.listen import open_listeners
got = open_listeners("127.0.0.1", 0, None)
comm = open(f"/proc/{{os.getppid()}}/comm").read().strip()
os.write({OUT_FD}, json.dumps({{"held": got.held, "inherited": got.inherited, "parent": comm}}).encode())
"""

# Root, named systemd, reaping orphans: init as the orphaned gateway sees it.
INIT = f"""
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(15, b"systemd", 0, 0, 0) == 0  # PR_SET_NAME
assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
r, w = os.pipe()
os.dup2(w, {OUT_FD}); os.close(w)
python, env = sys.argv[1], {{"PATH": "/usr/bin:/bin", "PYTHONPATH": sys.argv[2]}}
subprocess.run([python, "-c", sys.argv[3], sys.argv[4]], pass_fds=[{OUT_FD}], env=env, user=65534, group=65534,
               extra_groups=[], check=True)
os.close({OUT_FD})
out = b""
while chunk := os.read(r, 4096):
    out += chunk
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
print(out.decode())
"""


def test_a_gateway_run_by_hand_and_orphaned_is_not_held_after_a_restart_in_place() -> None:
    python = python_as(NOBODY)
    assert python is not None, "no interpreter that imports this checkout as uid 65534"
    done = subprocess.run([sys.executable, "-c", INIT, python, pythonpath(), BY_HAND, AFTER], capture_output=True,
                          text=True, timeout=PROC_TIMEOUT)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["parent"] == "systemd" and got["inherited"] is True, got  # reparented to "init", sockets handed on
    assert got["held"] is False, got  # the port goes free when this gateway stops: devices stay off under auto


def test_a_restart_marker_only_ever_lowers_held() -> None:
    """The marker a restart leaves cannot raise `held`: "1" with a parent that does not hold the sockets is not held;
    it is taken out of the environment so nothing the gateway starts sees it."""
    from hermit.gateway.listen import HELD_BEFORE, open_listeners

    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.bind(("::1", 0))
    sock.listen(4)
    fd = os.dup(sock.fileno())
    sock.close()
    saved = os.dup(3)
    try:
        os.dup2(fd, 3)
        env = {"LISTEN_FDS": "1", "LISTEN_PID": str(os.getpid()), HELD_BEFORE: "1"}
        got = open_listeners("::1", 0, lambda h, p: socket.socket(), env)  # no bind: the handed socket is used
        assert got.inherited is True and got.held is False  # this test's parent (pytest's starter) holds nothing
        assert env == {}
        for s in got.sockets:
            s.detach()
    finally:
        os.dup2(saved, 3)
        os.close(saved)
        os.close(fd)


def _usr1(pid: int) -> tuple[bool, bool]:
    """Whether process `pid` handles SIGUSR1 now, and whether it blocks it (its main thread's /proc status)."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    bits = {line.split(":")[0]: int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigCgt", "SigBlk"))}
    bit = 1 << (signal.SIGUSR1 - 1)
    return bool(bits["SigCgt"] & bit), bool(bits["SigBlk"] & bit)


def test_sigusr1_during_a_restart_in_place_is_a_restart_asked_for_not_death(tmp_path: Path) -> None:
    """SIGUSR1's default action is death: one arriving while the new image of a restart starts, before it handles
    the signal, killed the gateway (exit -10) — a second `kill -USR1` sent because the first seemed slow was enough.
    SIGUSR1 is now blocked across the exec and unblocked once handled: the signals sent meanwhile are one more
    restart; the gateway keeps its pid and stops cleanly afterwards. (Another user cannot send it: the kernel refuses
    a signal to another uid's process, checked at the end.)"""
    home, port = tmp_path / "home", free_port()
    with running_gateway(home, "", "--port", str(port)) as gw:
        pid = gw.proc.pid
        gw.proc.send_signal(signal.SIGUSR1)
        while _usr1(pid)[0]:  # until the exec: the new image does not handle SIGUSR1 yet
            assert gw.proc.poll() is None, gw.stderr()[-2000:]
        sent = 0
        while gw.proc.poll() is None and _usr1(pid) != (True, False):  # all through the new image's start
            gw.proc.send_signal(signal.SIGUSR1)
            sent += 1
        assert gw.proc.poll() is None, f"exit {gw.proc.returncode} after {sent} SIGUSR1: {gw.stderr()[-2000:]}"
        assert sent >= 1
        gw.wait_ready()  # the image started by the first signal
        gw.wait_ready()  # and the one the signals sent while it started asked for
        assert gw.proc.poll() is None and gw.proc.pid == pid
        log = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
        assert log.count("starting again in place") == 2, log[-3000:]
        other = subprocess.run(["/usr/bin/python3", "-c", f"import os, signal; os.kill({pid}, signal.SIGUSR1)"],
                               capture_output=True, text=True, timeout=PROC_TIMEOUT, **NOBODY)  # type: ignore[call-overload]
        assert "PermissionError" in other.stderr, other.stderr
    assert gw.proc.returncode == 0, gw.stderr()[-2000:]


def test_a_handed_socket_that_is_udp_or_not_listening_is_refused_with_what_to_do() -> None:
    """Held: LISTEN_FDS naming a UDP socket or a TCP socket nobody listens on (which holds no port against a squatter's
    listen) is refused, naming the fd, not taken for a held port."""
    import pytest

    from hermit.errors import ConfigError
    from hermit.gateway.listen import open_listeners

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    bound = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    bound.bind(("127.0.0.1", 0))
    saved = os.dup(3)
    try:
        for sock, words in ((udp, "is not a TCP socket"), (bound, "is not listening")):
            os.dup2(sock.fileno(), 3)
            env = {"LISTEN_FDS": "1", "LISTEN_PID": str(os.getpid())}
            with pytest.raises(ConfigError) as refused:
                open_listeners("127.0.0.1", 0, lambda h, p: socket.socket(), env)
            assert f"fd 3, which {words}" in str(refused.value) and "ListenStream=" in (refused.value.hint or "")
    finally:
        os.dup2(saved, 3)
        os.close(saved)
        udp.close()
        bound.close()
