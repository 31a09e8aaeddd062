"""Past sessions and a session open in two tabs, in the web app in real Chromium (Playwright) against `hermit
gateway run` with the scripted model (hermit.testing.FakeProvider), at a phone's size and a desktop's.

- A session ended by `/new` is listed under its chat ("Earlier sessions (1)", with when it ended, why and its
  size); opened, it shows its history read-only with the reason, the gateway refuses a message to it
  (`read_only`), a reload keeps it open, and "Open the current session" goes back.
- Two tabs on one session: what one sends and the reply appear in the other by themselves, once each, with no
  duplicate in the tab that sent it; a tab showing another session is not disturbed and marks the changed one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import DESKTOP_SIZE, PHONE_SIZE, Demo, T, browser_fixture, open_page, served_demo  # noqa: F401 - browser_fixture: the `browser` fixture
from webapphelpers import CLI_KEY, build_demo_home

SIZES = [PHONE_SIZE, DESKTOP_SIZE]
MAIN = "agent:main:main"


def steps() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for w, _ in SIZES:
        out += [{"match": {"contains": f"first-{w}"}, "text": f"Noted, first {w}."},
                {"match": {"contains": f"second-{w}"}, "text": f"Noted, second {w}."}]
    out += [{"match": {"contains": "tab-one says"}, "text": "Reply to tab one."},
            {"match": {"contains": "tab-two says"}, "text": "Reply to tab two."},
            {"match": {"contains": "elsewhere says"}, "text": "Reply while you looked elsewhere."}]
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    def prepare(home: Path, base_url: str) -> None:
        build_demo_home(home, base_url)
        config = home / "hermit.yaml"  # /new saves nothing to memory here: the model is asked only what a test says
        config.write_text(config.read_text(encoding="utf-8").replace(
            "    heartbeat:", "    session: {hooks: {session_memory: {enabled: false}}}\n    heartbeat:"), encoding="utf-8")

    with served_demo(tmp_path_factory.mktemp("sessions") / "home", steps(), prepare) as served:
        yield served


def send(page: Any, text: str, narrow: bool) -> None:
    page.fill("#input", text)
    if narrow:
        page.tap("#send")
    else:
        page.press("#input", "Enter")


def drawer(page: Any, narrow: bool) -> None:
    if narrow:
        page.click("#menu")
        page.wait_for_selector("#sidebar", state="visible", timeout=T)


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_a_session_ended_by_new_opens_read_only_with_its_reason(browser: Any, demo: Demo, width: int,
                                                                 height: int) -> None:
    narrow = width < 700
    opened = open_page(browser, demo.url, width, height, console_errors=True)
    page = opened.page
    send(page, f"hello first-{width}", narrow)
    page.locator(f".msg.assistant[data-done='done']:has-text('Noted, first {width}.')").wait_for(timeout=T)
    send(page, "/new", narrow)
    page.wait_for_selector(".notice.placeholder", timeout=T)  # the new session: no messages yet
    send(page, f"hello second-{width}", narrow)
    page.locator(f".msg.assistant[data-done='done']:has-text('Noted, second {width}.')").wait_for(timeout=T)

    drawer(page, narrow)
    toggle = page.locator(f"#sessions li.earlier[data-for-key='main\\a {MAIN}'] .earlier-toggle")
    toggle.wait_for(timeout=T)
    assert page.locator(f"#sessions li[data-key='{MAIN}'] + li.earlier").count() == 1  # right under its chat
    assert "Earlier sessions (" in toggle.inner_text() and toggle.get_attribute("aria-expanded") == "false"
    toggle.click()
    assert toggle.get_attribute("aria-expanded") == "true"
    ended = page.locator(f"#sessions li.ended[data-ended-key='{MAIN}']").first  # newest first: this test's
    ended.wait_for(timeout=T)
    assert "(/new)" in ended.inner_text() and " messages · " in ended.inner_text() and "started" in ended.inner_text()
    count = page.locator(f"#sessions li.earlier[data-for-key='main\\a {MAIN}'] li.ended").count()
    assert count >= 1 and f"Earlier sessions ({count})" in toggle.inner_text()
    # Measured where it is drawn, once drawn: the list is redrawn when a session changes (the reply just sent can
    # still be announcing it), so wait for the condition rather than read one moment of it.
    page.wait_for_function("(sel) => { const e = document.querySelector(sel); "
                           "return !!e && e.getBoundingClientRect().height >= 40; }",
                           arg=f"#sessions li.ended[data-ended-key='{MAIN}']", timeout=T)
    ended.click()
    if narrow:
        page.wait_for_selector("#sidebar", state="hidden", timeout=T)

    note = page.locator("#readonly-note")
    note.wait_for(state="visible", timeout=T)
    assert "This session ended on" in note.inner_text() and "(/new)" in note.inner_text()
    assert "Ended session" in note.inner_text()
    page.locator(f".msg.user:has-text('hello first-{width}')").wait_for(timeout=T)
    assert page.locator(f".msg:has-text('second-{width}')").count() == 0
    assert page.is_disabled("#input") and page.is_disabled("#send") and page.is_disabled("#new-session")
    assert "ended session" in page.inner_text("#session-title")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=f"/tmp/webC/ended-session-{width}.png")

    # The gateway refuses it too, not only the page: what the page would send, sent as it is.
    refused = page.evaluate("""async () => {
        const s = window.HermitChat.current();
        try { await window.Hermit.request('chat.send', {text: 'into the past', sessionKey: s.key, agentId: s.agentId,
                                                       sessionId: s.sessionId}); return 'sent'; }
        catch (e) { return e.code + ': ' + e.message; } }""")
    assert refused.startswith("read_only:") and "ended" in refused

    page.reload()  # still the ended session, read-only
    page.wait_for_selector("#status.ok", timeout=T)
    note.wait_for(state="visible", timeout=T)
    page.locator(f".msg.user:has-text('hello first-{width}')").wait_for(timeout=T)
    assert "(/new)" in note.inner_text()
    page.click("#open-current")
    note.wait_for(state="hidden", timeout=T)
    page.locator(f".msg.user:has-text('hello second-{width}')").wait_for(timeout=T)
    assert page.is_enabled("#input")
    assert opened.errors == []
    opened.context.close()


def test_two_tabs_on_one_session_see_each_others_messages(browser: Any, demo: Demo) -> None:
    one = open_page(browser, demo.url, console_errors=True)
    two = open_page(browser, demo.url, console_errors=True, context=one.context)  # a second tab, same browser
    other = open_page(browser, demo.url, *PHONE_SIZE, console_errors=True)  # another browser, on another session
    other.page.click("#menu")
    other.page.click(f"#sessions li[data-key='{CLI_KEY}']")
    other.page.wait_for_selector("#session-kind[data-kind='cli']", timeout=T)
    cli_before = other.page.inner_text("#messages")

    send(one.page, "tab-one says hi", False)
    one.page.locator(".msg.assistant[data-done='done']:has-text('Reply to tab one.')").wait_for(timeout=T)
    two.page.locator(".msg.assistant:has-text('Reply to tab one.')").wait_for(timeout=T)  # by itself
    two.page.locator(".msg.user:has-text('tab-one says hi')").wait_for(timeout=T)

    send(two.page, "tab-two says hello", False)
    two.page.locator(".msg.assistant[data-done='done']:has-text('Reply to tab two.')").wait_for(timeout=T)
    one.page.locator(".msg.assistant:has-text('Reply to tab two.')").wait_for(timeout=T)
    for tab in (one, two):  # each message once in each tab, in order
        texts = tab.page.locator("#messages .msg").all_inner_texts()
        assert sum("tab-one says hi" in t for t in texts) == 1 and sum("Reply to tab one." in t for t in texts) == 1
        assert sum("tab-two says hello" in t for t in texts) == 1 and sum("Reply to tab two." in t for t in texts) == 1
        mine = [t for t in texts if "tab-" in t or "Reply to tab" in t]
        assert mine == ["tab-one says hi", "Reply to tab one.", "tab-two says hello", "Reply to tab two."], mine

    # The tab on another session: not disturbed, and the changed session marked in its list.
    assert other.page.inner_text("#messages") == cli_before
    assert "tab-one" not in other.page.inner_text("#messages")
    other.page.click("#menu")
    other.page.locator(f"#sessions li.unread[data-key='{MAIN}'] .badge.new").wait_for(timeout=T)
    other.page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().left >= 0",
                                 timeout=T)  # the drawer's slide, ended (waited for, not slept on)
    other.page.screenshot(path="/tmp/webC/unread-390.png")
    other.page.click(f"#sessions li[data-key='{MAIN}']")
    other.page.locator(".msg.assistant:has-text('Reply to tab two.')").wait_for(timeout=T)
    assert other.page.locator("#sessions li.unread").count() == 0
    one.page.screenshot(path="/tmp/webC/two-tabs-1280.png")
    assert one.errors == [] and two.errors == [] and other.errors == []
    one.context.close()
    other.context.close()
