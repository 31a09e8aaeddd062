"""Connections not signed in, by who makes them (s20 t3), against a real `hermit gateway run` over real sockets.

s19 capped connections not signed in at 32 per address: another local user (here uid 65534, a real second uid) could
fill 127.0.0.1's 32 and the owner's new tab could not connect (open ones were unaffected); and a request that
dribbled its body was held until the cap, the deadline being for its headers only. Now a loopback client is counted
by the uid that owns its socket (the kernel's, via sock_diag) — the gateway's own uid in a pool another uid cannot
use up, every other local user by uid whatever loopback address it uses, a client whose uid cannot be read as
another user's — and the whole request, body included, must come within `gateway.sign_in_seconds`.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import struct
import subprocess
import time
from collections.abc import Iterator

import pytest

from ciguard import need
from connscripts import CLOSED_WITHIN, STILL_OPEN
from gatewayhelpers import GatewayProcess, unused_model_gateway
from prochelpers import PROC_TIMEOUT, python_as
from test_s19_web_idle import PER_SOURCE, WAIT, address, closed_by_gateway, raw, signed_in, works

NOBODY = {"user": 65534, "group": 65534, "extra_groups": []}
SIOCGIFADDR = 0x8915

# uid 65534's program: PER_SOURCE silent connections from 127.0.0.1 (as many as s19 let one address hold), then
# EXTRA more from other loopback addresses and from this machine's LAN address (a local user may connect to
# 127.0.0.1 from it: not a network client); says how many of those the gateway closed, then (on a line from the
# test) how many of the first ones are still open, and holds them all until its stdin ends.
FLOOD = r"""
import json, select, socket, sys, time
port, per, extra, wait, lan = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]

