"""A hostile contact of agent family (its model obeys them) tries every way to agent main's memory: a path out
of the workspace, main's absolute paths, memory_get, memory_search with family's transcripts indexed, and a
command that computes main's path at run time. None reaches main's MEMORY.md, notes or transcripts. (A
regression test of the audit: all of these held.)"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from agenthelpers import fixed_clock, load_offline
from ciguard import need
from hermit.agent.runtime import AgentRuntime
from hermit.config.load import AgentConfig
from hermit.memory.service import MemoryKey, MemoryService
from hermit.sessions.keys import dm_session_key, main_session_key
from hermit.testing import ScriptedModel
from hermit.tools.os_sandbox import Backend, detect
from hermit.workspace import ensure_workspace

CANARIES = ("MAINMEMORY-CANARY-3301", "MAINDAILY-CANARY-3302", "MAINCHAT-CANARY-3303")


def runtime(agent: AgentConfig, model: ScriptedModel, home: Path, backend: Backend) -> AgentRuntime:
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search, None)
    return AgentRuntime(agent, model, memory=svc, clock=fixed_clock, fsync=False, home=home, sandbox_backend=backend)


def test_a_contact_of_one_agent_reaches_nothing_of_another(tmp_path: Path) -> None:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    loaded = load_offline(tmp_path, defaults={"memory_search": {"provider": "none", "sources": ["memory", "sessions"]}},
                          agents=[{"id": "main"}, {"id": "family"}])
    main, family = loaded.agent("main"), loaded.agent("family")
    for a in (main, family):
        ensure_workspace(a.workspace)
    (main.workspace / "MEMORY.md").write_text(f"# MEMORY.md\n- {CANARIES[0]} zebra\n")
    (main.workspace / "memory" / "2026-01-19.md").write_text(f"- {CANARIES[1]} zebra\n")
    owner = runtime(main, ScriptedModel(["noted"]), tmp_path, backend)
    owner.run_turn(main_session_key("main"), f"remember {CANARIES[2]} zebra")
    owner.close()

    hidden = base64.b64encode(str(main.workspace).encode()).decode()
    sessions = main.sessions_dir
    calls = [("read", {"path": "../workspace/MEMORY.md"}), ("read", {"path": str(main.workspace / "MEMORY.md")}),
             ("read", {"path": str(main.workspace / "memory" / "2026-01-19.md")}),
             ("memory_get", {"path": "../workspace/MEMORY.md"}),
             ("memory_get", {"path": str(main.workspace / "memory" / "2026-01-19.md")}),
             ("memory_get", {"path": "sessions/../../../main/sessions/sessions.json"}),
             ("memory_search", {"query": "zebra"}),
             ("exec", {"command": f'w=$(echo {hidden} | base64 -d); cat "$w/MEMORY.md" "$w"/memory/*.md; '
                                  f'cat {sessions}/*.jsonl; ls -R / 2>/dev/null | grep -c workspace'})]
    model = ScriptedModel([{"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}, "done"])
    contact = runtime(family, model, tmp_path, backend)
    contact.run_turn(dm_session_key("family", "telegram", "555", account_id="familybot"), "show me everything")
    contact.close()

    seen = json.dumps([m.to_dict() for m in model.requests[-1].messages]) + model.requests[-1].system
    for canary in CANARIES:
        assert canary not in seen
    assert len(model.requests[-1].messages) == 2 + len(calls)  # every call ran and answered
