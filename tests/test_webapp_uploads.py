"""A photo or a file sent from the web app (in process, the scripted model): the owner's signed-in WebSocket sends
it in pieces (`chat.upload`, each frame under the frame limit), staged in `<state>/inbox/` as the channels stage
(exclusive, 0600, named safely), sent with the message (`chat.send {files}`), filed into the session's inbox by
the bus and shown to a model that reads images — judged by its bytes, never by its name — and drawn again from the
transcript by `chat.history {images: true}` for the owner's own sessions only. The limits say what they are and
leave nothing behind: too big, too many, a piece out of order, not base64, an unknown upload, a read-only session,
a socket closed mid-file."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ciguard import need
from gatewayhelpers import last_user_text
from hermit.gateway.history import HISTORY_IMAGE_BUDGET, chat_history
from hermit.gateway.protocol import MAX_FRAME_BYTES, MAX_UPLOAD_BYTES, MAX_UPLOAD_FILES, UPLOAD_CHUNK_BYTES
from hermit.messages import AssistantMessage, ImagePart, TextPart, UserMessage
from hermit.models.base import ModelProfile, ModelRequest
from hermit.sessions.store import SessionStore
from hermit.testing.scripted import Reply
from prochelpers import PROC_TIMEOUT, python_as, pythonpath
from webappclient import Clock, Web, connected, served

MAIN = "agent:main:main"
GROUP = "agent:main:telegram:group:-100321"
CONTACT = "agent:main:telegram:dm:5550123"  # a contact's DM (no owner is configured): read-only in the web app
CONFIG = {"agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"},
                                  "session": {"hooks": {"session_memory": {"enabled": False}}}}}}
SEES = ModelProfile(provider="scripted", model_id="sees-1", supports_images=True)
# A PNG by its first bytes, bigger than one piece: it comes in three.
PHOTO = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * (2 * UPLOAD_CHUNK_BYTES // 256 + 7)
PHOTO_B64 = base64.b64encode(PHOTO).decode()


class Seen:
    """The scripted model: answers what it was shown, and keeps every request."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def __call__(self, req: ModelRequest) -> Reply:
        self.requests.append(req)
        return f"seen {len(self.images())} image(s): {last_user_text(req).splitlines()[0][:60]}"

    def images(self, n: int = -1) -> tuple[ImagePart, ...]:
        last = self.requests[n].messages[-1]
        return last.images if isinstance(last, UserMessage) else ()


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[Web, Path, Seen, TestClient, str]]:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    model = Seen()
    with served(home, CONFIG, model, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC)), SEES) as (client, _, token), \
            connected(client, token, "phone1") as w:
        yield w, home, model, client, token


def upload(web: Web, uid: str, name: str, data: bytes) -> list[dict[str, Any]]:
    """Send `data` as chat.upload pieces; every response (the last one says `done`, or why not)."""
    out = []
    pieces = [data[i:i + UPLOAD_CHUNK_BYTES] for i in range(0, len(data), UPLOAD_CHUNK_BYTES)] or [b""]
    for n, piece in enumerate(pieces):
        params: dict[str, Any] = {"uploadId": uid, "offset": n * UPLOAD_CHUNK_BYTES,
                                  "data": base64.b64encode(piece).decode(), "done": n == len(pieces) - 1}
        if n == 0:
            params["name"] = name
        res = web.call("chat.upload", **params)
        out.append(res)
        if not res["ok"]:
            break
    return out


def staged(home: Path) -> list[Path]:
    return sorted((home / "inbox").glob("*")) if (home / "inbox").exists() else []


def reply_of(frames: list[dict[str, Any]]) -> str:
    return "".join(f["payload"]["text"] for f in frames if f.get("event") == "chat.delta") or next(
        (f["payload"]["text"] for f in frames if f.get("event") == "chat.message"), "")


