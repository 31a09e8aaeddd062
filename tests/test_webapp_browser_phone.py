"""The web app's "Sign in a phone", in real Chromium against `hermit gateway run`: the signed-in owner opens
the panel (Operations) and gets a new one-time link at the address a phone can reach (the first of
gateway.allowed_origins) with its QR code, drawn by the gateway as an SVG shown through `img src=data:` (the
page's CSP is unchanged). The QR code read back from the pixels the page draws is the link's; the link signs
a phone-sized browser context in, once. `tickets.create` is refused to any connection that has not signed in
(a wrong token, a foreign origin, none at all) and makes no ticket then; a gateway on loopback only makes
none either, and the panel says what to change.

The phone's name (`phone.test`) is mapped to 127.0.0.1 in Chromium's resolver: nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import segno

from browserdemo import PHONE_SIZE, T, open_page
from gatewayhelpers import GatewayProcess, free_port, launched_chromium, write_config
from hermit.gateway.app import SECURITY_HEADERS
from hermit.gateway.tickets import PREFIX
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT, python_as, pythonpath

USED = ("this link was already used or expired: get a new one — on a phone, from Operations → Sign in a phone in "
        "the web app on your computer (or `hermit dashboard --phone`); on the computer, run `hermit dashboard` again")
# What the page draws, read back as modules: the QR code's pixels off a canvas (red channel), its module size
# from the top-left finder pattern (7 modules wide), sampled at each module's centre.
READ_QR = """async () => {
  const img = document.getElementById('phone-qr');
  await img.decode();
  const c = document.createElement('canvas');
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d');
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  const dark = (x, y) => d[(y * c.width + x) * 4] < 128;
  let x0 = -1, y0 = -1;
  for (let y = 0; y < c.height && x0 < 0; y++) for (let x = 0; x < c.width; x++) if (dark(x, y)) { x0 = x; y0 = y; break; }
  let run = 0;
  while (dark(x0 + run, y0)) run++;
  const m = run / 7, n = Math.round((c.width - 2 * x0) / m), rows = [];
  for (let r = 0; r < n; r++) {
    const row = [];
    for (let k = 0; k < n; k++) row.push(dark(Math.floor(x0 + (k + .5) * m), Math.floor(y0 + (r + .5) * m)) ? 1 : 0);
    rows.push(row);
  }
  return rows;
}"""


# Run as uid 65534: a WebSocket to the gateway that would sign in with the token (on its stdin: never on a
# command line) and ask for a ticket.
AS_ANOTHER_USER = """
import json, sys
from websockets.sync.client import connect
try:
    with connect(sys.argv[1], origin=None) as ws:
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": sys.stdin.read()}}))
        ws.recv(10)
        ws.send(json.dumps({"type": "req", "id": "t", "method": "tickets.create", "params": {}}))
        print(ws.recv(10))
except Exception as e:
    print("refused" if "403" in str(e) or "1008" in str(e) else f"error: {e!r}")
