"""A turn replayed after a crash (the channel's journal delivers the message again) continues from what
the transcript holds: tool calls whose results were recorded do not run again, a call that was running
when the process died is reported to the model as of unknown outcome (never re-run by Hermit), the calls
after it as not started, and the user message is not stored twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatewayhelpers import runtime
from hermit.agent.loop import NOT_STARTED_RESULT, UNKNOWN_RESULT
from hermit.messages import ToolResultMessage, UserMessage
from hermit.models.base import ModelRequest
from hermit.sessions.transcript import MessageEntry, read_transcript
from hermit.testing.scripted import Reply

KEY = "agent:main:main"
ASK = "append a line to ran.txt"


class Crash(BaseException):
    """The process dying: nothing after it is recorded (not an Exception, so nothing catches it)."""


def _calls(n: int) -> Reply:
    return {"tool_calls": [{"name": "exec", "arguments": {"command": f"echo run{i} >> ran.txt"}, "id": f"c{i}"}
                           for i in range(n)]}


def _model(crash_after_tools: bool, calls: int = 1) -> tuple[list[ModelRequest], object]:
    seen: list[ModelRequest] = []

    def fn(req: ModelRequest) -> Reply:
        seen.append(req)
        last = req.messages[-1]
        if isinstance(last, UserMessage):
            return _calls(calls)  # what a model does when asked: run the tool
        if crash_after_tools:
            raise Crash()  # the gateway is killed while the model writes its answer
        return "done"
    return seen, fn


def _user_entries(rt: object) -> list[MessageEntry]:
    store = rt.store  # type: ignore[attr-defined]
    path = store.transcript_path(store.get(KEY).session_id)
    return [e for e in read_transcript(path).entries
            if isinstance(e, MessageEntry) and e.message.get("role") == "user"]


def test_a_replayed_turn_does_not_run_a_finished_tool_again(tmp_path: Path) -> None:
    _, crashing = _model(crash_after_tools=True)
    rt = runtime(tmp_path, crashing)  # type: ignore[arg-type]
    with pytest.raises(Crash):
        rt.run_turn(KEY, ASK)
    ran = rt.agent.workspace / "ran.txt"
    assert ran.read_text() == "run0\n"

    seen, fine = _model(crash_after_tools=False)
    rt = runtime(tmp_path, fine)  # type: ignore[arg-type]  # the restarted gateway
    result = rt.run_turn(KEY, ASK)  # the journal delivers the same message again
    assert result.reply == "done"
    assert ran.read_text() == "run0\n"  # the tool ran once in all
    assert len(seen) == 1 and isinstance(seen[0].messages[-1], ToolResultMessage)
    assert [e.message["content"][0]["text"] for e in _user_entries(rt)] == [ASK]  # stored once


def test_a_call_running_at_the_crash_is_reported_unknown_and_later_ones_not_started(tmp_path: Path) -> None:
    _, crashing = _model(crash_after_tools=True, calls=3)
    rt = runtime(tmp_path, crashing)  # type: ignore[arg-type]
    with pytest.raises(Crash):
        rt.run_turn(KEY, ASK)
    ran = rt.agent.workspace / "ran.txt"
    assert ran.read_text() == "run0\nrun1\nrun2\n"
    # Make it as if the process died while the second command ran: its result and the third's never
    # reached the transcript (the first did).
    store = rt.store
    path = store.transcript_path(store.get(KEY).session_id)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-2]))

    seen, fine = _model(crash_after_tools=False, calls=3)
    rt = runtime(tmp_path, fine)  # type: ignore[arg-type]
    assert rt.run_turn(KEY, ASK).reply == "done"
    assert ran.read_text() == "run0\nrun1\nrun2\n"  # nothing re-run by Hermit
    results = [m for m in seen[0].messages if isinstance(m, ToolResultMessage)]
    assert [r.content for r in results[1:]] == [UNKNOWN_RESULT, NOT_STARTED_RESULT]
    assert not results[0].is_error
    # The transcript now holds what the model was shown, in order.
    stored = [e.message for e in read_transcript(path).entries if isinstance(e, MessageEntry)]
    assert [m["role"] for m in stored] == ["user", "assistant", "toolResult", "toolResult", "toolResult", "assistant"]


def test_a_new_message_or_a_finished_turn_is_not_resumed(tmp_path: Path) -> None:
    seen, fine = _model(crash_after_tools=False)
    rt = runtime(tmp_path, fine)  # type: ignore[arg-type]
    assert rt.run_turn(KEY, ASK).reply == "done"
    assert rt.run_turn(KEY, ASK).reply == "done"  # asked again after an answer: a new turn, the tool runs
    assert (rt.agent.workspace / "ran.txt").read_text() == "run0\nrun0\n"
    assert len(_user_entries(rt)) == 2