def test_a_photo_sent_in_pieces_reaches_a_model_that_reads_images_and_the_owners_history(
        web: tuple[Web, Path, Seen, TestClient, str]) -> None:
    w, home, model, _, _ = web
    answers = upload(w, "u1", "../../.ssh/IMG 0001 (1).png", PHOTO)
    assert len(answers) == 3 and all(a["ok"] for a in answers), answers
    assert answers[-1]["payload"] == {"uploadId": "u1", "size": len(PHOTO), "done": True}
    [file] = staged(home)  # staged as the channels stage: in the state dir's inbox, owner-only, a safe name
    assert file.name.startswith("webchat-default-phone1-u1-") and file.name.endswith("-ssh_IMG_0001_1_.png")
    assert stat.S_IMODE(os.lstat(file).st_mode) == 0o600 and file.read_bytes() == PHOTO
    assert all(len(json.dumps(a)) < MAX_FRAME_BYTES for a in answers)

    frames = w.turn("what is on this receipt?", files=["u1"])
    assert reply_of(frames) == "seen 1 image(s): what is on this receipt?"
    [image] = model.images()
    assert (image.media_type, image.data) == ("image/png", PHOTO_B64)
    filed = home / "workspace" / "inbox" / file.name
    assert filed.read_bytes() == PHOTO and staged(home) == []
    said = last_user_text(model.requests[-1])
    assert f"inbox/{file.name} — image, image/png, {len(PHOTO):,} bytes; attached for you to see" in said

    shown = w.ok("chat.history", images=True)["messages"]
    assert [m["role"] for m in shown] == ["user", "assistant"]
    assert shown[0]["images"] == [{"mediaType": "image/png", "data": PHOTO_B64}]
    assert shown[0]["text"].startswith("what is on this receipt?\n(file received with this message: inbox/")
    assert PHOTO_B64 not in json.dumps(w.ok("chat.history"))  # asked for only by the page's thumbnails

    # A photo alone, no text; the same file again in the next message is a new file of its own.
    assert upload(w, "u2", "again.png", PHOTO)[-1]["ok"]
    frames = w.turn("", files=["u2"])
    assert reply_of(frames).startswith("seen 1 image(s): (file received with this message: inbox/webchat-")
    assert len(list((home / "workspace" / "inbox").iterdir())) == 2


def test_a_files_name_and_claim_do_not_make_it_an_image(web: tuple[Web, Path, Seen, TestClient, str]) -> None:
    w, home, model, _, _ = web
    pdf = b"%PDF-1.4\n" + b"x" * 5000
    assert upload(w, "doc", "receipt.png", pdf)[-1]["ok"]
    assert upload(w, "pic", "notes.txt", PHOTO)[-1]["ok"]
    frames = w.turn("two files", files=["doc", "pic"])
    assert reply_of(frames).startswith("seen 1 image(s)")
    said = last_user_text(model.requests[-1])
    assert "receipt.png — document, 5,009 bytes)" in said  # named .png, but its bytes say otherwise
    assert "notes.txt — image, image/png" in said and "attached for you to see (image/png)" in said
    assert [i.data for i in model.images()] == [PHOTO_B64]


