"""A delete's scrub of the owner's notes (agent/owner_notes.py) racing an outside editor that saves MEMORY.md (or a
`memory/private/` note) between the scrub's read and its replace. The web app's save holds the memory-write lock;
an editor does not, so the scrub must notice the file changed and redo its work on the saved text: the editor's save
stays, the deleted text goes.

The second writer is a real process (forked at the moment the scrub has read the file: the scrub's own read of the
note returns, then the editor saves — as a rename over the file, or in place — and exits before the scrub goes on);
through the real runtime and its write/edit tools, as this uid and (as root) as uid 65534.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import crashharness as ch
from agenthelpers import load_offline
from hermit.agent.runtime import AgentRuntime
from hermit.models.base import ModelRequest
from hermit.sessions.keys import main_session_key
from hermit.testing.scripted import Reply
from outside_editor import save_as_an_editor, scripted_runtime, set_up_then_delete

MAIN = main_session_key("main")
CODE = "QX81TR44"
SECRET = f"the locker code is {CODE}, at the blue harbour gym"
REF = "telegram:default:dm:u7:1"
NOTED = f"- Locker code {CODE} (blue harbour gym)"
MINE = "- swims on Tuesdays"
SAVED = "- dentist on Monday at 9 (typed in my editor)"
uid, home = ch.uid, ch.home


def runtime(home: Path, calls: list[dict[str, Any]]) -> AgentRuntime:
    def model(req: ModelRequest) -> Reply:
        last = req.messages[-1].to_dict()
        if last.get("role") == "toolResult":
            return "Noted."
        return {"tool_calls": calls} if CODE in str(last.get("content")) else "ok"

    return scripted_runtime(home, model)


def racing(target: Path, how: str) -> Callable[[], None]:
    """Arm the race: the scrub's first read of `target` (agent/owner_notes.py reads through `read_regular_stat`)
    returns what it read, and the editor saves right after — before the scrub replaces the file."""
    import hermit.agent.owner_notes as owner_notes

    real = owner_notes.read_regular_stat
    fired: list[bool] = []

    def read(path: Any, *args: Any, **kwargs: Any) -> Any:
        got = real(path, *args, **kwargs)
        if not fired and Path(path) == target:
            fired.append(True)
            save_as_an_editor(target, how, SAVED)
        return got

    owner_notes.read_regular_stat = read

    def check() -> None:
        owner_notes.read_regular_stat = real
        assert fired, "the scrub never read the note"
    return check


@pytest.mark.parametrize("how", ["rename", "in-place"])
@pytest.mark.parametrize("note", ["MEMORY.md", "memory/private/gym.md"])
def test_an_editor_saving_between_the_scrubs_read_and_replace_keeps_its_save(
        home: Path, uid: int | None, note: str, how: str) -> None:
    calls = [{"name": "edit", "arguments": {"path": note, "old": MINE, "new": f"{MINE}\n{NOTED}"}}]

    def setup(home: Path) -> None:
        ws = load_offline(home).agent().workspace
        (ws / note).parent.mkdir(parents=True, exist_ok=True)
        (ws / note).write_text(f"# Notes\n{MINE}\n")
        rt = runtime(home, calls)
        rt.run_turn(MAIN, SECRET, ref=REF)
        rt.close()

    def delete(home: Path) -> str:
        ws = load_offline(home).agent().workspace
        assert NOTED in (ws / note).read_text()
        check = racing((ws / note).resolve(), how)
        rt = runtime(home, calls)
        try:
            assert rt.retract(MAIN, REF)
        finally:
            rt.close()
            check()
        return (ws / note).read_text()

    text = set_up_then_delete(home, uid, setup, delete)
    assert SAVED in text, text  # the editor's save is kept
    assert CODE not in text, text  # and the deleted text is gone
    assert MINE in text and "- Locker code [deleted]" in text, text


def test_a_note_an_editor_saves_at_every_read_is_left_whole_and_said(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """An editor saving after each of the scrub's reads: the scrub gives up after a few tries rather than replace a
    save it has not read — every save stays, the copy is left, and the log says so (the next scrub takes it)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    calls = [{"name": "edit", "arguments": {"path": "MEMORY.md", "old": MINE, "new": f"{MINE}\n{NOTED}"}}]
    ws = load_offline(home).agent().workspace
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "MEMORY.md").write_text(f"# Notes\n{MINE}\n")
    rt = runtime(home, calls)
    rt.run_turn(MAIN, SECRET, ref=REF)
    rt.close()
    import hermit.agent.owner_notes as owner_notes

    real = owner_notes.read_regular_stat
    target = (ws / "MEMORY.md").resolve()
    saves: list[int] = []

    def read(path: Any, *args: Any, **kwargs: Any) -> Any:
        got = real(path, *args, **kwargs)
        if Path(path) == target:
            saves.append(1)
            save_as_an_editor(target, "rename", SAVED)
        return got

    owner_notes.read_regular_stat = read
    rt = runtime(home, calls)
    try:
        with caplog.at_level("WARNING", logger="hermit.agent"):
            assert rt.retract(MAIN, REF)
    finally:
        owner_notes.read_regular_stat = real
        rt.close()
    text = (ws / "MEMORY.md").read_text()
    assert text.count(SAVED) == len(saves) > 1, (len(saves), text)  # no save lost
    assert NOTED in text, text  # left, not replaced by a text that never held the saves
    assert any("kept changing" in r.getMessage() for r in caplog.records), caplog.text