def opened(source):
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s
""" + CLOSED_WITHIN + STILL_OPEN + r"""
first = [opened("127.0.0.1") for _ in range(per)]
more = [opened(["127.0.0.2", "127.0.0.3", lan][n % 3]) for n in range(extra)]
print(json.dumps({"more_closed": closed_within(more, wait)}), flush=True)
sys.stdin.readline()
print(json.dumps({"first_open": sum(still_open(s) for s in first)}), flush=True)
sys.stdin.read()
"""
EXTRA = 6


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    yield from unused_model_gateway(tmp_path_factory.mktemp("s20unsigned"), "  sign_in_seconds: 600\n")


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    yield from unused_model_gateway(tmp_path_factory.mktemp("s20quick"), "  sign_in_seconds: 2\n")


@pytest.fixture
def nobody_python() -> str:
    python = python_as(NOBODY)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    return python


def lan_address() -> str:
    """An IPv4 address of this machine that is not loopback (an interface's, asked with SIOCGIFADDR)."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # down, or no IPv4 address
        found = socket.inet_ntoa(packed[20:24])
        if not found.startswith("127."):
            return found
    raise AssertionError("this machine has no IPv4 address but loopback's")


def page_answers(gw: GatewayProcess) -> bool:
    page = raw(gw, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    try:
        return page.recv(100).startswith(b"HTTP/1.1 200")
    except OSError:
        return False
    finally:
        page.close()


def test_another_local_user_cannot_take_the_owners_room(patient: GatewayProcess, nobody_python: str) -> None:
    assert os.geteuid() != 65534
    port = patient.port
    flood = subprocess.Popen([nobody_python, "-c", FLOOD, str(port), str(PER_SOURCE), str(EXTRA), str(WAIT),
                              lan_address()],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/",
                             **NOBODY)  # type: ignore[call-overload]
    try:
        assert flood.stdin is not None and flood.stdout is not None
        said = json.loads(flood.stdout.readline())
        # while uid 65534 holds 127.0.0.1's 32, the owner's new connections come in and sign in
        assert page_answers(patient), "the owner's page was refused while another user held 127.0.0.1's slots"
        with signed_in(patient) as ws:
            assert works(ws)
        # one uid is one source whatever address of this machine it uses: 127.0.0.2-3 or the LAN address gave it
        # no more room
        assert said["more_closed"] == EXTRA, said
        flood.stdin.write("count\n")
        flood.stdin.flush()
        held = json.loads(flood.stdout.readline())
        assert held["first_open"] == PER_SOURCE, held  # its connections were held (the deadline is 600 s here)
    finally:
        if flood.stdin is not None:
            flood.stdin.close()
        flood.wait(PROC_TIMEOUT)
    log = (patient.home / "logs" / "gateway.log").read_text(encoding="utf-8")
    assert "(uid 65534) closed" in log and "(local;" in log, log[-2000:]


def test_who_a_connection_is_counted_as(nobody_python: str) -> None:
    """classify() on real connections: the kernel's owner of the client's socket picks the pool, both ways round
    (a gateway run by root, and one run by uid 65534), and a local client that cannot be found is another user's."""
    from hermit.gateway.unsigned import classify  # here: the tree before s20 has none

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        where = server.getsockname()
        with socket.create_connection(where) as mine:
            accepted, client = server.accept()
            with accepted:
                assert classify(client, where, os.geteuid()) == ("yours", "127.0.0.1")
                assert classify(client, where, 65534) == ("local", f"uid {os.geteuid()}")
                assert mine.getsockname() == client
        # uid 65534's: one from 127.0.0.1, one from this machine's LAN address (to 127.0.0.1 all the same)
        theirs = subprocess.Popen(
            [nobody_python, "-c", "import socket, sys\nheld = []\nfor src in sys.argv[2:]:\n"
             "    held.append(socket.create_connection(('127.0.0.1', int(sys.argv[1])), source_address=(src, 0)))\n"
             "print('on', flush=True)\nsys.stdin.read()", str(where[1]), "127.0.0.1", lan_address()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/", **NOBODY)  # type: ignore[call-overload]
        try:
            assert theirs.stdout is not None and theirs.stdout.readline().strip() == "on"
            for source in ("127.0.0.1", lan_address()):
                accepted, client = server.accept()
                with accepted:
                    assert client[0] == source
                    assert classify(client, where, os.geteuid()) == ("local", "uid 65534")
                    assert classify(client, where, 65534) == ("yours", source)
        finally:
            assert theirs.stdin is not None
            theirs.stdin.close()
            theirs.wait(PROC_TIMEOUT)
        # a loopback client the kernel does not show (gone, or in another network namespace): fail closed
        assert classify(("127.0.0.1", 9), where, os.geteuid()) == ("local", "uid unknown")
    # a client of another machine is counted by its address (an IPv6 one by its /64)
    assert classify(("192.0.2.7", 40000), ("192.0.2.1", 8080), os.geteuid()) == ("network", "192.0.2.7")
    assert classify(("2001:db8::7", 40000), ("2001:db8::1", 8080), 0) == ("network", "2001:db8::/64")


def test_a_request_that_dribbles_its_body_is_cut_at_the_deadline(quick: GatewayProcess) -> None:
    with signed_in(quick) as owner:
        s = raw(quick, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n")
        # the attacker's pace: a byte every 0.2 s, for up to WAIT s; the gateway must end it at its 2 s deadline
        started, cut = time.monotonic(), False
        s.settimeout(0.2)
        while time.monotonic() - started < WAIT and not cut:
            try:
                s.sendall(b"x")
                while s.recv(4096):
                    pass
                cut = True  # the gateway closed it (after its 405 for POST /)
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                cut = True
        took = time.monotonic() - started
        s.close()
        assert cut, f"a body dribbled for {took:.0f} s was still being read"
        assert works(owner), "the owner's signed-in socket was closed with the dribbler"
    # a whole request with a body, sent at once, is answered and its connection kept alive
    s = raw(quick, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc")
    assert s.recv(100).startswith(b"HTTP/1.1 405")
    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    got = b""
    while b"HTTP/1.1 200" not in got:
        more = s.recv(65536)
        assert more, got[:300]
        got += more
    s.close()
    log = (quick.home / "logs" / "gateway.log").read_text(encoding="utf-8")
    assert "no whole request within 2 s" in log


def test_a_signed_in_page_outlives_the_request_deadline(quick: GatewayProcess) -> None:
    """The WebSocket's upgrade request left the HTTP deadline armed on its connection: it is disarmed at the upgrade
    (the socket's own deadline is for `connect`), so the owner's page stays past sign_in_seconds."""
    with signed_in(quick) as owner:
        lone = raw(quick)  # a silent connection opened after: closed at the deadline, which is then past for both
        assert closed_by_gateway(lone)
        assert works(owner)


def ended(s: socket.socket, seconds: float) -> bool:
    """Whether the gateway ends `s` (a reset or its close) within `seconds`, waited on as the event itself without
    reading what it sent (POLLIN stays off: the test plays a client that never reads)."""
    poller = select.poll()
    poller.register(s, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(seconds * 1000))


def test_a_client_that_never_reads_its_replies_is_cut_at_the_deadline(quick: GatewayProcess) -> None:
    """A client asked for /static/chat.js 400 times over one connection and read nothing: the gateway's buffer filled
    and the connection was held for ever (and once uvicorn's keep-alive rule closed it, asyncio kept the descriptor
    while the count no longer saw it). Now its reply must be read within the deadline too."""
    with signed_in(quick) as owner:
        readers = []
        for _ in range(3):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(address(quick))
            s.sendall(b"GET /static/chat.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 400)
            readers.append(s)
        try:
            assert all(ended(s, WAIT) for s in readers), f"a client that read nothing was kept {WAIT} s"
        finally:
            for s in readers:
                s.close()
        assert works(owner), "the owner's signed-in socket was closed with the readers"
    log = (quick.home / "logs" / "gateway.log").read_text(encoding="utf-8")
    assert "its reply not read within 2 s" in log
