"""Re-audit (s17, r2) of the scrub of a deleted message's copies from MEMORY.md (2252104, agent/owner_notes.py).

Through the real bus, the real runtime and its real write/edit tools, with a scripted model:
- the scrub takes the copy out of MEMORY.md, but the previous version of MEMORY.md that a later rewrite kept in
  `<state>/agents/<id>/memory-history/` (tools/memory_files.py rule 2: every write or edit of MEMORY.md keeps one)
  still holds it — and the web app offers that version for restoring;
- a turn that rewrites MEMORY.md whole (write, not append: a tidy-up) "wrote" every line of the file, so the owner's
  own line that held the same words before the message was scrubbed too (fixed in 43b8760; and in dd3fcd6's successor
  when an earlier call of the same turn was scrubbed first and changed the versions the rewrite is found by);
- a turn that notes again a line the owner already had made the delete scrub every equal row, the owner's too (dd3fcd6).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agenthelpers import fixed_clock, load_offline
from gatewayhelpers import RecordingChannel, allow_all, route_dm_main_group_own
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import InboundMessage
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Bus
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest
from hermit.testing import FunctionModel
from hermit.testing.scripted import Reply

CODE = "QX81TR44"
SECRET = f"the locker code is {CODE}, at the blue harbour gym"
NOTED = f"- Locker code {CODE} (blue harbour gym)"
OWN = f"- my spare key tag {CODE} (typed by me long ago)"  # the owner's own line, in MEMORY.md before the message
MINE = "- swims on Tuesdays"
TOWEL = "- bring a towel on Fridays"


def dm(text: str, mid: str, **kw: Any) -> InboundMessage:
    return InboundMessage(channel="telegram", account_id="default", peer_kind="dm", peer_id="u7", sender_id="u7",
                          text=text, message_id=mid, **kw)


class Owner:
    def __init__(self, tmp: Path, memory_md: str, calls: dict[str, list[dict[str, Any]]]) -> None:
        self.home = tmp / "home"
        agent = load_offline(self.home).agent()
        self.ws = agent.workspace
        self.ws.mkdir(parents=True, exist_ok=True)
        (self.ws / "MEMORY.md").write_text(memory_md)

        def model(req: ModelRequest) -> Reply:
            last = req.messages[-1].to_dict()
            if last.get("role") == "toolResult":
                return "Noted."
            said = json.dumps(last.get("content"), ensure_ascii=False)
            for word, tool_calls in calls.items():
                if word in said:
                    return {"tool_calls": tool_calls}
            return "ok"

        self.rt = AgentRuntime(agent, FunctionModel(model), clock=fixed_clock, fsync=False, home=self.home)
        self.bus = Bus(AgentHost({"main": self.rt}), route=route_dm_main_group_own, admit=allow_all,
                       channels={("telegram", "default"): RecordingChannel()}, chunk=split_chunks)

    def memory_md(self) -> str:
        return (self.ws / "MEMORY.md").read_text()

    def send(self, *messages: InboundMessage) -> None:
        async def main() -> None:
            for m in messages:
                await self.bus.publish(m)
                assert await self.bus.drain(20)
        asyncio.run(main())

    def history(self) -> dict[str, str]:
        folder = self.rt.agent.sessions_dir.parent / "memory-history"
        return {p.name: p.read_text() for p in sorted(folder.glob("*.md"))}


def test_a_deleted_code_leaves_no_copy_in_memory_md_s_kept_versions(tmp_path: Path) -> None:
    """The turn notes the code (edit); the next turn notes something else (edit: MEMORY.md's version holding the
    code is kept in memory-history). The owner deletes the code's message: MEMORY.md loses it, and so must every
    kept version (the web app lists the newest for restoring: a restore would bring the code back)."""
    owner = Owner(tmp_path, f"# Memory\n{MINE}\n", {
        CODE: [{"name": "edit", "arguments": {"path": "MEMORY.md", "old": MINE, "new": f"{MINE}\n{NOTED}"}}],
        "towel": [{"name": "edit", "arguments": {"path": "MEMORY.md", "old": NOTED, "new": f"{NOTED}\n{TOWEL}"}}]})
    try:
        owner.send(dm(SECRET, "1"), dm("remember: bring a towel on Fridays", "2"))
        assert owner.memory_md() == f"# Memory\n{MINE}\n{NOTED}\n{TOWEL}\n", owner.memory_md()
        assert any(CODE in text for text in owner.history().values())  # the version before the towel's edit
        owner.send(dm("", "1", change="deleted"))
        assert CODE not in owner.memory_md(), owner.memory_md()
        assert TOWEL in owner.memory_md()
        kept = {name: text for name, text in owner.history().items() if CODE in text}
        assert kept == {}, kept
    finally:
        owner.rt.close()


def test_a_tidy_up_rewrite_of_memory_md_does_not_make_the_owners_own_line_the_turns(tmp_path: Path) -> None:
    """MEMORY.md held the owner's own line with the same code before the message. The turn rewrites the file whole
    (write, not append) with the note added. The delete scrubs the note's line; the owner's line, which the file
    held before the message and the rewrite only kept, stays as the owner typed it."""
    before = f"# Memory\n{MINE}\n{OWN}\n"
    owner = Owner(tmp_path, before, {
        CODE: [{"name": "write", "arguments": {"path": "MEMORY.md", "content": f"{before}{NOTED}\n"}}]})
    try:
        owner.send(dm(SECRET, "1"))
        assert owner.memory_md() == f"{before}{NOTED}\n", owner.memory_md()
        owner.send(dm("", "1", change="deleted"))
        text = owner.memory_md()
        assert NOTED not in text, text
        assert OWN in text, text  # the owner's own words, not the turn's
    finally:
        owner.rt.close()


def test_a_turn_noting_again_a_line_the_owner_had_leaves_the_owners_line(tmp_path: Path) -> None:
    """MEMORY.md held the owner's own line with the code; the turn appends the same line again (and an edit puts it
    once more under a heading). The delete scrubs the lines the turn wrote: two of the three equal rows — the
    owner's own row, which the file held before the message, keeps the code as the owner typed it."""
    before = f"# Memory\n{MINE}\n{OWN}\n"
    owner = Owner(tmp_path, before, {
        CODE: [{"name": "write", "arguments": {"path": "MEMORY.md", "content": f"{OWN}\n", "append": True}},
               {"name": "edit", "arguments": {"path": "MEMORY.md", "old": MINE, "new": f"{MINE}\n{OWN}"}}]})
    try:
        owner.send(dm(SECRET, "1"))
        assert owner.memory_md() == f"# Memory\n{MINE}\n{OWN}\n{OWN}\n{OWN}\n", owner.memory_md()
        owner.send(dm("", "1", change="deleted"))
        rows = owner.memory_md().split("\n")
        assert rows.count(OWN) == 1, rows  # the owner's own row
        assert rows.count(OWN.replace(CODE, "[deleted]")) == 2, rows  # the turn's two
        kept = [text for text in owner.history().values() if text.count(OWN) > 1]
        assert kept == [], kept  # the versions kept in between hold the turn's rows scrubbed too
    finally:
        owner.rt.close()


def test_a_tidy_up_after_an_edit_in_the_same_turn_still_leaves_the_owners_line(tmp_path: Path) -> None:
    """The turn first notes the code (edit), then rewrites MEMORY.md whole. The delete scrubs call by call: the
    edit's scrub changed MEMORY.md and the version the rewrite kept, so the rewrite's own kept version was no longer
    found by its content, and its every line — the owner's own among them — was taken for the turn's."""
    before = f"# Memory\n{MINE}\n{OWN}\n"
    tidy = f"# Memory\n{MINE}\n{NOTED}\n{OWN}\n- (tidied)\n"
    owner = Owner(tmp_path, before, {
        CODE: [{"name": "edit", "arguments": {"path": "MEMORY.md", "old": MINE, "new": f"{MINE}\n{NOTED}"}},
               {"name": "write", "arguments": {"path": "MEMORY.md", "content": tidy}}]})
    try:
        owner.send(dm(SECRET, "1"))
        assert owner.memory_md() == tidy, owner.memory_md()
        owner.send(dm("", "1", change="deleted"))
        text = owner.memory_md()
        assert NOTED not in text, text
        assert OWN in text, text
    finally:
        owner.rt.close()
