"""Sessions layer: JSONL transcripts and the sessions.json store, on real files (keys: test_session_keys.py)."""

from __future__ import annotations

import json
import multiprocessing
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hermit.config.paths import StatePaths
from hermit.errors import SessionError
from hermit.sessions import (
    CompactionEntry,
    CustomEntry,
    MessageEntry,
    SessionStore,
    Transcript,
    UnknownEntry,
    read_transcript,
)

T0 = datetime(2026, 1, 20, 9, 30, tzinfo=UTC)


@dataclass
class FakeClock:
    """Picklable (for spawned processes) manual clock."""

    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now = self.now + timedelta(**kwargs)


@dataclass
class Counter:
    prefix: str = "e"
    n: int = 0
    seen: list[str] = field(default_factory=list)

    def __call__(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n}"


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def lines_of(p: Path) -> list[str]:
    return p.read_text(encoding="utf-8").split("\n")


def new_transcript(tmp_path: Path, clock: FakeClock | None = None, ids: Any = None) -> Transcript:
    return Transcript.create(
        tmp_path / "sess" / "s1.jsonl",
        cwd="/work/space",
        session_key="agent:main:main",
        clock=clock or FakeClock(),
        id_factory=ids or Counter(),
        fsync=False,
    )


# ---- transcript -------------------------------------------------------------------------------


def test_header_and_entry_shapes_on_disk(tmp_path: Path) -> None:
    clock = FakeClock()
    t = new_transcript(tmp_path, clock)
    clock.advance(seconds=1)
    m1 = t.append_message({"role": "user", "content": "hello 你好"})
    clock.advance(seconds=1)
    m2 = t.append_message({"role": "assistant", "content": [{"type": "text", "text": "hi"}]})
    c = t.append_custom("model-change", {"model": "x"})
    comp = t.append_compaction(summary="S", first_kept_entry_id=m2.id, tokens_before=1000, tokens_after=200)

    rows = [json.loads(line) for line in lines_of(t.path) if line]
    assert rows[0] == {
        "type": "session",
        "version": 1,
        "id": "s1",
        "timestamp": "2026-01-20T09:30:00.000Z",
        "cwd": "/work/space",
        "sessionKey": "agent:main:main",
    }
    assert rows[1] == {
        "type": "message",
        "id": "e1",
        "parentId": None,
        "timestamp": "2026-01-20T09:30:01.000Z",
        "message": {"role": "user", "content": "hello 你好"},
    }
    assert rows[2]["parentId"] == "e1" and rows[2]["message"]["role"] == "assistant"
    assert rows[3] == {
        "type": "custom",
        "id": "e3",
        "parentId": "e2",
        "timestamp": "2026-01-20T09:30:02.000Z",
        "customType": "model-change",
        "data": {"model": "x"},
    }
    assert rows[4] == {
        "type": "compaction",
        "id": "e4",
        "parentId": "e3",
        "timestamp": "2026-01-20T09:30:02.000Z",
        "summary": "S",
        "firstKeptEntryId": "e2",
        "tokensBefore": 1000,
        "tokensAfter": 200,
    }
    assert "你好" in t.path.read_text(encoding="utf-8")  # readable, not \u-escaped
    assert (m1.id, m2.id, c.id, comp.id) == ("e1", "e2", "e3", "e4")
    assert isinstance(c, CustomEntry) and isinstance(comp, CompactionEntry)


def test_parent_chain_and_reopen(tmp_path: Path) -> None:
    t = new_transcript(tmp_path)
    ids = [t.append_message({"role": "user", "content": str(i)}).id for i in range(5)]
    reopened = Transcript.open(t.path)
    entries = reopened.entries()
    assert [e.id for e in entries] == ids
    assert [e.parent_id for e in entries] == [None, *ids[:-1]]
    assert reopened.header.session_id == "s1" and reopened.header.session_key == "agent:main:main"
    assert reopened.problems == ()
    assert all(isinstance(e, MessageEntry) for e in entries)


def test_owner_only_permissions(tmp_path: Path) -> None:
    t = new_transcript(tmp_path)
    t.append_message({"role": "user", "content": "x"})
    assert mode(t.path) == 0o600
    assert mode(t.path.parent) == 0o700


def test_entry_ids_unique_even_if_factory_repeats(tmp_path: Path) -> None:
    seq = iter(["a", "a", "a", "b", "b", "c"])
    t = new_transcript(tmp_path, ids=lambda: next(seq))
    assert [t.append_message({"role": "user", "content": "x"}).id for _ in range(3)] == ["a", "b", "c"]


