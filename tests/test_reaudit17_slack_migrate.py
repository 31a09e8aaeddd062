"""Re-audit of the Slack key migration (channels/slack_migrate.py) as an adversary and as normal use would meet it.

Real files throughout (the fixtures of test_slack_migrate.py: a state dir with hermit.yaml, sessions made by the
real SessionStore, notes with origin blocks, rooms, the accounts' workspace.json). What a chat may read is asked of
the real reader (`memory_view`, what its sandbox and file tools show it), never assumed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hermit.channels.slack_migrate import journal_path, migrate
from hermit.memory.policy.audience import audience_of_session, memory_view, reader_for_session
from hermit.memory.policy.provenance import Origin, origin_blocks, wrap
from hermit.sessions.store import SessionStore
from hermit.tools.rooms import room_slug
from test_slack_migrate import CONTACT_DM, NEW, OWNER, OWNER_DM, TEAM_A, sessions, setup

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


def test_a_tampered_journal_renames_only_what_a_run_could(tmp_path: Path) -> None:
    """The journal (channels/slack/key-migration.json) is replayed at the next start. One that names other
    renames — the owner's main session onto a contact's key, the owner's notes' audience onto the contact's, an
    owner's DM key, a key into another workspace's shape — must not be applied: the owner's conversation and
    notes would become the contact's. Only renames of a bare Slack id to its `@T…` form are."""
    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}}, {"work": TEAM_A})
    ids = sessions(loaded, [CONTACT_DM, OWNER_DM])
    agent = loaded.agent()
    store = SessionStore(agent.sessions_dir)
    main = store.get_or_create("agent:main:main").record
    store.open_transcript(main).append_message({"role": "user", "content": SECRET})
    note = agent.workspace / "memory" / "2026-12-02.md"
    note.write_text("slack notes\n" + wrap(SECRET, Origin("agent:main:main", audience="owner")), encoding="utf-8")
    contact_new = NEW[CONTACT_DM]
    journal = journal_path(tmp_path)
    journal.write_text(json.dumps({"version": 1, "keys": {"main": {
        "agent:main:main": contact_new,
        OWNER_DM: "agent:main:slack:work:dm:U0CONT9@T0AAAA1",
        CONTACT_DM: "agent:main:slack:work:dm:U0OTHER@T0AAAA1",
    }}, "audiences": {"main": {
        "owner": audience_of_session(contact_new),
        "slack:dm:U0OWNER1": "slack:dm:U0OWNER1@T0AAAA1",
        "slack:dm:U0CONT1": "slack:dm:U0CONT1@../../x",
    }}}), encoding="utf-8")

    report = migrate(loaded, tmp_path)

    store = SessionStore(agent.sessions_dir)
    assert store.get("agent:main:main").session_id == main.session_id
    assert store.get(OWNER_DM).session_id == ids[OWNER_DM]
    assert store.get("agent:main:slack:work:dm:U0OTHER@T0AAAA1") is None
    # What the planner itself finds is still done: the contact's session continues under its real new key.
    assert store.get(contact_new).session_id == ids[CONTACT_DM]
    assert [b.origin.audience for b in origin_blocks(note.read_text(encoding="utf-8"))] == ["owner"]
    assert SECRET not in _contact_sees(agent.workspace)
    notes = (agent.workspace / "memory" / "2026-12-01.md").read_text(encoding="utf-8")
    assert [b.origin.audience for b in origin_blocks(notes)] == ["slack:dm:U0CONT1@T0AAAA1", "slack:dm:U0OWNER1"]
    assert not journal.exists()
    said = "\n".join(report.left)
    assert "agent:main:main" in said and "owner" in said and "journal" in said, report.left


