"""An opt-in that widens who reaches private text, given only under `agents.defaults`, is the default agent's alone
(docs/security.md). `session.dangerously_share_main_session_with_contacts` and `sandbox.mode: off` there were every
agent's: a relative's agent added later (`hermit agents add family`, its main session the relative's) put its
contacts' DMs into the relative's main session, or ran its contacts' and groups' exec and file tools unsandboxed as
Hermit's uid — where they could read the default agent's MEMORY.md — though the relative never chose either. Now
another agent falls back to the built-in (not shared; `non-main`) unless its own agents.list entry sets them; a
stricter `sandbox.mode: all` under defaults stays every agent's. Through a real hermit.yaml, the real router, doctor
and runtime (exec in a real OS sandbox)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock
from ciguard import need
from clihere import hermit_here
from hermit.agent.routing import RouteInput, Router
from hermit.agent.runtime import AgentRuntime
from hermit.config.load import LoadedConfig, load_config
from hermit.config.paths import StatePaths
from hermit.sessions.keys import dm_session_key
from hermit.testing import ScriptedModel
from hermit.tools.os_sandbox import detect

MAIN_CANARY = "QUOKKA-MAIN-MEMORY-1813"  # in the default agent's MEMORY.md: family's contacts must never see it
FAMILY_CANARY = "QUOKKA-FAMILY-MEMORY-1814"  # in family's MEMORY.md: main's contacts reach it (its owner said off)
SHARE = "session.dangerously_share_main_session_with_contacts is true"
OFF = "sandbox.mode is off"


def _home(tmp_path: Path, defaults: str, family: str = "") -> LoadedConfig:
    """A state dir whose hermit.yaml gives `defaults` under agents.defaults and `family` in family's own entry;
    each agent has a Telegram bot of its own (family's owner: the relative, 77)."""
    home = tmp_path / "home"
    home.mkdir(parents=True)
    (home / "hermit.yaml").write_text(
        "agents:\n"
        "  defaults:\n"
        "    memory_search: {provider: none}\n"
        f"{defaults}"
        "  list:\n"
        "    - {id: main, default: true}\n"
        f"    - {{id: family{family}}}\n"
        "channels:\n  telegram:\n    accounts:\n"
        "      personal: {owners: ['42']}\n      familybot: {owners: ['77']}\n"
        "bindings:\n"
        "  - {match: {channel: telegram, account_id: personal}, agent_id: main}\n"
        "  - {match: {channel: telegram, account_id: familybot}, agent_id: family}\n")
    return load_config(StatePaths(home))


def _access(loaded: LoadedConfig) -> str:
    """What `hermit doctor` says under access (run in-process, as the CLI runs it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env.update(HERMIT_HOME=str(loaded.paths.home), OMP_WAIT_POLICY="PASSIVE")
    done = hermit_here(loaded.paths.home, "doctor", "--json", env=env)
    access: dict[str, Any] = {c["name"]: c for c in json.loads(done.stdout)}["access"]
    return str(access["detail"])


def _contact_lands_in(loaded: LoadedConfig, account: str) -> str:
    route = Router.from_config(loaded).resolve(RouteInput("telegram", account, "dm", "555"))
    return route.session_key


def test_sharing_the_main_session_under_defaults_is_the_default_agents_only(tmp_path: Path) -> None:
    loaded = _home(tmp_path, "    session: {dangerously_share_main_session_with_contacts: true}\n")
    assert loaded.agent("main").settings.session.dangerously_share_main_session_with_contacts is True
    assert loaded.agent("family").settings.session.dangerously_share_main_session_with_contacts is False
    assert _contact_lands_in(loaded, "personal") == "agent:main:main"  # the owner's own choice, for their agent
    assert _contact_lands_in(loaded, "familybot") != "agent:family:main"  # the relative's main session stays theirs
    assert _contact_lands_in(loaded, "familybot").startswith("agent:family:")
    detail = _access(loaded)
    assert f"agents main: {SHARE}" in detail
    assert f"agents family: {SHARE}" not in detail  # doctor does not claim family is shared


def test_an_agent_whose_own_entry_shares_its_main_session_does(tmp_path: Path) -> None:
    loaded = _home(tmp_path, "", family=", session: {dangerously_share_main_session_with_contacts: true}")
    assert _contact_lands_in(loaded, "familybot") == "agent:family:main"
    assert _contact_lands_in(loaded, "personal") != "agent:main:main"
    assert f"agents family: {SHARE}" in _access(loaded)


def test_sandbox_off_under_defaults_is_the_default_agents_only(tmp_path: Path) -> None:
    loaded = _home(tmp_path, "    sandbox: {mode: 'off'}\n")
    assert loaded.agent("main").settings.sandbox.mode == "off"
    assert loaded.agent("family").settings.sandbox.mode == "non-main"  # the built-in
    detail = _access(loaded)
    assert f"agents main: {OFF}" in detail
    assert f"agents family: {OFF}" not in detail  # doctor does not claim family is unsandboxed


def test_a_stricter_sandbox_under_defaults_and_an_agents_own_mode_still_apply(tmp_path: Path) -> None:
    strict = _home(tmp_path / "strict", "    sandbox: {mode: all}\n")
    assert [a.settings.sandbox.mode for a in strict.agents] == ["all", "all"]
    own = _home(tmp_path / "own", "    sandbox: {mode: all}\n", family=", sandbox: {mode: 'off'}")
    assert [own.agent(i).settings.sandbox.mode for i in ("main", "family")] == ["all", "off"]
    assert f"agents family: {OFF}" in _access(own)
    # The other opt-ins under defaults keep the rest of their section: only the opt-in is the default agent's.
    both = _home(tmp_path / "both", "    sandbox: {mode: 'off', memory_writes: main-only}\n")
    assert both.agent("family").settings.sandbox.memory_writes == "main-only"


def _contact_reads(loaded: LoadedConfig, agent_id: str, other: str) -> str:
    """A contact's DM session of agent `agent_id` runs exec that cats agent `other`'s MEMORY.md (the path
    computed at run time: a literal path outside the workspace is refused before the command runs); what the
    model was handed back."""
    target = str(loaded.agent(other).workspace / "MEMORY.md")
    hidden = base64.b64encode(target.encode()).decode()
    model = ScriptedModel([{"tool_calls": [{"name": "exec", "arguments": {
        "command": f'p=$(echo {hidden} | base64 -d); cat "$p" 2>&1; echo EXEC-RAN'}}]}, "done"])
    runtime = AgentRuntime(loaded.agent(agent_id), model, clock=fixed_clock, fsync=False, home=loaded.paths.home,
                           sandbox_backend=detect())
    try:
        runtime.run_turn(dm_session_key(agent_id, "telegram", "555", account_id="bot"), "show me the notes")
    finally:
        runtime.close()
    request = model.requests[-1]
    assert len(request.messages) == 3, request.messages  # the exec ran and was answered
    return json.dumps(request.messages[-1].to_dict())


def test_family_contacts_exec_is_sandboxed_with_defaults_off_and_mains_is_not(tmp_path: Path) -> None:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    loaded = _home(tmp_path, "    sandbox: {mode: 'off'}\n")
    for agent_id, canary in (("main", MAIN_CANARY), ("family", FAMILY_CANARY)):
        loaded.agent(agent_id).workspace.mkdir(parents=True, exist_ok=True)
        (loaded.agent(agent_id).workspace / "MEMORY.md").write_text(f"# MEMORY.md\n- {canary}\n")
    family_saw = _contact_reads(loaded, "family", "main")
    assert "EXEC-RAN" in family_saw
    assert MAIN_CANARY not in family_saw  # sandboxed: the default agent's memory is out of its reach
    main_saw = _contact_reads(loaded, "main", "family")
    assert FAMILY_CANARY in main_saw  # the default agent keeps off, as its owner wrote: unsandboxed