def test_corrupt_middle_line_reported_with_line_number_and_skipped(tmp_path: Path) -> None:
    t = new_transcript(tmp_path)
    a = t.append_message({"role": "user", "content": "a"})
    with open(t.path, "a", encoding="utf-8") as fh:
        fh.write('{"type":"message","id":"zz", BROKEN\n')
    b = t.append_message({"role": "user", "content": "b"})

    read = read_transcript(t.path)
    assert [e.id for e in read.entries] == [a.id, b.id]
    assert len(read.problems) == 1
    problem = read.problems[0]
    assert problem.line == 3 and problem.path == t.path
    assert str(problem).startswith(f"{t.path}:3: not valid JSON")
    # The chain skips the unreadable line instead of pointing into it.
    assert b.parent_id == a.id
    assert Transcript.open(t.path).line_of(b.id) == 4


def test_structurally_bad_lines_are_reported(tmp_path: Path) -> None:
    t = new_transcript(tmp_path)
    t.append_message({"role": "user", "content": "a"})
    with open(t.path, "a", encoding="utf-8") as fh:
        fh.write("[1, 2]\n")
        fh.write('{"type":"message","parentId":null}\n')
        fh.write('{"type":"message","id":"e1","message":{}}\n')
        fh.write('{"type":"future-thing","id":"f1","payload":1}\n')
        fh.write("\n")
    read = read_transcript(t.path)
    assert [p.line for p in read.problems] == [3, 4, 5]
    assert "duplicate entry id 'e1'" in read.problems[2].message
    unknown = read.entries[-1]
    assert (
        isinstance(unknown, UnknownEntry) and unknown.type == "future-thing" and unknown.raw["payload"] == 1
    )


def test_truncated_last_line_then_append_starts_on_fresh_line(tmp_path: Path) -> None:
    t = new_transcript(tmp_path)
    a = t.append_message({"role": "user", "content": "a"})
    with open(t.path, "ab") as fh:  # a crash mid-write: no closing brace, no newline
        fh.write(b'{"type":"message","id":"torn","parentId":"e1","message":{"role":"assi')

    fresh = Transcript.open(t.path, id_factory=Counter("n"), fsync=False)
    assert [e.id for e in fresh.entries()] == [a.id]
    assert [(p.line, "truncated last line" in p.message) for p in fresh.problems] == [(3, True)]

    b = fresh.append_message({"role": "assistant", "content": "b"})
    assert b.parent_id == a.id and b.line == 4
    text_lines = lines_of(t.path)
    assert json.loads(text_lines[3])["id"] == b.id
    again = read_transcript(t.path)
    assert [e.id for e in again.entries] == [a.id, b.id]
    assert [p.line for p in again.problems] == [3]


def test_line_of_points_at_the_entry_line(tmp_path: Path) -> None:
    t = new_transcript(tmp_path)
    ids = [t.append_message({"role": "user", "content": f"m{i}"}).id for i in range(4)]
    text_lines = lines_of(t.path)
    for entry_id in ids:
        line = t.line_of(entry_id)
        assert line is not None
        assert json.loads(text_lines[line - 1])["id"] == entry_id
    assert t.line_of("nope") is None
    got = t.get(ids[2])
    assert isinstance(got, MessageEntry) and got.message["content"] == "m2"
    assert t.get("nope") is None


def test_append_only_existing_bytes_never_change(tmp_path: Path) -> None:
    t = new_transcript(tmp_path)
    t.append_message({"role": "user", "content": "a"})
    before = t.path.read_bytes()
    t.append_message({"role": "user", "content": "b"})
    t.append_compaction(summary="s", first_kept_entry_id=None, tokens_before=5)
    assert t.path.read_bytes().startswith(before)


def test_two_writers_keep_one_chain(tmp_path: Path) -> None:
    t1 = new_transcript(tmp_path, ids=Counter("x"))
    t2 = Transcript.open(t1.path, id_factory=Counter("y"), fsync=False)
    a = t1.append_message({"role": "user", "content": "1"})
    b = t2.append_message({"role": "assistant", "content": "2"})
    c = t1.append_message({"role": "user", "content": "3"})
    assert (b.parent_id, c.parent_id) == (a.id, b.id)
    assert [e.id for e in t2.entries()] == [a.id, b.id, c.id]
    assert c.line == 4