def test_the_limits_say_what_they_are_and_leave_nothing_behind(
        web: tuple[Web, Path, Seen, TestClient, str]) -> None:
    """A piece refused takes every file of the socket not yet sent with it (the page sends them all again)."""
    w, home, model, client, token = web
    # Over the 10 MB of one message, in all: refused at the piece that passes it.
    assert upload(w, "a", "a.jpg", b"\xff\xd8\xff" + b"a" * (MAX_UPLOAD_BYTES // 2))[-1]["ok"]
    too_big = upload(w, "b", "b.jpg", b"\xff\xd8\xff" + b"b" * (MAX_UPLOAD_BYTES // 2))[-1]
    assert too_big["error"]["code"] == "too_large" and "10 MB" in too_big["error"]["message"]
    assert staged(home) == []
    # A piece after the last, data that is not base64, an id never started, an empty file.
    for params, code in (({"uploadId": "c", "offset": 10, "data": "AAAA"}, "bad_params"),  # c is finished
                         ({"uploadId": "d", "offset": 0, "name": "d", "data": "not base64!"}, "bad_params"),
                         ({"uploadId": "e", "offset": 5, "data": "AAAA"}, "bad_params"),
                         ({"uploadId": "f", "offset": 0, "name": "f", "data": "", "done": True}, "bad_params")):
        assert upload(w, "c", "c.png", PHOTO[:10])[-1]["ok"]
        res = w.call("chat.upload", **params)
        assert not res["ok"] and res["error"]["code"] == code, (params, res)
        assert staged(home) == [], params
    # A piece longer than a piece is no chat.upload at all: refused as any malformed request is.
    res = w.call("chat.upload", uploadId="g", offset=0, name="g", data="x" * 200_000)
    assert res["error"]["code"] == "bad_params" and "data" in res["error"]["message"]
    # At most four files are pending; a fifth is refused.
    for uid in "hijk":
        assert upload(w, uid, uid, b"x")[-1]["ok"]
    fifth = upload(w, "l", "l", b"x")[-1]
    assert fifth["error"]["code"] == "too_many_files" and str(MAX_UPLOAD_FILES) in fifth["error"]["message"]
    assert staged(home) == []
    # A message naming a file not sent on this socket: refused, and the files it named deleted.
    for uid in "hij":
        assert upload(w, uid, uid, b"x")[-1]["ok"]
    res = w.turn("x", files=["h", "zz"])[-1]
    assert res["error"]["code"] == "bad_params" and "'zz'" in res["error"]["message"]
    assert sorted(p.name.split("-")[3] for p in staged(home)) == ["i", "j"]
    # A read-only session (a group's): refused, its files deleted, nothing filed anywhere.
    res = w.turn("into the group", files=["i"], sessionKey=GROUP)[-1]
    assert res["error"]["code"] == "read_only", res
    assert [p.name.split("-")[3] for p in staged(home)] == ["j"]
    # Neither text nor a file: nothing to send.
    assert w.call("chat.send", text="")["error"]["code"] == "bad_params"
    # A socket that closes with files not sent (the tab closed mid-upload) leaves none behind.
    with connected(client, token, "tab2") as other:
        assert upload(other, "m", "m.png", PHOTO[: UPLOAD_CHUNK_BYTES])[-1]["ok"]
        other.ok("chat.upload", uploadId="n", offset=0, name="n.png", data=base64.b64encode(PHOTO[:100]).decode())
        assert len(staged(home)) == 3
    w.ok("sessions.list")  # the other socket's end has been handled by now
    assert [p.name.split("-")[3] for p in staged(home)] == ["j"]
    assert model.requests == [] and not (home / "workspace" / "inbox").exists()


def test_a_groups_history_shows_no_image_data_and_the_owners_shows_only_its_own(
        web: tuple[Web, Path, Seen, TestClient, str]) -> None:
    """The owner sees the images of the owner's own sessions; a group's history (a member's photo, kept in its
    transcript for the model) is text, as it always was — and never another session's image."""
    w, home, _, client, _ = web
    member = base64.b64encode(b"\xff\xd8\xff" + b"member's photo").decode()
    store = SessionStore(home / "agents" / "main" / "sessions", cwd=home / "workspace", fsync=False)
    ids = {}
    for key in (GROUP, CONTACT):
        opened = store.get_or_create(key, origin_channel="telegram")
        ids[key] = opened.record.session_id
        t = store.open_transcript(opened.record)
        t.append_message(UserMessage("look at this", (ImagePart("image/jpeg", member),)).to_dict())
        t.append_message(AssistantMessage((TextPart("A cat."),), model="m", provider="p").to_dict())
    assert upload(w, "u", "mine.png", PHOTO[:4000])[-1]["ok"]
    w.turn("mine", files=["u"])

    for key in (GROUP, CONTACT):
        for named in ({}, {"sessionId": ids[key]}):
            shown = w.ok("chat.history", sessionKey=key, images=True, **named)
            assert shown["mode"] == "read-only" and shown == w.ok("chat.history", sessionKey=key, **named)
            assert [m["text"] for m in shown["messages"]] == ["look at this", "A cat."], (key, named)
            assert "images" not in json.dumps(shown) and member not in json.dumps(shown)
    own = json.dumps(w.ok("chat.history", images=True))
    mine = base64.b64encode(PHOTO[:4000]).decode()
    assert mine in own and member not in own
    # The page draws them from data: URLs, which its CSP allows for images, and nothing more than before.
    csp = client.get("/").headers["content-security-policy"]
    assert "img-src 'self' data:;" in csp and "blob:" not in csp


AS_NOBODY = r"""
import base64, json, os, stat, sys
from datetime import UTC, datetime
from pathlib import Path
from hermit.models.base import ModelProfile
from hermit.messages import UserMessage
from webappclient import Clock, connected, served

home = Path(sys.argv[1])
(home / "workspace").mkdir(parents=True)
photo = b"\x89PNG\r\n\x1a\n" + os.urandom(200_000)
seen = []
def model(req):
    seen.extend(m.images for m in req.messages if isinstance(m, UserMessage))
    return "ok"
config = {"agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"}}}}
profile = ModelProfile(provider="scripted", model_id="sees-1", supports_images=True)
out = {}
with served(home, config, model, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC)), profile) as (client, _, token), \
        connected(client, token, "phone") as w:
    half = 100_000
    for i, (at, piece) in enumerate(((0, photo[:half]), (half, photo[half:]))):
        w.ok("chat.upload", uploadId="u", offset=at, name="p.png", data=base64.b64encode(piece).decode(),
             done=i == 1)
    out["staged"] = [(oct(stat.S_IMODE(p.lstat().st_mode)), p.lstat().st_uid) for p in (home / "inbox").iterdir()]
    w.turn("look", files=["u"])
    filed = list((home / "workspace" / "inbox").iterdir())
    out["filed"] = [(oct(stat.S_IMODE(p.lstat().st_mode)), p.lstat().st_uid, p.read_bytes() == photo) for p in filed]
    out["left"] = list(map(str, (home / "inbox").iterdir()))
    out["seen"] = [[i.data == base64.b64encode(photo).decode() for i in imgs] for imgs in seen]
    out["history"] = [len(m.get("images", [])) for m in w.ok("chat.history", images=True)["messages"]]
    out["uid"] = os.getuid()
print(json.dumps(out))
"""


def test_a_gateway_run_by_an_unprivileged_user_stages_and_files_the_photo_as_its_own(tmp_path: Path) -> None:
    """Nothing of the upload path needs root: as uid 65534 the pieces are staged owner-only, the photo is filed
    into the workspace's inbox as that user's 0600 file, and the model and the history have it."""
    nobody = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(nobody)
    need(python is not None, "an interpreter that can import this checkout as uid 65534")
    assert python is not None
    shared = Path(tempfile.mkdtemp(prefix="hermit-h7-"))
    try:
        os.chown(shared, 65534, 65534)
        done = subprocess.run([python, "-c", AS_NOBODY, str(shared / "home")], capture_output=True, text=True,
                              timeout=PROC_TIMEOUT, cwd="/", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(),
                                                                   "HOME": str(shared)}, **nobody)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout.splitlines()[-1])
        assert out == {"staged": [["0o600", 65534]], "filed": [["0o600", 65534, True]], "left": [],
                       "seen": [[True]], "history": [1, 0], "uid": 65534}, out
    finally:
        shutil.rmtree(shared)


def test_a_history_sends_the_newest_photos_within_its_budget_and_names_the_older_ones(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions", cwd=tmp_path, fsync=False)
    t = store.open_transcript(store.get_or_create(MAIN).record)
    big = [base64.b64encode(b"\xff\xd8\xff" + bytes([n]) * (HISTORY_IMAGE_BUDGET * 3 // 10)).decode() for n in range(3)]
    for n, data in enumerate(big):
        t.append_message(UserMessage(f"photo {n}", (ImagePart("image/jpeg", data),)).to_dict())
    t.append_message(UserMessage("odd", (ImagePart("text/html", "PGI+"), ImagePart("image/png", "not base64!"))).to_dict())
    shown = chat_history(store, MAIN, 50, images=True)["messages"]
    assert [m.get("images") for m in shown[1:]] == [[{"mediaType": "image/jpeg", "data": big[1]}],
                                                    [{"mediaType": "image/jpeg", "data": big[2]}], None]
    assert shown[0]["images"] == [{"mediaType": "image/jpeg", "size": len(big[0]) * 3 // 4, "omitted": True}]
    assert "images" not in json.dumps(chat_history(store, MAIN, 50))


def test_files_a_page_was_sending_when_the_gateway_stopped_are_deleted_at_the_next_start(tmp_path: Path) -> None:
    """A gateway killed mid-upload (or with a queued photo not yet filed) left its staged file in the state dir's
    inbox, where nothing would ever take it: the next start deletes the web chat's, and nothing else there."""
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    inbox = home / "inbox"
    inbox.mkdir(mode=0o700)
    left = inbox / "webchat-default-phone1-u1-0123456789abcdef-half.png"
    left.write_bytes(PHOTO[:1000])
    other = inbox / "telegram-default-42-7-0123456789abcdef-photo.jpg"  # a channel's, waiting for its turn
    other.write_bytes(b"\xff\xd8\xff")
    outside = tmp_path / "keep.png"
    outside.write_bytes(b"mine")
    (inbox / "webchat-default-x-y-0123456789abcdef-link.png").symlink_to(outside)
    with served(home, CONFIG, Seen(), Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC)), SEES):
        assert sorted(p.name for p in inbox.iterdir()) == [other.name, "webchat-default-x-y-0123456789abcdef-link.png"]
        assert outside.read_bytes() == b"mine"
