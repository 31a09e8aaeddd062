"""A chat's `read` of a file under memory/ that is not Markdown (audit: chats, as a non-owner).

Memory is Markdown: the indexer, memory_search, memory_get (".md only") and what a chat's sandboxed commands
see of memory/ (audience.memory_view) take `.md` files only. A chat's `read` tool did not: any file under
memory/ went through the audience rules, which call text outside origin blocks shared. But the owner's
writes are owner-only blocks only in Markdown (a block would break a JSON or CSV file), so what the main
session wrote with its write tool (`memory/people.json`), what the owner's shell wrote (`memory/notes.txt`:
its changes are marked in .md files only) and anything kept there by hand (`memory/passwords.txt`) went to
any contact or group member who asked for the path. Now a chat reads Markdown memory only; everything else
under memory/ is answered as missing, as memory_get answers it.

Real parts: the runtime's real tools — the owner's write and exec, the contact's and the group's RoomView.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agenthelpers import offline_tool_runtime
from agenthelpers import tool_call as call
from hermit.agent.runtime import AgentRuntime
from hermit.sessions.keys import main_session_key

MAIN = main_session_key("main")
CHATS = ("agent:main:telegram:default:dm:777", "agent:main:telegram:group:-1007")


@pytest.fixture
def rt(tmp_path: Path) -> AgentRuntime:
    return offline_tool_runtime(tmp_path)


def test_what_is_not_markdown_under_memory_is_no_chats_to_read(rt: AgentRuntime) -> None:
    ws = rt.agent.workspace
    assert not call(rt, MAIN, "write", path="memory/people.json", content='{"ann": "PIN 5512 OWNERJSON"}')[1]
    assert not call(rt, MAIN, "write", path="memory/todo.txt", content="OWNERTXT call the lawyer")[1]
    assert not call(rt, MAIN, "exec", command='printf "OWNEREXEC door code 0451\\n" > memory/notes.txt')[1]
    (ws / "memory" / "people").mkdir()
    (ws / "memory" / "people" / "passwords.txt").write_text("HANDPLACED bank 9876\n")
    (ws / "memory" / ".env").write_text("DOTFILE token\n")
    (ws / "memory" / "shared.md").write_text("SHAREDNOTE picnic on sunday\n")
    (ws / "memory" / "UPPER.MD").write_text("UPPERNOTE shared too\n")
    for chat in CHATS:
        for path in ("memory/people.json", "memory/todo.txt", "memory/notes.txt", "memory/people/passwords.txt",
                     "memory/.env", "/workspace/memory/notes.txt"):  # where a chat sees the workspace
            text, err = call(rt, chat, "read", path=path)
            assert err and "file not found" in text and "(or nothing in it is shared with this chat)" in text, (
                chat, path, text)
            assert not any(s in text for s in ("OWNER", "HANDPLACED", "DOTFILE")), text
        # Markdown memory is read as before.
        assert call(rt, chat, "read", path="memory/shared.md") == ("SHAREDNOTE picnic on sunday", False)
        assert call(rt, chat, "read", path="memory/UPPER.MD") == ("UPPERNOTE shared too", False)
        # The same answer as memory_get's rule, and the same as for a file that is not there.
        assert call(rt, chat, "read", path="memory/none.json")[0].replace("none.json", "X") == \
            call(rt, chat, "read", path="memory/todo.txt")[0].replace("todo.txt", "X")
    # The owner reads them all.
    assert "OWNERJSON" in call(rt, MAIN, "read", path="memory/people.json")[0]
