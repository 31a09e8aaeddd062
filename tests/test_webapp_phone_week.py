"""A week with the web app on a phone, in real Chromium (Playwright) against `hermit gateway run` with the scripted
model (hermit.testing.FakeProvider), on the demo memory (English, 中文, a long note) and a session with photos:

- Every control a thumb taps is at least 44×44 CSS px and nothing is wider than the screen — upright at 390×844
  and 360×640, sideways at 844×390 — in the chat, the drawer, the memory list, a long note, the editor and
  Operations.
- An ended session sideways keeps room to read it (its note a line, no idle box).
- At 200 % text (the page 195 px wide), the header's pill keeps its word whole and the message box stays a box.
- A search result says where it is from in words (the daily log's date) and shows the line that matched, marked,
  even below the passage's first lines; opening it scrolls to that line.
- Dark mode (the phone's setting) draws the page dark with readable text (contrast ≥ 4.5:1).
- The tab's photo cache is bounded in bytes (least recently drawn out first); a photo dropped is brought again.
- A used or expired link opened on a phone says where a phone gets a new one, not only `hermit dashboard`.
- A streamed reply is aria-busy until it is whole (the conversation is a role=log).
- Operations' refresh every 4 s, and the session list's after a turn, leave the focus where it was (a keyboard's,
  a screen reader's).
- The drawer takes the focus when it opens and leaves the page behind inert; turning the screen to where there
  is no drawer gives the page back.
- An edit of MEMORY.md in progress survives losing the gateway and coming back, and saves then; offline, a
  search and an append say what to do (wait for the reconnect) and keep what was typed; a search from an open
  note on a phone shows its results.

The module's gateway and fake provider listen on ports the system gives.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import PHONE_SIZE, Demo, T, browser_fixture, open_page, served_demo  # noqa: F401 - browser_fixture: the `browser` fixture
from hermit.messages import AssistantMessage, ImagePart, TextPart, UserMessage
from hermit.sessions.store import SessionStore
from test_webapp_browser_photos import png
from webapphelpers import CLI_KEY, build_demo_home

PHOTOS_KEY = "photos"  # a session of the owner's (a CLI name) with four photos
PHOTOS = [base64.b64encode(png(120, 90, 40 + n)).decode() for n in range(4)]  # ~43 KB of base64 each
LONG_NOTE = "memory/lisbon-trip-notes-with-a-rather-long-file-name.md"

# Every control that is drawn (not the drawer's while it is closed): its size, and whether it is off the screen.
AUDIT = """() => {
  const W = innerWidth, small = [], off = [];
  const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + ' ' +
    (e.getAttribute('aria-label') || e.textContent || '').trim().slice(0, 30);
  for (const e of document.querySelectorAll('button, input, select, textarea, a[href], [role=button], summary, label.check')) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || getComputedStyle(e).visibility === 'hidden') continue;
    if (e.tagName === 'INPUT' && e.closest('label.check')) continue;  // its label is what is tapped
    if (r.height < 44 || r.width < 44) small.push(name(e) + ' ' + Math.round(r.width) + 'x' + Math.round(r.height));
    if (r.right > W + 1 || r.left < -1) off.push(name(e));
  }
  return {small, off, scrollWidth: document.documentElement.scrollWidth, width: W};
}"""

# WCAG's contrast ratio of an element's text colour to the first opaque background behind it.
CONTRAST = """(sel) => {
  const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= .03928 ? v / 12.92 : ((v + .055) / 1.055) ** 2.4; };
                               return .2126 * f(r) + .7152 * f(g) + .0722 * f(b); };
  const e = document.querySelector(sel);
  let bg = null;
  for (let n = e; n && !bg; n = n.parentElement) {
    const c = rgb(getComputedStyle(n).backgroundColor);
    if (c.length < 4 || c[3] > .9) if (!(c.length === 4 && c[3] === 0)) bg = c;
  }
  bg = bg || [255, 255, 255];
  const a = lum(rgb(getComputedStyle(e).color)), b = lum(bg);
  return {ratio: (Math.max(a, b) + .05) / (Math.min(a, b) + .05), background: lum(bg)};
}"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    def prepare(home: Path, base_url: str) -> None:
        build_demo_home(home, base_url)
        ws = home / "workspace"
        (ws / LONG_NOTE).write_text("# Lisbon\n\n" + "\n".join(
            f"- day {n}: https://example.com/a/very/long/address/that/has/no/spaces/{n}/" + "x" * 60 for n in range(60)),
            encoding="utf-8")
        store = SessionStore(home / "agents" / "main" / "sessions", cwd=ws, fsync=False)
        t = store.open_transcript(store.get_or_create(PHOTOS_KEY).record)
        for n, data in enumerate(PHOTOS):
            t.append_message(UserMessage(f"photo {n}", (ImagePart("image/png", data),)).to_dict())
            t.append_message(AssistantMessage((TextPart(f"Seen {n}."),), model="test-model", provider="fake").to_dict())

    steps = [{"match": {"contains": "slow-reply"}, "delay": 1.5, "text": "A whole **reply**, read once."}]
    with served_demo(tmp_path_factory.mktemp("week") / "home", steps, prepare) as served:
        yield served


