"""/new killed (kill -9) between saving the old session to memory/ and starting the new session: the next
/new must not save that same session again (session_memory.already_saved).

The kill is `Killed`, an exception nothing in Hermit catches, raised where the runtime starts the new
session (right after the hook wrote its file), so nothing after that point runs; a fresh runtime then opens
the same state dir, as the restarted process would. Real AgentRuntime turns, real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenthelpers import TODAY, fixed_clock, load_offline
from hermit.agent.runtime import AgentRuntime
from hermit.agent.session_memory import chat_suffix
from hermit.memory.policy.provenance import origin_blocks
from hermit.models.base import ModelProfile, ModelRequest
from hermit.sessions.keys import dm_session_key, main_session_key
from hermit.sessions.record import SessionRecord
from hermit.testing import FunctionModel
from hermit.tools.os_sandbox import Backend

MAIN = main_session_key("main")
CONTACT = dm_session_key("main", "telegram", "2001")


class Killed(BaseException):
    """The process dies here: nothing in Hermit catches it, so nothing after this point runs."""


def make(home: Path) -> AgentRuntime:
    hook = {"session": {"hooks": {"session_memory": {"slug_from_model": False}}}}
    agent = load_offline(home, defaults=hook).agent()

    def answer(request: ModelRequest) -> str:
        return "noted"

    model = FunctionModel(answer, profile=ModelProfile("scripted", "x", context_window=200_000))
    return AgentRuntime(agent, model, memory=None, clock=fixed_clock, fsync=False, home=home,
                        sandbox_backend=Backend(None, None, "test"))


def sender(key: str) -> str | None:
    return None if key == MAIN else "Eve (2001)"


def killed_new(home: Path, key: str, monkeypatch: pytest.MonkeyPatch) -> SessionRecord:
    """/new in a runtime that dies right after the hook saved the session; the session it was ending."""
    rt = make(home)
    old = rt.session(key)
    assert old is not None

    def die(session_key: str) -> SessionRecord:
        raise Killed

    monkeypatch.setattr(rt, "new_session", die)
    with pytest.raises(Killed):
        rt.run_turn(key, "/new", sender=sender(key))
    return old


def memory_files(home: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((home / "workspace" / "memory").iterdir()) if p.is_file()}


@pytest.mark.parametrize(("key", "earlier_sessions"), [(MAIN, 0), (CONTACT, 0), (CONTACT, 3)])
def test_new_killed_after_saving_does_not_save_the_session_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, earlier_sessions: int) -> None:
    """The owner's file, a chat's own file, and a chat's fourth session of the day (appended to its newest
    file): after the restart, /new finds the saved session and starts the new one without a second copy."""
    home = tmp_path / "home"
    rt = make(home)
    for n in range(earlier_sessions):
        rt.run_turn(key, f"earlier topic{chr(97 + n)} details", sender=sender(key))
        assert not rt.run_turn(key, "/new", sender=sender(key)).warnings
    rt.run_turn(key, "the walrus migration plan for Thursday", sender=sender(key))
    before = memory_files(home)
    old = killed_new(home, key, monkeypatch)
    saved = memory_files(home)
    assert sum(t.count("User: the walrus migration") for t in saved.values()) == 1  # the hook's file landed
    (path,) = (n for n, t in saved.items() if t != before.get(n))
    assert path.startswith(TODAY) and (key == MAIN or chat_suffix(key) in path)
    assert f"- Session id: {old.session_id}\n" in saved[path]

    restarted = make(home)
    result = restarted.run_turn(key, "/new", sender=sender(key))
    assert result.reset == "/new" and result.session_id != old.session_id and not result.warnings
    assert f"saved to memory/{path}" in result.reply  # the file the killed /new wrote
    assert memory_files(home) == saved  # nothing written again
    blocks = origin_blocks(saved[path])
    assert len(blocks) == (2 if earlier_sessions == 3 else 1)


def test_a_session_that_went_on_after_the_crash_is_saved_again(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    make(home).run_turn(MAIN, "the walrus migration plan for Thursday")
    killed_new(home, MAIN, monkeypatch)
    (first,) = memory_files(home)
    restarted = make(home)
    restarted.run_turn(MAIN, "and the narwhal rollout on Friday")  # the old session is still the current one
    result = restarted.run_turn(MAIN, "/new")
    files = memory_files(home)
    assert len(files) == 2 and "saved to memory/" in result.reply
    (second,) = (n for n in files if n != first)
    assert "narwhal rollout" in files[second] and "walrus migration" in files[second]
    assert "narwhal" not in files[first]


def test_a_file_that_only_quotes_the_header_does_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The header is read only where the hook writes it, in a block of the session's own audience: the same
    lines inside the conversation, or in another chat's block, are not an earlier save."""
    home = tmp_path / "home"
    rt = make(home)
    rt.run_turn(MAIN, "the walrus migration plan for Thursday")
    old = killed_new(home, MAIN, monkeypatch)
    (name, text), = memory_files(home).items()
    mem = home / "workspace" / "memory"
    mem.joinpath(name).unlink()
    header = text[text.index("# Session"):text.index("## Conversation")]
    other = '<!-- origin session="agent:main:telegram:dm:2001" audience="dm:telegram:2001" -->\n'
    (mem / f"{TODAY}-quoted.md").write_text(f"{other}{header}## Conversation\n\n<!-- /origin -->\n")
    (mem / f"{TODAY}-pasted.md").write_text(text.replace("# Session", "## Conversation\n\n# Session", 1))
    result = make(home).run_turn(MAIN, "/new")
    assert result.session_id != old.session_id and "saved to memory/" in result.reply
    assert f"saved to memory/{TODAY}-quoted.md" not in result.reply
    assert f"saved to memory/{TODAY}-pasted.md" not in result.reply
    assert len(memory_files(home)) == 3
