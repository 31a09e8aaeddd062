"""The web app on a phone (390×844, touch) in real Chromium against `hermit gateway run`: what a new user's
audit found. Nothing typed is lost (a message sent while the gateway is down stays in the box; a draft and an
unsaved MEMORY.md edit come back after a reload, and closing the page with an unsaved edit asks first); a page
that is not signed in says what to run and takes no text; an error banner goes with the next success or a
change of view; a date with no daily log says so where a phone shows it; Markdown tables are drawn (as text);
tool lines promise nothing they do not do; Return starts a new line on a touch screen; small things measured.

One gateway (restarted by the last test) and one browser serve the module; each test has its own context.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import PHONE_SIZE, Demo, T, browser_fixture, open_page, served_demo  # noqa: F401 - browser_fixture: the `browser` fixture
from webapphelpers import build_demo_home

TABLE = ("Your week:\n\n| Day | Plan | Where |\n|:----|:----:|---:|\n| Mon | gym at **7** | <b>club</b> |\n"
         "| Tue | `deploy` \\| rollback | [notes](https://notes.example/x) |\n\nThat's all.")
STEPS: list[dict[str, Any]] = [
    {"match": {"contains": "table-please"}, "text": TABLE},
    {"match": {"contains": "tool-please"}, "tool_calls": [{"name": "memory_search", "arguments": {"query": "tea"}}]},
    {"match": {"contains": "tool-please"}, "text": "Sencha."},
    {"match": {"contains": "kept-please"}, "repeat": True, "text": "Got it, the kept message."},
    {"match": {"contains": "two lines"}, "repeat": True, "text": "Two lines received."},
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    def prepare(home: Path, base_url: str) -> None:
        build_demo_home(home, base_url)
        (home / "workspace" / "memory" / "blob.md").write_bytes(b"# not text\x00\x01\x02\n")

    with served_demo(tmp_path_factory.mktemp("phone") / "home", STEPS, prepare) as served:
        yield served


def phone(browser: Any, demo: Demo, url: str | None = None, *, signed_in: bool = True) -> tuple[Any, Any, list[str]]:
    opened = open_page(browser, url or demo.url, *PHONE_SIZE, signed_in=signed_in)
    return opened.context, opened.page, opened.errors


def nav(page: Any, selector: str) -> None:
    """Tap something in the drawer behind ☰."""
    page.tap("#menu")
    page.wait_for_selector("#sidebar", state="visible", timeout=T)
    page.tap(selector)
    page.wait_for_selector("#sidebar", state="hidden", timeout=T)


def send(page: Any, text: str) -> Any:
    page.fill("#input", text)
    page.tap("#send")
    reply = page.locator(f".msg.user:has-text('{text}') + .msg.assistant[data-done='done']")
    reply.wait_for(timeout=T)
    return reply


def test_a_page_not_signed_in_says_what_to_run_and_takes_no_text(browser: Any, demo: Demo) -> None:
    base = demo.url.split("?", 1)[0]
    for link in (base + "#ticket=" + "u" * 43, base):  # a used (or made-up) link, the plain address
        context, page, errors = phone(browser, demo, link, signed_in=False)
        page.wait_for_selector("#status.bad", timeout=T)
        assert page.is_visible("#signin"), link
        say = page.inner_text("#signin")
        assert "hermit dashboard" in say, say
        signin, title = page.locator("#signin").bounding_box(), page.locator("#view-title").bounding_box()
        assert signin["width"] >= 380 and title["width"] >= 30, (signin, title)  # full width; the title not squeezed
        for sel in ("#input", "#send", "#memory-query", "#memory-append-text", "#job-message", "#new-session"):
            assert page.is_disabled(sel), (link, sel)
        nav(page, ".tab[data-view='memory']")
        assert page.is_disabled("#memory-query") and page.is_visible("#signin")
        assert page.evaluate("window.Hermit.request('memory.search', {query: 'x'}).catch((e) => e.hint)") == say
        assert errors == []
        context.close()


def test_a_banner_goes_with_the_next_success_and_with_a_change_of_view(browser: Any, demo: Demo) -> None:
    context, page, errors = phone(browser, demo)
    nav(page, ".tab[data-view='memory']")
    page.wait_for_selector("#memory-files li[data-path='MEMORY.md']", timeout=T)
    page.evaluate("window.HermitMemory.openFile('memory/blob.md')")
    page.wait_for_selector("#banner", state="visible", timeout=T)
    assert "binary" in page.inner_text("#banner")
    page.tap("#memory-back")
    page.tap("#memory-files li[data-path='MEMORY.md']")
    page.wait_for_selector("#memory-edit", state="visible", timeout=T)
    page.wait_for_selector("#banner", state="hidden", timeout=T)  # MEMORY.md opened: the error is over

    page.evaluate("window.HermitMemory.openFile('memory/blob.md')")
    page.wait_for_selector("#banner", state="visible", timeout=T)
    nav(page, ".tab[data-view='ops']")
    assert page.is_hidden("#banner")  # another view: the error was about the one left

    page.tap("#view-ops details > summary")
    page.fill("#job-when", "not a schedule")
    page.fill("#job-message", "banner check")
    page.tap("#job-add button[type='submit']")
    page.wait_for_selector("#banner", state="visible", timeout=T)
    page.wait_for_selector("#job-add-note.bad", timeout=T)
    page.fill("#job-when", "0 9 * * 1-5")
    page.tap("#job-add button[type='submit']")
    page.wait_for_selector("#job-add-note.ok", timeout=T)
    assert page.is_hidden("#banner")
    assert errors == []
    context.close()


def test_a_date_with_no_daily_log_is_said_in_the_list_a_phone_shows(browser: Any, demo: Demo) -> None:
    context, page, errors = phone(browser, demo)
    nav(page, ".tab[data-view='memory']")
    page.wait_for_selector("#memory-files li[data-path='MEMORY.md']", timeout=T)
    page.fill("#memory-date", "2020-01-01")
    note = page.locator("#memory-list >> text=no daily log for 2020-01-01")
    note.wait_for(timeout=T)
    assert note.is_visible()
    page.fill("#memory-date", "2026-11-21")  # a day with a log opens it, and the note goes
    page.wait_for_selector("#memory-file", state="visible", timeout=T)
    page.wait_for_function("() => document.getElementById('memory-path').textContent === 'memory/2026-11-21.md'",
                           timeout=T)
    assert page.locator("#memory-list >> text=no daily log").count() == 0
    assert errors == []
    context.close()


def test_an_unsaved_edit_and_a_note_come_back_after_a_reload(browser: Any, demo: Demo) -> None:
    context, page, errors = phone(browser, demo)
    nav(page, ".tab[data-view='memory']")
    page.fill("#memory-append-text", "half a note")
    page.tap("#memory-files li[data-path='MEMORY.md']")
    page.tap("#memory-edit")
    page.wait_for_selector("#memory-editor", state="visible", timeout=T)
    on_disk = (demo.home / "workspace" / "MEMORY.md").read_text(encoding="utf-8")
    page.tap("#memory-editor")
    page.keyboard.press("Control+End")
    page.keyboard.type("- unsaved line from the phone\n")
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.type)
        dialog.accept()

    page.once("dialog", answer)
    page.reload()  # a pull-to-refresh
    page.wait_for_selector("#status.ok", timeout=T)
    assert asked == ["beforeunload"]  # the edit was unsaved: the browser asked first
    page.wait_for_selector("#memory-editor", state="visible", timeout=T)
    assert page.input_value("#memory-editor").endswith("- unsaved line from the phone\n")
    assert page.input_value("#memory-append-text") == "half a note"
    assert (demo.home / "workspace" / "MEMORY.md").read_text(encoding="utf-8") == on_disk  # nothing saved by itself
    page.tap("#memory-save")
    page.wait_for_selector("#memory-file-note.ok >> text=Saved", timeout=T)
    assert "- unsaved line from the phone" in (demo.home / "workspace" / "MEMORY.md").read_text(encoding="utf-8")
    page.reload()  # saved: nothing to ask, nothing to bring back
    page.wait_for_selector("#status.ok", timeout=T)
    page.wait_for_selector("#memory-files li[data-path='MEMORY.md']", timeout=T)
    assert page.is_hidden("#memory-editor") and asked == ["beforeunload"]
    assert errors == []
    context.close()


def test_markdown_tables_are_drawn_as_tables_of_text(browser: Any, demo: Demo) -> None:
    context, page, errors = phone(browser, demo)
    reply = send(page, "my week as a table-please")
    table = reply.locator(".md table")
    assert table.count() == 1
    assert table.locator("th").all_inner_texts() == ["Day", "Plan", "Where"]
    rows = table.locator("tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).locator("td").all_inner_texts() == ["Mon", "gym at 7", "<b>club</b>"]
    assert rows.nth(0).locator("td strong").inner_text() == "7"
    assert rows.nth(1).locator("td").nth(0).inner_text() == "Tue"
    assert rows.nth(1).locator("td").nth(1).inner_text() == "deploy | rollback"
    assert "(notes.example)" in rows.nth(1).locator("td a").inner_text()  # a link keeps its host label
    assert reply.locator("b, script, img").count() == 0 and "|" not in reply.locator("p").first.inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert errors == []
    context.close()


def test_a_tool_line_is_a_plain_line(browser: Any, demo: Demo) -> None:
    """chat.tool brings a tool's name and state only: its line says that, with no ▸ that promises more."""
    context, page, errors = phone(browser, demo)
    reply = send(page, "which tea, tool-please")
    line = reply.locator(".tool[data-name='memory_search']")
    assert line.inner_text() == "memory_search ✓ done"
    assert errors == []
    context.close()


