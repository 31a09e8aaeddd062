"""Re-audit of the Slack key migration (channels/slack_migrate.py) as an adversary and as normal use would meet it.

Real files throughout (the fixtures of test_slack_migrate.py: a state dir with hermit.yaml, sessions made by the
real SessionStore, notes with origin blocks, rooms, the accounts' workspace.json). What a chat may read is asked of
the real reader (`memory_view`, what its sandbox and file tools show it), never assumed."""

from __future__ import annotations

import os
from pathlib import Path

from hermit.channels.slack_migrate import migrate
from hermit.memory.policy.audience import audience_of_session, memory_view, reader_for_session
from hermit.memory.policy.provenance import Origin, wrap
from test_slack_migrate import CONTACT_DM, NEW, OWNER, TEAM_A, sessions, setup

SECRET = "OWNER-SECRET: the safe's code is 4711"


def _contact_sees(workspace: Path) -> str:
    """Everything of memory the contact (under its new key) is shown, as one text."""
    reader = reader_for_session(NEW[CONTACT_DM])
    return "\n".join(f"== {rel}\n{data.decode('utf-8')}" for rel, data in memory_view(workspace, (), reader))


def test_a_link_in_memory_to_an_owner_only_file_is_not_made_a_readable_copy(tmp_path: Path) -> None:
    """memory/ may hold a symlink or a hard link to an owner-only file (MEMORY.md linked for an editor, a daily
    log moved to memory/private/ with its old name kept): no chat is shown such a file (audience.memory_view).
    When that file held a block of a contact's old audience, the migration read it through the link and wrote the
    rename over the link's name: a plain file, the owner's unmarked text in it shared with every chat."""
    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}}, {"work": TEAM_A})
    sessions(loaded, [CONTACT_DM])
    ws = loaded.agent().workspace
    old = audience_of_session(CONTACT_DM)
    owner_text = f"# Mine\n{SECRET}\n" + wrap("the contact asked about Tuesday", Origin(CONTACT_DM, audience=old))
    (ws / "MEMORY.md").write_text(owner_text, encoding="utf-8")
    (ws / "memory" / "private").mkdir()
    (ws / "memory" / "private" / "people.md").write_text(owner_text, encoding="utf-8")
    (ws / "memory" / "private" / "kept.md").write_text(owner_text, encoding="utf-8")
    (ws / "memory" / "long-term.md").symlink_to(ws / "MEMORY.md")
    (ws / "memory" / "people.md").symlink_to(ws / "memory" / "private" / "people.md")
    os.link(ws / "memory" / "private" / "kept.md", ws / "memory" / "kept.md")
    assert SECRET not in _contact_sees(ws)  # before: none of them is shown to the contact

    report = migrate(loaded, tmp_path)

    shown = _contact_sees(ws)
    assert "kept for slack:dm:U0CONT1" in shown  # its own note, renamed, it still reads
    assert SECRET not in shown, shown
    assert (ws / "memory" / "long-term.md").is_symlink() and (ws / "memory" / "people.md").is_symlink()
    assert os.stat(ws / "memory" / "kept.md").st_nlink == 2
    for name in ("MEMORY.md", "memory/private/people.md", "memory/private/kept.md"):
        assert (ws / name).read_text(encoding="utf-8") == owner_text  # owner-only files: not touched
    said = "\n".join(report.left)
    assert "long-term.md" in said and "people.md" in said and "kept.md" in said, report.left
