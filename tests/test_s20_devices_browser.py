"""The web app on a phone stays signed in (gateway/devices.py), in Debian's Chromium at a phone's size (390×844):
signed in once by a one-time ticket, the page keeps a non-extractable key pair in IndexedDB, never the gateway token;
a new tab at the manifest's start URL, the browser restarted (a profile on disk) and the gateway restarted all find it
signed in without a ticket; another origin of the same gateway is not; Operations → Devices lists it and Revoke signs
it out at once (the open page is told and does not reconnect); a device idle for 30 days is refused and forgets its
key. The manifest ("Add to Home Screen") loads under the page's CSP with its icons."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from browserdemo import PHONE_SIZE, T
from devicehelpers import port_squatter
from gatewayhelpers import CHROMIUM_FLAGS, GatewayProcess, free_port, need_chromium, write_config
from hermit.gateway.devices import IDLE_SECONDS, Devices
from hermit.gateway.tickets import issue_ticket
from hermit.testing import FakeProvider
from test_gateway_tickets import gateway_pid

REMEMBER = "  remember_devices: true\n"  # devices are opt-in (gateway.remember_devices)

PHONE = {"viewport": {"width": PHONE_SIZE[0], "height": PHONE_SIZE[1]}, "is_mobile": True, "has_touch": True}
STORED = """async () => {
  const db = await new Promise((ok, no) => { const r = indexedDB.open("hermit", 1); r.onsuccess = () => ok(r.result);
                                             r.onerror = () => no(r.error); r.onupgradeneeded = () => r.result.createObjectStore("device"); });
  const d = await new Promise((ok) => { const r = db.transaction("device").objectStore("device").get("this"); r.onsuccess = () => ok(r.result); });
  db.close();
  let exported = "refused";
  if (d) { try { await crypto.subtle.exportKey("pkcs8", d.privateKey); exported = "exported"; } catch (e) { exported = "refused"; } }
  return { device: d ? d.id : null, extractable: d ? [d.privateKey.extractable, d.secret.extractable] : null, exported,
           storage: JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }) };
}"""


class Served:
    def __init__(self, home: Path, port: int) -> None:
        self.home, self.port = home, port
        self.gw = GatewayProcess(home, "--port", str(port))
        self.gw.wait_ready()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def link(self) -> str:
        return f"{self.origin}/#ticket={issue_ticket(self.home, gateway_pid(self.gw))}"

    def restart(self) -> None:
        self.gw.stop()
        self.gw = GatewayProcess(self.home, "--port", str(self.port))
        self.gw.wait_ready()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("devices-browser") / "home"
    with FakeProvider(["hi"] * 8) as fake:
        write_config(home, fake.openai_base_url, extra=REMEMBER)
        s = Served(home, free_port())
        try:
            yield s
        finally:
            s.gw.stop()


@pytest.fixture(scope="module")
def pw() -> Iterator[Any]:
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


def phone(pw: Any, profile: Path) -> Any:
    """A phone's browser with its profile on disk (closing it and launching it again is a browser restart)."""
    return pw.chromium.launch_persistent_context(profile, executable_path=need_chromium(), args=CHROMIUM_FLAGS,
                                                 headless=True, **PHONE)


def signed_in(page: Any, url: str, errors: list[str] | None = None) -> None:
    if errors is not None:
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    page.wait_for_selector("#status.ok", timeout=T)


def device_page(ctx: Any, link: str) -> tuple[Any, str]:
    """A new tab of the phone's browser `ctx` signed in through `link`, and the device id it stored."""
    page = ctx.new_page()
    signed_in(page, link)
    return page, page.evaluate(STORED)["device"]