"""


@dataclass
class Served:
    gw: GatewayProcess
    port: int
    origin: str

    @property
    def url(self) -> str:
        return self.gw.url


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A gateway on 127.0.0.1 whose web app a phone reaches as http://phone.test:<port> (listed first)."""
    home = tmp_path_factory.mktemp("phone-web") / "home"
    port = free_port()
    origin = f"http://phone.test:{port}"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        write_config(home, fake.openai_base_url, extra=f'  allowed_origins: ["{origin}"]\n  remember_devices: true\n')
        gw = GatewayProcess(home, "--port", str(port))
        gw.wait_ready()
        try:
            yield Served(gw, port, origin)
        finally:
            gw.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium that resolves phone.test to this machine (the port stays the link's)."""
    yield from launched_chromium("--host-resolver-rules=MAP phone.test 127.0.0.1")


def tickets(gw: GatewayProcess) -> list[str]:
    return sorted(p.name for p in (gw.home / "gateway").glob(f"{PREFIX}*"))


def open_panel(page: Any) -> tuple[str, str]:
    """Operations → Sign in a phone: (the link shown, the QR code's data: URI)."""
    if page.is_visible("#menu"):  # a phone: the views are in the drawer
        page.tap("#menu")
        page.wait_for_selector("#sidebar", state="visible", timeout=T)
        page.tap(".tab[data-view='ops']")
        page.wait_for_selector("#sidebar", state="hidden", timeout=T)
    else:
        page.click(".tab[data-view='ops']")
    page.click("#phone-open")
    page.wait_for_selector("#phone-qr", state="visible", timeout=T)
    return page.inner_text("#phone-link"), str(page.get_attribute("#phone-qr", "src"))


def test_the_owner_shows_a_qr_code_whose_link_signs_a_phone_in_once(browser: Any, served: Served) -> None:
    owner = open_page(browser, served.url, console_errors=True)
    page = owner.page
    link, src = open_panel(page)
    assert link.startswith(f"{served.origin}/#ticket=") and served.gw.token not in link + src
    assert src.startswith("data:image/svg+xml")
    assert page.evaluate(READ_QR) == [list(r) for r in segno.make(link, error="m", micro=False).matrix]
    # A plain http link: the phone's page is no secure context, so it keeps no device — its tab holds the token.
    assert "signs one browser in, once, within 10 minutes, for as long as that tab stays open: only at an https " \
           "address does a phone stay signed in, listed under Devices below." in page.inner_text("#phone-note")
    assert "plain http" in page.inner_text("#phone-warning")  # http://phone.test: unencrypted on the network
    csp = page.evaluate("fetch('/').then((r) => r.headers.get('content-security-policy'))")
    assert csp == SECURITY_HEADERS["Content-Security-Policy"]  # shown as the CSP already allowed: unchanged

    phone = open_page(browser, link, *PHONE_SIZE)  # the phone opens the link: signed in, and the ticket used up
    assert phone.page.evaluate("sessionStorage.getItem('hermit.token')") == served.gw.token
    href = phone.page.evaluate("location.href")
    assert href.startswith(f"{served.origin}/") and "ticket" not in href, href
    other = open_page(browser, link, *PHONE_SIZE, signed_in=False)  # the same link again: once
    # Outside a secure context the page sends the ticket itself; it says "refused" and then, as the socket
    # closes, what to do: waited for.
    other.page.wait_for_function("(used) => document.getElementById('signin').textContent === used", arg=USED,
                                 timeout=T)
    assert other.page.evaluate("sessionStorage.getItem('hermit.token')") is None
    phone.context.close()
    other.context.close()

    page.click("#phone-close")  # closed: nothing of the link left on the page
    assert page.is_hidden("#phone-panel") and page.inner_text("#phone-link") == ""
    again, _ = open_panel(page)  # a new one each time it is opened
    assert again != link and again.startswith(f"{served.origin}/#ticket=")
    assert owner.errors == []
    owner.context.close()


def test_the_panel_fits_a_phone(browser: Any, served: Served, tmp_path: Path) -> None:
    opened = open_page(browser, served.url, *PHONE_SIZE)
    page = opened.page
    open_panel(page)
    page.evaluate("document.getElementById('phone-qr').decode()")  # measured once drawn: its height is 0 until then
    width = PHONE_SIZE[0]
    for selector in ("#phone-panel", "#phone-qr", "#phone-link", "#phone-close"):
        box = page.locator(selector).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box)
    qr = page.locator("#phone-qr").bounding_box()
    assert qr["width"] >= 200 and qr["y"] + qr["height"] <= PHONE_SIZE[1], qr  # big enough to scan, in sight
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    shot = tmp_path / "phone-panel.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    assert opened.errors == []
    opened.context.close()


