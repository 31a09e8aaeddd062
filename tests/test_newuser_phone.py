"""A new user's first day with the web app on a phone, upright and held sideways, and on a tablet, in real
Chromium against `hermit gateway run` (what the H5 audit found): sideways, the sidebar is a drawer as upright,
and a note opened in the memory view gets the width (beside the sidebar and the file list it was a column of
a few letters on a phone sideways, and of none on a tablet; a memory view under 900 px shows the list or the note); a phone's fields are set in 16 px text, below which iOS zooms the page
in when one is tapped; and with two agents, the one nobody has talked to yet is in the session list.

One gateway and one browser serve the module; each test has its own context.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import PHONE_SIZE, Demo, T, browser_fixture, open_page, served_demo  # noqa: F401 - browser_fixture: the `browser` fixture
from gatewayhelpers import PROC_TIMEOUT
from webapphelpers import build_demo_home

STEPS: list[dict[str, Any]] = [
    {"match": {"contains": "hello-second-agent"}, "repeat": True, "text": "Hello from the family agent."},
]
SIDEWAYS = (844, 390)  # an iPhone 12-15 held sideways
TABLET = (768, 1024)   # an iPad mini upright


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    def prepare(home: Path, base_url: str) -> None:
        build_demo_home(home, base_url)
        subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "agents", "add", "family"],
                       check=True, capture_output=True, timeout=PROC_TIMEOUT)

    with served_demo(tmp_path_factory.mktemp("newuser") / "home", STEPS, prepare) as served:
        yield served


def touch_page(browser: Any, demo: Demo, width: int, height: int) -> tuple[Any, Any, list[str]]:
    """A page on a touch screen of any size (open_page makes only a narrow one a phone)."""
    context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=True, has_touch=True)
    opened = open_page(browser, demo.url, width, height, context=context)
    return context, opened.page, opened.errors


def width(page: Any, selector: str) -> float:
    return float(page.locator(selector).bounding_box()["width"])


def drawer_to(page: Any, view: str) -> None:
    page.tap("#menu")
    page.wait_for_selector("#sidebar", state="visible", timeout=T)
    page.tap(f".tab[data-view='{view}']")
    page.wait_for_selector("#sidebar", state="hidden", timeout=T)


def open_memory_md(page: Any) -> None:
    page.wait_for_selector("#memory-files li[data-path='MEMORY.md']", timeout=T)
    page.tap("#memory-files li[data-path='MEMORY.md']")
    page.wait_for_selector("#memory-edit", state="visible", timeout=T)


def test_a_phone_held_sideways_gets_the_drawer_and_a_note_the_width(browser: Any, demo: Demo) -> None:
    context, page, errors = touch_page(browser, demo, *SIDEWAYS)
    assert page.is_visible("#menu") and page.is_hidden("#sidebar")  # the chat has the width, not a third of it
    assert width(page, "#messages") >= 800
    drawer_to(page, "memory")
    open_memory_md(page)
    assert page.is_hidden("#memory-list")  # the list or the note, not both
    assert width(page, "#memory-lines") >= 780, width(page, "#memory-lines")  # was 146 px beside the sidebar
    back = page.locator("#memory-back").bounding_box()
    assert back["width"] >= 40 and back["height"] >= 40, back
    page.tap("#memory-edit")
    page.wait_for_selector("#memory-editor", state="visible", timeout=T)
    assert width(page, "#memory-editor") >= 780
    page.tap("#memory-cancel")
    page.tap("#memory-back")
    page.wait_for_selector("#memory-files li[data-path='MEMORY.md']", state="visible", timeout=T)
    assert page.is_hidden("#memory-file")
    assert page.evaluate("document.documentElement.scrollWidth") <= SIDEWAYS[0]
    assert errors == []
    context.close()


def test_a_tablet_shows_a_note_at_a_readable_width_and_a_desktop_keeps_two_panes(browser: Any, demo: Demo) -> None:
    context, page, errors = touch_page(browser, demo, *TABLET)
    assert page.is_hidden("#menu")  # wide enough for the sidebar beside the page
    page.tap(".tab[data-view='memory']")
    open_memory_md(page)
    assert page.is_hidden("#memory-list")
    assert width(page, "#memory-lines") >= 400, width(page, "#memory-lines")
    page.tap("#memory-back")
    page.wait_for_selector("#memory-files li[data-path='MEMORY.md']", state="visible", timeout=T)
    assert errors == []
    context.close()

    opened = open_page(browser, demo.url)  # a desktop: the list and the note side by side, no ←
    page = opened.page
    page.click(".tab[data-view='memory']")
    page.wait_for_selector("#memory-files li[data-path='MEMORY.md']", timeout=T)
    page.click("#memory-files li[data-path='MEMORY.md']")
    page.wait_for_selector("#memory-edit", state="visible", timeout=T)
    assert page.is_visible("#memory-list") and page.is_hidden("#memory-back")
    assert width(page, "#memory-lines") >= 400
    assert opened.errors == []
    opened.context.close()


SMALL_FIELDS = """() => [...document.querySelectorAll('input, select, textarea')]
    .filter((f) => f.offsetParent !== null && f.type !== 'checkbox')
    .map((f) => [f.id, parseFloat(getComputedStyle(f).fontSize)]).filter(([, size]) => size < 16)"""


def test_a_phones_fields_are_16px_so_ios_does_not_zoom_in_on_a_tap(browser: Any, demo: Demo) -> None:
    opened = open_page(browser, demo.url, *PHONE_SIZE)
    page = opened.page
    assert page.is_visible("#input") and page.evaluate(SMALL_FIELDS) == []
    drawer_to(page, "memory")
    page.wait_for_selector("#memory-agent", state="visible", timeout=T)  # two agents: the picker shows
    assert page.evaluate(SMALL_FIELDS) == []
    open_memory_md(page)
    page.tap("#memory-edit")
    page.wait_for_selector("#memory-editor", state="visible", timeout=T)
    assert page.evaluate(SMALL_FIELDS) == []
    page.tap("#memory-cancel")
    drawer_to(page, "ops")
    page.tap("#view-ops details > summary")
    page.wait_for_selector("#job-message", state="visible", timeout=T)
    assert page.evaluate(SMALL_FIELDS) == []
    assert opened.errors == []
    opened.context.close()


def test_an_agent_nobody_has_talked_to_is_in_the_session_list(browser: Any, demo: Demo) -> None:
    opened = open_page(browser, demo.url, *PHONE_SIZE)
    page = opened.page
    page.tap("#menu")
    row = page.locator("#sessions li[data-agent='family'][data-key='agent:family:main']")
    row.wait_for(timeout=T)
    assert "Main session (family)" in row.inner_text() and "no messages yet" in row.inner_text()
    row.tap()
    page.wait_for_selector("#sidebar", state="hidden", timeout=T)
    page.wait_for_function("() => document.getElementById('session-title').textContent === 'Main session (family)'",
                           timeout=T)
    page.fill("#input", "hello-second-agent")
    page.tap("#send")
    page.locator(".msg.user:has-text('hello-second-agent') + .msg.assistant[data-done='done']").wait_for(timeout=T)
    assert "family agent" in page.locator(".msg.assistant").last.inner_text()
    page.tap("#menu")
    page.wait_for_function("""() => { const li = document.querySelector(
        "#sessions li[data-agent='family'][data-key='agent:family:main']");
        return li && !li.textContent.includes('no messages yet'); }""", timeout=T)  # started: a session like any
    assert page.locator("#sessions li[data-agent='family'][data-key='agent:family:main']").count() == 1
    assert opened.errors == []
    opened.context.close()


def test_with_the_keyboard_up_save_stays_in_sight_and_the_chat_keeps_room(browser: Any, demo: Demo) -> None:
    """A keyboard that resizes the page (Firefox on Android does): upright, the page is 420 px high, and the
    note's Save (at the head of the file) scrolled away with the note; sideways, 180 px, and the conversation
    had 24-36 px between the header, the session bar and the composer."""
    context, page, errors = touch_page(browser, demo, 390, 420)
    drawer_to(page, "memory")
    open_memory_md(page)
    page.tap("#memory-edit")
    page.wait_for_selector("#memory-editor", state="visible", timeout=T)
    page.evaluate("document.querySelector('.memory-panes').scrollTop = 1e6")  # typing at the end of the note
    save = page.locator("#memory-save").bounding_box()
    assert save["y"] >= 0 and save["y"] + save["height"] <= 420, save
    page.tap("#memory-save")  # reachable: the tap lands on it
    page.wait_for_selector("#memory-edit", state="visible", timeout=T)
    assert errors == []
    context.close()

    context, page, errors = touch_page(browser, demo, 844, 180)
    assert page.locator("#messages").bounding_box()["height"] >= 70
    assert page.is_visible("#send") and page.is_visible("#menu")
    assert errors == []
    context.close()
