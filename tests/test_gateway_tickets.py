"""`hermit dashboard`'s one-time tickets (audit W2), against a real `hermit gateway run`: real WebSocket clients
for the protocol, Debian's Chromium with a profile on disk for the page. A browser keeps every URL it visits
in its history, fragment and all, so `…/#token=…` left the long-lived token in the profile; the link now
carries a ticket that signs one tab in, within 10 minutes, with the gateway that ran when it was made, and
the page trades it for the token over the handshake (keyed by the ticket, so whatever else answers on the
port learns nothing it can use)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from devicehelpers import port_squatter, running_gateway
from gatewayhelpers import CHROMIUM_FLAGS, GatewayProcess, free_port, need_chromium, write_config
from hermit.gateway.protocol import handshake_proof
from hermit.gateway.state import read_lock_info
from hermit.gateway.tickets import PREFIX, TICKET_TTL, issue_ticket, ticket_id
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT

T = 30_000  # ms
USED = ("this link was already used or expired: get a new one — on a phone, from Operations → Sign in a phone in "
        "the web app on your computer (or `hermit dashboard --phone`); on the computer, run `hermit dashboard` again")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_gateway(tmp_path_factory.mktemp("tickets") / "home") as (gateway, _):
        yield gateway


def host_of(gw: GatewayProcess) -> str:
    return gw.url.split("//", 1)[1].split("/", 1)[0]


def gateway_pid(gw: GatewayProcess) -> int:
    info = read_lock_info(gw.home)
    assert info is not None
    return int(info["pid"])


def dashboard_link(gw: GatewayProcess) -> tuple[str, str]:
    """(URL, ticket) as `hermit dashboard --no-open` prints them."""
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(gw.home), "dashboard", "--no-open"],
                       capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert r.returncode == 0, r.stderr
    url = r.stdout.strip()
    assert gw.token not in r.stdout + r.stderr
    found = re.fullmatch(r"http://127\.0\.0\.1:\d+/#ticket=([A-Za-z0-9_-]{43})", url)
    assert found, url
    return url, found.group(1)


def frame(rid: str, method: str, **params: Any) -> str:
    return json.dumps({"type": "req", "id": rid, "method": method, "params": params})


def closed_with(ws: Any) -> int | None:
    from websockets.exceptions import ConnectionClosed

    try:
        ws.recv(10)
    except ConnectionClosed as e:
        return e.rcvd.code if e.rcvd else None
    return None


class Handshake(contextlib.ExitStack):
    """One WebSocket connection through connect.challenge keyed by `ticket`, then `connect` with the proof."""

    def __init__(self, gw: GatewayProcess, ticket: str) -> None:
        from websockets.sync.client import connect

        super().__init__()
        self.gw, self.ticket, self.host = gw, ticket, host_of(gw)
        self.ws = self.enter_context(connect(gw.ws_url, origin=None))  # type: ignore[arg-type]
        self.ws.send(frame("challenge", "connect.challenge", nonce="a" * 32, host=self.host,
                           ticketId=ticket_id(ticket)))
        self.challenge: dict[str, Any] = json.loads(self.ws.recv(10))
        if self.challenge["ok"]:  # the gateway proved it holds the ticket
            p = self.challenge["payload"]
            assert p["proof"] == handshake_proof(ticket.encode(), "gateway", self.host, "a" * 32, p["nonce"])

    def connect(self, proof: str | None = None) -> dict[str, Any]:
        p = self.challenge["payload"]
        proof = proof or handshake_proof(self.ticket.encode(), "client", self.host, p["nonce"], "a" * 32)
        self.ws.send(frame("connect", "connect", proof=proof, clientId="tab1"))
        reply: dict[str, Any] = json.loads(self.ws.recv(10))
        return reply


def assert_used(reply: dict[str, Any]) -> None:
    assert not reply["ok"] and reply["error"] == {
        "code": "ticket_expired", "message": "this link was already used or expired",
        "hint": "get a new one — on a phone, from Operations → Sign in a phone in the web app on your computer (or "
                "`hermit dashboard --phone`); on the computer, run `hermit dashboard` again"}, reply


def refused_challenge(gw: GatewayProcess, ticket: str) -> None:
    with Handshake(gw, ticket) as hs:
        assert_used(hs.challenge)
        assert closed_with(hs.ws) == 4401


def test_a_ticket_signs_in_once_and_brings_the_token(gw: GatewayProcess) -> None:
    _, ticket = dashboard_link(gw)
    with Handshake(gw, ticket) as hs:
        assert hs.challenge["ok"], hs.challenge
        hello = hs.connect()
        assert hello["ok"] and hello["payload"]["type"] == "hello-ok", hello
        assert hello["payload"]["token"] == gw.token  # what the page needs for its reconnects
        hs.ws.send(frame("s", "sessions.list"))
        assert json.loads(hs.ws.recv(10))["ok"]
    assert not (gw.home / "gateway" / f"{PREFIX}{ticket_id(ticket)}").exists()
    refused_challenge(gw, ticket)  # a second use: worthless, and it says what to do

    # A connection with the token itself is no different than before, and carries no token back.
    from websockets.sync.client import connect

    with connect(gw.ws_url, origin=None) as ws:  # type: ignore[arg-type]
        ws.send(frame("c", "connect", token=gw.token))
        hello = json.loads(ws.recv(10))
        assert hello["ok"] and "token" not in hello["payload"]


def test_an_expired_unknown_or_other_gateways_ticket_is_refused(gw: GatewayProcess) -> None:
    pid = gateway_pid(gw)
    expired = issue_ticket(gw.home, pid, clock=lambda: time.time() - TICKET_TTL - 1)
    refused_challenge(gw, expired)
    assert not (gw.home / "gateway" / f"{PREFIX}{ticket_id(expired)}").exists()  # the gateway cleared it away
    almost = issue_ticket(gw.home, pid, clock=lambda: time.time() - TICKET_TTL + 60)  # a minute left: still good
    with Handshake(gw, almost) as hs:
        assert hs.connect()["ok"]
    refused_challenge(gw, "never-issued-" + "x" * 20)
    # Made for a gateway that has stopped since (another pid): worthless to this one, so a link read by a
    # program that held the port meanwhile is worthless too.
    other = issue_ticket(gw.home, pid + 1)
    refused_challenge(gw, other)


def test_a_wrong_proof_does_not_use_the_ticket_up(gw: GatewayProcess) -> None:
    _, ticket = dashboard_link(gw)
    with Handshake(gw, ticket) as hs:
        reply = hs.connect(proof="0" * 64)
        assert not reply["ok"] and reply["error"]["code"] == "unauthorized"
        assert closed_with(hs.ws) == 4401
    with Handshake(gw, ticket) as hs:  # only one who holds it can spend it
        assert hs.connect()["ok"]


def test_two_connections_racing_with_one_ticket_sign_in_once(gw: GatewayProcess) -> None:
    _, ticket = dashboard_link(gw)
    with Handshake(gw, ticket) as first, Handshake(gw, ticket) as second:
        assert first.challenge["ok"] and second.challenge["ok"]  # both before either spent it
        replies = [first.connect(), second.connect()]
        assert [r["ok"] for r in replies] == [True, False]
        assert_used(replies[1])
        assert closed_with(second.ws) == 4401


def test_outside_a_secure_context_the_ticket_itself_signs_in_once(gw: GatewayProcess) -> None:
    """A page on plain http at a LAN address has no WebCrypto: it sends the ticket as it would the token."""
    from websockets.sync.client import connect

    _, ticket = dashboard_link(gw)
    for n in range(2):
        with connect(gw.ws_url, origin=None) as ws:  # type: ignore[arg-type]
            ws.send(frame("connect", "connect", ticket=ticket, clientId="tab1"))
            reply = json.loads(ws.recv(10))
            if n == 0:
                assert reply["ok"] and reply["payload"]["token"] == gw.token, reply
            else:
                assert_used(reply)
                assert closed_with(ws) == 4401


def history_urls(profile: Path) -> list[str]:
    db = sqlite3.connect(profile / "Default" / "History")
    try:
        return [str(u) for (u,) in db.execute("SELECT url FROM urls")]
    finally:
        db.close()


def test_the_link_signs_the_browser_in_and_the_token_never_reaches_its_history(
        gw: GatewayProcess, tmp_path: Path) -> None:
    chromium = need_chromium()
    from playwright.sync_api import sync_playwright

    profile = tmp_path / "profile"
    url, ticket = dashboard_link(gw)
    expired = issue_ticket(gw.home, gateway_pid(gw), clock=lambda: time.time() - TICKET_TTL - 1)
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=chromium, args=CHROMIUM_FLAGS,
                                                   headless=True)
        try:
            page = ctx.new_page()
            page.goto(url)
            page.wait_for_selector("#status.ok", timeout=T)
            where = page.evaluate("[location.href, history.length]")
            assert ticket not in where[0] and gw.token not in where[0] and "#ticket" not in where[0], where
            stored = page.evaluate("[sessionStorage.getItem('hermit.token'), sessionStorage.getItem('hermit.ticket')]")
            # the ticket traded for what the tab needs to reconnect (gateway.remember_devices is off by default: no
            # device is kept; test_s20_devices_browser has the browser that stays signed in)
            assert stored == [gw.token, None]
            page.reload()  # a reload reconnects with the token this tab keeps, the ticket being used up
            page.wait_for_selector("#status.ok", timeout=T)

            # Used, then expired, in another browser (a clean profile).
            elsewhere = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
            for link in (url, url.split("#")[0] + f"#ticket={expired}"):  # used, then expired: a new tab each
                other = elsewhere.new_page()
                other.goto(link)
                other.wait_for_selector("#status.bad", timeout=T)
                assert other.inner_text("#signin") == USED  # said in full under the header, the pill stays short
                assert other.evaluate("sessionStorage.getItem('hermit.token')") is None

            # A new link pasted into that tab (only its fragment differs: no page load of its own) signs it in.
            fresh, _ = dashboard_link(gw)
            other.evaluate("window.__before = 1")
            with other.expect_event("load", timeout=T):  # the reload; the fragment's own change fires none
                other.goto(fresh)
            other.wait_for_selector("#status.ok", timeout=T)
            assert other.evaluate("[window.__before, location.href.includes('ticket')]") == [None, False]

            # A used link opened in the tab that signed in with it: it stays signed in with its token.
            page.evaluate("window.__before = 1")
            with page.expect_event("load", timeout=T):
                page.goto(url)
            page.wait_for_selector("#status.ok", timeout=T)
            assert page.evaluate("[window.__before, sessionStorage.getItem('hermit.ticket')]") == [None, None]
            elsewhere.close()
        finally:
            ctx.close()
    visited = history_urls(profile)
    assert any(f"#ticket={ticket}" in u for u in visited), visited  # the browser did record the link…
    assert not any(gw.token in u for u in visited), visited  # …which never held the token
    assert not any("token" in u for u in visited), visited


@contextmanager
def impostor(port: int) -> Iterator[tuple[list[str], threading.Event]]:
    """A program on the port that serves the web app's own files (as the gateway did until it stopped) and
    answers the WebSocket as well as it can without the ticket: a made-up proof, a made-up `hello-ok`."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.server import ServerConnection

    frames: list[str] = []
    heard = threading.Event()

    def handler(ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            for raw in ws:
                frames.append(raw if isinstance(raw, str) else raw.decode("utf-8", "replace"))
                heard.set()
                rid = json.loads(frames[-1]).get("id")
                ws.send(json.dumps({"type": "res", "id": rid, "ok": True, "payload": {"nonce": "n" * 43,
                                                                                       "proof": "0" * 64}}))
                ws.send(json.dumps({"type": "res", "id": "connect", "ok": True,
                                    "payload": {"type": "hello-ok", "token": "impostor-token-" + "x" * 30}}))

    with port_squatter(port, handler):
        yield frames, heard


def test_a_program_on_the_port_never_gets_the_ticket_nor_the_token(gw: GatewayProcess) -> None:
    """The page opened with a ticket where something else answers: it sends only the ticket's sha256, refuses
    the made-up proof and takes nothing in; the ticket stays good for the gateway (it was never shown)."""
    chromium = need_chromium()
    from playwright.sync_api import sync_playwright

    _, ticket = dashboard_link(gw)
    port = free_port()
    with impostor(port) as (frames, heard), sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = b.new_page()
            page.goto(f"http://127.0.0.1:{port}/#ticket={ticket}")
            assert heard.wait(T / 1000)
            page.wait_for_selector("#status.bad", timeout=T)
            assert "could not prove" in page.inner_text("#signin")
            assert page.evaluate("[sessionStorage.getItem('hermit.token'), sessionStorage.getItem('hermit.ticket')]") \
                == [None, ticket]  # nothing taken from it; the ticket kept for the real gateway
        finally:
            b.close()
        sent = [json.loads(f) for f in frames]
        assert sent and all(f["method"] == "connect.challenge" for f in sent), sent
        assert {f["params"]["ticketId"] for f in sent} == {hashlib.sha256(ticket.encode()).hexdigest()}
        assert not any(ticket in f or gw.token in f for f in frames)
    with Handshake(gw, ticket) as hs:
        assert hs.connect()["ok"]


def test_a_ticket_is_worthless_to_the_next_gateway(tmp_path: Path) -> None:
    """A link printed for a gateway that then stopped: a program that held the port meanwhile could have served
    its own page there and read the ticket from the address; the gateway started next refuses it."""
    from websockets.sync.client import connect

    home, port = tmp_path / "home", free_port()
    with FakeProvider(["hi"]) as fake:
        write_config(home, fake.openai_base_url)
        first = GatewayProcess(home, "--port", str(port))
        first.wait_ready()
        try:
            _, ticket = dashboard_link(first)
        finally:
            first.stop()
        assert (home / "gateway" / f"{PREFIX}{ticket_id(ticket)}").exists()  # unused, unexpired: yet worthless
        second = GatewayProcess(home, "--port", str(port))
        second.wait_ready()
        try:
            refused_challenge(second, ticket)
            with connect(second.ws_url, origin=None) as ws:  # type: ignore[arg-type]
                ws.send(frame("connect", "connect", ticket=ticket))
                assert_used(json.loads(ws.recv(10)))
        finally:
            second.stop()
