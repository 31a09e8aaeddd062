"""Living with the web app on a phone, in real Chromium (Playwright) against `hermit gateway run` with the scripted
model (hermit.testing.FakeProvider):

- Opening a session with photos twice sends each photo once: the history names them (chat.history `imageRefs`),
  the page brings each with chat.image and keeps it for the tab's life — counted over the page's own WebSocket.
- What was typed comes back after a reload, each session its own; a picked file, which a reload cannot keep,
  makes leaving the page ask first (beforeunload).
- The row of an agent nobody has talked to yet opens the main session the gateway names (hello-ok
  `mainSessions`), not one the page builds.
- A message whose turn waits for one of its agent's turn slots (`max_concurrent_turns`) says "waiting for a free
  turn…" until it starts (`session.changed`/chat.history `waiting`), not a silent "…".

The module's gateway and fake provider listen on ports the system gives.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import PHONE_SIZE, Demo, T, browser_fixture, open_page, served_demo  # noqa: F401 - browser_fixture: the `browser` fixture
from gatewayhelpers import GatewayProcess, free_port
from hermit.messages import AssistantMessage, ImagePart, TextPart, UserMessage
from hermit.sessions.store import SessionStore
from hermit.testing import FakeProvider
from test_webapp_browser_photos import png
from webapphelpers import CLI_KEY, build_demo_home

MAIN = "agent:main:main"
PHOTOS = [png(200, 150, seed) for seed in range(3)]  # ~90 KB each, noise: nothing compresses them
PHOTOS_B64 = [base64.b64encode(p).decode() for p in PHOTOS]
ALBUM, ALBUM_PHOTOS = "album", 40  # a long session of the owner's (a CLI name), a photo in each turn
ELSEWHERE = "agent:work:dm:owner-desk"  # what the rewritten hello names as the work agent's main session


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    def prepare(home: Path, base_url: str) -> None:
        build_demo_home(home, base_url)
        config = home / "hermit.yaml"
        config.write_text(config.read_text(encoding="utf-8").replace(
            "agents:\n", "agents:\n  list: [{id: main, default: true}, {id: work}]\n", 1), encoding="utf-8")
        store = SessionStore(home / "agents" / "main" / "sessions", cwd=home / "workspace", fsync=False)
        t = store.open_transcript(store.get_or_create(MAIN).record)
        for n, data in enumerate(PHOTOS_B64):
            t.append_message(UserMessage(f"holiday photo {n}", (ImagePart("image/png", data),)).to_dict())
            t.append_message(AssistantMessage((TextPart(f"A nice one, {n}."),), model="test-model",
                                              provider="fake").to_dict())

        album = store.open_transcript(store.get_or_create(ALBUM).record)
        for n in range(ALBUM_PHOTOS):
            words = "\n".join(f"line {k} about the day" for k in range(12))
            album.append_message(UserMessage(f"album photo {n}\n{words}", (ImagePart("image/png", album_photo(n)),)).to_dict())
            album.append_message(AssistantMessage((TextPart(f"Kept {n}."),), model="test-model", provider="fake").to_dict())

    with served_demo(tmp_path_factory.mktemp("edges") / "home", [], prepare) as served:
        yield served


def album_photo(n: int) -> str:
    return base64.b64encode(png(16, 12, 100 + n)).decode()


def wire(page: Any) -> list[str]:
    """Every frame the page's WebSocket receives, as it came (the bytes on the socket, unparsed)."""
    got: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: got.append(payload)))
    return got


def drawn(page: Any) -> None:
    """The main session's history is drawn with its three photos, each loaded (an <img> is put in when it is)."""
    page.wait_for_selector(".msg.user:has-text('holiday photo 2') .pics img", timeout=T)
    page.wait_for_function("() => document.querySelectorAll('.msg.user .pics img').length === 3", timeout=T)
    assert page.evaluate("() => [...document.querySelectorAll('.msg.user .pics img')].map((i) => i.naturalWidth)") \
        == [200, 200, 200]


def photo_bytes(frames: list[str]) -> int:
    """How many characters of the photos' base64 the frames carried (each photo counted each time it came)."""
    return sum(len(b64) * f.count(b64) for f in frames for b64 in PHOTOS_B64)


