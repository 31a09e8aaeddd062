"""Sessions across processes and after damage: one turn at a time per session (a cross-process lock),
token counters and session keys recovered from the transcripts when sessions.json is rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agenthelpers import load, make_runtime
from hermit.errors import SessionBusy
from hermit.sessions.lock import lock_path, session_lock
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import read_transcript
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return {**env, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}


def _config(home: Path, fake: FakeProvider) -> None:
    """No daily reset: a 04:00 between two of the turns would start a second session, whatever the locking does."""
    (home / "workspace").mkdir(parents=True, exist_ok=True)  # as after `hermit init`
    cfg = {"agents": {"defaults": {"model": "fake/m", "memory_search": {"provider": "none"},
                                   "session": {"reset": {"mode": "off"}}}},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url}}}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))


def _roles(home: Path) -> list[str]:
    [transcript] = list((home / "agents" / "main" / "sessions").glob("*.jsonl"))
    lines = [json.loads(x) for x in transcript.read_text().splitlines()[1:]]
    return [x["message"]["role"] for x in lines if x["type"] == "message"]


def test_concurrent_agent_processes_take_turns_in_one_session(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "answer", "delay": 0.4, "repeat": True}]) as fake:
        _config(home, fake)
        subprocess.run([sys.executable, "-m", "hermit.cli.main", "agent", "-m", "start"], env=_env(home),
                       check=True, capture_output=True, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)
        procs = [subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "agent", "-m", f"message {i}"],
                                  env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL) for i in range(4)]
        results = [p.communicate(timeout=PROC_TIMEOUT) for p in procs]
    codes = [p.returncode for p in procs]
    for code, (out, err) in zip(codes, results, strict=True):
        assert (code == 0 and "answer" in out) or "session busy: another hermit process is answering in session agent:main:main" in err
        assert "Traceback" not in err
    roles = _roles(home)
    assert roles == ["user", "assistant"] * (len(roles) // 2)  # never user, user, assistant, assistant
    assert len(roles) == 2 * (1 + codes.count(0))


def test_second_holder_waits_then_gets_session_busy(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from hermit.sessions.lock import session_lock\n"
         "with session_lock(Path(sys.argv[1]), 'agent:main:main'):\n"
         "    print('held', flush=True); time.sleep(30)\n", str(sessions)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(SessionBusy, match="session busy: another hermit process is answering in session "
                                              "agent:main:main"), session_lock(sessions, "agent:main:main",
                                                                               wait_seconds=0.3):
            pass
        assert 0.25 <= time.monotonic() - t0 < 3
        with session_lock(sessions, "agent:main:other", wait_seconds=0):
            pass  # other sessions are not blocked
    finally:
        holder.kill()
        holder.wait()
    with session_lock(sessions, "agent:main:main", wait_seconds=0):
        pass  # the kernel released the dead holder's lock
    assert lock_path(sessions, "agent:main:main").parent == sessions
    assert lock_path(sessions, "a:b") != lock_path(sessions, "a_b")


KEY = "agent:main:main"


def _turns(tmp_path: Path, *texts: str) -> tuple[Any, FakeProvider]:
    """A runtime (not closed) after one turn per text, each reply with known usage."""
    fake = FakeProvider([{"text": f"reply {i}", "usage": {"input_tokens": 100 * (i + 1), "output_tokens": 7,
                                                          "cache_read_tokens": 10}}
                         for i in range(len(texts) + 3)]).start()
    rt = make_runtime(load(tmp_path / "home", "openai", fake), None, memory=False)
    for text in texts:
        rt.run_turn(KEY, text)
    return rt, fake


def test_rebuilt_sessions_json_recomputes_token_counters(tmp_path: Path) -> None:
    rt, fake = _turns(tmp_path, "one", "two")
    try:
        before = rt.store.get(KEY)
        assert before is not None and before.total_tokens > 0
        rt.store.path.unlink()
        after = SessionStore(rt.store.directory).get(KEY)
        assert after is not None and after.session_id == before.session_id
        assert (after.input_tokens, after.output_tokens, after.total_tokens, after.context_tokens) == (
            before.input_tokens, before.output_tokens, before.total_tokens, before.context_tokens)
        assert (after.input_tokens, after.output_tokens) == (110 + 210, 14)
    finally:
        fake.stop()


def _damage_header(path: Path, replacement: bytes) -> None:
    lines = path.read_bytes().split(b"\n", 1)
    path.write_bytes(replacement + b"\n" + lines[1])


def test_damaged_header_keeps_the_session_key_and_the_conversation(tmp_path: Path) -> None:
    rt, fake = _turns(tmp_path, "my name is Ada")
    try:
        record = rt.store.get(KEY)
        assert record is not None
        transcript = rt.store.transcript_path(record.session_id)
        _damage_header(transcript, b"\x00\x00garbage that is not a header")
        rt.run_turn(KEY, "second")  # the store notices and appends the header's stand-in
        assert any("session-header" in w for w in rt.store.warnings)
        assert read_transcript(transcript).header.session_key == KEY
        assert not read_transcript(transcript).problems  # the stand-in answers for line 1
        rt.store.path.unlink()  # sessions.json lost too: rebuilt from the transcripts
        rebuilt = SessionStore(rt.store.directory).get(KEY)
        assert rebuilt is not None and rebuilt.session_id == record.session_id
        rt.run_turn(KEY, "third")
        sent = json.dumps(fake.requests[-1].body)
        assert "my name is Ada" in sent and "second" in sent  # the conversation went on
        assert not [k for k in SessionStore(rt.store.directory)._read() if k.startswith("recovered:")]
        assert transcript.read_bytes().startswith(b"\x00\x00garbage")  # never rewritten
    finally:
        fake.stop()


def test_damaged_header_and_damaged_store_at_once(tmp_path: Path) -> None:
    rt, fake = _turns(tmp_path, "hello")
    try:
        record = rt.store.get(KEY)
        assert record is not None
        transcript = rt.store.transcript_path(record.session_id)
        # A torn header still shows its key; a truncated sessions.json still shows key → sessionId.
        _damage_header(transcript, b'{"type":"session","version":1,"id":"' + record.session_id.encode()
                       + b'","sessionKey":"agent:main:main","timest')
        other = SessionStore(rt.store.directory)
        other.path.write_bytes(rt.store.path.read_bytes()[:60])
        assert other.get(KEY) is not None and other.get(KEY).session_id == record.session_id  # type: ignore[union-attr]
        other.path.unlink()
        assert SessionStore(rt.store.directory).get(KEY).session_id == record.session_id  # type: ignore[union-attr]
        # With nothing legible anywhere, the transcript is still listed, under recovered:<id>.
        _damage_header(transcript, b"###")
        store = SessionStore(rt.store.directory)
        store.path.unlink()
        assert f"recovered:{record.session_id}" in store._read()
    finally:
        fake.stop()
