"""Issue 22 §2, route by route: what the owner tells the main session never reaches a group, a contact's DM
or a cron session, and the owner's main session still finds it.

One owner's day is played once through the real runtime (real tools, real SQLite index with the real e5
model, session transcripts indexed too) with a model that acts by the request it gets: the owner asks it
to remember something (a `remember:` write to today's log), it answers with a secret (a reply), the
conversation grows until the pre-compaction flush writes a note and compaction summarises (a flush, a
compaction), and the owner starts over with /new (the session-memory file). Each route leaves its own
canary. Then each reader session searches and reads every memory file it can name; the assertions look
at every request the model received for that session.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import TODAY
from conftest import write
from hermit.agent.compaction import SUMMARY_MARKER
from hermit.agent.runtime import AgentRuntime
from hermit.memory.policy.audience import OWNER
from hermit.memory.policy.provenance import origin_blocks
from hermit.messages import ToolResultMessage, UserMessage
from hermit.models.base import ModelProfile, ModelRequest
from hermit.testing import FunctionModel
from hermit.testing.scripted import request_text
from sessionhelpers import SMALL_COMPACTION, SMALL_WINDOW, memory_service, runtime, small_config, user_text

MAIN = "agent:main:main"
GROUP = "agent:main:telegram:group:-100200"
CONTACT = "agent:main:telegram:dm:4242"  # an approved contact's own DM session
CRON = "cron:digest"
DAILY = f"memory/{TODAY}.md"
REMEMBERED = "R3NT-CANARY-1"  # `remember:` → today's log
REPLIED = "D00R-CANARY-2"  # only in an assistant reply → the transcript
FLUSHED = "FLU5H-CANARY-3"  # written by the pre-compaction flush
SUMMARISED = "C0MPACT-CANARY-4"  # only in the compaction summary
SAVED = "L0CKER-CANARY-5"  # said just before /new → the session-memory file
CANARIES = (REMEMBERED, REPLIED, FLUSHED, SUMMARISED, SAVED)
SHARED_LINE = "- Team lunch at the ramen place on Friday (R4MEN-SHARED)."
PROBES = ["when is the rent due", "what is the door code", "what did we decide about savings",
          "locker combination", "quarterly planning vendor contracts", "team lunch Friday"]


def _text(message: Any) -> str:
    content = message.to_dict().get("content")
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


@dataclass
class Brain:
    """The model: acts on what the request says. `probe` maps a session key to the tool calls it makes; a probe
    names its session in its text (`probe [<key>]`), as the prompt shows a chat its key without the account."""

    probe: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def __call__(self, request: ModelRequest) -> Any:
        if SUMMARY_MARKER in request.system:
            return f"## Goals\n- keep planning\n## Decisions\n- the savings go to the credit union ({SUMMARISED})"
        user = next(_text(m) for m in reversed(request.messages) if isinstance(m, UserMessage))
        if isinstance(request.messages[-1], ToolResultMessage):
            return "NO_REPLY" if "Pre-compaction memory flush" in user else "done"
        if "Pre-compaction memory flush" in user:
            return self._write(f"- Decided to move the savings to the credit union ({FLUSHED}).\n")
        if user.split("\n", 1)[-1].startswith("remember:"):  # after the group's sender line
            return self._write(f"- The rent of 18,500 CZK is due on the 3rd ({REMEMBERED}).\n")
        if "door code" in user:
            return f"The door code is 4-7-1-1 ({REPLIED})."
        if user.startswith("probe"):
            marker = re.match(r"probe \[(\S+)\]", user)
            assert marker is not None, user
            return {"tool_calls": self.probe[marker.group(1)]}
        return "ack"

    @staticmethod
    def _write(note: str) -> dict[str, Any]:
        return {"tool_calls": [{"name": "write", "arguments": {"path": DAILY, "content": note, "append": True}}]}


@dataclass
class Day:
    rt: AgentRuntime
    model: FunctionModel
    brain: Brain
    ws: Path
    saved: Path  # the session-memory file /new wrote
    old_session: str  # the main session's transcript before /new
    main_requests: list[ModelRequest]
    probed: dict[str, list[ModelRequest]] = field(default_factory=dict)  # key -> its probe turn's requests

    def turn(self, key: str, text: str) -> list[ModelRequest]:
        """Run one turn in `key`; the requests the model got for it."""
        before = len(self.model.requests)
        self.rt.run_turn(key, text)
        return self.model.requests[before:]


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory, e5: object) -> Iterator[Day]:
    home = tmp_path_factory.mktemp("audience") / "home"
    write(home / "workspace" / DAILY, f"# {TODAY}\n{SHARED_LINE}\n")  # hand-written: shared
    hook = {"session": {"hooks": {"session_memory": {"slug_from_model": False}}}}
    loaded = small_config(home, defaults={"compaction": SMALL_COMPACTION, **hook,
                                          "memory_search": {"sources": ["memory", "sessions"]}})
    brain = Brain()
    model = FunctionModel(brain, profile=ModelProfile("scripted", "small", context_window=SMALL_WINDOW))
    # The index's clock runs an hour ahead, so every transcript counts as quiet and is (re)indexed at once.
    memory = memory_service(loaded, e5, sessions=True, clock_offset=3600)  # type: ignore[arg-type]
    rt = runtime(loaded, model, memory=memory)
    ws = rt.agent.workspace
    day = Day(rt, model, brain, ws, ws, "", [])
    day.main_requests += day.turn(MAIN, "remember: my rent of 18,500 CZK is due on the 3rd")
    day.main_requests += day.turn(MAIN, "what is the door code again?")
    for n in range(1, 12):  # past the flush and the compaction thresholds
        day.main_requests += day.turn(MAIN, user_text(n))
    record = rt.session(MAIN)
    assert record is not None and record.compaction_count >= 1 and record.memory_flush_compaction_count >= 0
    day.main_requests += day.turn(MAIN, f"note: the gym locker combination is 31-7-22 ({SAVED})")
    day.old_session = record.session_id
    day.main_requests += day.turn(MAIN, "/new")
    saved = [p for p in (ws / "memory").glob(f"{TODAY}-*.md")]
    assert len(saved) == 1
    day.saved = saved[0]
    yield day
    assert rt.memory is not None
    rt.memory.close()


def test_every_owner_route_left_its_canary_owner_only(day: Day) -> None:
    daily = (day.ws / DAILY).read_text()
    assert REMEMBERED in daily and FLUSHED in daily and SHARED_LINE in daily
    for canary in (REMEMBERED, FLUSHED):
        # The flush runs once per compaction cycle, and how many cycles the day holds follows the prompt's size.
        blocks = [b for b in origin_blocks(daily) if canary in "\n".join(daily.split("\n")[b.start - 1:b.end])]
        assert blocks and all(b.origin.audience == OWNER and b.origin.session == MAIN for b in blocks), blocks
    saved = day.saved.read_text()
    (block,) = origin_blocks(saved)
    assert SAVED in saved and (block.start, block.end) == (1, len(saved.split("\n")) - 1)  # the whole file
    assert block.origin.audience == OWNER
    assert any(SUMMARISED in request_text(r) for r in day.main_requests)  # the summary leads main's history
    assert all(SUMMARISED not in p.read_text() for p in (day.ws / "memory").rglob("*.md"))  # not in memory files
    assert any(REPLIED in request_text(r) for r in day.main_requests)


def probe_calls(day: Day) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = [{"name": "memory_search", "arguments": {"query": q, "minScore": 0}}
                                   for q in PROBES]
    for path in (DAILY, day.saved.relative_to(day.ws).as_posix(), f"sessions/{day.old_session}.jsonl",
                 "MEMORY.md"):
        calls.append({"name": "memory_get", "arguments": {"path": path}})
    return calls


def probed(day: Day, key: str) -> list[ModelRequest]:
    """The requests of one probe turn of `key` in a fresh session: run once per key (the turn is the same whatever
    canary a test then looks for), each canary's test reads them."""
    if key not in day.probed:
        day.rt.new_session(key)  # a fresh conversation: only this probe in its context
        day.brain.probe[key] = probe_calls(day)
        day.probed[key] = day.turn(key, f"probe [{key}]: what do you know?")
    return day.probed[key]


