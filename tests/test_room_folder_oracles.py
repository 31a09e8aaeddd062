"""A chat cannot tell which of the owner's folders (and other owner-only entries) exist under memory/.

A group's `read` of an owner-only folder (memory/private/<topic>/, or a folder holding only owner-only notes)
answered "is a directory; it contains: (empty)" where a missing one got "file not found", and its `exec`
with such a folder as cwd ran (in the workspace root) where a missing one got "cwd … is not a directory";
inside the sandbox the folder is not there at all. Now a folder exists for a chat only when a note it may see
lies beneath it. Each test drives the real runtime's tools (`AgentRuntime.tools_for`) as a model's calls
would, exec under the real bubblewrap sandbox.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ciguard import need
from hermit.agent.runtime import AgentRuntime
from hermit.testing import ScriptedModel
from hermit.tools.os_sandbox import detect
from test_contact_oracles import CONTACT, GROUP, call, make

OWNER_ONLY = '<!-- origin session="agent:main:main" audience="owner" -->\n- the ACME deal closes in May\n<!-- /origin -->\n'
HIDDEN = ["memory/private", "memory/private/divorce-lawyer-smith", "memory/projects/acquisition-of-acme",
          "memory/projects/acquisition-of-acme/"]
MISSING = ["memory/private/no-such-folder", "memory/projects/no-such", "memory/projects/no-such/"]


@pytest.fixture
def owner_folders(tmp_path: Path) -> AgentRuntime:
    """Owner-only folders beside a folder with a note every chat may read."""
    home = tmp_path / "home"
    mem = home / "workspace" / "memory"
    (mem / "private" / "divorce-lawyer-smith").mkdir(parents=True)
    (mem / "private" / "divorce-lawyer-smith" / "notes.md").write_text("- custody hearing on the 3rd\n")
    (mem / "projects" / "acquisition-of-acme").mkdir(parents=True)
    (mem / "projects" / "acquisition-of-acme" / "plan.md").write_text(OWNER_ONLY)
    (mem / "projects" / "team-offsite").mkdir()
    (mem / "projects" / "team-offsite" / "plan.md").write_text("- the offsite is in Lyon\n")
    return make(home, ScriptedModel([]))


def answers(rt: AgentRuntime, session: str, paths: list[str], tool: str, **args: object) -> dict[str, str]:
    """Each path's answer with the path itself (as given, or as read shows it) replaced: the rest must not differ."""
    got = {}
    for path in paths:
        key = "path" if tool == "read" else "cwd"
        text, is_error = call(rt, session, tool, **{key: path}, **args)
        assert is_error, (path, text)
        got[path] = text.replace(path, "<path>").replace(path.rstrip("/"), "<path>")
    return got


def test_read_answers_an_owner_only_folder_as_a_missing_one(owner_folders: AgentRuntime) -> None:
    rt = owner_folders
    for session in (GROUP, CONTACT):
        got = answers(rt, session, HIDDEN + MISSING, "read")
        assert len(set(got.values())) == 1, got
        assert next(iter(got.values())).startswith(
            "error: file not found: <path> (or nothing in it is shared with this chat)"), got
        # A folder with a note the chat may see still lists (owner-only folders left out) and reads.
        text, _ = call(rt, session, "read", path="memory/projects")
        assert "memory/projects is a directory; it contains: team-offsite/\n" in text, text
        text, _ = call(rt, session, "read", path="memory/projects/team-offsite")
        assert "it contains: plan.md\n" in text, text
        assert call(rt, session, "read", path="memory/projects/team-offsite/plan.md") == (
            "- the offsite is in Lyon", False)


def test_exec_refuses_an_owner_only_folder_as_cwd_as_a_missing_one(owner_folders: AgentRuntime) -> None:
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    rt = owner_folders
    for session in (GROUP, CONTACT):
        got = answers(rt, session, HIDDEN + MISSING, "exec", command="pwd; ls -A")
        assert len(set(got.values())) == 1, got
        assert next(iter(got.values())) == \
            "error: cwd '<path>' is not a directory\nhint: pass a folder inside the workspace", got
        # A folder holding a shared note is a working folder like any other, and memory/ itself always is.
        workspace = "/workspace"  # where a room sees it (views.ROOM_ROOT), never the host path
        text, is_error = call(rt, session, "exec", command="pwd; ls -A", cwd="memory/projects/team-offsite")
        assert not is_error and text.endswith(f"\n{workspace}/memory/projects/team-offsite\nplan.md"), text
        text, is_error = call(rt, session, "exec", command="pwd; ls -A", cwd="memory/projects")
        assert not is_error and text.endswith(f"\n{workspace}/memory/projects\nteam-offsite"), text
        text, is_error = call(rt, session, "exec", command="pwd", cwd="memory")
        assert not is_error and text.endswith(f"\n{workspace}/memory"), text


def test_read_answers_other_owner_entries_under_memory_as_missing(owner_folders: AgentRuntime) -> None:
    """docs/security.md: a symlink, a FIFO, a folder, a binary or unreadable file, or a file the path goes on
    beneath, get the answer a missing one gets from `read` as from memory_get; `read` told them apart."""
    rt = owner_folders
    mem = rt.agent.workspace / "memory"
    (mem / "shared.md").write_text("- the team lunch is at noon\n")
    (mem / "folder.md").mkdir()
    os.mkfifo(mem / "pipe.md")
    os.symlink(mem / "shared.md", mem / "alias.md")
    os.symlink(mem / "projects", mem / "folder-alias")
    (mem / "binary.md").write_bytes(b"\x00\x01\x02 not text\n")
    (mem / "locked.md").write_text("- locked\n")
    os.chmod(mem / "locked.md", 0)
    withheld = ["memory/folder.md", "memory/pipe.md", "memory/alias.md", "memory/folder-alias",
                "memory/folder-alias/team-offsite/plan.md", "memory/binary.md",
                "memory/projects/acquisition-of-acme/plan.md", "memory/private/divorce-lawyer-smith/notes.md",
                "memory/private/divorce-lawyer-smith/notes.md/x"] + (["memory/locked.md"] if os.geteuid() else [])
    missing = ["memory/nothere.md", "memory/nowhere/x.md", "memory/private/missing.md"]
    for session in (GROUP, CONTACT):
        got = answers(rt, session, withheld + missing, "read")
        assert len(set(got.values())) == 1, got
        assert "the team lunch is at noon" in call(rt, session, "read", path="memory/shared.md")[0]