def test_return_starts_a_new_line_on_a_touch_screen_and_send_sends(browser: Any, demo: Demo) -> None:
    context, page, errors = phone(browser, demo)
    page.tap("#input")
    page.keyboard.type("two lines, the first")
    page.keyboard.press("Enter")
    page.keyboard.type("and the second")
    assert page.input_value("#input") == "two lines, the first\nand the second"
    assert page.locator(".msg.user:has-text('two lines')").count() == 0  # Return sent nothing
    page.tap("#send")
    page.locator(".msg.user:has-text('two lines') + .msg.assistant[data-done='done']").wait_for(timeout=T)
    assert page.locator(".msg.user:has-text('two lines')").last.inner_text() == "two lines, the first\nand the second"
    assert page.input_value("#input") == ""
    assert errors == []
    context.close()
    desk = browser.new_context(viewport={"width": 1280, "height": 800})  # with a keyboard, Enter sends
    page = desk.new_page()
    page.goto(demo.url)
    page.wait_for_selector("#status.ok", timeout=T)
    page.fill("#input", "two lines? no, one")
    page.press("#input", "Enter")
    page.locator(".msg.user:has-text('two lines? no, one') + .msg.assistant[data-done='done']").wait_for(timeout=T)
    desk.close()


def test_a_chat_draft_comes_back_after_a_reload(browser: Any, demo: Demo) -> None:
    context, page, errors = phone(browser, demo)
    page.wait_for_selector("#session-kind[data-kind='main']", timeout=T)
    page.fill("#input", "a thought to finish later")
    page.reload()
    page.wait_for_selector("#status.ok", timeout=T)
    page.wait_for_function("() => document.getElementById('input').value === 'a thought to finish later'", timeout=T)
    assert errors == []
    context.close()


