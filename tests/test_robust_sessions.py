"""Sessions across processes and after damage: one turn at a time per session (a cross-process lock),
token counters and session keys recovered from the transcripts when sessions.json is rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hermit.errors import SessionBusy
from hermit.sessions.lock import lock_path, session_lock
from hermit.testing import FakeProvider


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return {**env, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}


def _config(home: Path, fake: FakeProvider) -> None:
    (home / "workspace").mkdir(parents=True, exist_ok=True)  # as after `hermit init`
    cfg = {"agents": {"defaults": {"model": "fake/m", "memory_search": {"provider": "none"}}},
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
                       check=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        procs = [subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "agent", "-m", f"message {i}"],
                                  env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL) for i in range(4)]
        results = [p.communicate(timeout=120) for p in procs]
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
