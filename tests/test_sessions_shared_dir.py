"""Sessions on several hosts: two state dirs (two "hosts") sharing one session.store_dir list and continue
the same session, a concurrent turn is refused as "session busy", and nothing is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from agenthelpers import MODEL_REF, load
from hermit.agent.runtime import AgentRuntime
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.errors import SessionBusy
from hermit.models.registry import build_model
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT

KEY = "agent:main:main"
NO_RESET = {"reset": {"mode": "off"}}  # these tests are about one session shared, never about its daily reset


def _host(tmp_path: Path, name: str, shared: str, fake: FakeProvider) -> Path:
    """A state dir with its own config, workspace and index, whose sessions live in `shared`. No daily reset: a
    04:00 between two turns of a test would start a second session (and transcript) whatever the hosts do."""
    home = tmp_path / name
    (home / "workspace").mkdir(parents=True)  # as after `hermit init`
    cfg = {"agents": {"defaults": {"model": "fake/m", "memory_search": {"provider": "none"},
                                   "session": {"store_dir": shared, **NO_RESET}}},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url}}}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
    return home


def _hermit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def _popen(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.Popen([sys.executable, "-m", "hermit.cli.main", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def _messages(shared: Path) -> list[tuple[str, str]]:
    [transcript] = list((shared / "agents" / "main" / "sessions").glob("*.jsonl"))
    entries = [json.loads(x) for x in transcript.read_text().splitlines()[1:]]
    out = []
    for e in entries:
        if e["type"] == "message":
            content = e["message"]["content"]
            text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
            out.append((e["message"]["role"], text))
    return out


def test_store_dir_places_sessions_under_the_shared_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermit.yaml").write_text(yaml.safe_dump(
        {"agents": {"defaults": {"session": {"store_dir": "../shared"}}, "list": [{"id": "main"}, {"id": "work"}]}}))
    loaded = load_config(StatePaths(home))
    dirs = {a.id: a.sessions_dir for a in loaded.agents}
    shared = tmp_path / "shared"  # resolved: judged and used where it resolves (config.load.sessions_problem)
    assert dirs == {"main": shared / "agents/main/sessions", "work": shared / "agents/work/sessions"}
    (home / "hermit.yaml").write_text("{}")
    [default] = load_config(StatePaths(home)).agents
    assert default.sessions_dir == home / "agents" / "main" / "sessions"  # unchanged without store_dir


def test_two_hosts_list_and_continue_one_session_and_take_turns(tmp_path: Path) -> None:
    shared = tmp_path / "shared-sessions"
    with FakeProvider([{"text": "hello A"}, {"text": "hello B"},
                       {"text": "slow answer", "delay": 1.0, "repeat": True}]) as fake:
        host_a = _host(tmp_path, "host-a", str(shared), fake)
        host_b = _host(tmp_path, "host-b", str(shared), fake)

        first = _hermit(host_a, "agent", "-m", "remember the blue door")
        assert first.returncode == 0, first.stderr
        assert "hello A" in first.stdout

        listed = _hermit(host_b, "sessions", "list", "--all", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert [(r["key"], r["messages"], r["current"]) for r in rows] == [(KEY, 2, True)]

        second = _hermit(host_b, "agent", "-m", "what door?")
        assert second.returncode == 0, second.stderr
        # Host B's model request carried host A's turn: it continued the session, not a new one.
        sent = fake.requests[-1].body["messages"]
        assert any("remember the blue door" in json.dumps(m) for m in sent)

        # Both hosts answer in the same session at once: one turn at a time, the loser is told "busy".
        procs = [_popen(h, "agent", "-m", f"at once from {h.name}") for h in (host_a, host_b)]
        results = [p.communicate(timeout=PROC_TIMEOUT) for p in procs]

    codes = [p.returncode for p in procs]
    assert 0 in codes
    for code, (out, err) in zip(codes, results, strict=True):
        assert "Traceback" not in err
        if code != 0:
            assert f"session busy: another hermit process is answering in session {KEY}" in err
        else:
            assert "slow answer" in out
    msgs = _messages(shared)
    roles = [r for r, _ in msgs]
    assert roles == ["user", "assistant"] * (len(roles) // 2)  # never user, user, assistant, assistant
    texts = [t for _, t in msgs]
    assert texts[:4] == ["remember the blue door", "hello A", "what door?", "hello B"]
    done = [h.name for h, c in zip((host_a, host_b), codes, strict=True) if c == 0]
    assert sorted(t for t in texts[4:] if t.startswith("at once")) == sorted(f"at once from {n}" for n in done)
    # Nothing of either host landed in its own state dir.
    assert not (host_a / "agents" / "main" / "sessions").exists()
    assert not (host_b / "agents" / "main" / "sessions").exists()


def test_lost_sessions_json_is_rebuilt_by_the_other_host(tmp_path: Path) -> None:
    shared = tmp_path / "shared-sessions"
    with FakeProvider([{"text": "noted", "repeat": True}]) as fake:
        host_a = _host(tmp_path, "host-a", str(shared), fake)
        host_b = _host(tmp_path, "host-b", str(shared), fake)
        assert _hermit(host_a, "agent", "-m", "first").returncode == 0
        (shared / "agents" / "main" / "sessions" / "sessions.json").unlink()  # e.g. a sync conflict removed it
        cont = _hermit(host_b, "agent", "-m", "second")
        assert cont.returncode == 0, cont.stderr
    assert [t for _, t in _messages(shared)] == ["first", "noted", "second", "noted"]


def test_a_turn_on_one_host_makes_the_other_host_busy_then_it_continues(tmp_path: Path) -> None:
    shared = tmp_path / "shared-sessions"
    with FakeProvider([{"text": "slow from A", "delay": 3.0}, {"text": "from B"}]) as fake:
        host_a = _host(tmp_path, "host-a", str(shared), fake)
        slow = _popen(host_a, "agent", "-m", "long question on A")
        try:
            loaded = load(tmp_path / "host-b", "openai", fake,
                          defaults={"memory_search": {"provider": "none"},
                                    "session": {"store_dir": str(shared), **NO_RESET}})
            agent = loaded.agent(None)
            runtime = AgentRuntime(agent, build_model(MODEL_REF, loaded.config.models, {}), memory=None,
                                   clock=lambda: datetime.now(UTC), fsync=False, home=loaded.paths.home)
            runtime.session_wait_seconds = 0.2
            sessions = shared / "agents" / "main" / "sessions"
            deadline = datetime.now(UTC).timestamp() + 60
            while not any("long question on A" in p.read_text() for p in sessions.glob("*.jsonl")):
                assert datetime.now(UTC).timestamp() < deadline, "host A never started its turn"
                time.sleep(0.05)
                slow.poll()
                assert slow.returncode is None, slow.stderr.read() if slow.stderr else ""
            with pytest.raises(SessionBusy, match=f"session busy: another hermit process is answering in session {KEY}"):
                runtime.run_turn(KEY, "interrupting from B")
            out, err = slow.communicate(timeout=PROC_TIMEOUT)
            assert slow.returncode == 0, err
            assert "slow from A" in out
            result = runtime.run_turn(KEY, "after A from B")
        finally:
            if slow.poll() is None:
                slow.kill()
                slow.wait()
    assert result.reply == "from B"
    assert _messages(shared) == [("user", "long question on A"), ("assistant", "slow from A"),
                                 ("user", "after A from B"), ("assistant", "from B")]
