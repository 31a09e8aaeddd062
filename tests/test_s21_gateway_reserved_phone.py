"""The owner's phone keeps a place among connections not signed in (s21 t15), against a real `hermit gateway run`
over real sockets on a real LAN (network namespaces and a veth pair: test_s21_gateway_pools.py's).

t5's fair share left two holes: on IPv6 an address's /64 is one source, so a LAN guest device in the phone's /64
holding 32 silent connections kept every new connection of the phone out; and a host spread over many /48s leaves a
phone in another /48 a couple of places of 6. Now an address that signed in (a completed `connect`) has places of
its own that strangers can neither take nor evict; a wrong token, a page load or a socket that never sends
`connect` earns none.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gatewayhelpers import write_config
from prochelpers import PROC_TIMEOUT
from test_s19_web_idle import PER_SOURCE, TOTAL
from test_s21_gateway_pools import GATEWAY_NET6, HOST, PHONE, Gateway, in_ns, lan, log_of, running

__all__ = ["lan"]  # the LAN fixture, used here as there

PHONE6 = "fd77:0:1:1::50"  # the owner's phone, in the /64 of the guest device fd77:0:1:1::1
STRANGER6 = "fd77:0:1:1::51"  # someone else in that /64, who never signs in
GUEST6 = ["fd77:0:1:1::1"]  # a guest device: 32 silent connections fill the /64's share
SPREAD6 = [f"fd77:{n:x}::1" for n in range(0x10, 0x50)]  # a host in 64 /48s, 4 connections each: the pool's 256


@pytest.fixture(scope="module")
def lan6(lan: tuple[int, int]) -> tuple[int, int]:
    """The LAN with the phone, a stranger and 64 /48s' addresses added on its side."""
    _, lan_ns = lan
    for a in [PHONE6, STRANGER6, *SPREAD6]:
        in_ns(lan_ns, "ip", "-6", "addr", "add", f"{a}/16", "dev", "vb", "nodad")
    return lan


# From `src`, at the gateway's WebSocket: "token" signs in with the right token, "wrong" with a wrong one, "silent"
# opens the socket and closes it without `connect`, "page" loads the page (no ticket); prints what it got.
VISIT = r"""
import json, socket, sys
from websockets.sync.client import connect
gateway, port, src, how, token = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
sock = socket.create_connection((gateway, port), source_address=(src, 0))
if how == "page":
    sock.sendall(b"GET / HTTP/1.1\r\nHost: [" + gateway.encode() + b"]\r\nConnection: close\r\n\r\n")
    sock.settimeout(30)
    print(json.dumps(sock.recv(100).split(b"\r\n")[0].decode()), flush=True)
    sys.exit()
with connect(f"ws://[{gateway}]:{port}/ws", sock=sock, open_timeout=30) as ws:
    if how == "silent":
        print(json.dumps("opened"), flush=True)
        sys.exit()
    ws.send(json.dumps({"type": "req", "id": "c", "method": "connect",
                        "params": {"token": token if how == "token" else "not-the-token"}}))
    got = json.loads(ws.recv(30))
    print(json.dumps(got.get("payload", {}).get("type") or got.get("error", {}).get("code")), flush=True)
"""


def visit(lan_ns: int, gw: Gateway, src: str, how: str) -> str:
    out = subprocess.run(["nsenter", "-t", str(lan_ns), "-n", sys.executable, "-c", VISIT, GATEWAY_NET6,
                          str(gw.port), src, how, gw.token], capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout))


def phone_gets(lan_ns: int, gw: Gateway, src: str) -> list[str]:
    out = subprocess.run(["nsenter", "-t", str(lan_ns), "-n", sys.executable, "-c", PHONE, GATEWAY_NET6,
                          str(gw.port), src, "6"], capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout))


class Flood:
    """test_s21_gateway_pools.HOST from the LAN: `per` silent connections from each of `sources`, held until the
    end of the with block; `first` is how many of them were open once the gateway had counted them all."""

    def __init__(self, lan_ns: int, gw: Gateway, sources: list[str], per: int) -> None:
        self.proc = subprocess.Popen(["nsenter", "-t", str(lan_ns), "-n", sys.executable, "-c", HOST, GATEWAY_NET6,
                                      str(gw.port), str(per), ",".join(sources)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.first = int(json.loads(self.proc.stdout.readline())["held"])

    def __enter__(self) -> Flood:
        return self

    def __exit__(self, *_: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(PROC_TIMEOUT)


@pytest.fixture
def gateway6(tmp_path: Path, lan6: tuple[int, int]) -> Iterator[Gateway]:
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", extra="  sign_in_seconds: 600\n")
    with running(Gateway(home, ["nsenter", "-t", str(lan6[0]), "-n"], "--host", GATEWAY_NET6)) as gw:
        yield gw


@pytest.mark.parametrize(("sources", "per"), [(GUEST6, PER_SOURCE), (SPREAD6, TOTAL // len(SPREAD6))],
                         ids=["guest-in-the-phones-64", "host-in-64-48s"])
def test_a_phone_that_signed_in_connects_whatever_the_lan_holds(gateway6: Gateway, lan6: tuple[int, int],
                                                                sources: list[str], per: int) -> None:
    """The phone signed in once (its WebSocket completed `connect`) and went away; then a guest device in its /64
    holds 32 silent connections (the /64's cap), or a host spread over 64 /48s fills the network pool (256). The
    phone's page, scripts and socket (6 connections) all get in: before, none did (the /64 at its cap) or 1–3."""
    lan_ns = lan6[1]
    assert visit(lan_ns, gateway6, PHONE6, "token") == "hello-ok"
    with Flood(lan_ns, gateway6, sources, per) as flood:
        assert flood.first == len(sources) * per, flood.first  # all of the flood is held: its share is full
        got = phone_gets(lan_ns, gateway6, PHONE6)
        assert got == ["HTTP/1.1 200 OK"] * 6, f"the signed-in phone's connections while the LAN was full: {got}"


def test_only_a_sign_in_earns_a_place(gateway6: Gateway, lan6: tuple[int, int]) -> None:
    """A stranger in the phone's /64 loads the page, opens a socket that never signs in, and signs in with a wrong
    token: none of it reserves anything, so while the guest holds the /64's 32 it gets no connection; the phone,
    signed in at its exact address, gets all of its own."""
    lan_ns = lan6[1]
    assert visit(lan_ns, gateway6, STRANGER6, "page") == "HTTP/1.1 200 OK"
    assert visit(lan_ns, gateway6, STRANGER6, "silent") == "opened"
    assert visit(lan_ns, gateway6, STRANGER6, "wrong") == "unauthorized"
    assert visit(lan_ns, gateway6, PHONE6, "token") == "hello-ok"
    with Flood(lan_ns, gateway6, GUEST6, PER_SOURCE) as flood:
        assert flood.first == PER_SOURCE
        assert phone_gets(lan_ns, gateway6, STRANGER6) == [""] * 6  # the /64's share is the guest's
        assert phone_gets(lan_ns, gateway6, PHONE6) == ["HTTP/1.1 200 OK"] * 6
    assert "closed to make room" not in log_of(gateway6)  # no one's place was taken for the phone: it had its own
