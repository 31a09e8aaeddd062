"""Re-audit 21 (t9), held: ways around the main session's untrusted-words guard that were tried and found closed
already (nothing changed for them; these tests keep them closed).

- A scheduled job's own (isolated) session or a contact's DM that reads the page cannot write an instruction file at
  all — the write tool refuses every session but the main one, and its shell runs in the sandbox, where the
  workspace's files are read-only — so the guard wrapping only the main session leaves no gap there.
- Any spelling of an instruction file's path (another case, `./`, `memory/../`, the absolute path) is the file.

Real parts: the runtime's turn with its real tools; the model is scripted.
"""

from __future__ import annotations

from pathlib import Path

from hermit.sessions.keys import cron_session_key, dm_session_key
from hermit.testing import ScriptedModel
from test_audit21_untrusted_reaudit_bypasses import page_file
from test_audit21_untrusted_standing import MAIN, RULE, call, setup, snapshot


def test_a_jobs_or_contacts_session_that_read_the_page_writes_no_instruction_file(tmp_path: Path) -> None:
    page = page_file(tmp_path)
    for key in (cron_session_key("j-1", "main"), dm_session_key("main", "telegram", "4242")):
        writes = [call("write", path=name, content=f"- {RULE}\n", append=True) for name in
                  ("AGENTS.md", "SOUL.md", "HEARTBEAT.md", "MEMORY.md")]
        rt, _, _ = setup(tmp_path / key.replace(":", "_"), [
            call("exec", command=f"cat {page}"), *writes,
            call("exec", command=f"echo '- {RULE}' >> TOOLS.md; echo '- {RULE}' >> AGENTS.md"), "done"])
        before = snapshot(rt)
        tools = (rt.agent.workspace / "TOOLS.md").read_text(encoding="utf-8")
        result = rt.run_turn(key, "summarise example.com")
        assert all(r.is_error for r in result.tool_calls[1:5]), [r.result[:120] for r in result.tool_calls]
        assert snapshot(rt) == before, key
        assert (rt.agent.workspace / "TOOLS.md").read_text(encoding="utf-8") == tools, key


def test_every_spelling_of_an_instruction_files_path_is_that_file(tmp_path: Path) -> None:
    page = page_file(tmp_path)
    rt, _, _ = setup(tmp_path, [])
    ws = rt.agent.workspace
    paths = ("heartbeat.MD", "./HEARTBEAT.md", "memory/../MEMORY.md", str(ws / "AGENTS.md"), "~/../" + str(ws)
             + "/SOUL.md")
    rt.model = ScriptedModel([call("exec", command=f"cat {page}"),  # type: ignore[arg-type]
                              *[call("write", path=p, content=f"- {RULE}\n", append=True) for p in paths], "done"])
    before = snapshot(rt)
    result = rt.run_turn(MAIN, "what does example.com say?")
    assert [r.is_error for r in result.tool_calls] == [False] + [True] * len(paths), \
        [r.result[:120] for r in result.tool_calls]
    assert snapshot(rt) == before



def test_a_hard_link_the_shell_made_does_not_carry_a_write_into_the_heartbeat(tmp_path: Path) -> None:
    """`ln HEARTBEAT.md memory/hb.md` (no words in the command), then the write tool on memory/hb.md (a note: not
    guarded): the write tool replaces the file whole, so the link is broken, not written through."""
    page = page_file(tmp_path)
    rt, _, _ = setup(tmp_path, [call("exec", command=f"cat {page}"),
                                call("exec", command="mkdir -p memory; ln HEARTBEAT.md memory/hb.md"),
                                call("write", path="memory/hb.md", content=f"- {RULE}\n", append=True), "done"])
    before = snapshot(rt)
    result = rt.run_turn(MAIN, "what does example.com say?")
    assert [r.is_error for r in result.tool_calls] == [False, False, False], [r.result[:120] for r in result.tool_calls]
    assert snapshot(rt) == before
