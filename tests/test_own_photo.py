"""The owner's own photo after a reload, when the model answering reads text only (in process through the real
gateway and its WebSocket, the scripted model; and in real Chromium against `hermit gateway run`). Such a photo is
not in the transcript as an image (the model was not shown it): the user turn records it only as filed in the
owner's inbox (messages.FiledFile). `chat.history {imageRefs}` names it as it names an image part ({mediaType,
sha256, size}) and `chat.image` brings it from inbox/ — only for the owner's own sessions, only a file the gateway
filed in the owner's own inbox for a turn of the owner's, not deleted since, opened without following a link, a
regular file of this user's still holding the very bytes filed, at most the size of an image a model is shown."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from browserdemo import T, browser_fixture, open_page  # noqa: F401 - browser_fixture: the `browser` fixture
from gatewayhelpers import GatewayProcess, free_port
from hermit.gateway.attachments import MAX_IMAGE_BYTES
from hermit.messages import AssistantMessage, FiledFile, Sender, TextPart, UserMessage
from hermit.sessions.retraction import retract_in
from hermit.sessions.store import SessionStore
from hermit.testing import FakeProvider
from test_webapp_browser_photos import png as real_png
from test_webapp_uploads import upload
from webappclient import PHOTO_CONFIG as CONFIG
from webappclient import Clock, Web, b64, connected, served, sha
from webappclient import answer_ok as answer
from webapphelpers import build_demo_home

MAIN = "agent:main:main"
CONTACT = "agent:main:telegram:dm:5550123"  # a contact's DM (no owner is configured): read-only in the web app


def png(n: int, size: int = 20_000) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + bytes([n]) * size




@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[Web, Path, SessionStore]]:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    # No profile: the scripted model reads text only (ModelProfile.supports_images is False).
    with served(home, CONFIG, answer, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))) as (client, _, token), \
            connected(client, token, "phone1") as w:
        yield w, home, SessionStore(home / "agents" / "main" / "sessions", cwd=home / "workspace", fsync=False)


def refused(w: Web, code: str, **params: Any) -> None:
    res = w.call("chat.image", **params)
    assert not res["ok"] and res["error"]["code"] == code, res
    assert "data" not in json.dumps(res)


def user_images(w: Web, **params: Any) -> list[list[dict[str, Any]]]:
    return [m.get("images", []) for m in w.ok("chat.history", imageRefs=True, **params)["messages"]
            if m["role"] == "user"]


def turn_with_file(store: SessionStore, key: str, text: str, files: tuple[FiledFile, ...], *,
                   ref: str | None = None, sender: Sender | None = None) -> None:
    record = store.get(key) or store.get_or_create(key, origin_channel="telegram").record
    t = store.open_transcript(record)
    t.append_message(UserMessage(text, (), sender=sender, ref=ref, files=files).to_dict())
    t.append_message(AssistantMessage((TextPart("ok"),), model="m", provider="p").to_dict())


def filed(inbox: Path, name: str, raw: bytes, place: str = "workspace") -> FiledFile:
    inbox.mkdir(mode=0o700, parents=True, exist_ok=True)
    (inbox / name).write_bytes(raw)
    return FiledFile(name, place, sha(raw), len(raw))  # type: ignore[arg-type]


def test_a_photo_sent_to_a_text_only_model_is_named_and_brought_after_a_reload(
        web: tuple[Web, Path, SessionStore]) -> None:
    w, home, _ = web
    photo = png(1)
    assert upload(w, "u1", "IMG_0001.png", photo)[-1]["ok"]
    w.turn("what is on this?", files=["u1"])
    [msg] = [m for m in w.ok("chat.history", imageRefs=True)["messages"] if m["role"] == "user"]
    assert "you cannot see it: the model answering reads text only" in msg["text"]
    assert msg["images"] == [{"mediaType": "image/png", "sha256": sha(photo), "size": len(photo)}]
    assert w.ok("chat.image", sessionKey=MAIN, sha256=sha(photo)) == {
        "sha256": sha(photo), "mediaType": "image/png", "data": b64(photo)}
    # A document sent so is not a photo: named as text only, as before.
    assert upload(w, "u2", "notes.pdf", b"%PDF-1.4\n" + b"x" * 500)[-1]["ok"]
    w.turn("my notes", files=["u2"])
    assert user_images(w) == [msg["images"], []]
    # The file changed in inbox/ since (same size, other bytes): not served as the photo filed.
    [kept] = [p for p in (home / "workspace" / "inbox").iterdir() if p.name.endswith(".png")]
    kept.write_bytes(png(2))
    assert user_images(w) == [msg["images"], []]  # named by its recorded hash, its type by its first bytes
    refused(w, "not_found", sessionKey=MAIN, sha256=sha(photo))
    kept.unlink()  # gone: no longer named
    assert user_images(w) == [[], []]


def test_a_deleted_messages_photo_is_neither_named_nor_brought(web: tuple[Web, Path, SessionStore]) -> None:
    w, home, store = web
    inbox = home / "workspace" / "inbox"
    gone, kept = png(3), png(4)
    turn_with_file(store, MAIN, "first", (filed(inbox, "a.png", gone),), ref="webchat:default:m1")
    turn_with_file(store, MAIN, "second", (filed(inbox, "b.png", kept),), ref="webchat:default:m2")
    assert [i[0]["sha256"] for i in user_images(w)] == [sha(gone), sha(kept)]
    assert w.ok("chat.image", sha256=sha(gone))["data"] == b64(gone)  # indexed now
    t = store.open_transcript(store.get(MAIN))  # type: ignore[arg-type]
    retract_in(t, "webchat:default:m1", None)  # its sender deleted it; the file is still in inbox/ (not removed)
    assert (inbox / "a.png").read_bytes() == gone
    refused(w, "not_found", sha256=sha(gone))
    assert user_images(w) == [[], [{"mediaType": "image/png", "sha256": sha(kept), "size": len(kept)}]]
    assert w.ok("chat.image", sha256=sha(kept))["data"] == b64(kept)


def test_a_contacts_or_a_rooms_or_someone_elses_file_is_never_served(web: tuple[Web, Path, SessionStore]) -> None:
    w, home, store = web
    inbox = home / "workspace" / "inbox"
    contact, roomed, theirs, big = png(5), png(6), png(7), png(8, MAX_IMAGE_BYTES)
    turn_with_file(store, CONTACT, "from a contact", (filed(inbox, "c.png", contact, "room"),))
    # In the owner's own session: a file recorded as a room's, a message another person wrote, one too big.
    turn_with_file(store, MAIN, "roomed", (filed(inbox, "r.png", roomed, "room"),))
    turn_with_file(store, MAIN, "theirs", (filed(inbox, "t.png", theirs),), sender=Sender("5550123", "Gus"))
    turn_with_file(store, MAIN, "big", (filed(inbox, "big.png", big),))
    assert user_images(w) == [[], [], []]
    for raw in (contact, roomed, theirs, big):
        refused(w, "not_found", sessionKey=MAIN, sha256=sha(raw))
    refused(w, "read_only", sessionKey=CONTACT, sha256=sha(contact))
    assert "images" not in json.dumps(w.ok("chat.history", sessionKey=CONTACT, imageRefs=True))
    # A name that is no plain name in inbox/: never looked for outside it.
    outside = png(9)
    (home / "workspace" / "secret.png").write_bytes(outside)
    turn_with_file(store, MAIN, "escape", (FiledFile("../secret.png", "workspace", sha(outside), len(outside)),))
    refused(w, "not_found", sha256=sha(outside))


def test_a_link_in_inbox_or_a_file_not_the_users_is_not_followed(web: tuple[Web, Path, SessionStore]) -> None:
    w, home, store = web
    inbox = home / "workspace" / "inbox"
    photo, other = png(10), png(11)
    elsewhere = home / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "p.png").write_bytes(photo)
    inbox.mkdir(mode=0o700)
    (inbox / "p.png").symlink_to(elsewhere / "p.png")  # the very bytes filed, through a link
    turn_with_file(store, MAIN, "linked", (FiledFile("p.png", "workspace", sha(photo), len(photo)),))
    assert user_images(w) == [[]]
    refused(w, "not_found", sha256=sha(photo))
    # inbox/ itself a link to a folder holding the file.
    (inbox / "p.png").unlink()
    inbox.rmdir()
    (elsewhere / "q.png").write_bytes(other)
    inbox.symlink_to(elsewhere)
    turn_with_file(store, MAIN, "folder linked", (FiledFile("q.png", "workspace", sha(other), len(other)),))
    assert user_images(w) == [[], []]
    refused(w, "not_found", sha256=sha(other))
    # A regular file in a real inbox/, of another user (a root-run Hermit: uid 65534's file is not the owner's).
    inbox.unlink()
    f = filed(inbox, "n.png", other)
    if os.geteuid() == 0:
        os.chown(inbox / "n.png", 65534, 65534)
        turn_with_file(store, MAIN, "nobody's", (f,))
        assert user_images(w) == [[], [], []]
        refused(w, "not_found", sha256=sha(other))
    else:  # not root: the file is the user's own and served; the owner check is asserted as root (CI, containers)
        turn_with_file(store, MAIN, "mine", (f,))
        assert w.ok("chat.image", sha256=sha(other))["data"] == b64(other)


def test_in_a_browser_a_photo_sent_to_a_text_only_model_is_drawn_after_a_reload(
        browser: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    photo = real_png(40, 30, 12)  # one a browser decodes
    steps = [{"match": {"contains": "look-please"}, "repeat": True, "text": "I read text only."}]
    with FakeProvider(steps) as fake:
        build_demo_home(home, fake.openai_base_url)  # the fake model: no `input`, text only
        gw = GatewayProcess(home, "--port", str(free_port()))
        gw.wait_ready()
        try:
            opened = open_page(browser, gw.url, 1200, 900, console_errors=True)
            page = opened.page
            page.set_input_files("#attach-input", [{"name": "IMG_7.png", "mimeType": "image/png", "buffer": photo}])
            page.wait_for_selector("#attachments .attachment.image img", timeout=T)
            page.fill("#input", "look-please")
            page.click("#send")
            page.locator(".msg.user:has-text('look-please') + .msg.assistant[data-done='done']").wait_for(timeout=T)
            sent = fake.requests[-1].body["messages"]
            assert not any(isinstance(m["content"], list) for m in sent if m["role"] == "user")  # text only
            page.reload()
            page.wait_for_selector("#status.ok", timeout=T)
            img = page.locator(".msg.user:has-text('look-please') .pics img")
            img.wait_for(timeout=T)
            page.wait_for_function("(i) => i.complete && i.naturalWidth === 40", arg=img.element_handle(), timeout=T)
            assert img.get_attribute("src") == "data:image/png;base64," + b64(photo)
            line = page.locator(".msg.user:has-text('look-please') .file-line").inner_text()
            assert "the model answering reads text only" in line
            assert opened.errors == []
            opened.context.close()
        finally:
            gw.stop()
