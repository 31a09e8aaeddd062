"""The session-memory hook (/new) for sessions that are not the owner's: what a chat can put into memory/
is bounded like its notes, file names never carry secrets nor break the save, and a group's file is not
credited to whoever typed /new.

Every test drives real AgentRuntime turns (a scripted model, real workspace and transcript files).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from agenthelpers import TODAY, fixed_clock, load_offline
from hermit.agent import session_memory
from hermit.agent.runtime import AgentRuntime
from hermit.agent.session_memory import chat_suffix
from hermit.memory.policy.daily_log import MAX_NOTE_CHARS
from hermit.memory.policy.provenance import origin_blocks
from hermit.models.base import ModelProfile, ModelRequest
from hermit.sessions.keys import dm_session_key, group_session_key, main_session_key
from hermit.testing import FunctionModel
from hermit.tools.memory_files import MAX_FILE_CHARS_FROM_OTHERS
from hermit.tools.os_sandbox import Backend

MAIN = main_session_key("main")
CONTACT = dm_session_key("main", "telegram", "2001")
GROUP = group_session_key("main", "telegram", "-100200")
LONG_REPLY = "ok " + "A" * 1990  # about MAX_MESSAGE_CHARS: 7 exchanges are 28,000 characters of dialogue
TOKEN = "ghp_" + "Zq7RkV2mWx9LpT4nYc8HsB3dJf6GaE1uQo5K"


def make(home: Path, reply: str = "ok") -> AgentRuntime:
    hook = {"session": {"hooks": {"session_memory": {"slug_from_model": False}}}}
    agent = load_offline(home, defaults=hook).agent()

    def answer(request: ModelRequest) -> str:
        return reply

    model = FunctionModel(answer, profile=ModelProfile("scripted", "x", context_window=200_000))
    return AgentRuntime(agent, model, memory=None, clock=fixed_clock, fsync=False, home=home,
                        sandbox_backend=Backend(None, None, "test"))


def memory_files(rt: AgentRuntime) -> dict[str, str]:
    mem = rt.agent.workspace / "memory"
    return {p.name: p.read_text() for p in sorted(mem.iterdir()) if p.is_file()}


def long_session(rt: AgentRuntime, key: str, topic: str, *, sender: str | None = "Eve (2001)") -> None:
    """Seven ~2,000-character user messages (and as many replies), each tagged part<n>-<topic>."""
    for n in range(7):
        rt.run_turn(key, f"{topic} part{n}-{topic} " + "lorem ipsum " * 160, sender=sender)


def new(rt: AgentRuntime, key: str, sender: str | None = "Eve (2001)") -> tuple[str, tuple[str, ...]]:
    result = rt.run_turn(key, "/new", sender=sender)
    return result.reply, result.warnings


# -- F1: a chat's /new files are bounded per chat and day -------------------------------------------

def test_a_chats_new_file_keeps_the_last_note_sized_part_of_the_session(tmp_path: Path) -> None:
    rt = make(tmp_path / "home", LONG_REPLY)
    long_session(rt, CONTACT, "walrus")
    reply, warnings = new(rt, CONTACT)
    assert not warnings and "saved to memory/" in reply
    (name, text), = memory_files(rt).items()
    assert name.endswith(f"-{chat_suffix(CONTACT)}.md")
    block = origin_blocks(text)
    assert len(block) == 1
    inside = "\n".join(text.split("\n")[block[0].start:block[0].end - 1])
    assert len(inside) <= MAX_NOTE_CHARS  # like a note the chat adds to its daily log
    assert "part6-walrus" in text and "part0-walrus" not in text  # the end of the session is what /new keeps
    assert "earlier messages cut" in text

    long_session(rt, MAIN, "narwhal", sender=None)  # the owner's own session is saved whole
    new(rt, MAIN, sender=None)
    (owners,) = (t for n, t in memory_files(rt).items() if n != name)
    assert "part0-narwhal" in owners and "part6-narwhal" in owners and len(owners) > MAX_NOTE_CHARS


def test_a_chat_makes_three_files_a_day_then_appends_until_the_file_is_full(tmp_path: Path) -> None:
    rt = make(tmp_path / "home", LONG_REPLY)
    topics = [f"topic{chr(97 + n)}" for n in range(6)]
    for topic in topics:
        long_session(rt, CONTACT, topic)
        reply, warnings = new(rt, CONTACT)
        assert not warnings and "saved to memory/" in reply
    files = memory_files(rt)
    assert len(files) == 3 and all(n.startswith(TODAY) and chat_suffix(CONTACT) in n for n in files)
    newest = re.search(r"saved to memory/(\S+\.md)", reply)
    assert newest is not None
    grown = files[newest.group(1)]
    for topic in topics[2:]:  # the third file and the three sessions added to it
        assert f"part6-{topic}" in grown
    blocks = origin_blocks(grown)
    assert len(blocks) == 4 and all(b.origin.session == CONTACT for b in blocks)
    assert grown.count("# Session ") == 4

    # Each session adds at most a note's worth: the file stops growing at MAX_FILE_CHARS_FROM_OTHERS.
    refused: tuple[str, ...] = ()
    for n in range(MAX_FILE_CHARS_FROM_OTHERS // MAX_NOTE_CHARS + 2):
        long_session(rt, CONTACT, f"more{n}")
        _, refused = new(rt, CONTACT)
        if refused:
            break
    assert refused and "could not save the last session to memory" in refused[0] and "no room" in refused[0]
    after = memory_files(rt)
    assert len(after) == 3
    assert all(len(text) <= MAX_FILE_CHARS_FROM_OTHERS for text in after.values())
    assert sum(len(text) for text in after.values()) <= MAX_FILE_CHARS_FROM_OTHERS + 2 * (MAX_NOTE_CHARS + 1000)


def test_the_owners_new_files_are_not_counted_or_limited(tmp_path: Path) -> None:
    rt = make(tmp_path / "home")
    for n in range(5):
        rt.run_turn(MAIN, f"planning topic{chr(97 + n)} details")
        _, warnings = new(rt, MAIN, sender=None)
        assert not warnings
    for n in range(4):
        rt.run_turn(CONTACT, f"chat subject{chr(97 + n)} details", sender="Eve (2001)")
        _, warnings = new(rt, CONTACT)
        assert not warnings
    files = memory_files(rt)
    suffix = chat_suffix(CONTACT)
    assert len([n for n in files if suffix not in n]) == 5  # the owner's: one file each, untouched
    assert len([n for n in files if suffix in n]) == 3
    assert all("subject" not in text for n, text in files.items() if suffix not in n)


def test_a_chat_never_appends_to_a_file_that_is_not_its_own(tmp_path: Path) -> None:
    """A file named like the chat's (the owner's hand-written note here) counts against the chat's day and is
    never added to: the chat's session is then not saved."""
    rt = make(tmp_path / "home")
    mem = rt.agent.workspace / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    for n in range(2):
        rt.run_turn(CONTACT, f"chat subject{chr(97 + n)} details", sender="Eve (2001)")
        assert not new(rt, CONTACT)[1]
    owners = mem / f"{TODAY}-vault-{chat_suffix(CONTACT)}.md"
    owners.write_text("# my notes\n- the safe code is in the blue book\n")
    os.utime(owners, (2_000_000_000, 2_000_000_000))  # the newest of the three
    rt.run_turn(CONTACT, "chat subjectz details", sender="Eve (2001)")
    reply, warnings = new(rt, CONTACT)
    assert "saved to" not in reply and warnings and "could not save the last session" in warnings[0]
    assert owners.read_text() == "# my notes\n- the safe code is in the blue book\n"
    assert not any("subjectz" in text for text in memory_files(rt).values())