@pytest.mark.parametrize("key", [GROUP, CONTACT, CRON])
@pytest.mark.parametrize("canary", CANARIES)
def test_no_canary_reaches_a_group_a_contact_or_a_cron_session(day: Day, key: str, canary: str) -> None:
    requests = probed(day, key)
    assert len(requests) == 2  # the tool calls, then the answer after their results
    sent = "\n".join(request_text(r) for r in requests)
    assert canary not in sent
    # The searches ran and found what is shared: the hand-written line, today's log with lines withheld.
    assert "R4MEN-SHARED" in sent and "lines withheld: not shared with this chat" in sent
    assert "18,500" not in sent and "4-7-1-1" not in sent and "31-7-22" not in sent


@pytest.mark.parametrize("canary", [REMEMBERED, REPLIED, FLUSHED, SAVED])
def test_the_owners_main_session_still_finds_each_canary(day: Day, canary: str) -> None:
    day.rt.new_session(MAIN)
    day.brain.probe[MAIN] = [{"name": "memory_search", "arguments": {"query": canary, "minScore": 0}}]
    requests = day.turn(MAIN, f"probe [{MAIN}]")
    results = request_text(requests[-1])
    assert results.count(canary) >= 2  # in the query and in what the search returned
    assert '\\"audience\\": \\"owner\\"' in results or '"audience": "owner"' in results


