"""`hermit dashboard --phone`: a one-time sign-in link at an address a phone can reach, printed as a QR code
in the terminal with the link under it, against a real `hermit gateway run`. The printed half blocks are read
back into modules and must be the QR code of the printed link; the ticket in it signs a real WebSocket client
in, once, through the handshake for that address. A gateway reachable on loopback only gets no ticket, and
the owner is told what to change. Neither output ever holds the gateway token."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import segno

from gatewayhelpers import GatewayProcess, free_port, write_config
from hermit.gateway.protocol import handshake_proof
from hermit.gateway.state import GatewayLock, ensure_token
from hermit.gateway.tickets import PREFIX, ticket_id
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT

ORIGIN = "https://hermit.example"  # a TLS proxy's public name, as gateway.allowed_origins lists it
TICKET = r"[A-Za-z0-9_-]{43}"
# Unicode half blocks, two module rows a character: (top dark, bottom dark) as segno's compact writer draws
# light on dark (a full block is two light modules).
HALVES = {" ": (1, 1), "\u2580": (0, 1), "\u2584": (1, 0), "\u2588": (0, 0)}


def dashboard(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "NO_COLOR")}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "dashboard", *args],
                          env={**base, **(env or {})}, capture_output=True, text=True, timeout=PROC_TIMEOUT)


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway on 127.0.0.1 behind a proxy: allowed_origins lists a loopback origin first, then the proxy's."""
    home = tmp_path_factory.mktemp("phone") / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        write_config(home, fake.openai_base_url,
                     extra=f'  allowed_origins: ["http://localhost:8080", "{ORIGIN}"]\n')
        gw = GatewayProcess(home)
        gw.wait_ready()
        try:
            yield gw
        finally:
            gw.stop()


def read_qr(text: str) -> list[list[int]]:
    """The modules (1 dark) of a QR code printed in half blocks, its 4-module light quiet zone checked and cut
    off (an odd number of module rows leaves the last line's lower halves blank: cut too)."""
    rows = text.split("\n")
    assert len({len(r) for r in rows}) == 1, "ragged QR code"
    out: list[list[int]] = []
    for line in rows:
        top, bottom = zip(*(HALVES[c] for c in line), strict=True)
        out += [list(top), list(bottom)]
    out = out[:len(out[0])]  # a QR code is square
    quiet = out[:4] + out[-4:] + [r[:4] + r[-4:] for r in out]
    assert all(v == 0 for r in quiet for v in r), "no light quiet zone"
    return [r[4:-4] for r in out[4:-4]]


def printed(r: subprocess.CompletedProcess[str]) -> tuple[list[list[int]], str]:
    """(the QR code's modules, the link) of `dashboard --phone`'s output: the code, then the link under it."""
    assert r.returncode == 0, r.stderr
    *qr, link = r.stdout.rstrip("\n").split("\n")
    assert "\x1b" not in r.stdout  # not a terminal: no colours
    return read_qr("\n".join(qr)), link


def sign_in(gw: GatewayProcess, link: str) -> dict[str, Any]:
    """What `connect` answers a WebSocket client that opened `link` (the page's handshake, keyed by the ticket,
    for the link's address: the gateway's own port is reached, the address named is the link's)."""
    from websockets.sync.client import connect

    host = link.split("//", 1)[1].split("/", 1)[0]
    ticket = link.split("#ticket=", 1)[1]
    with connect(gw.ws_url, origin=None) as ws:  # type: ignore[arg-type]
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect.challenge",
                            "params": {"nonce": "n" * 32, "host": host, "ticketId": ticket_id(ticket)}}))
        challenge = json.loads(ws.recv(10))
        if not challenge["ok"]:
            return dict(challenge)
        p = challenge["payload"]
        assert p["proof"] == handshake_proof(ticket.encode(), "gateway", host, "n" * 32, p["nonce"])
        ws.send(json.dumps({"type": "req", "id": "k", "method": "connect", "params": {
            "proof": handshake_proof(ticket.encode(), "client", host, p["nonce"], "n" * 32)}}))
        return dict(json.loads(ws.recv(10)))


def test_the_qr_code_is_the_link_at_the_proxys_address_and_signs_a_phone_in_once(proxied: GatewayProcess) -> None:
    r = dashboard(proxied.home, "--phone")
    modules, link = printed(r)
    assert re.fullmatch(rf"{re.escape(ORIGIN)}/#ticket={TICKET}", link), link  # the proxy's, not localhost's
    assert modules == [list(row) for row in segno.make(link, error="m", micro=False).matrix]
    assert proxied.token not in r.stdout + r.stderr
    assert "one-time link" in r.stderr and "10 minutes" in r.stderr
    assert "plain http" not in r.stderr  # https: no warning
    hello = sign_in(proxied, link)
    assert hello["ok"] and hello["payload"]["token"] == proxied.token, hello
    again = sign_in(proxied, link)  # once
    assert not again["ok"] and again["error"]["code"] == "ticket_expired", again

    r = dashboard(proxied.home, "--qr")  # the alias; a new ticket each time
    _, second = printed(r)
    assert second != link and sign_in(proxied, second)["ok"]


