"""The owner's own photo after a reload when the owner's DM works in a room: with `dm_scope: per-channel-peer` the
owner's Telegram DM is a session of its own (not main), sandboxed under `sandbox.mode: non-main`, so the files sent
to it are filed in that session's room inbox (messages.FiledFile place "room"), not the workspace's. With a model
that reads text only the transcript records such a photo only as filed there; `chat.history {imageRefs}` names it
and `chat.image` brings it from that session's own room inbox — only for an owner's session, only while that inbox
still holds the very bytes filed (a room's sandboxed commands may change it), never through a link. A contact's
room file stays unserved, and a file recorded as a room's in a session that has no room (main) is not looked for.
In process through the real gateway and its WebSocket (the scripted model), and in real Chromium against
`hermit gateway run`."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from browserdemo import T, browser_fixture, open_page  # noqa: F401 - browser_fixture: the `browser` fixture
from fakes.fake_telegram import FakeTelegram
from gatewayhelpers import GatewayProcess, free_port
from hermit.config.envfile import set_env_values
from hermit.messages import AssistantMessage, FiledFile, TextPart, UserMessage
from hermit.sessions.store import SessionStore
from hermit.testing import FakeProvider
from hermit.tools.rooms import room_audience, room_slug
from test_firstday_telegram import _cancel_left as cancel_left
from test_webapp_browser_photos import png as real_png
from test_webapp_uploads import upload
from webappclient import PHOTO_CONFIG, Clock, Web, b64, connected, served, sha
from webappclient import answer_ok as answer
from webapphelpers import build_demo_home

OWNER_DM = "agent:main:telegram:dm:42"
CONTACT = "agent:main:telegram:dm:77"
MAIN = "agent:main:main"
TOKEN = "123456789:AAHroomedOwnerDm_x-1"
CONFIG: dict[str, Any] = {
    "agents": {"defaults": {**PHOTO_CONFIG["agents"]["defaults"], "sandbox": {"mode": "non-main"},
                            "session": {"dm_scope": "per-channel-peer",
                                        "hooks": {"session_memory": {"enabled": False}}}}},
    "channels": {"telegram": {"accounts": {"personal": {"owners": ["42"], "dm_policy": "allowlist",
                                                        "allow_from": ["77"]}}}},
}


def png(n: int, size: int = 20_000) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + bytes([n]) * size


def room_inbox(home: Path, key: str) -> Path:
    return home / "agents" / "main" / "rooms" / room_slug(room_audience(key)) / "inbox"


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[Web, Path, SessionStore]]:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    # No profile: the scripted model reads text only.
    with served(home, CONFIG, answer, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))) as (client, _, token), \
            connected(client, token, "phone1") as w:
        yield w, home, SessionStore(home / "agents" / "main" / "sessions", cwd=home / "workspace", fsync=False)


def user_images(w: Web, key: str) -> list[list[dict[str, Any]]]:
    return [m.get("images", []) for m in w.ok("chat.history", sessionKey=key, imageRefs=True)["messages"]
            if m["role"] == "user"]


def refused(w: Web, code: str, **params: Any) -> None:
    res = w.call("chat.image", **params)
    assert not res["ok"] and res["error"]["code"] == code, res
    assert "data" not in json.dumps(res)


def turn_with_file(store: SessionStore, key: str, text: str, files: tuple[FiledFile, ...]) -> None:
    record = store.get(key) or store.get_or_create(key, origin_channel="telegram").record
    t = store.open_transcript(record)
    t.append_message(UserMessage(text, (), files=files).to_dict())
    t.append_message(AssistantMessage((TextPart("ok"),), model="m", provider="p").to_dict())


def test_a_photo_the_owner_sent_into_their_roomed_dm_is_named_and_brought_after_a_reload(
        web: tuple[Web, Path, SessionStore]) -> None:
    w, home, _ = web
    photo = png(1)
    assert upload(w, "u1", "IMG_0001.png", photo)[-1]["ok"]
    frames = w.turn("what is on this?", sessionKey=OWNER_DM, files=["u1"])
    assert frames[-1].get("event") == "chat.done", frames
    [kept] = list(room_inbox(home, OWNER_DM).iterdir())  # filed in the DM's room, not the workspace
    assert kept.read_bytes() == photo and not (home / "workspace" / "inbox").exists()
    [msg] = [m for m in w.ok("chat.history", sessionKey=OWNER_DM, imageRefs=True)["messages"] if m["role"] == "user"]
    assert "you cannot see it: the model answering reads text only" in msg["text"]
    assert msg["images"] == [{"mediaType": "image/png", "sha256": sha(photo), "size": len(photo)}]
    assert w.ok("chat.image", sessionKey=OWNER_DM, sha256=sha(photo)) == {
        "sha256": sha(photo), "mediaType": "image/png", "data": b64(photo)}
    # The room's commands changed the file since (same size, other bytes): not served as the photo filed.
    kept.write_bytes(png(2))
    refused(w, "not_found", sessionKey=OWNER_DM, sha256=sha(photo))
    # Replaced by a link to the very bytes elsewhere: not followed.
    elsewhere = home / "elsewhere.png"
    elsewhere.write_bytes(photo)
    kept.unlink()
    kept.symlink_to(elsewhere)
    refused(w, "not_found", sessionKey=OWNER_DM, sha256=sha(photo))
    assert user_images(w, OWNER_DM) == [[]]
    # The room's inbox itself a link to a folder holding it: not followed either.
    kept.unlink()
    room_inbox(home, OWNER_DM).rmdir()
    folder = home / "elsewhere"
    folder.mkdir()
    (folder / kept.name).write_bytes(photo)
    room_inbox(home, OWNER_DM).symlink_to(folder)
    refused(w, "not_found", sessionKey=OWNER_DM, sha256=sha(photo))
    assert user_images(w, OWNER_DM) == [[]]


def test_a_contacts_room_file_or_a_room_file_recorded_in_main_is_never_served(
        web: tuple[Web, Path, SessionStore]) -> None:
    w, home, store = web
    contact, in_main, own = png(5), png(6), png(7)
    for key, raw, name in ((CONTACT, contact, "c.png"), (MAIN, in_main, "m.png"), (OWNER_DM, own, "o.png")):
        inbox = room_inbox(home, key)
        inbox.mkdir(mode=0o700, parents=True, exist_ok=True)
        (inbox / name).write_bytes(raw)
        turn_with_file(store, key, "a photo", (FiledFile(name, "room", sha(raw), len(raw)),))
    refused(w, "read_only", sessionKey=CONTACT, sha256=sha(contact))
    assert "images" not in json.dumps(w.ok("chat.history", sessionKey=CONTACT, imageRefs=True))
    # Main works in the workspace: a file recorded as a room's is not looked for in any room.
    assert user_images(w, MAIN) == [[]]
    refused(w, "not_found", sessionKey=MAIN, sha256=sha(in_main))
    # Another session's room file named by hash in the owner's DM: not this session's, not found.
    refused(w, "not_found", sessionKey=OWNER_DM, sha256=sha(contact))
    assert user_images(w, OWNER_DM) == [[{"mediaType": "image/png", "sha256": sha(own), "size": len(own)}]]
    assert w.ok("chat.image", sessionKey=OWNER_DM, sha256=sha(own))["data"] == b64(own)
    if os.geteuid() == 0:  # a root-run Hermit: a file of uid 65534 (the room's sandbox user, say) is not served
        os.chown(room_inbox(home, OWNER_DM) / "o.png", 65534, 65534)
        assert user_images(w, OWNER_DM) == [[]]
        refused(w, "not_found", sessionKey=OWNER_DM, sha256=sha(own))


@contextmanager
def fake_telegram() -> Iterator[tuple[FakeTelegram, asyncio.AbstractEventLoop]]:
    """A FakeTelegram served from an event loop of its own thread, and that loop (updates are queued on it)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    fake = FakeTelegram(TOKEN)
    asyncio.run_coroutine_threadsafe(fake.start(), loop).result(30)
    try:
        yield fake, loop
    finally:
        try:
            asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(30)
        finally:
            asyncio.run_coroutine_threadsafe(cancel_left(), loop).result(30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()


def test_in_a_browser_a_photo_the_owner_sent_on_telegram_into_a_roomed_dm_is_drawn(
        browser: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    photo = real_png(40, 30, 12)  # one a browser decodes
    steps = [{"match": {"contains": "look-please"}, "repeat": True, "text": "I read text only."}]
    with FakeProvider(steps) as model, fake_telegram() as (tg, loop):
        build_demo_home(home, model.openai_base_url)  # the fake model: no `input`, text only
        config = yaml.safe_load((home / "hermit.yaml").read_text(encoding="utf-8"))
        config["agents"]["defaults"].update(sandbox={"mode": "non-main"}, session={"dm_scope": "per-channel-peer"})
        config["channels"] = {"telegram": {"accounts": {"default": {
            "api_base": tg.base_url, "poll_timeout_seconds": 1, "owners": ["42"]}}}}
        (home / "hermit.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        set_env_values(home / "hermit.env", {"TELEGRAM_BOT_TOKEN": TOKEN})
        gw = GatewayProcess(home, "--port", str(free_port()))
        gw.wait_ready()
        try:
            async def push() -> int:
                return tg.push_message(chat_id=42, text="look-please", photo=photo)
            asyncio.run_coroutine_threadsafe(push(), loop).result(30)
            deadline = time.monotonic() + T / 1000
            while not any("I read text only." in s.get("text", "") for s in tg.sent()):  # the fake's record
                assert time.monotonic() < deadline and gw.proc.poll() is None, gw.stderr()
                time.sleep(0.1)
            [filed_photo] = list(room_inbox(home, OWNER_DM).iterdir())  # the DM works in its room
            assert filed_photo.read_bytes() == photo
            opened = open_page(browser, gw.url, 1200, 900, console_errors=True)
            page = opened.page
            page.wait_for_selector("#status.ok", timeout=T)
            page.click(f"#sessions li[data-key='{OWNER_DM}']")
            img = page.locator(".msg.user:has-text('look-please') .pics img")
            img.wait_for(timeout=T)
            page.wait_for_function("(i) => i.complete && i.naturalWidth === 40", arg=img.element_handle(), timeout=T)
            assert img.get_attribute("src") == "data:image/png;base64," + b64(photo)
            assert opened.errors == []
            opened.context.close()
        finally:
            gw.stop()
