"""The web app under Trusted Types (s20 t3), in Debian's headless Chromium against a real `hermit gateway run`.

The page's CSP now says `require-trusted-types-for 'script'; trusted-types 'none'`: a string given to an HTML or
script sink (innerHTML, insertAdjacentHTML, document.write, a script's src or text, eval-like setTimeout) is refused
by the browser, and no policy can be made to turn one into a trusted value. The app writes text only (dom.js), so
every view still works — chat (a reply with Markdown), a session from the sidebar, memory (list, file, edit and save,
search), operations (cron jobs, a pairing request approved, the phone panel's QR code), signing a phone in with its
one-time link, and a wrong token's sign-in message — with no CSP report, page error or console error on the way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import PHONE_SIZE, T, open_page
from gatewayhelpers import GatewayProcess, free_port, launched_chromium
from hermit.testing import FakeProvider
from webapphelpers import build_demo_home

REPLY = "Here is **bold**, `code` and [a link](https://example.com/docs)."
# Recorded from the document's start in every page of a context: what the CSP refused or reported.
WATCH = """window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI
    + ' ' + (e.sample || '')));"""
# What a script that got into the page (or a future line of the app) would try: each sink with a string.
SINKS = """() => {
  const tries = {
    innerHTML: () => { document.body.innerHTML = '<img src=x>'; },
    outerHTML: () => { document.getElementById('status').outerHTML = '<b>x</b>'; },
    insertAdjacentHTML: () => { document.body.insertAdjacentHTML('beforeend', '<b>x</b>'); },
    write: () => { document.write('<b>x</b>'); },
    scriptSrc: () => { document.createElement('script').src = '/static/main.js'; },
    scriptText: () => { document.createElement('script').textContent = 'window.__ran = 1'; },
    timeoutString: () => { setTimeout('window.__ran = 2', 0); },
    policy: () => { trustedTypes.createPolicy('mine', { createHTML: (s) => s }); },
    defaultPolicy: () => { trustedTypes.createPolicy('default', { createHTML: (s) => s }); },
  };
  const out = {};
  for (const [name, f] of Object.entries(tries)) {
    try { f(); out[name] = 'done'; } catch (e) { out[name] = e.name + ': ' + e.message; }
  }
  out.bodyKept = !!document.getElementById('messages');
  return out;
}"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, str]]:
    """The demo home (sessions, memory, a cron job, a pairing request) on 127.0.0.1, reached by a phone as
    http://phone.test:<port> (Chromium maps the name to 127.0.0.1)."""
    home = tmp_path_factory.mktemp("s20tt") / "home"
    port = free_port()
    origin = f"http://phone.test:{port}"
    with FakeProvider([{"text": REPLY, "repeat": True}]) as fake:
        build_demo_home(home, fake.openai_base_url)
        config = home / "hermit.yaml"
        config.write_text(config.read_text(encoding="utf-8") + f'  allowed_origins: ["{origin}"]\n', encoding="utf-8")
        gw = GatewayProcess(home, "--port", str(port))
        gw.wait_ready()
        try:
            yield gw, origin
        finally:
            gw.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched_chromium("--host-resolver-rules=MAP phone.test 127.0.0.1")


def watched(browser: Any, url: str, *size: int, signed_in: bool = True) -> Any:
    narrow = bool(size) and size[0] < 700
    width, height = size or (1280, 800)
    context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=narrow, has_touch=narrow)
    context.add_init_script(WATCH)
    return open_page(browser, url, console_errors=True, signed_in=signed_in, context=context)


def clean(opened: Any) -> None:
    """No CSP refusal or report, no page or console error so far."""
    csp = opened.page.evaluate("window.__csp")
    assert csp == [] and opened.errors == [], (csp, opened.errors)


def test_every_view_works_under_trusted_types(browser: Any, served: tuple[GatewayProcess, str],
                                              tmp_path: Path) -> None:
    gw, origin = served
    owner = watched(browser, gw.url)
    page = owner.page

    # chat: a message sent, the reply drawn from Markdown; then a session from the sidebar
    page.fill("#input", "hello there")
    page.click("#send")
    reply = page.locator(".msg.assistant", has_text="Here is").last
    reply.wait_for(timeout=T)
    assert reply.locator("strong", has_text="bold").count() == 1 and reply.locator("code", has_text="code").count() == 1
    assert reply.locator("a", has_text="a link").get_attribute("href") == "https://example.com/docs"
    page.locator("#sessions li", has_text="group").first.click()
    page.locator(".msg.assistant", has_text="Every second Thursday").wait_for(timeout=T)
    clean(owner)

    # memory: the list, MEMORY.md opened, edited and saved, a search
    page.click(".tab[data-view='memory']")
    page.click("#memory-files li[data-path='MEMORY.md']")
    page.wait_for_selector("#memory-edit", state="visible", timeout=T)
    page.click("#memory-edit")
    editor = page.locator("#memory-editor")
    editor.fill(editor.input_value() + "- Trusted types: on\n")
    page.click("#memory-save")
    page.wait_for_selector("#memory-file-note.ok", timeout=T)
    assert "- Trusted types: on" in (gw.home / "workspace" / "MEMORY.md").read_text(encoding="utf-8")
    page.fill("#memory-query", "release")
    page.press("#memory-query", "Enter")
    page.locator("#memory-results li").first.wait_for(timeout=T)
    clean(owner)

    # operations: cron jobs, the pairing request approved, the phone panel's QR code and link
    page.click(".tab[data-view='ops']")
    page.locator("#jobs li", has_text="Morning brief").wait_for(timeout=T)
    page.locator(".pair", has_text="5550123").locator("button.approve").click()
    page.locator(".pair", has_text="5550123").wait_for(state="detached", timeout=T)
    page.click("#phone-open")
    page.wait_for_selector("#phone-qr", state="visible", timeout=T)
    link = page.inner_text("#phone-link")
    assert link.startswith(f"{origin}/#ticket="), link
    assert str(page.get_attribute("#phone-qr", "src")).startswith("data:image/svg+xml")
    clean(owner)

    # sign-in: the phone opens the link and is signed in; a wrong token is told what to do
    phone = watched(browser, link, *PHONE_SIZE)
    assert phone.page.evaluate("sessionStorage.getItem('hermit.token')") == gw.token
    clean(phone)
    wrong = watched(browser, gw.url.split("?")[0] + "?token=" + "x" * 43, signed_in=False)
    wrong.page.wait_for_selector("#signin:not([hidden])", timeout=T)
    assert wrong.page.inner_text("#signin").strip()
    clean(wrong)

    # and a string given to any HTML or script sink is refused, as is a policy that would let one through
    tried = page.evaluate(SINKS)
    print(json.dumps(tried, indent=1))
    kept = tried.pop("bodyKept")
    for sink, said in tried.items():
        assert said.startswith("TypeError"), (sink, said)
    assert kept is True
    assert "TrustedHTML" in tried["innerHTML"] and "TrustedScriptURL" in tried["scriptSrc"], tried
    assert page.evaluate("window.__ran === undefined")
    refused = page.evaluate("window.__csp")
    assert any(r.startswith("require-trusted-types-for") for r in refused), refused
    assert any(r.startswith("trusted-types") for r in refused), refused
    assert page.is_visible("#status.ok")  # the app itself is untouched
    csp = page.evaluate("fetch('/').then((r) => r.headers.get('content-security-policy'))")
    assert "require-trusted-types-for 'script'" in csp and "trusted-types 'none'" in csp, csp
    for opened in (owner, phone, wrong):
        opened.context.close()
