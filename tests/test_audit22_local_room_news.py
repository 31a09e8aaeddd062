"""A chat hears what Hermit finished in its room even when its turn calls no tool (audit 22, t8; s21's leftover).

A merge a killed Hermit left part-way is finished before anything looks at the room (tools/room_sweep.py), and what
was finished is kept for the chat (room_journal.tell). Until now only a tool result said it — an exec's or a file
tool's — so a turn that called no tool answered from the chat's history as if the room still held what the command
left before the kill ("kept.txt? you haven't saved one"). Now the turn's prompt says it, once: the turn after it
does not repeat it.

Each case really kills a child Hermit (SIGKILL) part-way through a merge (tests/test_s21_room_sweep.py), then runs
real turns through an AgentRuntime against the fake provider, and reads the system prompt the provider was sent.
"""

from __future__ import annotations

from pathlib import Path

from agenthelpers import system_text, tool_results
from hermit.testing import FakeProvider
from hermit.tools.room_sweep import finish_left
from hermit.tools.rooms import room_audience, room_slug
from test_s20_room_journal import snapshot
from test_s21_room_sweep import FINISHED, killed
from test_sandbox_attacks import GROUP, OTHER_GROUP, runtime
from test_sandbox_attacks import home as home  # noqa: F401 - the fixture

SAID = "that has been finished since, all of it"  # room_journal.PLAINLY["finished"]


def _kill_a_merge(home: Path) -> Path:
    agent_dir = home / "agents" / "main"
    killed(agent_dir, room_audience(GROUP))
    return agent_dir / "rooms" / room_slug(room_audience(GROUP))


def test_a_turn_without_tools_is_told_what_was_finished_in_its_room(home: Path) -> None:
    """The gateway's start finished the merge (finish_left); the chat's next turn calls no tool."""
    room = _kill_a_merge(home)
    assert finish_left(room.parent) == [room.name]
    with FakeProvider(["Nothing new.", "Still nothing.", "Hello."]) as fake:
        rt = runtime(home, fake)
        rt.run_turn(GROUP, "did the last command keep kept.txt?")
        rt.run_turn(GROUP, "and now?")
        rt.run_turn(OTHER_GROUP, "hi")
    first, second, other = (system_text(r) for r in fake.requests)
    print(first[-1200:])
    assert first.count(SAID) == 1
    assert "kept.txt" not in first, "the prompt names none of the files a command named"
    assert SAID not in second, "said once"
    assert SAID not in other, "another chat never hears it"
    assert not (room.parent / f".{room.name}.told").exists()
    assert (room / "kept.txt").read_text() == "secret-7781\n"


def test_a_merge_left_pending_is_finished_before_the_turn_and_said_in_its_prompt(home: Path) -> None:
    """No sweep ran (another Hermit was killed while this one served): the turn's own start finishes it."""
    room = _kill_a_merge(home)
    assert (room.parent / f".{room.name}.carry").exists()
    with FakeProvider(["ok", {"tool_calls": [{"name": "read", "arguments": {"path": "kept.txt"}}]}, "read it"]) as fake:
        rt = runtime(home, fake)
        rt.run_turn(GROUP, "anything?")
        rt.run_turn(GROUP, "read kept.txt")
    first = system_text(fake.requests[0])
    assert first.count(SAID) == 1 and "kept.txt" not in first
    assert not (room.parent / f".{room.name}.carry").exists()
    assert snapshot(room)["kept.txt"][1] == "secret-7781\n"
    # The tool in the next turn reads the whole room and repeats nothing.
    [(text, err)] = tool_results(fake.requests[2])
    assert not err and text.startswith("secret-7781") and FINISHED not in text
    assert SAID not in system_text(fake.requests[1])
