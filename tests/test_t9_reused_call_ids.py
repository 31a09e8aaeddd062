"""A tool result belongs to its own call, not to every call with its id (sessions/scrub.py `_call_outcomes`).

The scrub of a deleted message skips a note call whose result was an error (it wrote nothing) and takes every line of
a whole rewrite that created its file as the turn's. Both went by the call's id alone, but ids are not unique: a
provider that gives none gets `call_<n>` from the client, the same in every turn (models/openai_compat.py), and a model
may give one id to two calls. So a later failed read with the id of the turn's edit hid the edit's lines (the copy of
the deleted message stayed in MEMORY.md), and a read of a file starting "created " with the id of a rewrite made the
rewrite wholly the turn's (the owner's own line holding the same code was scrubbed too).

Through the real bus, the real runtime and its read/write/edit tools, with a scripted model naming the ids.
"""

from __future__ import annotations

from pathlib import Path

from test_reaudit17b_owner_notes import CODE, MINE, NOTED, OWN, SECRET, Owner, dm

GYM = "memory/private/gym.md"


def test_a_later_failed_call_with_the_same_id_does_not_hide_the_turns_edit(tmp_path: Path) -> None:
    owner = Owner(tmp_path, f"# Memory\n{MINE}\n", {
        CODE: [{"name": "edit", "id": "call_0", "arguments": {"path": "MEMORY.md", "old": MINE,
                                                             "new": f"{MINE}\n{NOTED}"}}],
        "towel": [{"name": "read", "id": "call_0", "arguments": {"path": "no-such-file.txt"}}]})
    try:
        owner.send(dm(SECRET, "1"), dm("where did I put the towel list?", "2"))
        assert NOTED in owner.memory_md()
        owner.send(dm("", "1", change="deleted"))
        text = owner.memory_md()
        assert CODE not in text and "- Locker code [deleted]" in text and MINE in text, text
    finally:
        owner.rt.close()


def test_a_read_saying_created_with_a_rewrites_id_does_not_make_the_owners_line_the_turns(tmp_path: Path) -> None:
    before = f"# Gym\n{MINE}\n{OWN}\n"
    owner = Owner(tmp_path, "# Memory\n", {CODE: [
        {"name": "read", "id": "c1", "arguments": {"path": "decoy.txt"}},
        {"name": "write", "id": "c1", "arguments": {"path": GYM, "content": f"{before}{NOTED}\n"}}]})
    try:
        (owner.ws / "decoy.txt").write_text("created by hand (a file of mine)\n")
        (owner.ws / GYM).parent.mkdir(parents=True, exist_ok=True)
        (owner.ws / GYM).write_text(before)
        owner.send(dm(SECRET, "1"))
        assert (owner.ws / GYM).read_text() == f"{before}{NOTED}\n"
        owner.send(dm("", "1", change="deleted"))
        text = (owner.ws / GYM).read_text()
        assert NOTED not in text and "- Locker code [deleted]" in text, text  # the turn's line
        assert OWN in text, text  # the owner's own, which the rewrite only kept
    finally:
        owner.rt.close()
