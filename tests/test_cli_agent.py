"""The agent CLI: `hermit agent -m` and `hermit chat` as subprocesses, the chat REPL, sessions and agents. What a
chat left behind is read back with `hermit sessions` in this process (the sessions commands are tested below)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agenthelpers import fixed_clock, load_offline
from clihere import hermit_here
from hermit.agent.runtime import AgentRuntime
from hermit.cli.chat import ChatRepl
from hermit.cli.main import main
from hermit.testing import FakeProvider, FunctionModel, ScriptedModel

_KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "HERMIT_HOME")


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARS}
    env["HERMIT_HOME"] = str(home)
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


def hermit(home: Path, *args: str, stdin: str | None = None, timeout: float = 60,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermit.cli.main", *args],
        input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True, text=True, env={**clean_env(home), **(env or {})}, timeout=timeout,
    )


def write_config(home: Path, fake: FakeProvider, api: str) -> None:
    (home / "workspace").mkdir(parents=True, exist_ok=True)  # as after `hermit init`
    provider: dict[str, Any] = (
        {"type": "anthropic", "base_url": fake.base_url, "api_key": "sk-ant-test"} if api == "anthropic"
        else {"type": "openai-compatible", "base_url": fake.openai_base_url}
    )
    cfg = {
        # No daily reset: these processes run on the real clock, and a 04:00 between two turns of one chat would
        # start another session under the test.
        "agents": {"defaults": {"model": "fake/model-x", "memory_search": {"provider": "none"},
                                "session": {"reset": {"mode": "off"}}}},
        "models": {"providers": {"fake": provider}},
    }
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_hermit_agent_one_turn_as_subprocess(tmp_path: Path, api: str) -> None:
    home = tmp_path / "home"
    script = [
        {"tool_calls": [{"name": "write", "arguments": {"path": "memory/note.md", "content": "- kiwi\n"}}]},
        {"text": "Saved.", "usage": {"input_tokens": 120, "output_tokens": 7}},
        {"text": "Plain reply."},
    ]
    with FakeProvider(script) as fake:
        write_config(home, fake, api)
        proc = hermit(home, "agent", "-m", "remember kiwi", "--json")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        plain = hermit(home, "agent", "-m", "hello", "--session", "agent:main:telegram:group:-1001")
    assert out["reply"] == "Saved." and out["delivered"] is True and out["model"] == "fake/model-x"
    assert out["sessionKey"] == "agent:main:main"
    assert out["toolCalls"][0]["name"] == "write" and out["toolCalls"][0]["isError"] is False
    assert out["toolCalls"][0]["arguments"] == {"path": "memory/note.md", "content": "- kiwi\n"}
    assert out["usage"]["output"] >= 7 and out["usage"]["input"] >= 120
    # What the main session writes to memory is owner-only (memory/policy/audience.py).
    assert (home / "workspace" / "memory" / "note.md").read_text() == (
        '<!-- origin session="agent:main:main" audience="owner" -->\n- kiwi\n<!-- /origin -->\n')
    assert plain.returncode == 0 and plain.stdout == "Plain reply.\n", plain.stderr
    assert len(fake.requests) == 3 and all(r.api == api for r in fake.requests)
    assert all(r.body.get("stream") for r in fake.requests[2:])  # plain mode streams to stdout


def test_exec_does_not_see_hermits_provider_keys(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"tool_calls": [{"name": "exec", "arguments": {"command": "env"}}]}, "done"]) as fake:
        write_config(home, fake, "openai")
        proc = hermit(home, "agent", "-m", "show env",
                      env={"OPENAI_API_KEY": "sk-secret-123", "ANTHROPIC_API_KEY": "sk-ant-456", "MY_VAR": "visible"})
    assert proc.returncode == 0, proc.stderr
    output = json.dumps(fake.requests[1].body)
    # A whitelist, not a blacklist: other secrets in the environment stay out too.
    assert "PATH=" in output and "sk-secret-123" not in output and "sk-ant-456" not in output
    assert "MY_VAR" not in output


def test_hermit_agent_reports_provider_errors_without_traceback(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"error": 401}]) as fake:
        write_config(home, fake, "anthropic")
        proc = hermit(home, "agent", "-m", "hi")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and "hint: " in proc.stderr


def test_hermit_chat_without_a_provider_prints_the_help_screen(tmp_path: Path) -> None:
    (tmp_path / "home" / "workspace").mkdir(parents=True)  # after `hermit init`
    proc = hermit(tmp_path / "home", "chat")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr == ""
    out = proc.stdout
    assert out.splitlines()[2].lstrip().startswith("hermit setup")  # the command that does it comes first
    assert "--provider ollama" in out and "--provider openai-compatible --base-url" in out
    assert "ANTHROPIC_API_KEY" in out and "OPENAI_API_KEY" in out and "agents.defaults.model" in out
    assert len(out.splitlines()) <= 24  # one screen
    agent = hermit(tmp_path / "home", "agent", "-m", "hi")
    assert agent.returncode == 1 and "no language model is configured" in agent.stderr


def test_hermit_chat_piped_session(tmp_path: Path) -> None:
    home = tmp_path / "home"
    slug = {"match": {"contains": "kebab-case slug"}, "text": "greeting-chat"}  # the session-memory hook
    with FakeProvider([slug, "first answer", "fresh start", "third"]) as fake:
        write_config(home, fake, "openai")
        proc = hermit(home, "chat", stdin="hello\n/status\n/new hi again\n/context\n/bogus\nthird one\n/exit\nnever\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "hermit> first answer" in out and "hermit> fresh start" in out and "hermit> third" in out
    assert "model      fake/model-x" in out and "new session " in out
    assert "fixed prompt (system + tools)" in out and "unknown command /bogus" in out
    assert len(fake.requests) == 4
    assert [p.name.endswith("-greeting-chat.md") for p in (home / "workspace" / "memory").iterdir()] == [True]
    sessions = hermit_here(home, "sessions", "list", "--json", env=clean_env(home))
    rows = json.loads(sessions.stdout)
    assert [r["key"] for r in rows] == ["agent:main:main"] and rows[0]["previousSessionId"]
    shown = hermit_here(home, "sessions", "show", "agent:main:main", env=clean_env(home))
    assert "user: hi again" in shown.stdout and "assistant: fresh start" in shown.stdout
    assert "hello" not in shown.stdout  # that was the previous session


# ---- the REPL in-process ------------------------------------------------------------------------


class Lines:
    def __init__(self, *items: str | BaseException) -> None:
        self.items: Iterator[str | BaseException] = iter(items)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        item = next(self.items, EOFError())
        if isinstance(item, BaseException):
            raise item
        return item


def test_repl_ctrl_c_cancels_a_turn_and_ctrl_d_exits(tmp_path: Path) -> None:
    calls = {"n": 0}

    def reply(request: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt
        return {"tool_calls": [{"name": "read", "arguments": {"path": "IDENTITY.md"}}]} if calls["n"] == 2 else "ok!"

    rt = AgentRuntime(load_offline(tmp_path / "home").agent(), FunctionModel(reply), clock=fixed_clock, fsync=False)
    out = io.StringIO()
    lines = Lines("slow question", KeyboardInterrupt(), "/verbose on", "again", "/status")
    repl = ChatRepl(rt, "agent:main:main", out=out, read_line=lines, interactive=True)
    assert repl.loop() == 0
    text = out.getvalue()
    assert "[cancelled]" in text and "^C" in text and "verbose on" in text
    assert "· read {\"path\": \"IDENTITY.md\"}" in text and "✓ # IDENTITY.md" in text and "hermit> ok!" in text
    assert "sandbox    off (non-main)" in text
    assert lines.prompts[0] == "\nyou> " and text.startswith("Hermit · agent main · scripted/scripted-1")


def test_repl_reset_passes_the_rest_as_first_prompt(tmp_path: Path) -> None:
    model = ScriptedModel([{"match": {"contains": "kebab-case slug"}, "text": "greeting"}, "one", "two"])
    rt = AgentRuntime(load_offline(tmp_path / "home").agent(), model, clock=fixed_clock, fsync=False)
    out = io.StringIO()
    ChatRepl(rt, "agent:main:main", out=out, read_line=Lines("hi", "/reset  what now?", "/exit"),
             interactive=False).loop()
    assert [m.text for m in model.requests[2].messages] == ["what now?"]  # fresh history
    assert "saved to memory/2026-01-20-greeting.md" in out.getvalue()
    rec = rt.session("agent:main:main")
    assert rec is not None and rec.previous_session_id is not None


# ---- sessions and agents commands ---------------------------------------------------------------


def test_agents_add_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    timezone: Europe/Paris\n"
                                      "models:\n  providers:\n    local: {type: openai-compatible, base_url: 'http://x/v1'}\n")
    assert main(["--home", str(home), "agents", "add", "work", "--model", "local/llama"]) == 0
    data = yaml.safe_load((home / "hermit.yaml").read_text())
    assert data["agents"]["list"] == [{"id": "main"}, {"id": "work", "model": "local/llama"}]
    assert data["agents"]["defaults"] == {"timezone": "Europe/Paris"} and "local" in data["models"]["providers"]
    assert (home / "workspace-work" / "AGENTS.md").exists()
    assert main(["--home", str(home), "agents", "add", "work"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["--home", str(home), "agents", "add", "Bad Id"]) == 1
    assert main(["--home", str(home), "agents", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["default"], r["sandbox"]) for r in rows] == [("main", True, "non-main"),
                                                                     ("work", False, "non-main")]
    assert rows[1]["workspace"] == str(home / "workspace-work")


def test_sessions_show_json_and_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    rt = AgentRuntime(load_offline(home).agent(), ScriptedModel(["pong"]), fsync=False)
    rt.run_turn("agent:main:main", "ping")
    rec = rt.session("agent:main:main")
    assert rec is not None
    assert main(["--home", str(home), "sessions", "show", rec.session_id[:8], "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert entries[0]["type"] == "session" and [e["message"]["role"] for e in entries[1:]] == ["user", "assistant"]
    assert main(["--home", str(home), "sessions", "show", "agent:main:nope"]) == 1
    assert "no session" in capsys.readouterr().err
    assert main(["--home", str(home), "sessions", "list"]) == 0
    assert "agent:main:main" in capsys.readouterr().out


def test_secrets_in_tool_call_arguments_are_masked_in_verbose_and_json_output(tmp_path: Path) -> None:
    """`--verbose` cut a tool call's arguments at 120 characters, leaving the first half of a key the output's
    whole-key masking could not see; `--json` escaped a secret holding `"` or `\\`, so it was not found."""
    home = tmp_path / "home"
    key, quoted = "sk-live-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 'Pa\\ss"w0rd-Zq81-long'
    env = {"MY_API_KEY": key, "DB_PASSWORD": quoted}
    runs = []
    for args, path in ((["--verbose"], "x" * 85 + " " + key), (["--json"], "y " + quoted)):
        with FakeProvider([{"tool_calls": [{"name": "read", "arguments": {"path": path}}]}, "done"]) as fake:
            write_config(home, fake, "openai")
            runs.append(hermit(home, "agent", *args, "-m", "hi", env=env))
    verbose, as_json = runs
    assert verbose.returncode == 0 and as_json.returncode == 0, verbose.stderr + as_json.stderr
    shown = verbose.stdout + verbose.stderr + as_json.stdout + as_json.stderr
    assert "sk-live-ABCD" not in shown and "w0rd-Zq81" not in shown
    assert "· read" in verbose.stderr and json.loads(as_json.stdout)["reply"] == "done"
    assert '"path": "y ***"' in as_json.stdout  # the call is there, its secret masked
