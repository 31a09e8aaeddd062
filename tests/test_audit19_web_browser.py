"""Audit 19 (t1): the web app in Debian's headless Chromium against a real `hermit gateway run`, as attackers act on
it — text others control shown to the owner, and a web page the owner visits in the same browser.

- Markup in every name and text a non-owner can set and the web app shows — a group member's message and display
  name, a reply with `javascript:`/`data:` links and an image link, a memory note's file name and its text, a cron
  job's name and message, a pairing request's name and username, MEMORY.md, a search snippet — stays text in the
  chat, memory (list, search, file view) and operations views: no script runs, no dialog opens, no element has an
  event attribute, no image but the app's own is drawn, no request leaves the gateway, the page's CSP is never even
  asked to block anything.
- A page of another origin in the browser the owner is signed in with: its WebSocket to the gateway is refused for
  its Origin before any sign-in (no `hello-ok`); it cannot read /status or the page (no CORS); it cannot frame the
  app (frame-ancestors); a tab of the app it opens is a cross-origin window whose document and storage it cannot
  touch; the owner's own tab stays signed in.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

import browserdemo
from browserdemo import Demo, T, browser_fixture, served_demo  # noqa: F401 - browser_fixture: the `browser` fixture
from hermit.channels.pairing import PairingStore
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.messages import AssistantMessage, Sender, TextPart, UserMessage
from hermit.scheduler import CronJobs
from hermit.sessions.store import SessionStore
from webapphelpers import write_demo_config

X = '<img src=x onerror="window.__pwned=1;alert(1)"><script>window.__pwned=2</script>'
GROUP_KEY = "agent:main:telegram:group:-100919"
NOTE = "memory/" + X.replace("/", "_") + ".md"
REPLY = ("reply " + X + " [click](javascript:window.__pwned=3) [d](data:text/html,<script>alert(1)</script>) "
         "![i](http://evil.test/x.png) <a href=javascript:alert(1)>a</a> <iframe src=//evil.test></iframe>")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    def prepare(home: Path, base_url: str) -> None:
        write_demo_config(home, base_url)
        ws = home / "workspace"
        (ws / "memory").mkdir(parents=True, exist_ok=True)
        (ws / "MEMORY.md").write_text("# Memory\n- pasted from a chat: " + X + " [a](javascript:alert(1))\n",
                                      encoding="utf-8")
        (ws / NOTE).write_text("note onerror " + X + "\n", encoding="utf-8")
        store = SessionStore(home / "agents" / "main" / "sessions", cwd=ws, fsync=False)
        transcript = store.open_transcript(store.get_or_create(GROUP_KEY, origin_channel="telegram").record)
        transcript.append_message(UserMessage("hi " + X, sender=Sender("2001", X)).to_dict())
        transcript.append_message(AssistantMessage((TextPart(REPLY),), model="test-model", provider="fake").to_dict())
        CronJobs(home, load_config(StatePaths(home))).add({
            "id": "j1", "name": X, "message": X, "schedule": {"kind": "cron", "expr": "0 8 * * 1-5"}})
        assert PairingStore(home).request("telegram", "default", "5550123", X, X) is not None

    with served_demo(tmp_path_factory.mktemp("audit19web") / "home", [{"match": {"contains": ""}, "repeat": True,
                                                                        "text": "ok"}], prepare) as demo:
        yield demo


WATCH = """() => { window.__csp = []; document.addEventListener('securitypolicyviolation',
    (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI)); }"""
INJECTED = """() => ({
    pwned: window.__pwned === undefined ? null : window.__pwned,
    csp: window.__csp,
    events: [...document.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name)))
        .map((e) => e.tagName),
    images: [...document.querySelectorAll('img')].map((e) => e.getAttribute('src'))
        .filter((s) => s && !s.startsWith('/static/')),
    frames: document.querySelectorAll('iframe, script:not([src]), object, embed, base, meta[http-equiv]').length,
    links: [...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href')),
})"""


def test_markup_from_others_stays_text_in_every_view(browser: Any, served: Demo) -> None:
    opened = browserdemo.open_page(browser, served.url, console_errors=True)
    page = opened.page
    dialogs: list[str] = []

    def dialog(d: Any) -> None:
        dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.evaluate(WATCH)
    page.locator("#sessions li", has_text="group").first.click()
    page.locator(".msg.assistant", has_text="reply").wait_for(timeout=T)
    shown = page.inner_text("#messages")
    assert "hi " + X in shown and "[click](javascript:window.__pwned=3)" in shown, shown
    assert "<iframe src=//evil.test></iframe>" in shown
    page.click(".tab[data-view='memory']")
    page.locator("#memory-files li", has_text="onerror").first.wait_for(timeout=T)
    assert X.replace("/", "_") in page.inner_text("#memory-files")
    page.locator("#memory-files li", has_text="onerror").first.click()
    page.locator("#memory-lines", has_text="note onerror").wait_for(timeout=T)
    assert X in page.inner_text("#memory-lines")
    page.fill("#memory-query", "onerror")
    page.press("#memory-query", "Enter")
    page.locator("#memory-results li").first.wait_for(timeout=T)
    assert "onerror" in page.inner_text("#memory-results")
    page.click(".tab[data-view='ops']")
    page.locator("#jobs li", has_text="j1").wait_for(timeout=T)
    assert X in page.inner_text("#jobs")
    page.locator(".pair", has_text="5550123").wait_for(timeout=T)
    got = page.evaluate(INJECTED)
    print(json.dumps(got), dialogs, opened.errors)
    assert got["pwned"] is None and dialogs == [] and got["csp"] == [], got
    assert got["events"] == [] and got["images"] == [] and got["frames"] == 0, got
    assert got["links"] == ["http://evil.test/x.png"], got  # an image link is a link, shown with its host
    assert opened.errors == []
    port = served.url.split("/")[2]
    assert [u for u in requests if not u.startswith(f"http://{port}/")] == []
    opened.context.close()


ATTACKER = """<!doctype html><html><body><script>
window.out = {};
const G = 'GATEWAY';
function ws(url) { return new Promise((done) => {
  const s = new WebSocket(url), got = [];
  s.onopen = () => { s.send(JSON.stringify({type: 'req', id: 'c', method: 'connect', params: {token: ''}}));
                     s.send(JSON.stringify({type: 'req', id: 'm', method: 'memory.get', params: {path: 'MEMORY.md'}})); };
  s.onmessage = (m) => got.push(JSON.parse(m.data));
  s.onclose = (e) => done({code: e.code, got});
}); }
(async () => {
  out.ws = await ws('ws://' + G + '/ws');
  try { const r = await fetch('http://' + G + '/status'); out.status = r.status; } catch (e) { out.status = 'blocked'; }
  try { const r = await fetch('http://' + G + '/'); out.page = r.status; } catch (e) { out.page = 'blocked'; }
  const f = document.createElement('iframe');
  await new Promise((done) => { f.onload = done; f.src = 'http://' + G + '/'; document.body.appendChild(f); });
  try { out.frame = f.contentDocument ? 'readable' : 'unreadable'; } catch (e) { out.frame = 'unreadable'; }
  const w = window.open('http://' + G + '/static/index.html', 'app');
  out.opened = !!w;
  window.done = true;
})();
</script></body></html>"""


@pytest.fixture
def attacker_site(served: Demo) -> Iterator[str]:
    gateway = served.url.split("/")[2]

    class Site(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = ATTACKER.replace("GATEWAY", gateway).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_of_another_origin_in_the_owners_browser_gets_nothing(browser: Any, served: Demo,
                                                                      attacker_site: str) -> None:
    owner = browserdemo.open_page(browser, served.url, frames=True)  # signed in, in this browser context
    evil = owner.context.new_page()
    with evil.expect_popup(timeout=T) as popup:  # the page's window.open: waited for as an event, not read once
        evil.goto(attacker_site)
        evil.wait_for_function("window.done === true", timeout=T)
    out = evil.evaluate("window.out")
    print(json.dumps(out))
    assert out["ws"]["code"] == 1008, out
    assert [f["error"]["code"] for f in out["ws"]["got"]] == ["origin_refused"], out  # no hello-ok, no memory
    assert out["status"] == "blocked" and out["page"] == "blocked"  # no CORS: nothing readable
    assert out["frame"] == "unreadable"
    app = popup.value
    app.wait_for_url("**/static/index.html*", timeout=T)
    app.wait_for_selector("#status.bad", timeout=T)  # not signed in: the owner's tab keeps its token to itself
    reach = evil.evaluate("""() => { const w = window.open('', 'app');
        const tries = {};
        for (const [k, f] of Object.entries({doc: () => w.document.title, storage: () => w.sessionStorage.length,
                                              local: () => w.localStorage.length, hash: () => w.location.hash})) {
          try { tries[k] = String(f()); } catch (e) { tries[k] = 'blocked'; }
        }
        return tries; }""")
    print(reach)
    assert reach == {"doc": "blocked", "storage": "blocked", "local": "blocked", "hash": "blocked"}, reach
    owner.page.wait_for_selector("#status.ok", timeout=T)
    assert "origin_refused" not in json.dumps(owner.frames)
    owner.context.close()