def test_a_chats_note_is_seen_by_that_chat_and_the_owner_only(tmp_path: Path, e5: object) -> None:
    """A group's note: its own group (later, in a new session of it) and the owner find it; another group,
    a contact and a cron session do not."""
    note = "- Bob brings the projector to the offsite (PR0JECTOR-GROUP-6).\n"
    other_group = "agent:main:telegram:group:-100999"

    def brain(request: ModelRequest) -> Any:
        user = next(_text(m) for m in reversed(request.messages) if isinstance(m, UserMessage))
        if isinstance(request.messages[-1], ToolResultMessage):
            return "done"
        if user.split("\n", 1)[-1].startswith("remember:"):  # after the group's sender line
            return Brain._write(note)
        return {"tool_calls": [{"name": "memory_search", "arguments": {"query": "who brings the projector",
                                                                        "minScore": 0}},
                               {"name": "memory_get", "arguments": {"path": DAILY}}]}

    home = tmp_path / "home"
    write(home / "workspace" / DAILY, f"# {TODAY}\n{SHARED_LINE}\n")
    loaded = small_config(home)
    model = FunctionModel(brain)
    rt = runtime(loaded, model, memory=memory_service(loaded, e5))  # type: ignore[arg-type]
    rt.run_turn(GROUP, "remember: Bob brings the projector", sender="bob")
    daily = (rt.agent.workspace / DAILY).read_text()
    (block,) = origin_blocks(daily)
    # A group's note names the group, never one member: it may hold several members' words.
    assert block.origin.audience == "telegram:group:-100200" and block.origin.sender is None

    def probe(key: str) -> str:
        rt.new_session(key)
        before = len(model.requests)
        rt.run_turn(key, "probe")
        return "\n".join(request_text(r) for r in model.requests[before:])

    for key in (GROUP, GROUP + ":topic:9", MAIN):
        assert "PR0JECTOR-GROUP-6" in probe(key), key
    for key in (other_group, CONTACT, CRON):
        seen = probe(key)
        assert "PR0JECTOR-GROUP-6" not in seen and "R4MEN-SHARED" in seen, key
    assert rt.memory is not None
    rt.memory.close()
