"""A delete's scrub of a daily note (`memory/YYYY-MM-DD.md`, agent/flush.py `scrub_flush_notes`) racing an outside
editor that saves the note between the scrub's read and its atomic replace. Hermit's own writers hold the
memory-write lock; an editor does not, so its save was lost (the scrub replaced the file with the text it had read).
Now the scrub reads the note again right before the replace and, when it changed, scrubs the saved text instead
(agent/owner_notes.py `scrub_file`, the same code as the owner notes'): the save stays, the deleted text goes.

The second writer is a real process, forked the moment the scrub's own read of the note returns (an event, no
sleep): it saves the note — a rename over it, or in place — and exits before the scrub goes on. A contact's note (its
origin block, written through its room view) and the owner's (an owner block), through the real runtime and its
write tool, as this uid and (as root) as uid 65534.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import crashharness as ch
from agenthelpers import NOW, load_offline
from hermit.agent.runtime import AgentRuntime
from hermit.models.base import ModelRequest
from hermit.sessions.keys import main_session_key
from hermit.testing.scripted import Reply
from outside_editor import save_as_an_editor, scripted_runtime, set_up_then_delete

CODE = "QX81TR44"
SECRET = f"the locker code is {CODE}, at the blue harbour gym"
NOTED = f"- Locker code {CODE} (blue harbour gym)"
PLAIN = "- likes the morning swims"
DAY = f"memory/{NOW:%Y-%m-%d}.md"
MINE = "# Today"
SAVED = "- dentist on Monday at 9 (typed in my editor)"
SESSIONS = {"contact": ("agent:main:telegram:dm:own-c1", "telegram:default:dm:own-c1:1"),
            "owner": (main_session_key("main"), "telegram:default:dm:u7:1")}
uid, home = ch.uid, ch.home


def runtime(home: Path) -> AgentRuntime:
    def model(req: ModelRequest) -> Reply:
        last = req.messages[-1].to_dict()
        if last.get("role") == "toolResult":
            return "Noted."
        if CODE in str(last.get("content")):
            return {"tool_calls": [{"name": "write", "arguments": {"path": DAY, "content": f"{NOTED}\n{PLAIN}\n",
                                                                     "append": True}}]}
        return "ok"

    return scripted_runtime(home, model)


def hooked_reads(target: Path, on_read: Callable[[], None]) -> Callable[[], int]:
    """Call `on_read` each time the scrub's read of `target` returns (agent/flush.py and agent/owner_notes.py read a
    note through owner_notes' `read_regular_stat`; the old flush.py through its own); returns the undo, which gives
    how many reads there were."""
    import hermit.agent.flush as flush
    import hermit.agent.owner_notes as owner_notes

    modules = [m for m in (flush, owner_notes) if hasattr(m, "read_regular_stat")]
    real = owner_notes.read_regular_stat
    reads: list[int] = []

    def read(path: Any, *args: Any, **kwargs: Any) -> Any:
        got = real(path, *args, **kwargs)
        if Path(path) == target:
            reads.append(1)
            on_read()
        return got

    for m in modules:
        m.read_regular_stat = read  # type: ignore[attr-defined]

    def undo() -> int:
        for m in modules:
            m.read_regular_stat = real  # type: ignore[attr-defined]
        return len(reads)
    return undo


@pytest.mark.parametrize("how", ["rename", "in-place"])
@pytest.mark.parametrize("who", sorted(SESSIONS))
def test_an_editor_saving_a_daily_note_mid_scrub_keeps_its_save(home: Path, uid: int | None, who: str,
                                                                 how: str) -> None:
    session, ref = SESSIONS[who]

    def setup(home: Path) -> None:
        ws = load_offline(home).agent().workspace
        (ws / "memory").mkdir(parents=True, exist_ok=True)
        (ws / DAY).write_text(f"{MINE}\n")
        rt = runtime(home)
        rt.run_turn(session, SECRET, ref=ref)
        rt.close()

    def delete(home: Path) -> str:
        ws = load_offline(home).agent().workspace
        note = (ws / DAY).resolve()
        assert NOTED in note.read_text()
        fired: list[bool] = []

        def once() -> None:
            if not fired:
                fired.append(True)
                save_as_an_editor(note, how, SAVED)
        undo = hooked_reads(note, once)
        rt = runtime(home)
        try:
            assert rt.retract(session, ref)
        finally:
            rt.close()
            assert undo(), "the scrub never read the note"
        return note.read_text()

    text = set_up_then_delete(home, uid, setup, delete)
    assert SAVED in text, text  # the editor's save is kept
    assert CODE not in text, text  # and the deleted text is gone
    assert MINE in text and PLAIN in text and "[deleted]" in text, text


def test_a_daily_note_an_editor_saves_at_every_read_is_left_whole_and_said(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An editor saving after each of the scrub's reads: the scrub gives up after a few tries rather than replace a
    save it has not read — every save stays, the copy is left, and the log says so (the next delete scrubs it)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    session, ref = SESSIONS["contact"]
    ws = load_offline(home).agent().workspace
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / DAY).write_text(f"{MINE}\n")
    rt = runtime(home)
    rt.run_turn(session, SECRET, ref=ref)
    rt.close()
    note = (ws / DAY).resolve()
    undo = hooked_reads(note, lambda: save_as_an_editor(note, "rename", SAVED))
    rt = runtime(home)
    try:
        with caplog.at_level("WARNING", logger="hermit.agent"):
            assert rt.retract(session, ref)
    finally:
        rt.close()
        saves = undo()
    text = note.read_text()
    assert text.count(SAVED) == saves > 1, (saves, text)  # no save lost
    assert NOTED.split(CODE)[0] in text and CODE in text, text  # left, not replaced by a text without the saves
    assert any("kept changing" in r.getMessage() and DAY.rsplit("/", 1)[1] in r.getMessage()
               for r in caplog.records), caplog.text
