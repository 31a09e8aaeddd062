"""s22 re-audit of the holder poll (gateway/listen.py `Holder.holds`, `watch_holder`): the starter that held the
gateway's listening sockets exits while the gateway runs (a service manager killed, a wrapper gone) — the gateway is
reparented (to init or a subreaper) and the pid it remembered is free for any process, another user's included.

Held: the next look sees that its parent is no longer the process it remembered (getppid, then that pid's start time,
then its fds: a pid reused by another process fails the start time, one of another user's cannot be read), and devices
go off; a restart in place keeps them off (the new parent is never taken for a socket unit's manager). Real
`hermit gateway run` started by a real "manager" process through LISTEN_FDS."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from gatewayhelpers import free_port, write_config
from hermit.gateway.state import read_lock_info
from prochelpers import PROC_TIMEOUT
from test_s21_socket_activation import LAUNCH, listening
from test_s22_devices_holder import lock_changes

# Holds the sockets handed to it, starts the gateway with them (as the socket unit's manager does), prints its pid,
# then exits at once when told to, leaving the gateway running.
MANAGER = """
import os, subprocess, sys
fds = [int(f) for f in sys.argv[1].split(",")]
out = open(sys.argv[2], "ab")
gw = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[1], *sys.argv[4:]], pass_fds=fds, stdout=out,
                      stderr=out, stdin=subprocess.DEVNULL, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
print(gw.pid, flush=True)
sys.stdin.readline()
os._exit(0)
"""


def test_a_starter_that_exits_while_the_gateway_runs_turns_devices_off(tmp_path: Path) -> None:
    port, home = free_port(), tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", grace=0)  # remember_devices: auto
    socks = listening(port)
    fds = [s.fileno() for s in socks]
    manager = subprocess.Popen(
        [sys.executable, "-c", MANAGER, ",".join(map(str, fds)), str(tmp_path / "gateway.out"), LAUNCH, "-m",
         "hermit.cli.main", "--home", str(home), "gateway", "run", "--port", "0"],
        pass_fds=fds, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for s in socks:
        s.close()  # the manager's copies are the only ones besides the gateway's
    assert manager.stdout is not None and manager.stdin is not None
    pid = int(manager.stdout.readline())
    pidfd = os.pidfd_open(pid)  # the gateway is not this process's child: its exit is seen through this
    try:
        info = lock_changes(home, pid, held=True)
        assert info["devices"]["on"] is True, info
        manager.stdin.write("exit\n")
        manager.stdin.flush()
        assert manager.wait(PROC_TIMEOUT) == 0
        info = lock_changes(home, pid, held=False)  # the next look: its parent is not the starter any more
        assert info["devices"]["on"] is False and "stopped holding" in info["devices"]["why"], info

        os.kill(pid, signal.SIGUSR1)  # a restart in place, reparented: still off
        now, deadline = info, time.monotonic() + PROC_TIMEOUT
        while now.get("started") == info["started"] or "port" not in now:
            assert time.monotonic() < deadline, f"the gateway did not start again: {now}"
            assert not select.select([pidfd], [], [], 0.05)[0], "the gateway exited instead of restarting"
            now = read_lock_info(home) or {}
        assert now["pid"] == pid and now["held"] is False and now["devices"]["on"] is False, now
        log = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
        assert "no longer holds its listening sockets" in log, log[-2000:]
    finally:
        if manager.poll() is None:
            manager.kill()
            manager.wait(PROC_TIMEOUT)
        if not select.select([pidfd], [], [], 0)[0]:
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        assert select.select([pidfd], [], [], PROC_TIMEOUT)[0], "the gateway did not stop"
        os.close(pidfd)
