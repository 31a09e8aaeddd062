"""A gateway restarted in place (SIGUSR1, gateway/supervisor.py `request_restart`): it stops as for SIGTERM (running
turns may finish), then starts again in the same process with its listening sockets handed on (gateway/listen.py
`exec_in_place`: LISTEN_FDS across exec) instead of closing and binding them again — so uid 65534's program cannot
take the port at any moment of the restart, and a request sent meanwhile is answered. Run by hand, its port still goes
free when it stops for good, so `remember_devices: auto` stays off (the starter does not hold the sockets)."""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path

from gatewayhelpers import free_port, running_gateway
from hermit.gateway.state import read_lock_info
from prochelpers import PROC_TIMEOUT
from test_s21_socket_activation import squat


def test_a_restart_in_place_never_lets_the_port_go(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    with running_gateway(home, "", "--port", str(port)) as gw:
        pid = gw.proc.pid
        assert (read_lock_info(home) or {})["held"] is False
        ready = threading.Event()
        waited: list[str] = []

        def wait_again() -> None:
            try:
                waited.append(gw.wait_ready())  # the "web chat:" line of the gateway started in place
            finally:
                ready.set()  # or it exited

        gw.proc.send_signal(signal.SIGUSR1)
        threading.Thread(target=wait_again, daemon=True).start()
        asked = socket.create_connection(("127.0.0.1", port), timeout=PROC_TIMEOUT)
        asked.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % port)
        tries = []
        while not ready.is_set():  # as long as the restart lasts, uid 65534 tries to take the port
            tries.append(squat("127.0.0.1", port))
        assert ready.wait(PROC_TIMEOUT) and waited, f"exit {gw.proc.poll()}: {gw.stderr()}"
        assert tries and all(t.startswith("refused") for t in tries), tries
        answer = b""
        while chunk := asked.recv(4096):
            answer += chunk
        asked.close()
        assert answer.startswith(b"HTTP/1.1 "), answer[:200]
        assert gw.proc.poll() is None and gw.proc.pid == pid  # the same process
        info = read_lock_info(home) or {}
        assert info["pid"] == pid and info["port"] == port and waited, info
        assert info["held"] is False and info["devices"]["on"] is False  # by hand: still off under auto
        log = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
        assert "starting again in place" in log, log[-2000:]
    assert gw.proc.returncode == 0, gw.stderr()
    assert squat("127.0.0.1", port) == "bound"  # stopped for good: the port is free (why auto stays off by hand)
