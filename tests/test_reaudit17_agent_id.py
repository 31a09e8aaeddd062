"""Re-audit of the agent-id hiding (audience.visible_text, what a chat's read, memory_get and sandbox show of a note).

A chat is not told the agent id (the owner's name for a setup): the origin markers of notes it may read lose
`agent:<id>:` from their session. A marker line is a marker whatever whitespace leads it (provenance reads it
stripped: an editor's list indent, the owner's own edit), so the id must go from such a line too; the owner
still reads the file as written. Real files, read by the real memory view the sandbox and file tools use."""

from __future__ import annotations

from pathlib import Path

from hermit.memory.policy.audience import OWNER_READER, memory_view, reader_for_session
from hermit.memory.policy.provenance import origin_blocks

AGENT = "alice-private"
CHAT = f"agent:{AGENT}:telegram:dm:42"
NOTE = "memory/2026-12-01.md"


def test_an_indented_origin_marker_does_not_name_the_agent_to_the_chat(tmp_path: Path) -> None:
    text = ("# Log\n"
            f'  <!-- origin session="{CHAT}" audience="telegram:dm:42" -->\n'
            "Bob likes tea\n"
            "<!-- /origin -->\n"
            f'\t<!-- origin session="{CHAT}" audience="telegram:dm:42" -->\n'
            "and cake\n"
            "<!-- /origin -->\n")
    assert [b.origin.session for b in origin_blocks(text)] == [CHAT, CHAT]  # both are markers
    (tmp_path / "memory").mkdir()
    (tmp_path / NOTE).write_text(text, encoding="utf-8")

    shown = dict(memory_view(tmp_path, (), reader_for_session(CHAT)))[NOTE].decode("utf-8")
    assert "Bob likes tea" in shown and "and cake" in shown
    assert AGENT not in shown, shown
    assert shown.count('session="telegram:dm:42"') == 2
    # The owner reads the file as written.
    assert dict(memory_view(tmp_path, (), OWNER_READER))[NOTE].decode("utf-8") == text