def phone(browser: Any, demo: Demo, width: int, height: int) -> Any:
    """A page signed in on a touch screen of that size (upright or sideways)."""
    context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=True, has_touch=True)
    return open_page(browser, demo.url, context=context)


def open_drawer(page: Any) -> None:
    page.tap("#menu")
    page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().left >= 0", timeout=T)


def nav(page: Any, view: str) -> None:
    """A view, through the drawer when there is one."""
    if page.is_visible("#menu"):
        open_drawer(page)
        page.tap(f".tab[data-view='{view}']")
        page.wait_for_selector("#sidebar", state="hidden", timeout=T)
    else:
        page.click(f".tab[data-view='{view}']")


def audit(page: Any, where: str, found: dict[str, Any]) -> None:
    got = page.evaluate(AUDIT)
    if got["small"] or got["off"] or got["scrollWidth"] > got["width"]:
        found[where] = got


@pytest.mark.parametrize("size", [PHONE_SIZE, (360, 640), (844, 390)], ids=["390x844", "360x640", "844x390"])
def test_every_control_is_a_thumbs_size_and_nothing_is_wider_than_the_screen(browser: Any, demo: Demo,
                                                                              size: tuple[int, int]) -> None:
    opened = phone(browser, demo, *size)
    page, found = opened.page, {}
    page.wait_for_selector("#messages .notice, #messages .msg", timeout=T)
    audit(page, "chat", found)
    page.set_input_files("#attach-input", {"name": "receipt.png", "mimeType": "image/png", "buffer": png(60, 40, 1)})
    page.wait_for_selector(".attachment img", timeout=T)
    audit(page, "a photo to send", found)  # its × too
    page.tap(".attachment-remove")
    open_drawer(page)
    audit(page, "drawer", found)
    page.keyboard.press("Escape")
    page.wait_for_selector("#sidebar", state="hidden", timeout=T)
    nav(page, "memory")
    page.wait_for_selector(f"#memory-files li[data-path='{LONG_NOTE}']", timeout=T)
    audit(page, "memory", found)
    page.tap(f"#memory-files li[data-path='{LONG_NOTE}']")
    page.wait_for_selector("#memory-lines .line", timeout=T)
    audit(page, "long note", found)
    page.tap("#memory-back")
    page.tap("#memory-files li[data-path='MEMORY.md']")
    page.wait_for_selector("#memory-edit", state="visible", timeout=T)
    page.tap("#memory-edit")
    page.wait_for_selector("#memory-editor", state="visible", timeout=T)
    audit(page, "editor", found)
    page.tap("#memory-cancel")
    nav(page, "ops")
    page.wait_for_selector(".job .run-now", timeout=T)
    page.wait_for_selector(".pair .approve", timeout=T)
    page.tap("#view-ops details > summary")
    audit(page, "operations", found)
    assert found == {}
    assert opened.errors == []
    opened.context.close()


def test_an_ended_session_sideways_leaves_the_conversation_room(browser: Any, demo: Demo) -> None:
    opened = phone(browser, demo, 844, 390)  # a phone sideways
    page = opened.page
    page.evaluate(f"window.HermitChat.open({{key: '{CLI_KEY}', agentId: 'main'}})")
    page.wait_for_selector("#messages .msg.assistant", timeout=T)
    page.fill("#input", "/new")
    page.tap("#send")
    page.wait_for_function("() => !document.querySelector('#messages .msg')", timeout=T)  # the new, empty session
    open_drawer(page)
    ended = f"li.ended[data-ended-key='{CLI_KEY}']"
    page.locator("li.earlier").filter(has=page.locator(ended)).locator(".earlier-toggle").tap()
    page.tap(ended)
    page.wait_for_selector("body.ended-session #messages .msg.assistant", timeout=T)
    room = page.evaluate("document.getElementById('messages').getBoundingClientRect().height")
    assert room >= 200, room  # was 93 px of 390 under the ended note and an idle, disabled box
    assert page.is_visible("#open-current") and page.is_hidden("#composer")
    page.set_viewport_size({"width": 390, "height": 844})  # upright again: the note says it all, the box is there
    assert page.is_visible(".ended-why") and page.is_visible("#composer")
    assert opened.errors == []
    opened.context.close()