def test_a_phone_link_opens_no_browser(proxied: GatewayProcess, tmp_path: Path) -> None:
    opened = tmp_path / "opened"
    script = tmp_path / "browser.py"
    script.write_text(f"open({str(opened)!r}, 'a').write('opened')\n", encoding="utf-8")
    r = dashboard(proxied.home, "--phone", env={"BROWSER": f"{sys.executable} {script} %s", "DISPLAY": ":0"})
    printed(r)
    assert not opened.exists() and not list((proxied.home / "gateway").glob("dashboard-*"))


def test_a_gateway_on_loopback_only_gets_no_link_and_says_what_to_change(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        write_config(home, fake.openai_base_url, extra='  allowed_origins: ["http://localhost:8080"]\n')
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()
            r = dashboard(home, "--phone")
        finally:
            gw.stop()
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert "your gateway listens on 127.0.0.1 only" in r.stderr and "a phone cannot reach it" in r.stderr
    assert "set gateway.host to this machine's network address" in r.stderr
    assert "gateway.allowed_origins" in r.stderr and "#ticket=" not in r.stderr
    assert gw.token not in r.stderr
    assert not list((home / "gateway").glob(f"{PREFIX}*"))  # no ticket made


def test_a_gateway_on_every_address_sends_the_phone_to_this_machines_address_with_a_plain_http_warning(
        tmp_path: Path) -> None:
    found = subprocess.run([sys.executable, "-c", "import json; from hermit.gateway.phone import lan_addresses; "
                            "print(json.dumps(lan_addresses()))"], capture_output=True, text=True, timeout=PROC_TIMEOUT)
    addresses = json.loads(found.stdout)
    home = tmp_path / "home"
    token = ensure_token(home)
    write_config(home, "http://127.0.0.1:9/v1")
    port = free_port()  # only published, never listened on: the link's port is what the lock file says
    lock = GatewayLock.acquire(home)  # what a gateway on 0.0.0.0 publishes (its pid: this process)
    try:
        lock.publish({"pid": os.getpid(), "host": "0.0.0.0", "port": port})
        r = dashboard(home, "--phone")
    finally:
        lock.release()
    if not addresses:  # a machine with no network address: told so, as loopback-only
        assert r.returncode == 1 and "a phone cannot reach it" in r.stderr
        return
    modules, link = printed(r)
    assert re.fullmatch(rf"http://{re.escape(addresses[0])}:{port}/#ticket={TICKET}", link), link
    assert modules == [list(row) for row in segno.make(link, error="m", micro=False).matrix]
    assert "warning: this link is plain http across your network" in r.stderr and "prefer https" in r.stderr
    assert token not in r.stdout + r.stderr


def test_on_a_terminal_the_code_is_drawn_light_on_dark_in_colours_of_its_own(proxied: GatewayProcess) -> None:
    """A light theme would draw it dark on light, inverted: many phone cameras read no such code. Run under a
    pseudo-terminal, the CLI sets the colours; with NO_COLOR, it does not."""
    import pty

    def on_tty(env: dict[str, str]) -> str:
        main, child = pty.openpty()
        base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "DISPLAY", "BROWSER")}
        p = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "--home", str(proxied.home), "dashboard",
                              "--phone"], stdout=child, stderr=subprocess.DEVNULL, env={**base, **env})
        os.close(child)
        out = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert p.wait(PROC_TIMEOUT) == 0
        os.close(main)
        return out.decode()

    coloured = on_tty({}).replace("\r\n", "\n").splitlines()
    qr = [line for line in coloured if line.startswith("\x1b[97;40m")]
    assert len(qr) >= 21 // 2 and all(line.endswith("\x1b[0m") for line in qr)
    link = coloured[-1]
    assert read_qr("\n".join(line[len("\x1b[97;40m"):-len("\x1b[0m")] for line in qr)) == [
        list(row) for row in segno.make(link, error="m", micro=False).matrix]
    assert "\x1b" not in on_tty({"NO_COLOR": "1"})


def test_which_address_a_phone_is_sent_to() -> None:
    from hermit.errors import HermitError
    from hermit.gateway.phone import PLAIN_HTTP, phone_address

    # The first origin that is not this machine's loopback, as listed; https needs no warning, http does.
    assert phone_address("127.0.0.1", 18789, ["http://127.0.0.1:9", ORIGIN, "http://b.example"]).base == f"{ORIGIN}/"
    assert phone_address("127.0.0.1", 18789, [ORIGIN]).warning == ""
    assert phone_address("127.0.0.1", 18789, ["http://mybox.local:18789"]).warning == PLAIN_HTTP
    # No such origin: the address the gateway listens on, when it is not loopback (IPv6 in brackets).
    assert phone_address("192.0.2.7", 18789, []).base == "http://192.0.2.7:18789/"
    assert phone_address("2001:db8::7", 18789, []).base == "http://[2001:db8::7]:18789/"
    for loopback in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        with pytest.raises(HermitError, match="a phone cannot reach it") as e:
            phone_address(loopback, 18789, ["http://localhost:8080", "http://[::1]:1"])
        assert "gateway.host" in e.value.hint and "gateway.allowed_origins" in e.value.hint
