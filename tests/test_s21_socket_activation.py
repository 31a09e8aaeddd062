"""The gateway's port held across its restarts (gateway/listen.py `open_listeners`, gateway/device_policy.py), for
real: this test process is the service manager — it binds 127.0.0.1 and [::1] at one port and hands the listening
sockets to `hermit gateway run` children through LISTEN_FDS/LISTEN_PID (systemd's socket activation protocol), as a
`.socket` unit does. While the gateway is down (stopped, killed -9) uid 65534's program cannot bind the port, a
connection made meanwhile waits in the kernel's queue and is answered by the next gateway, and a device signed in
before signs in again on the same port. Devices are on under `auto` exactly when the parent holds the sockets: a
wrapper that binds them and execs the gateway (systemd-socket-activate) holds nothing, and a gateway run by hand
leaves its port free when it stops (the hole this closes, shown for contrast)."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicehelpers import running_gateway
from gatewayhelpers import GatewayProcess, free_port, write_config
from hermit.gateway.state import read_lock_info
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_s20_devices_protocol import Key, cli, device_conn, sign_in

# The child side of a service manager's start: the sockets moved to fds 3, 4…, LISTEN_PID = the gateway's own pid
# (exec keeps it), then `hermit gateway run`.
LAUNCH = ("import fcntl, os, sys\n"
          "fds = [fcntl.fcntl(int(f), fcntl.F_DUPFD, 100) for f in sys.argv[1].split(',')]\n"
          "for i, fd in enumerate(fds):\n"
          "    os.dup2(fd, 3 + i)\n"
          "    os.close(fd)\n"
          "os.environ.update(LISTEN_FDS=str(len(fds)), LISTEN_PID=str(os.getpid()))\n"
          "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n")

SQUAT = ("import socket, sys\n"
         "fam, host, port = (socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET), sys.argv[1], int(sys.argv[2])\n"
         "s = socket.socket(fam, socket.SOCK_STREAM)\n"
         "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         "try:\n"
         "    s.bind((host, port)); s.listen(1)\n"
         "except OSError as e:\n"
         "    print('refused', e.errno)\n"
         "else:\n"
         "    print('bound')\n")


def squat(host: str, port: int) -> str:
    """What uid 65534's program gets trying to listen on host:port ("bound", or "refused <errno>")."""
    done = subprocess.run(["/usr/bin/python3", "-c", SQUAT, host, str(port)], capture_output=True, text=True,
                          timeout=PROC_TIMEOUT, user=65534, group=65534, extra_groups=[], env={"PATH": "/usr/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def listening(port: int) -> list[socket.socket]:
    """What a .socket unit with ListenStream=127.0.0.1:port and [::1]:port holds."""
    out = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        if family == socket.AF_INET6 and not has_ipv6_loopback():
            continue
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind((host, port))
        s.listen(128)
        out.append(s)
    return out


class ActivatedGateway(GatewayProcess):
    """`hermit gateway run` started as a socket unit's service: handed `socks` through LISTEN_FDS."""

    def __init__(self, home: Path, socks: list[socket.socket], *args: str) -> None:  # noqa: D107
        self.home = home
        self.stderr_path = home / "gateway.stderr"
        self._stderr = self.stderr_path.open("a")
        fds = [s.fileno() for s in socks]
        argv = [sys.executable, "-c", LAUNCH, ",".join(map(str, fds)), "-m", "hermit.cli.main", "--home", str(home),
                "gateway", "run", "--port", "0", *args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True, pass_fds=fds,
                                     env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = ""


@pytest.fixture
def held_port() -> Iterator[tuple[int, list[socket.socket]]]:
    port = free_port()
    socks = listening(port)
    try:
        yield port, socks
    finally:
        for s in socks:
            s.close()


def doctor_devices(home: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "doctor", "--json"],
                          capture_output=True, text=True, timeout=PROC_TIMEOUT)
    return str(next(c for c in json.loads(done.stdout) if c["name"] == "web app devices")["detail"])


def test_a_socket_activated_gateway_keeps_its_port_through_restarts_and_devices_are_on(
        tmp_path: Path, held_port: tuple[int, list[socket.socket]]) -> None:
    port, socks = held_port
    home = tmp_path / "home"
    with FakeProvider(["hi"] * 4) as fake:
        write_config(home, fake.openai_base_url)  # remember_devices not written: auto
        gw = ActivatedGateway(home, socks)
        gw.wait_ready()
        try:
            assert gw.port == port  # the handed sockets, not --port 0's
            info = read_lock_info(home) or {}
            assert info["held"] is True and info["devices"]["on"] is True, info
            assert "socket unit holds" in doctor_devices(home)
            key = Key()
            did = sign_in(gw, key)["device"]["id"]  # devices are on: the sign-in records a device
            listed = cli(home, "list")
            assert listed.returncode == 0 and did[:12] in listed.stdout, listed
        finally:
            gw.stop()

        # Down (a clean stop): nobody else can take the port; a page's connection made now waits in the queue.
        assert gw.proc.returncode == 0, gw.stderr()
        assert squat("127.0.0.1", port).startswith("refused")
        if len(socks) == 2:
            assert squat("::1", port).startswith("refused")
        waiting = socket.create_connection(("127.0.0.1", port), timeout=PROC_TIMEOUT)  # the kernel accepts it
        waiting.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % port)

        gw = ActivatedGateway(home, socks)  # the service manager starts the next one
        gw.wait_ready()
        try:
            answer = b""
            while chunk := waiting.recv(4096):
                answer += chunk
            waiting.close()
            assert answer.startswith(b"HTTP/1.1 "), answer[:200]  # the new gateway answered the queued connection
            with device_conn(gw, key, did) as (_, reply):  # the same device, on the same port, with no new link
                assert reply["ok"] and reply["payload"]["deviceId"] == did, reply
            gw.proc.send_signal(signal.SIGKILL)  # a crash: still nobody else's port
            gw.proc.wait(PROC_TIMEOUT)
            assert squat("127.0.0.1", port).startswith("refused")
        finally:
            gw.stop()


def test_a_gateway_handed_sockets_of_another_port_than_configured_uses_them_and_says_so(
        tmp_path: Path, held_port: tuple[int, list[socket.socket]]) -> None:
    port, socks = held_port
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1")
    other = free_port()
    gw = ActivatedGateway(home, socks, "--port", str(other))  # gateway.port changed since the socket unit was written
    try:
        gw.wait_ready()
        assert gw.port == port
    finally:
        gw.stop()
    log = (home / "logs" / "gateway.log").read_text(encoding="utf-8") + gw.stderr()
    assert f"listening on port {port}, which the service's socket unit holds, not on port {other}" in log, log
    assert "run `hermit service install` again" in log


def test_a_gateway_run_by_hand_leaves_its_port_free_when_it_stops_and_auto_keeps_devices_off(tmp_path: Path) -> None:
    """The hole socket activation closes, for contrast: and so `auto` is off by hand, saying why and how."""
    with running_gateway(tmp_path / "home") as (gw, _):
        port = gw.port
        info = read_lock_info(gw.home) or {}
        assert info["held"] is False and info["devices"]["on"] is False, info
        line = doctor_devices(gw.home)
        assert line.startswith("off (gateway.remember_devices: auto)") and "hermit service install" in line, line
        listed = cli(gw.home, "list")
        assert listed.stdout.startswith("off — (gateway.remember_devices: auto)"), listed.stdout
        assert "hermit service install" in listed.stdout
        key = Key()
        assert "device" not in sign_in(gw, key)  # off: the tab gets the token, nothing is recorded
    assert squat("127.0.0.1", port) == "bound"


def test_a_wrapper_that_execs_the_gateway_holds_nothing_so_auto_stays_off(tmp_path: Path) -> None:
    """systemd-socket-activate binds the port and execs the gateway: the sockets are handed in, but when the gateway
    exits the port is free, so devices stay off (and the gateway still serves on the handed port)."""
    tool = "/usr/bin/systemd-socket-activate"
    assert os.path.exists(tool), "systemd-socket-activate (package systemd) is needed"
    port = free_port()
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1")
    listen = ["-l", f"127.0.0.1:{port}"] + (["-l", f"[::1]:{port}"] if has_ipv6_loopback() else [])
    gw = GatewayProcess.__new__(GatewayProcess)
    gw.home, gw.stderr_path = home, home / "gateway.stderr"
    gw._stderr = gw.stderr_path.open("w")
    # It hands its child only the variables named (the import path, so the gateway is this checkout's)
    keep = [f"--setenv={k}={os.environ[k]}" for k in ("PYTHONPATH", "PATH", "HOME") if k in os.environ]
    gw.proc = subprocess.Popen([tool, *listen, *keep, sys.executable, "-m", "hermit.cli.main", "--home", str(home),
                                "gateway", "run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    gw.lines = queue.Queue()
    said: queue.Queue[str] = queue.Queue()

    def errors() -> None:  # the wrapper's words, then the gateway's (the same process after exec), into the file
        assert gw.proc.stderr is not None
        for line in gw.proc.stderr:
            said.put(line)
            gw._stderr.write(line)

    threading.Thread(target=gw._read, daemon=True).start()
    threading.Thread(target=errors, daemon=True).start()
    try:
        while not said.get(timeout=PROC_TIMEOUT).startswith(f"Listening on 127.0.0.1:{port}"):
            pass
        # It starts its child (exec: the same process) on the first connection, which the gateway then answers.
        first = socket.create_connection(("127.0.0.1", port), timeout=PROC_TIMEOUT)
        gw.wait_ready()
        first.close()
        info = read_lock_info(home) or {}
        assert info["port"] == port and info["held"] is False and info["devices"]["on"] is False, info
    finally:
        gw.stop()


def test_listen_fds_that_are_not_listening_sockets_are_refused_with_what_to_do(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1")
    with open(os.devnull) as f:
        argv = [sys.executable, "-c", LAUNCH, str(f.fileno()), "-m", "hermit.cli.main", "--home", str(home), "gateway",
                "run", "--port", "0"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROC_TIMEOUT, pass_fds=[f.fileno()])
    assert done.returncode != 0
    assert "LISTEN_FDS hands the gateway fd 3, which is not a socket" in done.stderr, done.stderr
    assert "hermit service" in done.stderr


TAKES = """
import json
from hermit.gateway.listen import open_listeners

def bind(host, port):
    raise AssertionError("bound a socket of its own")

got = open_listeners("127.0.0.1", 0, bind)
print(json.dumps({"held": got.held, "inherited": got.inherited, "ports": sorted({s.getsockname()[1] for s in got.sockets})}))
"""

# A script's lines that bind 127.0.0.1 and [::1] (where there is one) at one free port, listening: `socks`, `fds`.
BIND_BOTH = """
socks = []
for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    s = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        s.bind((host, socks[0].getsockname()[1] if socks else 0))
    except OSError:
        continue
    s.listen(8)
    socks.append(s)
fds = [s.fileno() for s in socks]
"""

HOLDER = """
import json, socket, subprocess, sys
launch, takes = sys.argv[1], sys.argv[2]
""" + BIND_BOTH + """
done = subprocess.run([sys.executable, "-c", launch, ",".join(map(str, fds)), "-c", takes], pass_fds=fds,
                      capture_output=True, text=True, timeout=120)
print(done.stdout.strip() or done.stderr)
"""


def test_the_holder_is_checked_as_a_normal_user_too_and_a_parent_it_cannot_see_is_not_trusted() -> None:
    """As uid 65534 (no privilege to read another process's fds but its own user's): a parent of the same user that
    holds the sockets is seen holding them; a parent of another user (root here) cannot be looked at, so the port
    counts as not held (devices stay off under `auto`) — the sockets are still used."""
    from prochelpers import python_as, pythonpath

    nobody = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(nobody)
    assert python is not None, "no interpreter that imports this checkout as uid 65534"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()}
    same = subprocess.run([python, "-c", HOLDER, LAUNCH, TAKES], capture_output=True, text=True, env=env,
                          timeout=PROC_TIMEOUT, **nobody)  # type: ignore[call-overload]
    got = json.loads(same.stdout)
    assert got["held"] is True and got["inherited"] is True and len(got["ports"]) == 1, got

    socks = listening(free_port())
    fds = [s.fileno() for s in socks]
    try:
        other = subprocess.run([python, "-c", LAUNCH, ",".join(map(str, fds)), "-c", TAKES], pass_fds=fds,
                               capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT,
                               **nobody)  # type: ignore[call-overload]
    finally:
        for s in socks:
            s.close()
    got = json.loads(other.stdout)
    assert got["held"] is False and got["inherited"] is True, (got, other.stderr)