def test_a_phone_stays_signed_in_across_tabs_browser_and_gateway_restarts(pw: Any, served: Served,
                                                                        tmp_path: Path) -> None:
    profile = tmp_path / "profile"
    ctx = phone(pw, profile)
    errors: list[str] = []
    try:
        page = ctx.new_page()
        signed_in(page, served.link(), errors)
        stored = page.evaluate(STORED)
        assert stored["device"] and stored["extractable"] == [False, False] and stored["exported"] == "refused"
        assert served.gw.token not in stored["storage"] and "hermit.ticket" not in stored["storage"]

        manifest_href = page.get_attribute("link[rel=manifest]", "href")
        manifest = page.evaluate("(h) => fetch(h).then(async (r) => [r.status, r.headers.get('content-type'), await r.json()])",
                                 manifest_href)
        assert manifest[0] == 200 and manifest[1] == "application/manifest+json"
        m = manifest[2]
        assert (m["start_url"], m["display"], m["scope"]) == ("/", "standalone", "/") and m["theme_color"]
        for icon in m["icons"]:
            assert page.evaluate("(s) => fetch(s).then((r) => r.status)", icon["src"]) == 200
        assert {i["sizes"] for i in m["icons"]} >= {"192x192", "512x512"}

        page.close()  # the tab closed; the home-screen icon opens the start URL
        again = ctx.new_page()
        signed_in(again, served.origin + m["start_url"], errors)
        assert "ticket" not in again.evaluate("location.href")

        served.restart()  # the gateway restarts: the open page reconnects as the device
        again.wait_for_selector("#status.ok", timeout=T)
        ctx.close()
        ctx = phone(pw, profile)  # the phone's browser restarts
        page = ctx.new_page()
        signed_in(page, served.origin + "/", errors)
        assert page.evaluate(STORED)["device"] == stored["device"]
        assert not [e for e in errors if "Content Security Policy" in e or "manifest" in e.lower()], errors
    finally:
        ctx.close()
    assert Devices(served.home).get(stored["device"]) is not None


def test_another_origin_of_the_same_gateway_has_no_device(pw: Any, served: Served, tmp_path: Path) -> None:
    ctx = phone(pw, tmp_path / "profile")
    try:
        page = ctx.new_page()
        signed_in(page, served.link())
        other = ctx.new_page()  # the same browser, another origin of the same gateway
        other.goto(f"http://localhost:{served.port}/")
        other.wait_for_selector("#status.bad", timeout=T)
        assert "not signed in" in other.inner_text("#signin")
        assert other.evaluate(STORED)["device"] is None
    finally:
        ctx.close()


def open_devices(page: Any) -> None:
    page.tap("#menu")
    page.wait_for_selector("#sidebar", state="visible", timeout=T)
    page.tap(".tab[data-view='ops']")
    page.wait_for_selector("#devices li.device", timeout=T)


def test_revoke_in_the_devices_list_signs_the_other_phone_out_at_once(pw: Any, served: Served,
                                                                      tmp_path: Path) -> None:
    owner, other = phone(pw, tmp_path / "owner"), phone(pw, tmp_path / "other")
    try:
        mine, theirs = owner.new_page(), other.new_page()
        signed_in(mine, served.link())
        signed_in(theirs, served.link())
        theirs_id = theirs.evaluate(STORED)["device"]
        open_devices(mine)
        row = mine.locator(f"#devices li[data-device='{theirs_id}']")
        assert "Chrome on" in row.inner_text() and "last seen" in row.inner_text()
        assert mine.locator("#devices li.current .badge").inner_text() == "this device"
        box = row.locator(".d-revoke").bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE_SIZE[0] and box["height"] >= 36  # on screen, tappable
        assert mine.evaluate("document.documentElement.scrollWidth") <= PHONE_SIZE[0]
        row.locator(".d-revoke").tap()
        theirs.wait_for_selector("#status.bad", timeout=T)  # told at once, on the open page
        assert "This device is signed out" in theirs.inner_text("#signin")
        theirs.wait_for_function("() => document.getElementById('input').disabled", timeout=T)
        assert theirs.evaluate(STORED)["device"] is None  # forgotten
        mine.wait_for_function("(id) => !document.querySelector(`#devices li[data-device='${id}']`)", arg=theirs_id,
                               timeout=T)
        theirs.reload()  # and it cannot reconnect
        theirs.wait_for_selector("#status.bad", timeout=T)
        assert "not signed in" in theirs.inner_text("#signin")
        assert Devices(served.home).get(theirs_id) is None
    finally:
        owner.close()
        other.close()