# -- F2: the file name: no secrets, bounded, and never the reason a session is lost ------------------

def test_the_keyword_slug_leaves_out_secrets_and_long_words(tmp_path: Path) -> None:
    rt = make(tmp_path / "home")
    rt.run_turn(MAIN, f"set the CI secret to {TOKEN} please; {TOKEN} is the deploy key")
    reply, warnings = new(rt, MAIN, sender=None)
    assert not warnings
    (name, text), = memory_files(rt).items()
    assert TOKEN[4:].lower() not in name.lower() and TOKEN[4:] not in text and "redacted" not in name
    assert f"saved to memory/{name}" in reply

    rt.run_turn(MAIN, "contract checksum " + "a1B2c3D4" * 40 + " for the lawyer, "
                + "deadbeefcafe0123456789 and " + "x" * 300)
    reply, warnings = new(rt, MAIN, sender=None)
    assert not warnings and "saved to memory/" in reply
    names = sorted(memory_files(rt))
    assert len(names) == 2
    second = next(n for n in names if n != name)
    assert "a1b2c3d4" not in second and "deadbeef" not in second
    assert len(second.encode()) <= 110 and all(len(w) <= 24 for w in second.removesuffix(".md").split("-"))


def test_a_chats_long_words_neither_lose_its_session_nor_exceed_the_stem(tmp_path: Path) -> None:
    rt = make(tmp_path / "home")
    words = " ".join(w * 30 for w in ("alpha", "bravo", "charlie", "delta", "echo"))
    rt.run_turn(CONTACT, f"{words} {words}", sender="Eve (2001)")
    reply, warnings = new(rt, CONTACT)
    assert not warnings and "saved to memory/" in reply
    (name,) = memory_files(rt)
    assert len(name.removesuffix(".md").encode()) <= 100 and name.endswith(f"-{chat_suffix(CONTACT)}.md")


def test_a_name_the_file_system_refuses_falls_back_to_a_timestamp(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With the caps lifted, a 300-letter word makes a name over NAME_MAX: the session is still saved."""
    monkeypatch.setattr(session_memory, "MAX_WORD_CHARS", 1000, raising=False)
    monkeypatch.setattr(session_memory, "MAX_STEM_BYTES", 1000, raising=False)
    rt = make(tmp_path / "home")
    rt.run_turn(MAIN, "z" * 300 + " plans")
    reply, warnings = new(rt, MAIN, sender=None)
    assert not warnings, warnings
    (name, text), = memory_files(rt).items()
    assert re.fullmatch(rf"{TODAY}-session-\d{{6}}\.md", name) and "plans" in text
    assert f"saved to memory/{name}" in reply


# -- F3: a group's /new file names the group, not whoever typed /new --------------------------------

def test_a_groups_new_file_is_not_credited_to_who_typed_new(tmp_path: Path) -> None:
    rt = make(tmp_path / "home")
    rt.run_turn(GROUP, "Mallory here: I will transfer the 5000 EUR tonight", sender="Mallory (666)")
    rt.run_turn(GROUP, "/new", sender="Alice (42)")
    (text,) = memory_files(rt).values()
    (block,) = origin_blocks(text)
    assert "5000 EUR" in text
    assert block.origin.sender is None and block.origin.group == "-100200"
    assert block.origin.describe() == "written from telegram group -100200"

    # A DM holds one person's words: its file still names them.
    rt.run_turn(CONTACT, "remember my bike is blue", sender="Eve (2001)")
    new(rt, CONTACT, sender="Eve (2001)")
    (dm,) = (t for t in memory_files(rt).values() if "bike is blue" in t)
    (block,) = origin_blocks(dm)
    assert block.origin.sender == "Eve (2001)" and block.origin.session == CONTACT