def test_an_account_removed_from_the_config_still_counts_for_the_keys_and_notes_it_may_have_made(
        tmp_path: Path) -> None:
    """Two accounts in two workspaces: the keys naming no account (a group's, a per-channel-peer DM's) and every
    audience are left, since either could have made them. The owner then removes `club` from hermit.yaml: those
    keys were not `work`'s to claim any more than before, yet the next start gave them, and the notes and rooms
    of club's group and contacts, to the same ids in work's workspace, other people there (a Slack id names
    someone only within one workspace). Its recorded workspace.json says which workspace it was in."""
    from test_slack_migrate import GROUP, PEER_DM, audiences

    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}, "club": {}}, {"work": TEAM_A, "club": "T0CLUB9"})
    ids = sessions(loaded, [CONTACT_DM, GROUP, PEER_DM])
    first = migrate(loaded, tmp_path)
    assert first.moved == [f"agent main: {CONTACT_DM} -> {NEW[CONTACT_DM]}"]
    before = audiences(loaded)

    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}}, {"work": TEAM_A})  # club removed
    report = migrate(loaded, tmp_path)

    store = SessionStore(loaded.agent().sessions_dir)
    assert store.get(GROUP).session_id == ids[GROUP] and store.get(NEW[GROUP]) is None
    assert store.get(PEER_DM).session_id == ids[PEER_DM] and store.get(NEW[PEER_DM]) is None
    assert audiences(loaded) == before == ["slack:dm:U0CONT1", "slack:group:C0GRP1", "slack:dm:U0PEER1"]
    rooms = loaded.agent().sessions_dir.parent / "rooms"
    assert not (rooms / room_slug(audience_of_session(NEW[GROUP]))).exists()
    assert not report.moved and not report.notes and not report.rooms
    assert any(GROUP in line and "club (no longer configured)" in line for line in report.left), report.left


_TOGETHER = """
import json, sys
from pathlib import Path
from hermit.channels.slack_migrate import migrate
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
home = Path(sys.argv[1])
loaded = load_config(StatePaths(home))
print("ready", flush=True)
sys.stdin.readline()
r = migrate(loaded, home)
print(json.dumps({"moved": r.moved, "notes": r.notes, "rooms": r.rooms, "left": r.left}), flush=True)
"""


def test_two_gateways_starting_together_rename_each_session_once(tmp_path: Path) -> None:
    """Two gateways on one state dir (a service and a `hermit gateway run` by hand) start at once: one run at a
    time (the journal's lock), so each session, note and room is renamed once, by one of them."""
    import subprocess
    import sys

    from test_slack_migrate import GROUP, GROUP_THREAD, PEER_DM, audiences

    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}}, {"work": TEAM_A})
    keys = [CONTACT_DM, GROUP, GROUP_THREAD, PEER_DM, OWNER_DM]
    ids = sessions(loaded, keys)
    runs = [subprocess.Popen([sys.executable, "-c", _TOGETHER, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for p in runs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in runs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    reports = []
    for p in runs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        reports.append(json.loads(out))
    moved = sorted(m for r in reports for m in r["moved"])
    assert moved == sorted(f"agent main: {k} -> {NEW[k]}" for k in NEW), reports
    assert sum(len(r["rooms"]) for r in reports) == 3 and not any(r["left"] for r in reports), reports
    store = SessionStore(loaded.agent().sessions_dir)
    for old, new in NEW.items():
        assert store.get(old) is None and store.get(new).session_id == ids[old]
    assert store.get(OWNER_DM).session_id == ids[OWNER_DM]
    assert audiences(loaded) == [audience_of_session(NEW.get(k, k)) for k in keys]
    assert not journal_path(tmp_path).exists()


def test_a_removed_account_whose_record_cannot_be_read_holds_its_keys_back_and_says_so(tmp_path: Path) -> None:
    from hermit.channels.slack import workspace_path
    from test_slack_migrate import GROUP

    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}}, {"work": TEAM_A})
    ids = sessions(loaded, [GROUP])
    workspace_path(tmp_path, "club").parent.mkdir(parents=True)
    workspace_path(tmp_path, "club").write_text("{not json", encoding="utf-8")

    report = migrate(loaded, tmp_path)

    assert SessionStore(loaded.agent().sessions_dir).get(GROUP).session_id == ids[GROUP]
    assert not report.waiting and any("club, no longer in the config" in line and "remove that folder" in line
                                      for line in report.left), report
