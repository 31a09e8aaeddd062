"""A line the owner types by hand into a note the assistant keeps for them (audit: normal use, no attacker).

The owner's chat keeps notes in files of their own (`write` memory/health.md: one owner-only block). The owner
then opens that file in an editor and adds a line at the end — after the block's close marker, where an editor
puts the cursor. That line was "hand-written text elsewhere under memory/": shared, so every contact's and group's
memory_search found it and memory_get, `read` and the sandbox showed it ("- biopsy next Tuesday"). Now a memory file
the owner's chat started (its first line opens an owner-only block) keeps all its text outside blocks owner-only;
daily logs (`memory/YYYY-MM-DD.md`, whose hand-written lines are shared as in the original design) and files that
start with hand-written text keep the rule for hand-written notes.

Real parts: the agent runtime with a scripted model calling the real file and memory tools, the real SQLite index
and a real embedder (memhelpers.HashEmbedder: what each chat is shown is the point here, not how well the
model ranks, so the e5 model's cost is not paid).
"""

from __future__ import annotations

from pathlib import Path

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.memory.embedders.base import Embedder
from hermit.memory.policy.audience import memory_view, reader_for_session
from hermit.memory.service import MemoryKey, MemoryService
from hermit.testing import ScriptedModel
from hermit.testing.scripted import Reply, request_text
from memhelpers import HashEmbedder

CONTACT = "agent:main:telegram:default:dm:42"
TYPED = "HANDTYPED-biopsy-next-tuesday"  # what the owner adds by hand to their own note file
SHARED = "SHAREDNOTE-office-closed-friday"  # a file the owner wrote by hand from its first line: shared


def turn(loaded: LoadedConfig, embedder: Embedder, key: str, *steps: Reply) -> str:
    """One turn of `key` whose model takes `steps` (tool calls), then answers; what its last request carried."""
    agent = loaded.agent()
    model = ScriptedModel([*steps, "ok"])
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search, embedder)
    rt = AgentRuntime(agent, model, memory=svc, home=loaded.paths.home, fsync=False)
    try:
        rt.run_turn(key, "go")
    finally:
        rt.close()
    return request_text(model.requests[-1])


def look(query: str, *paths: str) -> Reply:
    return {"tool_calls": [{"name": "memory_search", "arguments": {"query": query}},
                           *({"name": "memory_get", "arguments": {"path": p}} for p in paths),
                           *({"name": "read", "arguments": {"path": p}} for p in paths)]}


def test_a_line_typed_into_the_owners_note_file_stays_the_owners(tmp_path: Path) -> None:
    embedder = HashEmbedder()  # one embedder for every turn over the one index
    loaded = build_config({"agents": {"defaults": {"timezone": "Europe/Paris"}}}, StatePaths(tmp_path / "home"))
    ws = loaded.agent().workspace
    turn(loaded, embedder, "agent:main:main", {"tool_calls": [{"name": "write", "arguments": {
        "path": "memory/health.md", "content": "# Health\n- blood pressure pills, 10 mg\n"}}]})
    with (ws / "memory" / "health.md").open("a") as f:  # the owner, in an editor
        f.write(f"- {TYPED}: the biopsy is next Tuesday\n")
    (ws / "memory" / "office.md").write_text(f"# Office\n- {SHARED}: the office is closed on Friday\n")
    daily = ws / "memory" / "2026-01-20.md"
    turn(loaded, embedder, "agent:main:main", {"tool_calls": [{"name": "write", "arguments": {
        "path": "memory/2026-01-20.md", "content": "- lunch with Sam\n", "append": True}}]})
    with daily.open("a") as f:
        f.write("- DAILYHAND: out of office all day\n")

    seen = turn(loaded, embedder, CONTACT, look("when is the biopsy", "memory/health.md"),
                look("office closed", "memory/office.md", "memory/2026-01-20.md"))
    assert TYPED not in seen and "blood pressure" not in seen
    assert SHARED in seen and "DAILYHAND" in seen  # hand-started files and daily logs: shared, as before
    shown = dict(memory_view(ws, [], reader_for_session(CONTACT)))  # what the sandbox shows the chat
    assert "memory/health.md" not in shown and SHARED.encode() in shown["memory/office.md"]
    assert TYPED in turn(loaded, embedder, "agent:main:main", look("when is the biopsy", "memory/health.md"))