def test_sizes_on_a_phone(browser: Any, demo: Demo) -> None:
    """Every tap target is at least 40 px (the summary that opens the job form too), badges are at least 12 px,
    and the append form's checkbox sits on the line of its label."""
    context, page, errors = phone(browser, demo)
    small = "() => [...document.querySelectorAll('.badge')].filter((b) => b.offsetParent !== null)" \
            ".map((b) => parseFloat(getComputedStyle(b).fontSize)).filter((s) => s < 12)"
    page.wait_for_selector("#session-kind[data-kind='main']", timeout=T)
    assert page.evaluate(small) == []
    nav(page, ".tab[data-view='ops']")
    page.wait_for_selector(".job .badge", timeout=T)
    assert page.evaluate(small) == []
    summary = page.locator("#view-ops details > summary").bounding_box()
    assert summary["height"] >= 40, summary
    nav(page, ".tab[data-view='memory']")
    page.fill("#memory-query", "coffee")
    page.press("#memory-query", "Enter")
    page.wait_for_selector(".result .badge", timeout=T)
    assert page.evaluate(small) == []
    box, line = page.evaluate("""() => {
        const box = document.getElementById('memory-append-private'), label = box.parentElement;
        const text = [...label.childNodes].find((n) => n.nodeType === 3 && n.textContent.trim());
        const range = document.createRange();
        range.selectNodeContents(text);
        const r = box.getBoundingClientRect(), first = range.getClientRects()[0];
        return [[r.top, r.bottom], [first.top, first.bottom]]; }""")
    middle = (box[0] + box[1]) / 2
    assert line[0] <= middle <= line[1], (box, line)  # the box is beside the first line of its label
    assert errors == []
    context.close()


def test_a_message_sent_while_the_gateway_is_down_stays_in_the_box(browser: Any, demo: Demo) -> None:
    """Last in the module: it restarts the gateway."""
    context, page, errors = phone(browser, demo)
    page.wait_for_selector("#session-kind[data-kind='main']", timeout=T)
    demo.stop()
    page.wait_for_selector("#status.warn", timeout=T)
    text = "remember this, kept-please"
    page.fill("#input", text)
    page.tap("#send")
    unsent = page.locator(".notice.unsent")
    unsent.wait_for(timeout=T)
    assert "Not sent" in unsent.inner_text() and "still in the box" in unsent.inner_text()
    assert page.input_value("#input") == text
    assert page.locator(f".msg.user:has-text('{text}')").count() == 0  # not shown as if it were sent
    demo.start()
    page.wait_for_selector("#status.ok", timeout=T)
    unsent.wait_for(state="detached", timeout=T)  # the history was loaded again
    assert page.input_value("#input") == text  # still there after the reconnect
    page.tap("#send")
    page.locator(f".msg.user:has-text('{text}') + .msg.assistant[data-done='done']").wait_for(timeout=T)
    assert page.input_value("#input") == ""  # acknowledged: gone from the box
    assert errors == []
    context.close()