def refused(served: Served, *first: dict[str, Any], origin: str | None = None) -> dict[str, Any]:
    """The answer to tickets.create sent after `first` (or first of all) on a new WebSocket."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(served.gw.ws_url, origin=origin) as ws:  # type: ignore[arg-type]
        for n, req in enumerate(first):
            ws.send(json.dumps({"type": "req", "id": f"f{n}", **req}))
            try:
                json.loads(ws.recv(10))
            except ConnectionClosed:
                break
        try:
            ws.send(json.dumps({"type": "req", "id": "t", "method": "tickets.create", "params": {}}))
            while True:
                reply = json.loads(ws.recv(10))
                if reply.get("id") in ("t", None):
                    return dict(reply)
        except ConnectionClosed as e:
            return {"closed": e.rcvd.code if e.rcvd else None}


def test_tickets_create_is_refused_to_any_connection_but_the_owners(served: Served) -> None:
    before = tickets(served.gw)
    first = refused(served)  # no sign-in first
    assert not first["ok"] and first["error"]["code"] == "not_connected", first
    wrong = refused(served, {"method": "connect", "params": {"token": "x" * 43}})
    assert wrong.get("closed") == 4401 or wrong["error"]["code"] == "unauthorized", wrong
    foreign = refused(served, origin="http://evil.example")
    assert foreign.get("closed") == 1008 or foreign["error"]["code"] == "origin_refused", foreign
    if os.geteuid() == 0:  # CI and containers: another local user's program, token or not, is refused outright
        nobody = {"user": 65534, "group": 65534, "extra_groups": []}
        python = python_as(nobody)
        assert python is not None, "no interpreter uid 65534 can run"
        done = subprocess.run([python, "-c", AS_ANOTHER_USER, served.gw.ws_url], input=served.gw.token, text=True,
                              capture_output=True, timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin",
                                                                              "PYTHONPATH": pythonpath()}, **nobody)
        assert done.stdout.strip() == "refused", done.stdout + done.stderr
    assert tickets(served.gw) == before  # none of them made a ticket

    owner = refused(served, {"method": "connect", "params": {"token": served.gw.token}})
    assert owner["ok"] and owner["payload"]["link"].startswith(f"{served.origin}/#ticket=")
    assert len(tickets(served.gw)) == len(before) + 1


def test_a_gateway_on_loopback_only_makes_no_ticket_and_the_panel_says_what_to_change(
        browser: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        write_config(home, fake.openai_base_url)
        gw = GatewayProcess(home)
        gw.wait_ready()
        try:
            opened = open_page(browser, gw.url)
            page = opened.page
            page.click(".tab[data-view='ops']")
            page.click("#phone-open")
            page.wait_for_selector("#phone-note.bad", timeout=T)
            note = page.inner_text("#phone-note")
            assert "your gateway listens on 127.0.0.1 only" in note and "a phone cannot reach it" in note
            assert "set gateway.host" in note and "gateway.allowed_origins" in note
            assert page.is_hidden("#phone-qr") and page.inner_text("#phone-link") == ""
            assert not list((home / "gateway").glob(f"{PREFIX}*"))
            assert opened.errors == []
            opened.context.close()
        finally:
            gw.stop()


def test_an_https_link_says_the_phone_stays_signed_in_until_revoked_under_devices(browser: Any, tmp_path: Path) -> None:
    """Behind a TLS proxy (its https origin listed first) the link signs in a browser that keeps a device of its own
    (gateway/devices.py): the note says it stays signed in until revoked under Devices, which the panel shows."""
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        write_config(home, fake.openai_base_url, extra='  allowed_origins: ["https://hermit.example"]\n'
                     '  remember_devices: true\n')
        gw = GatewayProcess(home)
        gw.wait_ready()
        try:
            opened = open_page(browser, gw.url, console_errors=True)
            page = opened.page
            link, _ = open_panel(page)
            assert link.startswith("https://hermit.example/#ticket=")
            note = page.inner_text("#phone-note")
            assert note == "Scan this with the phone's camera. It signs one browser in, once, within 10 minutes; that " \
                "browser then stays signed in until you revoke it under Devices below (or it goes unused for 30 days). " \
                "Open this again for another.", note
            assert page.is_visible("#phone-note") and page.is_visible("#devices-card")
            note_box = page.locator("#phone-note").bounding_box()
            devices_box = page.locator("#devices-card").bounding_box()
            assert note_box is not None and devices_box is not None and devices_box["y"] > note_box["y"]  # "below"
            assert page.inner_text("#phone-warning") == ""  # https: nothing crosses the network in the clear
            assert opened.errors == []
            opened.context.close()
        finally:
            gw.stop()