def test_at_200_percent_text_the_pill_keeps_its_word_and_the_box_stays_a_box(browser: Any, demo: Demo) -> None:
    width, height = PHONE_SIZE[0] // 2, PHONE_SIZE[1] // 2  # a 390 px phone at 200 %: 195 CSS px
    opened = open_page(browser, demo.url, width, height)
    page = opened.page
    one_line = page.evaluate("""() => { const s = document.getElementById('status');
        return s.getClientRects().length === 1 && s.getBoundingClientRect().height < 2 * parseFloat(getComputedStyle(s).lineHeight || 18); }""")
    pill = page.locator("#status").bounding_box()
    assert one_line and pill["height"] < 30, pill  # "connected", not "connecte" over "d"
    box = page.locator("#input").bounding_box()
    assert box["width"] >= 150, box  # the box a line wide, not a column of three letters
    for selector in ("#input", "#send", "#attach", "#status"):
        r = page.locator(selector).bounding_box()
        assert r["x"] >= 0 and r["x"] + r["width"] <= width, (selector, r)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert opened.errors == []
    opened.context.close()


def test_a_search_result_says_where_it_is_from_and_shows_the_line_that_matched(browser: Any, demo: Demo) -> None:
    opened = open_page(browser, demo.url, *PHONE_SIZE)
    page = opened.page
    nav(page, "memory")
    page.fill("#memory-query", "钢琴")  # the piano lesson: the last line of the 21 November log's passage
    page.tap("#memory-search button")
    result = page.locator(".result[data-path='memory/2026-11-21.md']")
    result.wait_for(timeout=T)
    where = result.locator(".r-where").inner_text()
    assert where.startswith("daily log of ") and "21" in where and "2026" in where and "lines 1–" in where, where
    mark = result.locator(".snippet mark").first
    assert mark.inner_text() == "钢琴"
    snippet, hit = result.locator(".snippet").bounding_box(), mark.bounding_box()
    assert hit["y"] >= snippet["y"] and hit["y"] + hit["height"] <= snippet["y"] + snippet["height"], (hit, snippet)
    result.tap()  # opened at the line that matched
    line = page.locator("#memory-lines .line.term")
    line.wait_for(timeout=T)
    assert "钢琴" in line.inner_text()
    box = line.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE_SIZE[1], box
    assert opened.errors == []
    opened.context.close()


def test_dark_mode_draws_the_page_dark_with_readable_text(browser: Any, demo: Demo) -> None:
    opened = open_page(browser, demo.url, *PHONE_SIZE)
    page = opened.page
    page.emulate_media(color_scheme="dark")
    page.evaluate(f"window.HermitChat.open({{key: '{PHOTOS_KEY}', agentId: 'main'}})")
    page.wait_for_selector(".msg.assistant", timeout=T)
    assert page.evaluate(CONTRAST, "#messages")["background"] < 0.05  # the ground is dark
    for selector in ("#view-title", "#session-title", ".msg.assistant .body", ".msg.user .body", "#input", "#send",
                     "#status"):
        got = page.evaluate(CONTRAST, selector)
        assert got["ratio"] >= 4.5 and (selector in (".msg.user .body", "#send") or got["background"] < 0.1), (selector, got)
    nav(page, "memory")
    page.wait_for_selector("#memory-files li[data-path='MEMORY.md']", timeout=T)
    for selector in ("#memory-query", "#memory-files .f-name", "#memory-files .f-meta", "#memory-list .card-title"):
        got = page.evaluate(CONTRAST, selector)
        assert got["ratio"] >= 4.5 and got["background"] < 0.1, (selector, got)
    page.tap("#memory-files li[data-path='MEMORY.md']")
    page.wait_for_selector("#memory-lines .line", timeout=T)
    got = page.evaluate(CONTRAST, "#memory-lines .line .tx")
    assert got["ratio"] >= 4.5 and got["background"] < 0.1, got
    nav(page, "ops")
    page.wait_for_selector(".job .j-line", timeout=T)
    for selector in (".job .j-line", ".job .run-now", ".card-title"):
        got = page.evaluate(CONTRAST, selector)
        assert got["ratio"] >= 4.5 and got["background"] < 0.1, (selector, got)
    assert opened.errors == []
    opened.context.close()


