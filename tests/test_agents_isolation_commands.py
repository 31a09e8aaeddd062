"""How many sandboxed commands one agent's chats may run at once. Every topic of a Telegram forum group (and
every Slack or Discord thread) is a session of its own, and each session's command may hold
`sandbox.exec_memory_mb` plus its tmpfs copies: one member of agent family's group, opening topics, ran as many
1 GB commands at once as they liked — the machine's memory, agent main's turns and the owner's programs with
it. `sandbox.max_commands` (4) bounds them per agent: more are refused until one ends, and another agent's
chats keep theirs."""

from __future__ import annotations

from pathlib import Path

from agenthelpers import fixed_clock, load_offline
from ciguard import need
from hermit.agent.runtime import AgentRuntime
from hermit.sessions.keys import group_session_key
from hermit.testing import ScriptedModel
from hermit.tools.os_sandbox import detect

STEP = {"tool_calls": [{"name": "exec", "arguments": {"command": "echo ran-$((6*7))"}}]}


def test_an_agents_chats_run_at_most_max_commands_at_once_and_another_agents_are_not_held(tmp_path: Path) -> None:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    loaded = load_offline(tmp_path, defaults={"memory_search": {"provider": "none"}, "sandbox": {"max_commands": 2}},
                          agents=[{"id": "main"}, {"id": "family"}])
    assert loaded.agent("family").settings.sandbox.max_commands == 2
    models = {a: ScriptedModel([STEP, "done"] * 3) for a in ("main", "family")}
    rts = {a: AgentRuntime(loaded.agent(a), models[a], clock=fixed_clock, fsync=False, home=tmp_path,
                           sandbox_backend=backend) for a in ("main", "family")}
    slots = rts["family"].confinement.command_slots()
    assert slots is rts["family"].confinement.command_slots() is not rts["main"].confinement.command_slots()

    def topic(agent: str, n: int) -> str:
        rts[agent].run_turn(group_session_key(agent, "telegram", "-100777", topic_id=str(n)), "run it")
        return str(models[agent].requests[-1].messages[-1].to_dict())

    # Two commands of family's group are running (the slots they hold): a third topic's is refused...
    assert slots.acquire(blocking=False) and slots.acquire(blocking=False)
    third = topic("family", 3)
    assert "as many commands as they may at once (sandbox.max_commands)" in third and "ran-42" not in third
    # ...while agent main's group runs its own.
    assert "ran-42" in topic("main", 1)
    # One of family's ends: the next runs, and gives its slot back when it is done.
    slots.release()
    assert "ran-42" in topic("family", 4)
    assert slots.acquire(blocking=False)
    slots.release()
    slots.release()
    for rt in rts.values():
        rt.close()
