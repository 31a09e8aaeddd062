"""Links in the web app show where they go (audit C): a contact steers the assistant's reply in their own DM,
and the owner reads it in the read-only view, so a link's label must not name one address while it opens
another. Debian's headless Chromium through Playwright against `hermit gateway run` with the fake provider:
the contact's DM from its transcript, and the same reply streamed live into the owner's main session.

What the page must draw: a label that names an address or a domain other than the target's host is replaced
by the real address; any other label is followed by the target's host in a small `.md-host` element; a link
whose label is its own address shows just that (a lookalike host in its xn-- form); the anchor's title is the full address; javascript: and a
bare address in the text stay text. A label is read as NFKC (U+2024 ONE DOT LEADER is a dot), a bidi control
before a link is shown as an escape, and every link is a bidi isolate (audit W2 L7).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import T, browser_fixture, open_page, served_demo  # noqa: F401 - browser_fixture: the `browser` fixture
from hermit.messages import AssistantMessage, TextPart, UserMessage
from hermit.sessions.store import SessionStore
from webapphelpers import write_demo_config

CONTACT_KEY = "agent:main:telegram:dm:5550123"
PHISH = "https://evil.example/phish"
LOOKALIKE = "https://xn--bnk-6cd.example/"
REPLY = "\n".join([
    "Done. Useful links:",
    f"- deceptive: [https://bank.example/login]({PHISH})",
    f"- domain: [bank.example]({PHISH})",
    f"- hidden dot: [bank\u200b.example/login]({PHISH})",
    "- leader dot: [bank\u2024example login](https://evil.example/a)",
    "- reversed: \u202e[moc](https://evil.example/b)",
    f"- sentence: [log in at www.bank.example now]({PHISH})",
    f"- word: [Main session]({PHISH})",
    "- user part: [Main session](https://bank.example@evil.example/x)",
    "- same host: [the guide](https://docs.example/guide)",
    "- own: [https://docs.example/guide](https://docs.example/guide)",
    "- lookalike: [https://b\u0430nk.example/](https://b\u0430nk.example/)",  # a Cyrillic а
    "- script: [click](javascript:window.__pwned=1)",
    "- bare: https://plain.example/x",
])
# [text, href, title, rel, target, host element or None] of each anchor, in order.
EXPECTED = [
    [PHISH, PHISH, PHISH, "noopener noreferrer", "_blank", None],
    [PHISH, PHISH, PHISH, "noopener noreferrer", "_blank", None],
    [PHISH, PHISH, PHISH, "noopener noreferrer", "_blank", None],
    ["https://evil.example/a", "https://evil.example/a", "https://evil.example/a", "noopener noreferrer", "_blank",
     None],
    ["moc (evil.example)", "https://evil.example/b", "https://evil.example/b", "noopener noreferrer", "_blank",
     "(evil.example)"],
    [PHISH, PHISH, PHISH, "noopener noreferrer", "_blank", None],
    ["Main session (evil.example)", PHISH, PHISH, "noopener noreferrer", "_blank", "(evil.example)"],
    ["Main session (evil.example)", "https://evil.example/x", "https://evil.example/x", "noopener noreferrer", "_blank",
     "(evil.example)"],
    ["the guide (docs.example)", "https://docs.example/guide", "https://docs.example/guide", "noopener noreferrer",
     "_blank", "(docs.example)"],
    ["https://docs.example/guide", "https://docs.example/guide", "https://docs.example/guide", "noopener noreferrer",
     "_blank", None],
    [LOOKALIKE, LOOKALIKE, LOOKALIKE, "noopener noreferrer", "_blank", None],  # its host as the browser reads it
]
ANCHORS = """(root) => [...document.querySelectorAll(root + ' a')].map((a) => {
    const host = a.querySelector('.md-host');
    return [a.textContent, a.getAttribute('href'), a.getAttribute('title'), a.rel, a.target, host && host.textContent];
})"""


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    def prepare(home: Path, base_url: str) -> None:
        write_demo_config(home, base_url)
        (home / "workspace").mkdir(parents=True, exist_ok=True)
        store = SessionStore(home / "agents" / "main" / "sessions", cwd=home / "workspace", fsync=False)
        opened = store.get_or_create(CONTACT_KEY, origin_channel="telegram")
        transcript = store.open_transcript(opened.record)
        transcript.append_message(UserMessage("Reply with these links exactly, please").to_dict())
        transcript.append_message(AssistantMessage((TextPart(REPLY),), model="test-model", provider="fake").to_dict())

    steps = [{"match": {"contains": "links please"}, "repeat": True, "text": REPLY}]
    with served_demo(tmp_path_factory.mktemp("links") / "home", steps, prepare) as demo:
        yield demo.url


def check_links(page: Any, root: str, width: int) -> None:
    assert page.eval_on_selector_all(root + " a", "x => x.length") == len(EXPECTED)
    assert page.evaluate(ANCHORS, root) == EXPECTED
    text = page.inner_text(root)
    assert "[click](javascript:window.__pwned=1)" in text and "https://plain.example/x" in text  # stay text
    assert "bank.example" not in " ".join(a[0] for a in page.evaluate(ANCHORS, root))  # no link names the bank
    assert "reversed: ⟨U+202E⟩moc (evil.example)" in text  # the override shown, not obeyed
    assert set(page.eval_on_selector_all(root + " a", "x => x.map((a) => getComputedStyle(a).unicodeBidi)")) == {"isolate"}
    host = page.locator(root + " a .md-host").first  # small, and set apart from the label
    assert host.evaluate("(e) => parseFloat(getComputedStyle(e).fontSize) < parseFloat(getComputedStyle(e.parentNode).fontSize)")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.evaluate("window.__pwned") is None


@pytest.mark.parametrize(("width", "height"), [(390, 844), (1280, 800)], ids=["390x844", "1280x800"])
def test_a_link_shows_where_it_goes(browser: Any, gateway_url: str, width: int, height: int) -> None:
    narrow = width < 700
    opened = open_page(browser, gateway_url, width, height)
    context, page, errors = opened.context, opened.page, opened.errors

    # The owner's main session: the reply streamed live.
    page.fill("#input", f"links please {width}")
    if narrow:  # on a touch screen Return starts a new line: Send sends
        page.tap("#send")
    else:
        page.press("#input", "Enter")
    page.locator(".msg.assistant[data-done='done']").last.wait_for(timeout=T)
    check_links(page, ".msg.assistant[data-done='done']", width)

    # The contact's DM, read-only, from its transcript.
    if narrow:
        page.click("#menu")
    page.click(f"#sessions li[data-key='{CONTACT_KEY}']")
    page.wait_for_selector("#readonly-note", state="visible", timeout=T)
    assert "contact" in page.inner_text("#readonly-note")
    page.locator(".msg.assistant[data-done='history']").last.wait_for(timeout=T)
    check_links(page, ".msg.assistant[data-done='history']", width)
    assert errors == []
    context.close()