def test_an_idle_device_is_refused_and_forgets_its_key(pw: Any, served: Served, tmp_path: Path) -> None:
    ctx = phone(pw, tmp_path / "profile")
    try:
        page, did = device_page(ctx, served.link())
        page.close()
        path = served.home / "gateway" / "devices.json"
        data = json.loads(path.read_text())  # 31 days pass without the phone (the file as the gateway keeps it)
        for d in data["devices"]:
            if d["id"] == did:
                d["last_seen"] = time.time() - IDLE_SECONDS - 86400
        tmp = path.with_name("idle.tmp")
        tmp.write_text(json.dumps(data))
        tmp.chmod(0o600)
        tmp.replace(path)
        page = ctx.new_page()
        page.goto(served.origin + "/")
        page.wait_for_selector("#status.bad", timeout=T)
        assert "This device is signed out" in page.inner_text("#signin") and "30 days" in page.inner_text("#signin")
        assert page.evaluate(STORED)["device"] is None
    finally:
        ctx.close()


def test_a_home_screen_app_with_its_own_storage_signs_in_with_a_pasted_link(pw: Any, served: Served,
                                                                            tmp_path: Path) -> None:
    """iOS gives a home-screen web app storage of its own, and a QR code opens the browser: the app, opened at the
    start URL not signed in, takes the link pasted, signs in as a device and stays so."""
    ctx = phone(pw, tmp_path / "app")
    try:
        page = ctx.new_page()
        page.goto(served.origin + "/")
        page.wait_for_selector("#paste-signin", state="visible", timeout=T)
        assert page.is_enabled("#paste-link")
        page.fill("#paste-link", served.origin + "/#chat")  # a link, but no sign-in link
        page.tap("#paste-signin button")
        assert page.evaluate("document.getElementById('paste-link').validationMessage").startswith("a sign-in link")
        page.fill("#paste-link", served.link())
        page.tap("#paste-signin button")
        page.wait_for_selector("#status.ok", timeout=T)
        assert page.is_hidden("#paste-signin") and page.evaluate(STORED)["device"]
        page.close()
        page = ctx.new_page()
        signed_in(page, served.origin + "/")
    finally:
        ctx.close()


@contextmanager
def squatter(port: int, answer: str) -> Iterator[list[dict[str, Any]]]:
    """A program on the port while the gateway is down, serving the web app's own files and answering the device's
    challenge as well as it can without the gateway's token: a made-up proof ("proof"), or a made-up refusal
    ("signed-out") meant to make the phone forget its key. What it received, parsed."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.server import ServerConnection

    heard: list[dict[str, Any]] = []

    def handler(ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            for raw in ws:
                got = json.loads(raw)
                heard.append(got)
                if answer == "proof":
                    ws.send(json.dumps({"type": "res", "id": got.get("id"), "ok": True,
                                        "payload": {"nonce": "n" * 43, "proof": "0" * 64}}))
                else:
                    ws.send(json.dumps({"type": "res", "id": got.get("id"), "ok": False, "error": {
                        "code": "device_signed_out", "message": "signed out", "hint": "", "proof": "0" * 64}}))

    with port_squatter(port, handler):
        yield heard


def test_a_program_on_the_port_gets_no_signature_and_cannot_make_the_phone_forget(pw: Any, served: Served,
                                                                                  tmp_path: Path) -> None:
    ctx = phone(pw, tmp_path / "profile")
    try:
        page, did = device_page(ctx, served.link())
        page.close()
        served.gw.stop()
        for answer in ("proof", "signed-out"):
            with squatter(served.port, answer) as heard:
                page = ctx.new_page()
                page.goto(served.origin + "/")
                page.wait_for_selector("#status.bad", timeout=T)
                page.wait_for_function("() => /not your gateway/.test(document.getElementById('status').textContent)",
                                       timeout=T)
                assert heard and all(f["method"] == "connect.challenge" for f in heard), heard  # no connect
                assert not any("signature" in json.dumps(f) for f in heard)
                assert page.evaluate(STORED)["device"] == did  # kept: only the gateway can sign it out
                page.close()
        served.restart()
        page = ctx.new_page()
        signed_in(page, served.origin + "/")  # the real gateway: signed in as the device, as before
    finally:
        ctx.close()
        if served.gw.proc.poll() is not None:
            served.restart()
