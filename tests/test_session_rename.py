"""SessionStore.rename (one atomic write under the store's lock) and sessions/headers.py (a transcript's key on line 1,
read and renamed): the public parts the Slack key migration (channels/slack_migrate.py) uses instead of the store's
and the scrub's private methods, and the one reading of a header's key it shares with sessions/retraction.py (two
copies before: 64 KiB and a hand parse there, 4 KiB and the loader's parse here — a header longer than 4 KiB, as a
long workspace path makes it, hid an ended session from a delete's scrub).

Real files, a real second process racing the store's lock; as this uid and (as root) as uid 65534.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import crashharness as ch
from hermit.errors import SessionError
from hermit.sessions.retraction import ended_transcripts
from hermit.sessions.store import SessionStore

OLD = "agent:main:slack:dm:u42"
NEW = "agent:main:slack:dm:u42@t9"
OTHER = "agent:main:telegram:dm:7"
uid, home = ch.uid, ch.home


def test_rename_moves_the_record_whole_and_tells_every_other_case(home: Path, uid: int | None) -> None:
    def op() -> list[str]:
        store = SessionStore(home / "sessions")
        first = store.get_or_create(OLD).record
        store.add_usage(OLD, input_tokens=11, output_tokens=3)
        before = store.get(OLD)
        out = [store.rename(OLD, NEW)]
        moved = store.get(NEW)
        assert store.get(OLD) is None and moved is not None and before is not None
        assert (moved.session_id, moved.input_tokens, moved.output_tokens) == (first.session_id, 11, 3)
        out.append(store.rename(OLD, NEW))  # moved before: nothing to do
        out.append(store.rename("agent:main:slack:dm:u1", "agent:main:slack:dm:u1@t9"))  # neither has one
        store.get_or_create(OLD)
        out.append(store.rename(OLD, NEW))  # both: never merged
        assert store.get(OLD) is not None and store.get(NEW) == moved
        with pytest.raises(SessionError, match="invalid session key"):
            store.rename(OLD, " bad key")
        files = sorted(p.name for p in (home / "sessions").iterdir() if not p.name.endswith(".jsonl"))
        assert files == ["sessions.json", "sessions.json.lock"], files  # no temp left
        assert os.stat(home / "sessions" / "sessions.json").st_mode & 0o777 == 0o600
        return out

    ch.warm(lambda scratch: None)
    assert ch.ok(op, uid=uid).result == ["moved", "done", "absent", "taken"]


def test_rename_under_the_stores_lock_loses_no_update_another_process_makes(home: Path, uid: int | None) -> None:
    """A second process adds usage to another session 200 times while this one renames a key back and forth 200
    times: every one of its updates is there, and the renamed record is under exactly one key."""
    rounds = 200

    def op() -> dict[str, int]:
        store = SessionStore(home / "sessions", fsync=False)
        store.get_or_create(OLD)
        store.get_or_create(OTHER)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                os.write(w, b"go")
                for _ in range(rounds):
                    SessionStore(home / "sessions", fsync=False).add_usage(OTHER, input_tokens=1)
                os._exit(0)
            except BaseException:  # noqa: BLE001 - reported by the exit status
                os._exit(1)
        os.close(w)
        assert os.read(r, 2) == b"go"
        os.close(r)
        names = [OLD, NEW]
        for i in range(rounds):
            assert store.rename(names[i % 2], names[(i + 1) % 2]) == "moved"
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        data = json.loads((home / "sessions" / "sessions.json").read_text())
        other = store.get(OTHER)
        assert other is not None
        return {"other": other.input_tokens, "old": int(OLD in data), "new": int(NEW in data)}

    ch.warm(lambda scratch: None)
    assert ch.ok(op, uid=uid).result == {"other": rounds, "old": 1, "new": 0}


def test_a_header_longer_than_4_kib_still_names_its_key(tmp_path: Path) -> None:
    """An ended session whose header holds a long workspace path: a delete's scrub looks for the message in the key's
    ended transcripts by their headers, and read only 4 KiB of them (the Slack migration 64 KiB)."""
    store = SessionStore(tmp_path / "sessions")
    deep = "/srv/" + "/".join(["a-rather-long-folder-name-for-the-workspace"] * 110)  # ~4.9 KiB
    ended = store.get_or_create(OLD, cwd=deep).record.session_id
    current = store.new_session(OLD).record.session_id
    assert os.stat(store.transcript_path(ended)).st_size > 4096
    assert ended_transcripts(store, OLD, current) == [store.transcript_path(ended)]


def test_rename_header_renames_line_1_only_and_keeps_the_rest(home: Path, uid: int | None) -> None:
    from hermit.sessions.headers import (  # s18 (here: the tests above run without it)
        header_key,
        rename_header,
    )

    def op() -> list[object]:
        store = SessionStore(home / "sessions")
        opened = store.get_or_create(OLD)
        with opened.transcript_path.open("a") as f:
            f.write(json.dumps({"type": "custom", "customType": "note", "data": {"k": OLD}}) + "\n")
        before = opened.transcript_path.read_bytes()
        out: list[object] = [rename_header(opened.transcript_path, {OTHER: NEW}), opened.transcript_path.read_bytes() == before]
        out.append(rename_header(opened.transcript_path, {OLD: NEW}))
        after = opened.transcript_path.read_bytes()
        out.append(after.split(b"\n", 1)[1] == before.split(b"\n", 1)[1])  # the rest byte for byte
        out.append(header_key(opened.transcript_path))
        out.append(oct(os.stat(opened.transcript_path).st_mode & 0o777))
        no_id = home / "sessions" / "stray.jsonl"  # a line 1 the loader takes for no header: no key to rename
        no_id.write_text(json.dumps({"type": "session", "sessionKey": OLD}) + "\n")
        out.append(header_key(no_id))
        return out

    ch.warm(lambda scratch: None)
    assert ch.ok(op, uid=uid).result == [False, True, True, True, NEW, "0o600", None]
