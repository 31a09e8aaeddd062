"""A chat's error texts name this view's host paths as the chat knows them (RoomView.hide_host), and only whole
paths: `<home>/workspace` is also how another agent's `<home>/workspace-<id>` starts, and `<state>/agents/main`
how `<state>/agents/main2` starts. Such a sibling path in an error came out half-rewritten (`/workspace-work`,
`(the assistant's folder)2`): a path the chat never gave, that names nothing it can reach.

Real parts: the room's view over a real workspace and rooms folder, the file tools a chat's read goes through.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hermit.memory.policy.audience import Reader
from hermit.messages import ToolCallPart
from hermit.tools import RoomView, build_toolset
from hermit.tools.rooms import Room
from hermit.tools.views import ROOM_ROOT, AudienceMemoryView
from hermit.workspace import ensure_workspace

GROUP = "telegram:group:-100777"


def view_of(tmp_path: Path) -> tuple[RoomView, Path, Path]:
    home, state = tmp_path / "home", tmp_path / "state"
    ws = home / "workspace"
    ensure_workspace(ws)
    ensure_workspace(home / "workspace-work")  # another agent's, beside it
    (state / "agents" / "main2").mkdir(parents=True)
    view = RoomView(ws, Room(state / "agents" / "main" / "rooms", GROUP, 1 << 20), AudienceMemoryView(ws, Reader(GROUP)))
    return view, home, state


def read_error(view: RoomView, path: str) -> str:
    """What the chat's model is given for its `read` of `path` (its tools as a chat gets them)."""
    runner = build_toolset(view.workspace, confined=True, exec_enabled=False, private_memory=False,
                           reader=Reader(GROUP), view=view)
    run = runner.run(ToolCallPart("c1", "read", {"path": path}))
    assert run.result.is_error
    return run.result.content


def test_a_sibling_agents_path_in_a_chats_error_is_not_half_rewritten(tmp_path: Path) -> None:
    view, home, state = view_of(tmp_path)
    given = f"{home}/workspace-work/notes.txt"
    shown = read_error(view, given)
    assert given in shown  # the path the chat gave, as it gave it
    assert f"'{ROOM_ROOT}-work" not in shown  # was "'/workspace-work/notes.txt' is outside the workspace"
    shown = read_error(view, f"{state}/agents/main2/sandbox/x")
    assert f"{state}/agents/main2/sandbox/x" in shown and "folder)2" not in shown
    # this view's own workspace, guessed right: the answer a wrong guess gets, the path as the chat gave it (not
    # "'/workspace/../x' is outside", which told a right guess from a wrong one)
    right = read_error(view, f"{view.workspace}/../x")
    wrong = read_error(view, "/home/nobody-else/.hermit/workspace/../x")
    assert right.replace(str(view.workspace), "GUESS") == wrong.replace("/home/nobody-else/.hermit/workspace", "GUESS")
    assert f"'{ROOM_ROOT}/../x'" not in right


@pytest.mark.parametrize(("shown", "expected"), [
    ("cannot open {state}/agents/main2/sandbox: denied", "cannot open {state}/agents/main2/sandbox: denied"),
    ("cannot open {state}/agents/main/sandbox: denied", "cannot open (the assistant's folder)/sandbox: denied"),
    ("no {home}/workspace-work/a.txt", "no {home}/workspace-work/a.txt"),
    ("no {home}/workspace.bak or {home}/workspaces", "no {home}/workspace.bak or {home}/workspaces"),
    ("copied to /mnt{home}/workspace", "copied to /mnt{home}/workspace"),
    ("'{home}/workspace' is full.", "'/workspace' is full."),
    ("ran in {home}/workspace.", "ran in /workspace."),
    ("see {home}/workspace/notes.txt, {state}/agents/main/rooms", "see /workspace/notes.txt, (the rooms folder)"),
    ("[{state}/agents/main]", "[(the assistant's folder)]"),
    ("session agent:main:telegram:group:1", "session telegram:group:1"),
])
def test_only_whole_host_paths_are_rewritten(tmp_path: Path, shown: str, expected: str) -> None:
    view, home, state = view_of(tmp_path)
    assert view.hide_host(shown.format(home=home, state=state)) == expected.format(home=home, state=state)


def test_the_rooms_own_path_is_still_hidden(tmp_path: Path) -> None:
    view, _, _ = view_of(tmp_path)
    room = view.room.path
    assert view.hide_host(f"bwrap: cannot chdir to {room}/src: x") == f"bwrap: cannot chdir to {ROOM_ROOT}/src: x"
    assert view.hide_host(f"{room}-old") == f"(the rooms folder)/{room.name}-old"