def test_the_tabs_photo_cache_is_bounded_and_a_dropped_photo_comes_again(browser: Any, demo: Demo) -> None:
    cap = 100_000  # room for two of the four photos' data: URLs (~43 KB each)
    context = browser.new_context(viewport={"width": PHONE_SIZE[0], "height": PHONE_SIZE[1]}, is_mobile=True,
                                  has_touch=True)
    context.add_init_script(f"localStorage.setItem('hermit.photoCacheBytes', '{cap}')")
    opened = open_page(browser, demo.url, context=context, frames=True)
    page = opened.page
    asked = lambda: [f for f in opened.frames if f.get("type") == "res" and "sha256" in (f.get("payload") or {})]  # noqa: E731

    def open_photos() -> None:
        page.evaluate(f"window.HermitChat.open({{key: '{PHOTOS_KEY}', agentId: 'main'}})")
        page.wait_for_function("() => document.querySelectorAll('#messages .pics img').length === 4 && "
                               "[...document.querySelectorAll('#messages .pics img')].every((i) => i.complete && i.naturalWidth > 0)",
                               timeout=T)

    open_photos()
    first = len(asked())
    assert first == 4
    cache = page.evaluate("window.HermitChat.photoCache()")
    assert cache["cap"] == cap and cache["bytes"] <= cap and cache["count"] == 2, cache
    page.evaluate("window.HermitChat.open({key: 'agent:main:main', agentId: 'main'})")
    page.wait_for_function("() => !document.querySelector('#messages .pics')", timeout=T)
    open_photos()  # the two dropped are brought again, the two kept are not
    assert len(asked()) - first == 2
    cache = page.evaluate("window.HermitChat.photoCache()")
    assert cache["bytes"] <= cap and cache["count"] == 2, cache
    assert opened.errors == []
    context.close()


def test_a_used_link_tells_a_phone_where_to_get_a_new_one(browser: Any, demo: Demo) -> None:
    base = demo.url.split("?", 1)[0].rstrip("/")
    opened = open_page(browser, f"{base}/#ticket={secrets.token_urlsafe(24)}", *PHONE_SIZE, signed_in=False)
    page = opened.page
    page.wait_for_selector("#status.bad", timeout=T)
    page.wait_for_function("() => /already used or expired/.test(document.getElementById('signin').textContent)",
                           timeout=T)
    say = page.inner_text("#signin")
    assert "Sign in a phone" in say and "hermit dashboard --phone" in say and "hermit dashboard` again" in say, say
    assert page.is_visible("#signin")
    fresh = open_page(browser, f"{base}/", *PHONE_SIZE, signed_in=False)  # the plain address on a phone
    fresh.page.wait_for_selector("#status.bad", timeout=T)
    say = fresh.page.inner_text("#signin")
    assert "Sign in a phone" in say and "hermit dashboard" in say, say
    opened.context.close()
    fresh.context.close()


def test_the_drawer_takes_the_focus_and_gives_the_page_back(browser: Any, demo: Demo) -> None:
    opened = open_page(browser, demo.url, *PHONE_SIZE)
    page = opened.page
    open_drawer(page)
    assert page.evaluate("document.activeElement.matches('#sidebar .tab.active')")
    assert page.evaluate("document.querySelector('main').inert")  # a screen reader's swipes stay in the drawer
    page.keyboard.press("Escape")
    page.wait_for_selector("#sidebar", state="hidden", timeout=T)
    assert page.evaluate("document.activeElement.id") == "menu"
    assert not page.evaluate("document.querySelector('main').inert")
    open_drawer(page)
    page.set_viewport_size({"width": 1024, "height": 768})  # a tablet turned: no drawer there
    page.wait_for_function("() => !document.querySelector('main').inert", timeout=T)
    page.fill("#input", "typed after turning")  # the page is usable
    assert page.input_value("#input") == "typed after turning"
    page.fill("#input", "")
    assert opened.errors == []
    opened.context.close()


