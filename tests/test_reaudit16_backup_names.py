"""A user's own `.hermit-watch/` folder deeper in a workspace is restored, whatever sits next to it.

`hermit backup` leaves out only the `.hermit-watch/` journal at the top of each workspace (b929018): a user's
folder of that name deeper down is theirs, and is stored. `hermit restore` (b929018) worked out which folders are
the journal's by the manifest's workspaces, but then also took as a workspace's top any folder holding a
`MEMORY.md` or a `memory/` folder — meant for an older archive whose manifest names none, applied to every
archive. A user who kept an old MEMORY.md (or a `memory/` folder: a project's, a copy) in a folder next to a
`.hermit-watch/` folder of their own got a backup that held their files and a restore that silently dropped
them (counted as "transient files an older backup stored"). (reaudit16: data loss by naming.)

Real `hermit backup` / `hermit restore` subprocesses on real state dirs.
"""

from __future__ import annotations

from pathlib import Path

from hermit.memory.policy import added_notes
from test_audit_local2_watch import _hermit, _state


def test_a_users_watch_named_folder_beside_a_memory_copy_is_restored(tmp_path: Path) -> None:
    home, extra = tmp_path / "home", tmp_path / "extra-ws"
    _state(home, extra)
    ws = home / "workspace"
    for folder in ("archive-2024", "project"):
        (ws / folder / added_notes.WATCH_DIR).mkdir(parents=True)
        (ws / folder / added_notes.WATCH_DIR / "mine.md").write_text(f"my own {folder} file\n")
    (ws / "archive-2024" / "MEMORY.md").write_text("an old copy of my MEMORY.md\n")
    (ws / "project" / "memory").mkdir()  # a project's own folder of that name
    r = _hermit(home, "backup", str(tmp_path / "b.tar.gz"))
    assert r.returncode == 0, r.stderr
    target = tmp_path / "restored"
    r = _hermit(target, "restore", str(tmp_path / "b.tar.gz"))
    assert r.returncode == 0, r.stderr
    for folder in ("archive-2024", "project"):
        kept = target / "workspace" / folder / added_notes.WATCH_DIR / "mine.md"
        assert kept.read_text() == f"my own {folder} file\n", folder
    assert "transient" not in r.stdout, r.stdout  # nothing of the user's is counted as Hermit's leftovers
