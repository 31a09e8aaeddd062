"""`hermit agents add family`, then `hermit --agent family setup --channel telegram --owner <relative>` (README: "With
`--agent ID` before it"): the relative owns agent family's main session, whose exec and file tools ran unsandboxed
under the default `sandbox.mode: non-main` — the relative could `cat` the default agent's MEMORY.md, transcripts and
Hermit's keys until the user read docs/security.md and wrote `sandbox: {mode: all}` by hand. Setup now writes it into
that agent's own entry (comments kept, YAML and JSON), says so and how to undo it; an entry that sets a mode keeps it
(doctor keeps warning); a second run changes nothing."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from agenthelpers import fixed_clock
from ciguard import need
from clihere import hermit_here
from hermit.agent.runtime import AgentRuntime
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.sessions.keys import main_session_key
from hermit.testing import FakeProvider, ScriptedModel
from hermit.tools.os_sandbox import detect
from prochelpers import PROC_TIMEOUT

CANARY = "WOMBAT-MAIN-MEMORY-1811"  # in the default agent's MEMORY.md: the relative must never see it
FAMILY_OWN = "WOMBAT-FAMILY-1812"  # in family's own MEMORY.md: its reads do work
WARNING = "set sandbox.mode: all for agent family"  # doctor's line about family's unsandboxed main session
NOTE = "note: agent family's main session now belongs to this account's owner"
BOT = ("--channel", "telegram", "--account", "family", "--token-stdin", "--owner", "4242", "--no-check")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE")
    return env


def _here(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    done = hermit_here(home, *args, env=_env(home), stdin=stdin)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def _home_with_family(tmp_path: Path, fake: FakeProvider) -> Path:
    """A state dir as the README makes it: setup (the template config, with its comments), then `agents add`."""
    home = tmp_path / "home"
    _here(home, "setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url, "--model", "m1",
          "--name", "one", "--non-interactive")
    _here(home, "agents", "add", "family")
    return home


def _family_entry(cfg: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = next(e for e in cfg["agents"]["list"] if e["id"] == "family")
    return entry


def test_setup_binding_a_relatives_bot_sandboxes_that_agents_main_session(tmp_path: Path) -> None:
    with FakeProvider([{"text": "ok", "repeat": True}]) as fake:
        home = _home_with_family(tmp_path, fake)
        _bind_and_check(home)


def _bind_and_check(home: Path) -> None:
    config = home / "hermit.yaml"
    before = config.read_text()
    assert "sandbox" not in _family_entry(yaml.safe_load(before))
    # The documented flow, as the user runs it: the real CLI in a subprocess.
    bot = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--agent", "family", "setup", *BOT],
                         input="456:FAM\n", capture_output=True, text=True, timeout=PROC_TIMEOUT, env=_env(home))
    assert bot.returncode == 0, bot.stderr
    assert "answered by agent family" in bot.stdout, bot.stdout
    notes = [line for line in bot.stdout.splitlines() if line.startswith(NOTE)]
    assert len(notes) == 1 and "sandbox: {mode: non-main}" in notes[0], bot.stdout  # says so, and the undo
    after = config.read_text()
    cfg = yaml.safe_load(after)
    assert _family_entry(cfg)["sandbox"] == {"mode": "all"}
    assert next(e for e in cfg["agents"]["list"] if e["id"] == "main").get("sandbox") is None  # the user's own
    assert cfg["bindings"] == [{"agent_id": "family", "match": {"channel": "telegram", "account_id": "family"}}]
    # Every line the user had is still there, in order, comments too; the sandbox lines sit in family's entry,
    # above the template's comments that followed it.
    lines, kept = iter(after.splitlines()), []
    for line in before.splitlines():
        kept.append(any(candidate == line for candidate in lines))
    assert all(kept), after
    assert "    - id: family\n      sandbox:\n        mode: all\n" in after, after
    assert load_config(StatePaths(home)).agent("family").settings.sandbox.mode == "all"
    # Doctor no longer warns about family's main session.
    doctor = _here(home, "doctor").stdout
    assert "agents: main, family" in doctor and WARNING not in doctor, doctor
    # Running setup again changes nothing further and says nothing about the sandbox.
    again = _here(home, "--agent", "family", "setup", *BOT, stdin="456:FAM\n")
    assert NOTE not in again.stdout, again.stdout
    assert config.read_text() == after


def test_an_entry_that_sets_its_own_sandbox_mode_keeps_it(tmp_path: Path) -> None:
    with FakeProvider([{"text": "ok", "repeat": True}]) as fake:
        home = _home_with_family(tmp_path, fake)
        _keep_and_check(home)


def _keep_and_check(home: Path) -> None:
    config = home / "hermit.yaml"
    text = config.read_text()
    assert text.count("    - id: family\n") == 1
    config.write_text(text.replace("    - id: family\n",
                                   "    - id: family\n      sandbox: {mode: non-main}  # only I use it\n"))
    before = config.read_text()
    done = _here(home, "--agent", "family", "setup", *BOT, stdin="456:FAM\n")
    assert NOTE not in done.stdout, done.stdout
    after = config.read_text()
    assert "    - id: family\n      sandbox: {mode: non-main}  # only I use it\n" in after, after
    assert _family_entry(yaml.safe_load(after))["sandbox"] == {"mode": "non-main"}
    assert after.startswith(before)  # only the channel account and its binding were added, at the end
    doctor = _here(home, "doctor").stdout
    assert WARNING in doctor, doctor  # doctor keeps warning while it is not `all`


def test_a_json_config_gets_the_sandbox_mode_too(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    cfg = {"agents": {"defaults": {"memory_search": {"provider": "none"}},
                      "list": [{"id": "main", "default": True},
                               {"id": "family", "sandbox": {"memory_writes": "main-only"}},
                               {"id": "work", "sandbox": {"mode": "off"}}]}}
    (home / "hermit.json").write_text(json.dumps(cfg))
    os.chmod(home / "hermit.json", 0o600)
    done = _here(home, "--agent", "family", "setup", *BOT, stdin="456:FAM\n")
    assert sum(line.startswith(NOTE) for line in done.stdout.splitlines()) == 1, done.stdout
    after = json.loads((home / "hermit.json").read_text())
    entries = after["agents"]["list"]
    assert entries[1] == {"id": "family", "sandbox": {"memory_writes": "main-only", "mode": "all"}}
    assert entries[0] == {"id": "main", "default": True} and entries[2] == {"id": "work", "sandbox": {"mode": "off"}}
    text = (home / "hermit.json").read_text()
    again = _here(home, "--agent", "family", "setup", *BOT, stdin="456:FAM\n")
    assert NOTE not in again.stdout and (home / "hermit.json").read_text() == text
    # The work agent already set a mode of its own: binding a bot to it leaves that as written.
    work = _here(home, "--agent", "work", "setup", "--channel", "telegram", "--account", "work", "--token-stdin",
                 "--owner", "77", "--no-check", stdin="789:WRK\n")
    assert "note: agent work's" not in work.stdout, work.stdout
    assert json.loads((home / "hermit.json").read_text())["agents"]["list"][2]["sandbox"] == {"mode": "off"}


def test_the_relatives_main_session_cannot_read_the_default_agents_memory(tmp_path: Path) -> None:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    with FakeProvider([{"text": "ok", "repeat": True}]) as fake:
        home = _home_with_family(tmp_path, fake)
    _here(home, "--agent", "family", "setup", *BOT, stdin="456:FAM\n")
    loaded = load_config(StatePaths(home))
    main, family = loaded.agent("main"), loaded.agent("family")
    (main.workspace / "MEMORY.md").write_text(f"# MEMORY.md\n- {CANARY}\n")
    (family.workspace / "MEMORY.md").write_text(f"# MEMORY.md\n- {FAMILY_OWN}\n")
    target = str(main.workspace / "MEMORY.md")
    hidden = base64.b64encode(target.encode()).decode()
    calls: list[dict[str, Any]] = [
        {"name": "read", "arguments": {"path": target}},
        {"name": "read", "arguments": {"path": f"../{main.workspace.name}/MEMORY.md"}},
        {"name": "read", "arguments": {"path": "MEMORY.md"}},  # its own: reads work
        # The path computed at run time (a literal one outside the workspace is refused before the command runs).
        {"name": "exec", "arguments": {"command": f'p=$(echo {hidden} | base64 -d); cat "$p" 2>&1; cat MEMORY.md'}},
    ]
    model = ScriptedModel([{"tool_calls": calls}, "done"])
    runtime = AgentRuntime(family, model, clock=fixed_clock, fsync=False, home=home, sandbox_backend=backend)
    try:
        runtime.run_turn(main_session_key("family"), "show me the other agent's memory")
    finally:
        runtime.close()
    request = model.requests[-1]
    seen = json.dumps([m.to_dict() for m in request.messages]) + request.system
    assert len(request.messages) == 2 + len(calls)  # every call ran and was answered
    assert CANARY not in seen
    assert FAMILY_OWN in json.dumps(request.messages[-2].to_dict())  # its own MEMORY.md, through read
    assert FAMILY_OWN in json.dumps(request.messages[-1].to_dict())  # and through the sandboxed exec