def test_a_screen_reader_hears_a_reply_once_it_is_whole(browser: Any, demo: Demo) -> None:
    opened = phone(browser, demo, *PHONE_SIZE)
    page = opened.page
    assert page.get_attribute("#messages", "role") == "log"
    page.fill("#input", "slow-reply please")
    page.tap("#send")
    page.wait_for_selector(".msg.assistant.typing .body[aria-busy='true']", state="attached", timeout=T)  # redrawn while it comes
    reply = page.locator(".msg.assistant", has_text="A whole reply, read once.")
    reply.wait_for(timeout=T)
    page.wait_for_function("() => !document.querySelector('#messages [aria-busy]')", timeout=T)
    assert reply.locator("strong").inner_text() == "reply"
    assert opened.errors == []
    opened.context.close()


def test_a_refresh_leaves_the_focus_where_it_was(browser: Any, demo: Demo) -> None:
    opened = phone(browser, demo, *PHONE_SIZE)
    page = opened.page
    nav(page, "ops")
    for button in (".job .run-now", ".pair .approve", ".job .show-runs"):
        page.wait_for_selector(button, timeout=T)
        page.focus(button)
        if button.endswith("show-runs"):
            page.keyboard.press("Enter")  # the list redrawn with the runs unfolded: the button keeps the focus
            page.wait_for_selector(".job .show-runs >> text=Hide runs", timeout=T)
        page.evaluate("window.HermitOps.refresh()")  # what the view does every 4 s
        assert page.evaluate(f"document.activeElement.matches('{button}')"), (button, page.evaluate(
            "document.activeElement.outerHTML.slice(0, 80)"))
    open_drawer(page)  # the session list, redrawn after every turn, the same way
    row = f"#sessions li[data-key='{PHOTOS_KEY}']"
    page.focus(row)
    page.evaluate("window.HermitSessions.refresh()")
    assert page.evaluate(f"document.activeElement.matches(\"{row}\")")
    assert opened.errors == []
    opened.context.close()


def test_an_edit_in_progress_survives_losing_the_gateway(browser: Any, demo: Demo) -> None:
    opened = open_page(browser, demo.url, *PHONE_SIZE)
    page = opened.page
    nav(page, "memory")
    page.fill("#memory-append-text", "a note from the tunnel")
    page.tap("#memory-files li[data-path='MEMORY.md']")
    page.tap("#memory-edit")
    page.wait_for_selector("#memory-editor", state="visible", timeout=T)
    page.tap("#memory-editor")
    page.keyboard.press("Control+End")
    page.keyboard.type("- written on the train\n")
    text = page.input_value("#memory-editor")
    save, cancel = page.locator("#memory-save").bounding_box(), page.locator("#memory-cancel").bounding_box()
    assert save["y"] == cancel["y"] and save["x"] < cancel["x"], (save, cancel)  # side by side, not a row each
    demo.stop()  # the train goes into a tunnel
    page.wait_for_selector("#status.warn", timeout=T)
    page.tap("#memory-save")
    page.wait_for_selector("#memory-file-note.bad", timeout=T)
    assert "not connected" in page.inner_text("#memory-file-note") and "reconnect" in page.inner_text("#memory-file-note")
    assert page.input_value("#memory-editor") == text
    demo.start()
    page.wait_for_selector("#status.ok", timeout=T)
    assert page.is_visible("#memory-editor") and page.input_value("#memory-editor") == text
    page.tap("#memory-save")
    page.wait_for_selector("#memory-file-note.ok >> text=Saved", timeout=T)
    assert "- written on the train" in (demo.home / "workspace" / "MEMORY.md").read_text(encoding="utf-8")

    page.fill("#memory-query", "train")  # a search from the open note: its results, not a hidden list
    page.tap("#memory-search button")
    page.wait_for_selector(".result[data-path='MEMORY.md']", state="visible", timeout=T)
    assert page.is_hidden("#memory-file")

    demo.stop()  # offline again: what failed says what to do, and what was typed stays
    page.wait_for_selector("#status.warn", timeout=T)
    page.tap("#memory-append button[type='submit']")
    page.wait_for_selector("#memory-append-note.bad", timeout=T)
    said = page.inner_text("#memory-append-note")
    assert "not connected" in said and "reconnect" in said and "kept" in said, said
    assert page.input_value("#memory-append-text") == "a note from the tunnel"
    page.tap("#memory-search button")
    page.wait_for_selector("#memory-search-note.bad", timeout=T)
    assert "reconnect" in page.inner_text("#memory-search-note")
    demo.start()
    page.wait_for_selector("#status.ok", timeout=T)
    assert [e for e in opened.errors if "ERR_CONNECTION_REFUSED" not in e] == []
    opened.context.close()
