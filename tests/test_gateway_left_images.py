"""chat.image in O(1) per photo (gateway/image_index.py), in process through the real gateway and its WebSocket:
after chat.history named a session's photos, each chat.image reads that one line and decodes that one image (it
decoded and hashed every image of the transcript each time: N photos fetched one by one cost N full passes).
What the index remembers never outlives the transcript version it was made from: a scrub (a deleted message's
photo taken out, sessions/scrub.py), an append, an edit in place that puts the size and mtime back — and it never
answers for another session, nor a socket that did not sign in."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from hermit.messages import AssistantMessage, ImagePart, TextPart, UserMessage
from hermit.sessions.retraction import retract_in, scrub_copies
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import Transcript
from webappclient import PHOTO_CONFIG as CONFIG
from webappclient import Clock, Web, b64, connected, served, sha
from webappclient import answer_ok as answer

MAIN = "agent:main:main"
CLI = "notes"


def jpeg(n: int, size: int = 3_000) -> bytes:
    return b"\xff\xd8\xff" + n.to_bytes(2, "big") * (size // 2)




def photos_in(store: SessionStore, key: str, photos: list[bytes]) -> str:
    """A session of `key` whose user turns carry `photos` (one each, message refs `m0`, `m1`…); its session id."""
    opened = store.get_or_create(key)
    t = store.open_transcript(opened.record)
    for n, raw in enumerate(photos):
        t.append_message(UserMessage(f"photo {n} of {key}", (ImagePart("image/jpeg", b64(raw)),),
                                     ref=f"webchat:default:m{n}").to_dict())
        t.append_message(AssistantMessage((TextPart(f"seen {n}"),), model="m", provider="p").to_dict())
    return opened.record.session_id


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[Web, SessionStore, TestClient, str]]:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    with served(home, CONFIG, answer, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))) as (client, _, token), \
            connected(client, token, "tab1") as w:
        yield w, SessionStore(home / "agents" / "main" / "sessions", cwd=home / "workspace", fsync=False), client, token


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every image's bytes base64-decoded in this process from now on (the real b64decode, counted)."""
    seen: list[bytes] = []
    real = base64.b64decode

    def counting(data: Any, *args: Any, **kwargs: Any) -> bytes:
        out = real(data, *args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(base64, "b64decode", counting)
    return seen


def named(w: Web, **params: Any) -> list[str]:
    history = w.ok("chat.history", imageRefs=True, limit=500, **params)
    return [image["sha256"] for m in history["messages"] for image in m.get("images", ())]


def refused(w: Web, code: str, **params: Any) -> None:
    res = w.call("chat.image", **params)
    assert not res["ok"] and res["error"]["code"] == code, res
    assert '"data"' not in json.dumps(res)


def test_forty_photos_fetched_one_by_one_decode_each_photo_once(
        web: tuple[Web, SessionStore, TestClient, str], decoded: list[bytes]) -> None:
    w, store, _, _ = web
    photos = [jpeg(n) for n in range(40)]
    photos_in(store, MAIN, photos)
    assert named(w) == [sha(p) for p in photos]
    ours = set(photos)
    assert sum(1 for raw in decoded if raw in ours) == 40  # the history call: each photo once
    decoded.clear()
    for p in photos:
        assert w.ok("chat.image", sha256=sha(p)) == {"sha256": sha(p), "mediaType": "image/jpeg", "data": b64(p)}
    # One decode per request, of the photo asked for (checked against its hash): 40, not 1 + 2 + … + 40 = 820.
    assert sum(1 for raw in decoded if raw in ours) == 40
    assert [raw for raw in decoded if raw in ours] == photos
    refused(w, "not_found", sha256="0" * 64)  # a hash of none of its photos: answered from the index
    assert [raw for raw in decoded if raw in ours] == photos


def test_the_first_chat_image_indexes_the_transcript_for_the_next(
        web: tuple[Web, SessionStore, TestClient, str], decoded: list[bytes]) -> None:
    w, store, _, _ = web
    photos = [jpeg(n) for n in range(10)]
    photos_in(store, MAIN, photos)  # a page that asks without chat.history first (one kept from before)
    assert w.ok("chat.image", sha256=sha(photos[3]))["data"] == b64(photos[3])
    assert sum(1 for raw in decoded if raw in set(photos)) == 10 + 1  # each indexed, the one asked for checked
    decoded.clear()
    for p in photos:
        assert w.ok("chat.image", sha256=sha(p))["data"] == b64(p)
    assert [raw for raw in decoded if raw in set(photos)] == photos


def test_a_scrubbed_photo_is_never_served_from_the_index(web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, _, _ = web
    photos = [jpeg(n) for n in range(6)]
    session_id = photos_in(store, MAIN, photos)
    assert named(w) == [sha(p) for p in photos]
    assert w.ok("chat.image", sha256=sha(photos[2]))["data"] == b64(photos[2])
    transcript = Transcript.open(store.transcript_path(session_id), fsync=False)
    # Its sender deleted message 2: the scrub rewrites the file (its photo gives way to a mark) — the moment
    # before the `retracted` entry is appended (a kill there leaves just this) must serve it no more either.
    scrub_copies(transcript, "webchat:default:m2")
    assert b64(photos[2]) not in store.transcript_path(session_id).read_text()
    refused(w, "not_found", sha256=sha(photos[2]))
    assert w.ok("chat.image", sha256=sha(photos[3]))["data"] == b64(photos[3])  # the others still are
    retract_in(transcript, "webchat:default:m4", None)  # scrubbed and the entry written
    refused(w, "not_found", sha256=sha(photos[4]))
    assert named(w) == [sha(p) for n, p in enumerate(photos) if n not in (2, 4)]
    refused(w, "not_found", sha256=sha(photos[2]))


def test_a_retraction_appended_by_itself_hides_the_photo_from_the_index(
        web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, _, _ = web
    photos = [jpeg(n) for n in range(3)]
    session_id = photos_in(store, MAIN, photos)
    assert named(w) == [sha(p) for p in photos]
    # An older Hermit (or a failed scrub) left only the entry: the photo's bytes are still on its line.
    Transcript.open(store.transcript_path(session_id), fsync=False).append_custom("retracted", {"ref": "webchat:default:m1"})
    refused(w, "not_found", sha256=sha(photos[1]))
    assert w.ok("chat.image", sha256=sha(photos[0]))["data"] == b64(photos[0])


def test_an_edit_in_place_that_puts_size_and_mtime_back_is_seen(web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, _, _ = web
    old, new = jpeg(1), jpeg(2)
    session_id = photos_in(store, MAIN, [old])
    assert named(w) == [sha(old)]
    path = store.transcript_path(session_id)
    st = os.stat(path)
    data = path.read_bytes()
    with open(path, "r+b") as f:  # the same length of base64, in place: same inode, same size
        f.write(data.replace(b64(old).encode(), b64(new).encode()))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    refused(w, "not_found", sha256=sha(old))
    assert w.ok("chat.image", sha256=sha(new))["data"] == b64(new)


def test_a_photo_appended_after_the_history_is_found(web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, _, _ = web
    first, later = jpeg(1), jpeg(2)
    session_id = photos_in(store, MAIN, [first])
    assert named(w) == [sha(first)]
    t = Transcript.open(store.transcript_path(session_id), fsync=False)
    t.append_message(UserMessage("one more", (ImagePart("image/jpeg", b64(later)),)).to_dict())
    assert w.ok("chat.image", sha256=sha(later))["data"] == b64(later)
    assert w.ok("chat.image", sha256=sha(first))["data"] == b64(first)


def test_the_index_answers_for_no_other_session(web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, client, token = web
    mine, notes = jpeg(1), jpeg(2)
    main_id = photos_in(store, MAIN, [mine])
    photos_in(store, CLI, [notes])
    assert named(w) == [sha(mine)] and named(w, sessionKey=CLI) == [sha(notes)]  # both indexed
    refused(w, "not_found", sessionKey=CLI, sha256=sha(mine))  # MAIN's photo named under another session
    refused(w, "not_found", sha256=sha(notes))
    refused(w, "bad_params", sessionKey=CLI, sessionId=main_id, sha256=sha(mine))  # its transcript, another key
    w.turn("/new", method="sessions.new", sessionKey=MAIN)  # MAIN's indexed transcript has ended
    refused(w, "not_found", sha256=sha(mine))  # not in the current session's
    assert w.ok("chat.image", sessionId=main_id, sha256=sha(mine))["data"] == b64(mine)
    request = {"type": "req", "id": "x", "method": "chat.image", "params": {"sessionKey": MAIN, "sessionId": main_id,
                                                                            "sha256": sha(mine)}}
    with client.websocket_connect("ws://localhost/ws") as ws:  # a socket that did not sign in
        ws.send_text(json.dumps(request))
        frame = json.loads(ws.receive_text())
        assert not frame["ok"] and b64(mine)[:100] not in json.dumps(frame)


def test_the_index_is_bounded_in_transcripts_and_photos(tmp_path: Path) -> None:
    from hermit.gateway.history import chat_history, session_image
    from hermit.gateway.image_index import PhotoIndex

    store = SessionStore(tmp_path / "sessions", cwd=tmp_path, fsync=False)
    index = PhotoIndex(max_transcripts=2, max_images=5)
    keys = [f"cli{n}" for n in range(3)]
    shots = {k: [jpeg(10 * n + i) for i in range(2)] for n, k in enumerate(keys)}
    for k in keys:
        photos_in(store, k, shots[k])
        chat_history(store, k, 50, images=True, image_refs=True, photos=index)
    assert index.size() == (2, 4)  # the least recently used transcript dropped
    photos_in(store, "big", [jpeg(100 + i) for i in range(6)])
    chat_history(store, "big", 50, images=True, image_refs=True, photos=index)
    assert index.size() == (2, 4)  # one past the whole bound is not kept; it is still served
    assert session_image(store, "big", None, sha(jpeg(105)), index) == {
        "sha256": sha(jpeg(105)), "mediaType": "image/jpeg", "data": b64(jpeg(105))}
    assert session_image(store, keys[0], None, sha(shots[keys[0]][1]), index) is not None  # read again
    assert index.size() == (2, 4)


@pytest.mark.parametrize("swap", ["another user's file", "a symlink"])
def test_a_transcript_swapped_for_a_file_not_the_users_own_is_refused_though_indexed(
        web: tuple[Web, SessionStore, TestClient, str], tmp_path: Path, swap: str) -> None:
    w, store, _, _ = web
    photo = jpeg(1)
    session_id = photos_in(store, MAIN, [photo])
    assert named(w) == [sha(photo)]
    path = store.transcript_path(session_id)
    planted = tmp_path / "planted.jsonl"
    planted.write_bytes(path.read_bytes())  # the very same lines: the same photo at the same place
    if swap == "a symlink":
        os.replace(planted, path.with_suffix(".target"))
        os.remove(path)
        os.symlink(path.with_suffix(".target"), path)
    else:
        if os.getuid() == 0:  # a root-run gateway: a file uid 65534 (nobody) made
            os.chown(planted, 65534, 65534)
        else:  # a user's: one every user may write
            os.chmod(planted, 0o666)
        os.replace(planted, path)
    refused(w, "bad_params", sha256=sha(photo))


def test_an_image_part_that_is_no_drawable_image_is_neither_named_nor_served(
        web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, _, _ = web
    good = jpeg(5)
    opened = store.get_or_create(MAIN)
    t = store.open_transcript(opened.record)
    odd = ["QUJ", "QU=JD", "Q UJD", "QUJDé", "", b64(good) + "\n"]  # padding, spaces, not ASCII, empty, a newline
    t.append_message({"role": "user", "timestamp": 0, "content": [
        *({"type": "image", "mimeType": "image/png", "data": d} for d in odd),
        {"type": "image", "mimeType": "text/html", "data": b64(b"<b>")},
        {"type": "image", "mimeType": "image/jpeg", "data": b64(good)}]})
    assert named(w) == [sha(good)]
    assert w.ok("chat.image", sha256=sha(good))["data"] == b64(good)
    refused(w, "not_found", sha256=sha(b"<b>"))
    refused(w, "not_found", sha256=sha(b"AB"))  # what "QUJ" would be, wrongly padded


def test_a_torn_last_line_then_a_new_turn_leave_every_photo_found(web: tuple[Web, SessionStore, TestClient, str]) -> None:
    w, store, _, _ = web
    first, torn, later = jpeg(1), jpeg(2), jpeg(3)
    session_id = photos_in(store, MAIN, [first])
    assert named(w) == [sha(first)]
    path = store.transcript_path(session_id)
    line = json.dumps({"type": "message", "id": "torn1", "parentId": None, "timestamp": "2026-03-02T09:00:00Z",
                       "message": UserMessage("cut", (ImagePart("image/jpeg", b64(torn)),)).to_dict()})
    with open(path, "ab") as f:  # a gateway killed (-9) in the middle of its write
        f.write(line[: len(line) // 2].encode())
    assert w.ok("chat.image", sha256=sha(first))["data"] == b64(first)
    refused(w, "not_found", sha256=sha(torn))
    Transcript.open(path, fsync=False).append_message(UserMessage("again", (ImagePart("image/jpeg", b64(later)),)).to_dict())
    assert w.ok("chat.image", sha256=sha(later))["data"] == b64(later)  # on its own line, after the torn one
    assert w.ok("chat.image", sha256=sha(first))["data"] == b64(first)
    assert named(w) == [sha(first), sha(later)]


def test_photos_asked_for_while_a_scrub_and_turns_race_never_outlive_the_scrub(tmp_path: Path) -> None:
    import threading

    from hermit.gateway.history import chat_history, session_image
    from hermit.gateway.image_index import PhotoIndex

    store = SessionStore(tmp_path / "sessions", cwd=tmp_path, fsync=False)
    photos = [jpeg(n) for n in range(8)]
    session_id = photos_in(store, CLI, photos)
    index = PhotoIndex()
    chat_history(store, CLI, 50, images=True, image_refs=True, photos=index)
    scrubbed = threading.Event()
    stop = threading.Event()
    wrong: list[str] = []
    served_after = []

    def asker() -> None:
        while not stop.is_set():
            after = scrubbed.is_set()  # taken before the request starts
            for n, p in enumerate(photos):
                got = session_image(store, CLI, None, sha(p), index)
                if got is not None and got["data"] != b64(p):
                    wrong.append(f"photo {n}: other bytes")
                if n == 2 and after and got is not None:
                    served_after.append(n)

    def writer() -> None:
        t = Transcript.open(store.transcript_path(session_id), fsync=False)
        for n in range(20):
            t.append_message(AssistantMessage((TextPart(f"more {n}"),), model="m", provider="p").to_dict())

    askers = [threading.Thread(target=asker) for _ in range(3)]
    for a in askers:
        a.start()
    w = threading.Thread(target=writer)
    w.start()
    scrub_copies(Transcript.open(store.transcript_path(session_id), fsync=False), "webchat:default:m2")
    scrubbed.set()
    w.join()
    writer()  # more turns after the scrub
    stop.set()
    for a in askers:
        a.join()
    assert wrong == [] and served_after == []
    assert session_image(store, CLI, None, sha(photos[2]), index) is None
    assert all(session_image(store, CLI, None, sha(p), index) is not None for n, p in enumerate(photos) if n != 2)
