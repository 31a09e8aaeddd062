"""`hermit gateway restart` (cli/gateway_restart.py): a restart in place from the CLI — it finds the gateway of this
state dir by its lock, checks that the pid there is this user's and really holds that lock, sends SIGUSR1, waits until
the gateway has started again and answers on its port, and prints so. Before, the only way was `kill -USR1 <pid>`
with the pid read off `hermit gateway status`. Real gateway and `hermit` processes; a lock held by a helper that
names a process that is not the gateway (ours, or uid 65534's) is refused, and that process is not signalled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gatewayhelpers import GatewayProcess, free_port, write_config
from hermit.gateway.state import read_lock_info
from prochelpers import PROC_TIMEOUT


def hermit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), *args], capture_output=True,
                          text=True, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def test_gateway_restart_restarts_the_running_gateway_in_place_and_waits_until_it_answers(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    write_config(home, "http://127.0.0.1:9/v1")
    gw = GatewayProcess(home, "--port", str(port))
    try:
        gw.wait_ready()
        pid = gw.proc.pid
        before = (read_lock_info(home) or {})["started"]
        done = hermit(home, "gateway", "restart")
        assert done.returncode == 0, done.stderr
        assert f"restarted: the gateway (pid {pid}) answers again at http://127.0.0.1:{port}/" in done.stdout, done
        assert "web app devices: off (gateway.remember_devices: auto)" in done.stdout, done.stdout
        info = read_lock_info(home) or {}
        assert info["pid"] == pid and info["port"] == port and info["started"] != before, info
        assert gw.proc.poll() is None  # the same process, still running
        log = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
        assert log.count("starting again in place") == 1, log[-2000:]
    finally:
        gw.stop()
    assert gw.proc.returncode == 0, gw.stderr()[-2000:]


def test_gateway_restart_with_no_gateway_running_says_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1")
    done = hermit(home, "gateway", "restart")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"no gateway is running on {home}" in done.stderr and "hermit gateway run" in done.stderr, done.stderr


# Holds the state dir's gateway lock and publishes another process's pid as the gateway's.
FAKE_LOCK = """
import pathlib, sys
from hermit.gateway.state import GatewayLock
lock = GatewayLock.acquire(pathlib.Path(sys.argv[1]))
lock.publish({"pid": int(sys.argv[2]), "host": "127.0.0.1", "port": 9, "url": "http://127.0.0.1:9/", "started": 1.0})
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_lock_naming_a_process_that_is_not_the_gateway_is_refused_and_that_process_not_signalled(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1")
    nobody = {"user": 65534, "group": 65534, "extra_groups": []}
    for as_user, words in (({}, "does not hold that lock"), (nobody, "is not yours")):
        bystander = subprocess.Popen(["/bin/sleep", "600"], **as_user)  # type: ignore[call-overload]
        holder = subprocess.Popen([sys.executable, "-c", FAKE_LOCK, str(home), str(bystander.pid)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
            done = hermit(home, "gateway", "restart")
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
            assert f"process {bystander.pid}, which {home}'s gateway lock names, {words}" in done.stderr, done.stderr
            assert bystander.poll() is None  # SIGUSR1's default action would have killed it
        finally:
            holder.communicate("", timeout=PROC_TIMEOUT)
            bystander.kill()
            bystander.wait(PROC_TIMEOUT)