def test_context_view(tmp_path: Path) -> None:
    t = new_transcript(tmp_path)
    view = t.context_view()
    assert view.compaction is None and view.entries == ()
    ids = [t.append_message({"role": "user", "content": str(i)}).id for i in range(4)]
    assert [e.id for e in t.context_view().entries] == ids

    comp = t.append_compaction(
        summary="first", first_kept_entry_id=ids[2], tokens_before=900, tokens_after=300
    )
    after = t.append_message({"role": "user", "content": "after"})
    view = t.context_view()
    assert view.compaction == comp and view.warning is None
    assert [e.id for e in view.entries] == [ids[2], ids[3], after.id]
    assert t.latest_compaction() == comp

    comp2 = t.append_compaction(summary="second", first_kept_entry_id=after.id, tokens_before=500)
    view = t.context_view()
    assert view.compaction == comp2 and [e.id for e in view.entries] == [after.id]

    t.append_compaction(summary="third", first_kept_entry_id="gone", tokens_before=1)
    last = t.append_message({"role": "user", "content": "last"})
    view = t.context_view()
    assert [e.id for e in view.entries] == [last.id]
    assert view.warning is not None and "'gone'" in view.warning


def test_empty_file_reports_missing_header_and_append_writes_one(tmp_path: Path) -> None:
    p = tmp_path / "empty-1.jsonl"
    p.touch(mode=0o600)
    t = Transcript.open(p, clock=FakeClock(), id_factory=Counter(), fsync=False)
    assert t.header.inferred and t.header.session_id == "empty-1"
    assert [p.line for p in t.problems] == [1]
    e = t.append_message({"role": "user", "content": "x"})
    assert e.line == 2
    rows = [json.loads(line) for line in lines_of(p) if line]
    assert rows[0]["type"] == "session" and rows[0]["id"] == "empty-1"
    fresh = read_transcript(p)
    assert fresh.problems == () and not fresh.header.inferred and [x.id for x in fresh.entries] == [e.id]


def test_open_missing_or_create_existing_raise_session_error(tmp_path: Path) -> None:
    with pytest.raises(SessionError) as info:
        Transcript.open(tmp_path / "nope.jsonl")
    assert "nope.jsonl" in info.value.message and info.value.hint
    t = new_transcript(tmp_path)
    with pytest.raises(SessionError):
        Transcript.create(t.path, cwd="/")


def test_naive_clock_and_unserializable_message_are_refused(tmp_path: Path) -> None:
    t = Transcript.create(tmp_path / "s.jsonl", cwd="/", clock=FakeClock(), id_factory=Counter(), fsync=False)
    with pytest.raises(SessionError):
        t.append_message({"role": "user", "content": object()})
    assert t.entries() == ()
    naive = Transcript.open(t.path, clock=lambda: datetime(2026, 1, 1), fsync=False)
    with pytest.raises(ValueError):
        naive.append_message({"role": "user", "content": "x"})


# ---- store ------------------------------------------------------------------------------------


def make_store(root: Path, clock: FakeClock | None = None, ids: Any = None) -> SessionStore:
    return SessionStore(
        root / "agents" / "main" / "sessions",
        clock=clock or FakeClock(),
        id_factory=ids or Counter("sess-"),
        cwd="/ws",
        fsync=False,
    )


def test_store_round_trip_and_on_disk_shape(tmp_path: Path) -> None:
    clock = FakeClock()
    store = make_store(tmp_path, clock)
    assert store.get("agent:main:main") is None and store.list() == []

    opened = store.get_or_create("agent:main:main")
    assert opened.created and opened.record.session_id == "sess-1"
    assert opened.transcript_path == store.directory / "sess-1.jsonl"
    header = read_transcript(opened.transcript_path).header
    assert (header.session_id, header.session_key, header.cwd) == ("sess-1", "agent:main:main", "/ws")

    clock.advance(minutes=5)
    again = store.get_or_create("agent:main:main")
    assert not again.created and again.record == opened.record

    updated = store.update("agent:main:main", compaction_count=2, memory_flush_compaction_count=2)
    assert updated.updated_at == T0 + timedelta(minutes=5) and updated.created_at == T0

    reread = make_store(tmp_path).get("agent:main:main")
    assert reread == updated
    on_disk = json.loads(store.path.read_text())
    assert on_disk == {
        "agent:main:main": {
            "sessionId": "sess-1",
            "createdAt": "2026-01-20T09:30:00.000Z",
            "updatedAt": "2026-01-20T09:35:00.000Z",
            "originChannel": None,
            "chatType": "dm",
            "inputTokens": 0,
            "outputTokens": 0,
            "totalTokens": 0,
            "contextTokens": 0,
            "compactionCount": 2,
            "memoryFlushCompactionCount": 2,
            "previousSessionId": None,
        }
    }
    assert mode(store.path) == 0o600 and mode(store.directory) == 0o700
    assert not list(store.directory.glob(".*tmp*"))


