"""Re-audit of signed-in devices in Debian's Chromium: a program on the gateway's port while it is down (another
local user's) that closes the device's socket with 4401 — the gateway's "signed out" close code — without the proof
the gateway gives. The page said "This device is signed out (revoked …): sign it in again" and stopped trying, so
whatever held the port for a moment left the phone showing a lie and disconnected after the gateway came back; it
now treats an unproven close as what it is (not your gateway?), keeps trying, and signs in again by itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from browserdemo import T
from devicehelpers import port_squatter
from test_s20_devices_browser import STORED, Served, device_page, phone, pw, served

__all__ = ["pw", "served"]  # the fixtures, shared with the devices' own browser tests


@contextmanager
def closing_squatter(port: int) -> Iterator[list[str]]:
    """The web app's own files on `port`, and a socket that reads the page's first frame and closes 4401."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.server import ServerConnection

    heard: list[str] = []

    def handler(ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            heard.append(str(ws.recv(10)))
            ws.close(4401, "device signed out")

    with port_squatter(port, handler):
        yield heard


def test_an_unproven_signed_out_close_neither_signs_the_phone_out_nor_stops_it(pw: Any, served: Served,
                                                                                tmp_path: Path) -> None:
    ctx = phone(pw, tmp_path / "profile")
    try:
        page, did = device_page(ctx, served.link())
        served.gw.stop()
        with closing_squatter(served.port) as heard:
            page.reload()
            page.wait_for_function("() => /not your gateway/.test(document.getElementById('status').textContent)",
                                   timeout=T)
            assert heard and "deviceId" in heard[0]
            assert "signed out" not in page.inner_text("body")
            assert page.evaluate(STORED)["device"] == did
        served.restart()
        page.wait_for_selector("#status.ok", timeout=T)  # by itself, no reload: the same device, signed in
        assert page.evaluate(STORED)["device"] == did
    finally:
        ctx.close()
        if served.gw.proc.poll() is not None:
            served.restart()


def test_a_device_only_link_in_a_browser_that_cannot_make_a_key_says_why(pw: Any, served: Served,
                                                                         tmp_path: Path) -> None:
    """An https phone link is device-only (tickets.py); a browser whose WebCrypto cannot make an ECDSA key sends the
    handshake with no key and is refused `device_link`: the page says that, not "wrong token", and the link is
    still good."""
    from hermit.gateway.tickets import Tickets, issue_ticket, ticket_id
    from test_gateway_tickets import gateway_pid

    ticket = issue_ticket(served.home, gateway_pid(served.gw))
    tickets = Tickets(served.home, pid=gateway_pid(served.gw))
    tickets.restrict(ticket)  # as the web app marks its link at an https address
    ctx = phone(pw, tmp_path / "profile")
    try:
        ctx.add_init_script("crypto.subtle.generateKey = () => Promise.reject(new Error('no ECDSA here'));")
        page = ctx.new_page()
        page.goto(f"{served.origin}/#ticket={ticket}")
        page.wait_for_selector("#status.bad", timeout=T)
        page.wait_for_function("() => /keeps a key of its own/.test(document.body.innerText)", timeout=T)
        assert "wrong token" not in page.inner_text("body")
        assert tickets.find(ticket_id(ticket)) == ticket  # not spent
    finally:
        ctx.close()
