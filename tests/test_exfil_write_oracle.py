"""A chat's whole-file `write` to a memory file says nothing about the lines withheld from it.

Audit (exfil Y2): a chat may only add to a memory file, and a `write` without `append` was let through when
its content began with the file's whole real text — the owner's withheld lines included. So a contact could
write "the file as I guess it + a line" and read the answer: "added a note" for a right guess, "would change
existing text" for a wrong one, one guess at a time (the withheld line count and the origin marker's shape
are shown or known; a PIN in a known line is 10,000 silent tries). Edits were already refused before `old`
was matched (MemoryWriteRules.refuse_edit); a whole-file write is now judged against the file as this chat
sees it (withheld lines as their placeholders), and only what follows that is its note.
"""

from __future__ import annotations

from pathlib import Path

from agenthelpers import offline_tool_runtime
from agenthelpers import tool_call as call
from hermit.sessions.keys import dm_session_key, main_session_key

MAIN = main_session_key("main")
CONTACT = dm_session_key("main", "telegram", "777")
LOG = "memory/2026-01-20.md"
PIN = "- the bank PIN is 4821"


def test_a_guess_of_the_withheld_lines_gets_the_same_answer_right_or_wrong(tmp_path: Path) -> None:
    rt = offline_tool_runtime(tmp_path)
    assert not call(rt, MAIN, "write", path=LOG, content=PIN + "\n")[1]
    assert not call(rt, CONTACT, "write", path=LOG, content="- hello\n", append=True)[1]  # now it sees the log
    path = rt.agent.workspace / LOG
    real = path.read_text()
    shown, err = call(rt, CONTACT, "read", path=LOG)
    assert not err and "4821" not in shown and "withheld" in shown

    right = call(rt, CONTACT, "write", path=LOG, content=real + "- extra\n")
    wrong = call(rt, CONTACT, "write", path=LOG, content=real.replace("4821", "4822") + "- extra\n")
    assert right == wrong, (right, wrong)
    assert right[1] and "would change existing text" in right[0]
    assert path.read_text() == real  # neither guess added anything

    # The file as this chat sees it, and a line after it: a note of the chat's, after the owner's lines.
    out, err = call(rt, CONTACT, "write", path=LOG, content=shown + "\n- the contact's note\n")
    assert not err and out.startswith("added a note"), out
    text = path.read_text()
    assert text.startswith(real) and "- the contact's note" in text[len(real):]
    assert 'audience="telegram:dm:777"' in text[len(real):] and "withheld" not in text


def test_a_whole_file_write_to_a_log_it_sees_all_of_still_adds(tmp_path: Path) -> None:
    rt = offline_tool_runtime(tmp_path)
    assert not call(rt, CONTACT, "write", path=LOG, content="- first\n")[1]
    path = rt.agent.workspace / LOG
    before = path.read_text()
    # What the chat sees of its own note: the file, its origin marker not naming the agent (b33511e).
    shown, err = call(rt, CONTACT, "read", path=LOG)
    assert not err and "agent:main:" in before and "agent:main:" not in shown
    out, err = call(rt, CONTACT, "write", path=LOG, content=shown + "- second\n")
    assert not err and out.startswith("added a note"), out
    assert path.read_text().startswith(before) and "- second" in path.read_text()[len(before):]
    out, err = call(rt, CONTACT, "write", path=LOG, content="- replaced\n")
    assert err and "would change existing text" in out