def test_opening_a_session_with_photos_twice_sends_each_photo_once(browser: Any, demo: Demo) -> None:
    context = browser.new_context(viewport={"width": PHONE_SIZE[0], "height": PHONE_SIZE[1]}, is_mobile=True,
                                  has_touch=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    frames = wire(page)
    page.goto(demo.url)
    page.wait_for_selector("#status.ok", timeout=T)
    drawn(page)
    first = list(frames)
    page.evaluate(f"window.HermitChat.open({{key: {json.dumps(CLI_KEY)}, agentId: 'main'}})")
    page.wait_for_selector(".msg.user:has-text('release notes')", timeout=T)
    at = len(frames)
    page.evaluate(f"window.HermitChat.open({{key: {json.dumps(MAIN)}, agentId: 'main'}})")
    drawn(page)
    second = frames[at:]
    sizes = (sum(map(len, first)), sum(map(len, second)))
    print(f"\nopening a session with {len(PHOTOS)} photos: first {sizes[0]:,} characters received, "
          f"second {sizes[1]:,}; photo base64 {photo_bytes(first):,} then {photo_bytes(second):,}")
    assert photo_bytes(first) == sum(map(len, PHOTOS_B64))  # each photo once
    assert photo_bytes(second) == 0 and sizes[1] < 10_000  # the second time: the names only
    # Each photo came in a chat.image answer of its own; the history itself named them.
    history = [json.loads(f) for f in first if '"messages"' in f]
    assert history and all(b64 not in json.dumps(history) for b64 in PHOTOS_B64)
    named = [i["sha256"] for m in history[-1]["payload"]["messages"] for i in m.get("images", [])]
    assert named == [hashlib.sha256(p).hexdigest() for p in PHOTOS]
    assert page.get_attribute(".msg.user:has-text('holiday photo 0') .pics img", "src") == \
        "data:image/png;base64," + PHOTOS_B64[0]  # under the page's CSP: data: images only
    assert errors == []
    context.close()


def test_a_long_sessions_photos_are_brought_as_they_come_into_view(browser: Any, demo: Demo) -> None:
    context = browser.new_context(viewport={"width": PHONE_SIZE[0], "height": PHONE_SIZE[1]}, is_mobile=True,
                                  has_touch=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    asked: list[str] = []  # the hashes of the chat.image requests the page sent
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: asked.extend(
        [json.loads(payload)["params"]["sha256"]] if '"chat.image"' in payload else [])))
    page.goto(demo.url)
    page.wait_for_selector("#status.ok", timeout=T)
    page.evaluate(f"window.HermitChat.open({{key: {json.dumps(ALBUM)}, agentId: 'main'}})")
    last = page.locator(f".msg.user:has-text('album photo {ALBUM_PHOTOS - 1}') .pics img")
    last.wait_for(timeout=T)  # the newest, at the bottom where the history opens: drawn
    first = page.locator(".msg.user:has-text('album photo 0') .pics")  # 0 is the start of no other number
    assert first.locator("img").count() == 0 and "loading photo" in first.inner_text()
    album = {hashlib.sha256(base64.b64decode(album_photo(n))).hexdigest() for n in range(ALBUM_PHOTOS)}
    near = [h for h in asked if h in album]
    assert 0 < len(near) < ALBUM_PHOTOS / 2, len(near)  # only those near the view
    page.evaluate("document.getElementById('messages').scrollTop = 0")
    first.locator("img").wait_for(timeout=T)
    assert first.locator("img").get_attribute("src") == "data:image/png;base64," + album_photo(0)
    later = [h for h in asked if h in album]
    print(f"\n{ALBUM_PHOTOS} photos in a session: {len(near)} brought on opening it, {len(later)} after scrolling to its top")
    assert len(later) == len(set(later)) < ALBUM_PHOTOS  # each once; the middle ones still not brought
    assert errors == []
    context.close()


def test_drafts_come_back_after_a_reload_each_sessions_own(browser: Any, demo: Demo) -> None:
    opened = open_page(browser, demo.url, *PHONE_SIZE, console_errors=True)
    page = opened.page
    drawn(page)
    page.fill("#input", "a caption for the beach one")
    page.evaluate(f"window.HermitChat.open({{key: {json.dumps(CLI_KEY)}, agentId: 'main'}})")
    page.wait_for_selector(".msg.user:has-text('release notes')", timeout=T)
    assert page.input_value("#input") == ""
    page.fill("#input", "add a section on upgrades")
    page.reload()
    page.wait_for_selector("#status.ok", timeout=T)
    page.wait_for_selector(".msg.user:has-text('release notes')", timeout=T)  # the tab's session, still open
    page.wait_for_function("() => document.getElementById('input').value === 'add a section on upgrades'", timeout=T)
    page.evaluate(f"window.HermitChat.open({{key: {json.dumps(MAIN)}, agentId: 'main'}})")
    drawn(page)
    assert page.input_value("#input") == "a caption for the beach one"
    # Kept in this tab's sessionStorage (as its token is), never in localStorage: gone with the tab.
    assert page.evaluate("() => Object.keys(localStorage).filter((k) => k.includes('draft'))") == []
    assert opened.errors == []
    opened.context.close()