def test_store_defaults_from_key_and_extra_fields_survive(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    rec = store.get_or_create("agent:main:telegram:group:-100").record
    assert (rec.origin_channel, rec.chat_type) == ("telegram", "group")
    data = json.loads(store.path.read_text())
    data["agent:main:telegram:group:-100"]["label"] = "family"
    store.path.write_text(json.dumps(data))
    rec = store.update("agent:main:telegram:group:-100", context_tokens=7)
    assert rec.extra == {"label": "family"}
    assert json.loads(store.path.read_text())["agent:main:telegram:group:-100"]["label"] == "family"
    assert store.warnings == []


def test_store_update_errors(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    with pytest.raises(SessionError):
        store.update("agent:main:main", context_tokens=1)
    store.get_or_create("agent:main:main")
    with pytest.raises(TypeError):
        store.update("agent:main:main", no_such_field=1)
    with pytest.raises(TypeError):
        store.update("agent:main:main", session_id="other")
    with pytest.raises(SessionError):
        store.get_or_create("bad key\n")


def test_add_usage_accumulates(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.get_or_create("cron:j1")
    store.add_usage("cron:j1", input_tokens=100, output_tokens=20, context_tokens=100)
    rec = store.add_usage("cron:j1", input_tokens=50, output_tokens=5)
    assert (rec.input_tokens, rec.output_tokens, rec.total_tokens, rec.context_tokens) == (150, 25, 175, 100)
    assert rec.chat_type is None


def test_new_session_rotates_and_keeps_old_transcript(tmp_path: Path) -> None:
    clock = FakeClock()
    store = make_store(tmp_path, clock)
    first = store.get_or_create("agent:main:main", origin_channel="terminal")
    Transcript.open(first.transcript_path, fsync=False).append_message({"role": "user", "content": "old"})
    store.update("agent:main:main", compaction_count=3, input_tokens=10)
    clock.advance(hours=1)

    second = store.new_session("agent:main:main")
    assert second.created and second.record.session_id == "sess-2"
    assert second.record.previous_session_id == "sess-1"
    assert second.record.created_at == T0 + timedelta(hours=1)
    assert (second.record.compaction_count, second.record.input_tokens) == (0, 0)
    assert second.record.origin_channel == "terminal"
    assert first.transcript_path.exists() and second.transcript_path.exists()
    old_entries = read_transcript(first.transcript_path).entries
    assert [e.message["content"] for e in old_entries if isinstance(e, MessageEntry)] == ["old"]
    assert store.get("agent:main:main") == second.record
    assert store.get_or_create("agent:main:main").record.session_id == "sess-2"


def test_new_session_on_unknown_key_creates(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    opened = store.new_session("agent:main:main")
    assert opened.created and opened.record.previous_session_id is None


def test_missing_transcript_is_recreated_with_warning(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    opened = store.get_or_create("agent:main:main")
    opened.transcript_path.unlink()
    again = store.get_or_create("agent:main:main")
    assert not again.created and again.transcript_path.exists()
    assert read_transcript(again.transcript_path).header.session_key == "agent:main:main"
    assert any("missing" in w for w in store.warnings)


def _hammer(root: str, key: str, own_key: str, n: int, start: Any) -> None:
    store = make_store(Path(root), ids=_UuidIds())
    start.wait()  # both processes start together, so their read-modify-writes really overlap
    store.get_or_create(own_key)
    for _ in range(n):
        store.add_usage(key, input_tokens=1, output_tokens=2)


class _UuidIds:
    def __call__(self) -> str:
        import uuid

        return str(uuid.uuid4())


def test_concurrent_updates_from_two_processes_lose_nothing(tmp_path: Path) -> None:
    store = make_store(tmp_path, ids=_UuidIds())
    store.get_or_create("agent:main:main")
    ctx = multiprocessing.get_context("spawn")
    # 200 each: without the lock about half of these updates are lost (checked when writing this test).
    n = 200
    start = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_hammer, args=(str(tmp_path), "agent:main:main", f"cron:p{i}", n, start))
        for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    rec = store.get("agent:main:main")
    assert rec is not None
    assert (rec.input_tokens, rec.output_tokens, rec.total_tokens) == (2 * n, 4 * n, 6 * n)
    assert {r.key for r in store.list()} == {"agent:main:main", "cron:p0", "cron:p1"}
    assert store.warnings == []


def _populated_store(tmp_path: Path) -> tuple[SessionStore, FakeClock]:
    clock = FakeClock()
    store = make_store(tmp_path, clock)
    main = store.get_or_create("agent:main:main")
    t = Transcript.open(main.transcript_path, clock=clock, fsync=False)
    m = t.append_message({"role": "user", "content": "x"})
    t.append_compaction(summary="s", first_kept_entry_id=m.id, tokens_before=10)
    clock.advance(minutes=1)
    store.new_session("agent:main:main")  # sess-2 is current for the main key
    clock.advance(minutes=1)
    store.get_or_create("agent:main:telegram:group:-5")  # sess-3
    return store, clock


def test_corrupt_sessions_json_is_moved_aside_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, clock = _populated_store(tmp_path)
    t2 = Transcript.open(store.transcript_path("sess-2"), clock=clock, fsync=False)
    clock.advance(minutes=3)
    t2.append_message({"role": "user", "content": "later"})
    t2.append_compaction(summary="s", first_kept_entry_id=None, tokens_before=1)
    garbage = b'{"agent:main:main": {"sessionId": "sess-2", "crea'
    store.path.write_bytes(garbage)

    fresh = make_store(tmp_path, clock)
    with caplog.at_level("WARNING", logger="hermit.sessions"):
        records = {r.key: r for r in fresh.list()}
    aside = fresh.directory / "sessions.json.corrupt-20260120T093500Z"
    assert aside.read_bytes() == garbage
    assert len(fresh.warnings) == 1 and "corrupt" in fresh.warnings[0] and aside.name in fresh.warnings[0]
    assert any("corrupt" in r.message for r in caplog.records)

    assert set(records) == {"agent:main:main", "agent:main:telegram:group:-5"}
    main = records["agent:main:main"]
    assert main.session_id == "sess-2" and main.previous_session_id == "sess-1"
    assert main.compaction_count == 1
    assert main.updated_at == T0 + timedelta(minutes=5)
    group = records["agent:main:telegram:group:-5"]
    assert (group.session_id, group.origin_channel, group.chat_type) == ("sess-3", "telegram", "group")
    # The rebuilt file is valid and used from now on, without further warnings.
    again = make_store(tmp_path, clock)
    assert {r.key: r for r in again.list()} == records and again.warnings == []
    assert again.get_or_create("agent:main:main").record.session_id == "sess-2"


def test_partially_invalid_sessions_json_keeps_good_entries(tmp_path: Path) -> None:
    store, clock = _populated_store(tmp_path)
    store.update("agent:main:telegram:group:-5", input_tokens=99)
    data = json.loads(store.path.read_text())
    data["agent:main:main"]["inputTokens"] = "lots"
    store.path.write_text(json.dumps(data))
    clock.advance(seconds=1)

    records = {r.key: r for r in make_store(tmp_path, clock).list()}
    assert records["agent:main:telegram:group:-5"].input_tokens == 99  # salvaged as is
    assert records["agent:main:main"].session_id == "sess-2"  # rebuilt from headers
    assert len(list(store.directory.glob("sessions.json.corrupt-*"))) == 1


def test_second_corruption_gets_a_distinct_aside_name(tmp_path: Path) -> None:
    store, clock = _populated_store(tmp_path)
    store.path.write_text("not json")
    store.list()
    store.path.write_text("[]")
    store.list()
    assert len(list(store.directory.glob("sessions.json.corrupt-*"))) == 2


def test_missing_sessions_json_is_rebuilt_from_transcripts(tmp_path: Path) -> None:
    store, clock = _populated_store(tmp_path)
    orphan = Transcript.create(store.directory / "legacy.jsonl", cwd="/", clock=clock, fsync=False)
    store.path.unlink()
    fresh = make_store(tmp_path, clock)
    rec = fresh.get("agent:main:main")
    assert rec is not None and rec.session_id == "sess-2"
    assert fresh.get(f"recovered:{orphan.path.stem}") is not None
    assert store.path.exists() and any("missing" in w for w in fresh.warnings)


def test_for_agent_uses_state_layout(tmp_path: Path) -> None:
    store = SessionStore.for_agent(StatePaths(tmp_path), "work", clock=FakeClock(), fsync=False)
    opened = store.get_or_create("agent:work:main")
    assert opened.transcript_path.parent == tmp_path / "agents" / "work" / "sessions"
    assert read_transcript(opened.transcript_path).header.cwd == str(tmp_path / "workspace-work")
