"""Audit 19 (t1): `http://localhost:<port>/` and another local user's program on `[::1]:<port>`.

The gateway listened on 127.0.0.1 only, and Chromium tries `::1` first for `localhost` — so a program of another
local user (uid 65534) listening on `[::1]:<port>`, which any user may bind beside the gateway's IPv4 socket, got
every page the owner opened as `http://localhost:<port>/` (the gateway's own 421 hint suggests that address): a
fake web app taking what the owner types, a `#token=`/`#ticket=` link's secret. Now a gateway on IPv4 loopback
(or on 0.0.0.0) holds `[::1]:<port>` too, and does not start beside another user's program there.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from browserdemo import T, browser_fixture  # noqa: F401 - browser_fixture: the `browser` fixture
from ciguard import need
from gatewayhelpers import GatewayProcess, free_port, write_config
from prochelpers import PROC_TIMEOUT, python_as

NOBODY = {"user": 65534, "group": 65534, "extra_groups": []}
SQUATTER = r"""
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
try:
    s.bind(("::1", int(sys.argv[1])))
except OSError as e:
    print("refused", e.errno, flush=True)
    sys.exit(0)
s.listen(8)
print("bound", flush=True)
body = b"<!doctype html><title>Hermit</title><p id=fake>SQUATTER: type your message here"
while True:
    c, _ = s.accept()
    c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    c.close()
"""
UPGRADE = r"""
import socket, sys
s = socket.create_connection(("::1", int(sys.argv[1])), timeout=10)
s.sendall(("GET /ws HTTP/1.1\r\nHost: localhost:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n" % sys.argv[1]).encode())
print(s.recv(200).split(b"\r\n")[0].decode())
"""


@pytest.fixture
def squatter_python() -> str:
    python = python_as(NOBODY)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    return python


@pytest.fixture
def squat(squatter_python: str) -> Iterator[Any]:
    """Start uid 65534's program on [::1]:port; what it printed first ("bound", or "refused <errno>")."""
    started: list[subprocess.Popen[str]] = []

    def start(port: int) -> str:
        proc = subprocess.Popen([squatter_python, "-c", SQUATTER, str(port)], stdout=subprocess.PIPE, text=True,
                                cwd="/", **NOBODY)  # type: ignore[call-overload]
        started.append(proc)
        assert proc.stdout is not None
        return proc.stdout.readline().strip()

    yield start
    for proc in started:
        proc.kill()
        proc.wait(PROC_TIMEOUT)


def test_another_users_program_cannot_take_localhost_beside_the_gateway(browser: Any, squat: Any,
                                                                         tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    write_config(home, "http://127.0.0.1:9/v1")
    gw = GatewayProcess(home, "--port", str(port))
    try:
        url = gw.wait_ready()
        said = squat(port)
        print(f"uid 65534 on [::1]:{port} ->", said)
        assert said.startswith("refused"), said  # before: "bound", and localhost was the squatter's
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"http://localhost:{port}/?token={gw.token}")
        page.wait_for_selector("#status.ok", timeout=T)  # Hermit's own page, signed in
        assert page.locator("#fake").count() == 0
        context.close()
        assert url.startswith(f"http://127.0.0.1:{port}/")
        # …and uid 65534's own program reaching the gateway through [::1] is refused, as through 127.0.0.1.
        python = python_as(NOBODY)
        assert python is not None
        done = subprocess.run([python, "-c", UPGRADE, str(port)], capture_output=True, text=True, timeout=60,
                              cwd="/", **NOBODY)  # type: ignore[call-overload]
        assert done.stdout.startswith("HTTP/1.1 403"), done.stdout + done.stderr
        assert "uid 65534" in gw.stderr()
    finally:
        gw.stop()


def test_the_gateway_does_not_start_beside_another_users_program_on_localhost(squat: Any, tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    write_config(home, "http://127.0.0.1:9/v1")
    said = squat(port)
    if said.startswith("refused"):  # a machine without IPv6 loopback: nobody can hold it, the gateway starts
        gw = GatewayProcess(home, "--port", str(port))
        try:
            gw.wait_ready()
        finally:
            gw.stop()
        return
    assert said == "bound"
    gw = GatewayProcess(home, "--port", str(port))
    try:
        with pytest.raises(AssertionError, match="did not start"):  # before: it started beside the squatter
            gw.wait_ready()
    finally:
        gw.stop()
    stderr = gw.stderr()
    print(stderr[-600:])
    assert f"[::1]:{port}" in stderr and "uid 65534" in stderr and f"http://localhost:{port}/" in stderr, stderr
    with pytest.raises(httpx.ConnectError):  # nothing of Hermit's was left listening on 127.0.0.1
        httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
