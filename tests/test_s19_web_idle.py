"""Connections that never sign in (s19 t11), against a real `hermit gateway run` over real sockets.

uvicorn kept a TCP connection that never sent a byte (or half a request) open for ever, and WebSocket pings kept a
socket that never sent `connect` open too: anyone who reaches the port (a LAN client, another local user) could hold
thousands and use up the gateway's file descriptors. Now each must identify itself within `gateway.sign_in_seconds`
(short here, so the test is quick), and one address holds at most PER_SOURCE such connections at once; the owner's
signed-in sockets are neither closed nor refused for it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from gatewayhelpers import GatewayProcess, unused_model_gateway

PER_SOURCE, TOTAL = 32, 256  # gateway/unsigned.py's caps (written out: the test runs against a tree without it too)

WAIT = 30.0  # an upper bound for a close that must come; the tests wait on the close itself, never for this long


def frame(method: str, params: dict[str, Any], rid: str = "r") -> str:
    return json.dumps({"type": "req", "id": rid, "method": method, "params": params})


def gateway_with(tmp: pytest.TempPathFactory, seconds: float) -> Iterator[GatewayProcess]:
    yield from unused_model_gateway(tmp.mktemp("s19idle"), f"  sign_in_seconds: {seconds}\n")


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    yield from gateway_with(tmp_path_factory, 2.0)


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    yield from gateway_with(tmp_path_factory, 120.0)


def address(gw: GatewayProcess) -> tuple[str, int]:
    host, port = gw.ws_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


def raw(gw: GatewayProcess, data: bytes = b"", source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect(address(gw))
    if data:
        s.sendall(data)
    s.settimeout(WAIT)
    return s


def closed_by_gateway(s: socket.socket) -> bool:
    """Blocks until the gateway ends the connection (b'' or a reset); False if it is still open after WAIT."""
    try:
        while True:
            got = s.recv(4096)
            if not got:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def still_open(s: socket.socket) -> bool:
    """Whether the gateway has not ended it, looked at now (no wait: a socket with a timeout polls first)."""
    s.setblocking(False)
    try:
        got = s.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.settimeout(WAIT)
    return bool(got)


@contextmanager
def signed_in(gw: GatewayProcess, source: str = "127.0.0.1") -> Iterator[ClientConnection]:
    with connect(gw.ws_url, open_timeout=WAIT, sock=raw(gw, source=source)) as ws:
        ws.send(frame("connect", {"token": gw.token}))
        assert json.loads(ws.recv(WAIT))["payload"]["type"] == "hello-ok"
        yield ws


def works(ws: ClientConnection) -> bool:
    ws.send(frame("sessions.list", {}, "again"))
    got = json.loads(ws.recv(WAIT))
    return got.get("id") == "again" and got.get("ok") is True


def test_connections_that_never_sign_in_are_closed_by_the_deadline_and_the_owner_stays(quick: GatewayProcess) -> None:
    with ExitStack() as held:
        owner = held.enter_context(signed_in(quick))
        silent = [held.enter_context(raw(quick)) for _ in range(6)]
        half = [held.enter_context(raw(quick, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")) for _ in range(3)]
        sockets = [held.enter_context(connect(quick.ws_url, open_timeout=WAIT)) for _ in range(4)]
        for i, s in enumerate(silent + half):
            assert closed_by_gateway(s), f"connection {i} still open after {WAIT} s"
        for ws in sockets:
            said = json.loads(ws.recv(WAIT))
            assert said["error"]["code"] == "sign_in_timeout", said
            assert "gateway.sign_in_seconds" in said["error"]["hint"]
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(WAIT)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4408
        assert works(owner), "the owner's signed-in socket was closed with the strangers'"
    log = (quick.home / "logs" / "gateway.log").read_text(encoding="utf-8")
    assert "no sign-in within 2 s" in log and "no whole request within 2 s" in log


def test_one_address_holds_only_so_many_and_the_owner_still_gets_in(patient: GatewayProcess) -> None:
    with ExitStack() as held:
        early = held.enter_context(signed_in(patient, source="127.0.0.2"))  # the owner's, from the flood's address
        flood = [held.enter_context(raw(patient, source="127.0.0.2")) for _ in range(PER_SOURCE)]
        over = [held.enter_context(raw(patient, source="127.0.0.2")) for _ in range(3)]
        for s in over:
            assert closed_by_gateway(s), "a connection over the cap was kept"
        assert all(still_open(s) for s in flood)  # the deadline (120 s here) has not closed those
        assert works(early), "the owner's signed-in socket was closed for the flood from its address"
        with signed_in(patient) as late:  # from another address, the owner still signs in while the flood is held
            assert works(late)
        page = raw(patient, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert page.recv(100).startswith(b"HTTP/1.1 200")
        page.close()


def test_everyone_together_holds_only_so_many(patient: GatewayProcess) -> None:
    with ExitStack() as held:
        owner = held.enter_context(signed_in(patient))
        sources = [f"127.0.0.{n}" for n in range(3, 3 + TOTAL // PER_SOURCE + 1)]  # each under its own cap
        every = [held.enter_context(raw(patient, source=src)) for src in sources for _ in range(PER_SOURCE)]
        over = every[TOTAL:]
        for s in over:
            assert closed_by_gateway(s), "a connection over the total cap was kept"
        assert sum(still_open(s) for s in every) == TOTAL
        assert works(owner), "the owner's signed-in socket was closed for the crowd"