def test_leaving_with_a_picked_file_asks_first(browser: Any, demo: Demo) -> None:
    opened = open_page(browser, demo.url, *PHONE_SIZE, console_errors=True)
    page = opened.page
    drawn(page)
    asked: list[str] = []

    def dialog(d: Any) -> None:
        asked.append(d.type)
        d.dismiss()  # "stay on the page"

    page.on("dialog", dialog)
    page.tap("#input")  # a page the owner has touched (Chromium asks only then)
    with page.expect_event("close", timeout=T):
        page.close(run_before_unload=True)  # nothing picked: it just goes
    assert asked == []

    page = opened.context.new_page()
    page.on("dialog", dialog)
    page.goto(demo.url)
    page.wait_for_selector("#status.ok", timeout=T)
    page.set_input_files("#attach-input", [{"name": "IMG_7.png", "mimeType": "image/png", "buffer": png(30, 20, 7)}])
    page.wait_for_selector("#attachments .attachment.image img", timeout=T)
    page.tap("#input")
    with page.expect_event("dialog", timeout=T):
        page.close(run_before_unload=True)
    assert page.evaluate("() => document.title") and not page.is_closed()  # dismissed: the page stays
    assert asked == ["beforeunload"]
    assert page.locator("#attachments .attachment").count() == 1  # stayed: the file is still there
    page.tap(".attachment-remove")
    page.wait_for_selector("#attachments", state="hidden", timeout=T)
    with page.expect_event("close", timeout=T):
        page.close(run_before_unload=True)
    assert asked == ["beforeunload"]
    assert opened.errors == []
    opened.context.close()


def test_an_unstarted_agents_row_opens_the_main_session_the_gateway_names(browser: Any, demo: Demo) -> None:
    """The gateway's hello is rewritten on its way to the page to name another main session for `work` (a key
    scheme the page does not know): the page uses it as it is."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    hellos: list[dict[str, Any]] = []

    def route(ws: Any) -> None:
        server = ws.connect_to_server()

        def to_page(message: str | bytes) -> None:
            f = json.loads(message)
            if f.get("type") == "res" and f.get("id") == "connect" and f.get("ok"):
                hellos.append(dict(f["payload"]))
                f["payload"]["mainSessions"] = {**f["payload"].get("mainSessions", {}), "work": ELSEWHERE}
                message = json.dumps(f)
            ws.send(message)

        server.on_message(to_page)

    page.route_web_socket(re.compile(r"/ws$"), route)
    page.goto(demo.url)
    page.wait_for_selector("#status.ok", timeout=T)
    assert hellos[0]["mainSessions"] == {"main": MAIN, "work": "agent:work:main"}  # what the gateway says
    row = page.locator("#sessions li[data-agent='work']")
    row.wait_for(timeout=T)
    assert row.get_attribute("data-key") == ELSEWHERE
    row.click()
    page.wait_for_function(f"() => (window.HermitChat.current() || {{}}).key === {json.dumps(ELSEWHERE)}", timeout=T)
    page.wait_for_selector("#session-title:has-text('owner-desk')", timeout=T)
    context.close()


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Demo, FakeProvider]]:
    """A gateway whose agent runs one turn at a time (max_concurrent_turns: 1), and its model, to hold."""
    steps = [{"match": {"contains": "long-task"}, "text": "The long task is done."},
             {"match": {"contains": "quick-question"}, "text": "A quick answer."}]
    home = tmp_path_factory.mktemp("slots") / "home"
    with FakeProvider(steps) as fake:
        build_demo_home(home, fake.openai_base_url)
        config = home / "hermit.yaml"
        config.write_text(config.read_text(encoding="utf-8").replace(
            "    heartbeat:", "    max_concurrent_turns: 1\n    heartbeat:", 1), encoding="utf-8")
        port = free_port()
        gw = GatewayProcess(home, "--port", str(port))
        demo = Demo(home, gw, port, gw.wait_ready())
        try:
            yield demo, fake
        finally:
            demo.gw.stop()


def test_a_turn_waiting_for_a_slot_says_so_until_it_starts(browser: Any, one_slot: tuple[Demo, FakeProvider]) -> None:
    demo, fake = one_slot
    other = open_page(browser, demo.url, console_errors=True)  # a tab on another session of the owner's
    other.page.evaluate(f"window.HermitChat.open({{key: {json.dumps(CLI_KEY)}, agentId: 'main'}})")
    other.page.wait_for_selector(".msg.user:has-text('release notes')", timeout=T)
    phone = open_page(browser, demo.url, *PHONE_SIZE, console_errors=True)
    page = phone.page
    page.wait_for_selector("#session-kind[data-kind='main']", timeout=T)
    fake.hold()
    try:
        other.page.fill("#input", "long-task: summarise the quarter")
        other.page.press("#input", "Enter")
        assert fake.waiting.wait(T / 1000)  # the agent's one slot is taken: its model call is in flight
        page.fill("#input", "quick-question: what time is it?")
        page.tap("#send")
        note = page.locator(".msg.user:has-text('quick-question') + .msg.assistant.typing .wait-note")
        note.wait_for(timeout=T)
        assert "waiting for a free turn" in note.inner_text()
        # The other tab's turn runs: its bubble is a reply being written, not one waiting.
        assert other.page.locator(".msg.assistant.waiting").count() == 0
    finally:
        fake.release()
    reply = page.locator(".msg.user:has-text('quick-question') + .msg.assistant[data-done='done']")
    reply.wait_for(timeout=T)
    assert "A quick answer." in reply.inner_text()
    assert page.locator(".wait-note").count() == 0 and page.locator(".msg.waiting").count() == 0
    other.page.locator(".msg.user:has-text('long-task') + .msg.assistant[data-done='done']").wait_for(timeout=T)
    assert phone.errors == [] and other.errors == []
    phone.context.close()
    other.context.close()
