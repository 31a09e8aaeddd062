"""Whole turns through the fake provider over real HTTP (both wire formats), real memory, real transcripts."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from agenthelpers import (
    TODAY,
    fixed_clock,
    last_tool_result,
    load,
    load_offline,
    make_runtime,
    system_text,
    tool_results,
)
from conftest import write
from hermit.agent.loop import AgentEvent, TextChunk, ToolFinished, ToolStarted
from hermit.agent.runtime import AgentRuntime
from hermit.errors import RateLimitError
from hermit.messages import AssistantMessage, TextPart, ToolCallPart
from hermit.models.base import ClosableModel, ModelRequest
from hermit.sessions.keys import group_session_key, main_session_key
from hermit.testing import FakeProvider, FunctionModel, ScriptedModel

APIS = ["anthropic", "openai"]
MAIN = main_session_key("main")
GROUP = group_session_key("main", "telegram", "-100200")
MEMORY = ("# MEMORY.md\n\n## Preferences\n- Prefers oat milk flat white, no sugar.\n- Deploys only on Tuesdays.\n"
          "\n## People\n- Alice Chen leads the data platform team.\n- CANARY-PRIVATE-7731\n")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    write(h / "workspace" / "MEMORY.md", MEMORY)
    write(h / "workspace" / "memory" / "2026-01-19.md", "# 2026-01-19\n- Fixed the login timeout bug.\n")
    return h


def turns(runtime: AgentRuntime, key: str) -> list[dict[str, Any]]:
    rec = runtime.session(key)
    assert rec is not None
    path = runtime.store.transcript_path(rec.session_id)
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True])
def test_memory_search_then_get_then_answer(home: Path, e5: object, api: str, stream: bool) -> None:
    script = [
        {"tool_calls": [{"name": "memory_search", "arguments": {"query": "oat milk coffee preference"}}]},
        {"tool_calls": [{"name": "memory_get", "arguments": {"path": "MEMORY.md", "from": 4, "lines": 1}}]},
        {"text": "You like an oat milk flat white, no sugar."},
    ]
    with FakeProvider(script) as fake:
        rt = make_runtime(load(home, api, fake), e5)  # type: ignore[arg-type]
        events: list[AgentEvent] = []
        result = rt.run_turn(MAIN, "How do I take my coffee?", events.append, stream=stream)
    assert result.reply == "You like an oat milk flat white, no sugar." and result.delivered
    assert [c.name for c in result.tool_calls] == ["memory_search", "memory_get"]
    assert len(fake.requests) == 3
    search_text, search_err = last_tool_result(fake.requests[1])
    found = json.loads(search_text)
    assert not search_err and found["results"][0]["path"] == "MEMORY.md"
    assert "oat milk" in found["results"][0]["snippet"] and found["provider"] == "local"
    get_text, get_err = last_tool_result(fake.requests[2])
    assert not get_err
    assert json.loads(get_text) == {"path": "MEMORY.md", "text": "- Prefers oat milk flat white, no sugar."}
    if stream:
        assert "".join(e.text for e in events if isinstance(e, TextChunk)) == result.reply
    assert [type(e).__name__ for e in events if isinstance(e, ToolStarted | ToolFinished)] == [
        "ToolStarted", "ToolFinished", "ToolStarted", "ToolFinished"]
    rt.memory.close()  # type: ignore[union-attr]


@pytest.mark.parametrize("api", APIS)
def test_write_to_daily_log_is_searchable_next_turn(home: Path, e5: object, api: str) -> None:
    fact = "- The spare house key is hidden under the blue flower pot.\n"
    script = [
        {"tool_calls": [{"name": "write", "arguments": {"path": f"memory/{TODAY}.md",
                                                         "content": f"# {TODAY}\n{fact}"}}]},
        {"text": "Noted in today's log."},
        {"tool_calls": [{"name": "memory_search", "arguments": {"query": "where is the spare key hidden"}}]},
        {"text": "Under the blue flower pot."},
    ]
    with FakeProvider(script) as fake:
        rt = make_runtime(load(home, api, fake), e5)  # type: ignore[arg-type]
        first = rt.run_turn(MAIN, "Remember: the spare key is under the blue flower pot.")
        assert first.reply == "Noted in today's log."
        # The main session's note is owner-only (memory/policy/audience.py): one block around what it wrote.
        assert (home / "workspace" / "memory" / f"{TODAY}.md").read_text() == (
            f'<!-- origin session="{MAIN}" audience="owner" -->\n# {TODAY}\n{fact}<!-- /origin -->\n')
        second = rt.run_turn(MAIN, "Where's the spare key?")
    assert second.reply == "Under the blue flower pot."
    hits = json.loads(last_tool_result(fake.requests[3])[0])["results"]
    assert hits and hits[0]["path"] == f"memory/{TODAY}.md" and "blue flower pot" in hits[0]["snippet"]
    assert hits[0]["audience"] == "owner" and "<!--" not in hits[0]["snippet"]
    rt.memory.close()  # type: ignore[union-attr]


@pytest.mark.parametrize("api", APIS)
def test_tool_errors_go_back_to_the_model_and_the_turn_continues(home: Path, api: str) -> None:
    script = [
        {"tool_calls": [{"name": "read", "arguments": {"path": 5, "bogus": True}}]},
        {"tool_calls": [{"name": "read", "arguments": {"path": "notes/missing.md"}},
                        {"name": "no_such_tool", "arguments": {}}]},
        {"tool_calls": [{"name": "edit", "arguments": {"path": "SOUL.md", "old": "not in the file", "new": "x"}}]},
        {"text": "Sorry, I could not find those notes."},
    ]
    with FakeProvider(script) as fake:
        rt = make_runtime(load(home, api, fake), None, memory=False)
        result = rt.run_turn(MAIN, "read my notes")
    assert result.reply == "Sorry, I could not find those notes."
    assert [c.is_error for c in result.tool_calls] == [True, True, True, True]
    bad_args = tool_results(fake.requests[1])[-1]
    assert bad_args[1] and "invalid arguments for tool 'read'" in bad_args[0]
    assert "unexpected argument 'bogus'" in bad_args[0] and "path" in bad_args[0]
    missing, unknown = tool_results(fake.requests[2])[-2:]
    assert missing[1] and "file not found: notes/missing.md" in missing[0]
    assert unknown[1] and "unknown tool 'no_such_tool'" in unknown[0] and "memory" not in unknown[0]
    edit = last_tool_result(fake.requests[3])
    assert edit[1] and "0 matches" in edit[0]
    entries = turns(rt, MAIN)
    results = [e["message"] for e in entries[1:] if e["message"]["role"] == "toolResult"]
    assert len(results) == 4 and all(r["isError"] for r in results)


@pytest.mark.parametrize("api", APIS)
def test_429_is_retried_after_the_servers_retry_after(home: Path, api: str) -> None:
    sleeps: list[float] = []
    with FakeProvider([{"error": 429, "retry_after": 2}, {"text": "hello again"}]) as fake:
        rt = make_runtime(load(home, api, fake), None, sleeps=sleeps, memory=False)
        result = rt.run_turn(MAIN, "hi")
    assert result.reply == "hello again"
    assert sleeps == [2.0] and len(fake.requests) == 2


@pytest.mark.parametrize("api", APIS)
def test_429_that_never_ends_is_recorded_and_raised(home: Path, api: str) -> None:
    with FakeProvider([{"error": 429, "retry_after": 0, "repeat": True}]) as fake:
        rt = make_runtime(load(home, api, fake), None, memory=False)
        with pytest.raises(RateLimitError):
            rt.run_turn(MAIN, "hi")
    last = turns(rt, MAIN)[-1]["message"]
    assert last["role"] == "assistant" and last["stopReason"] == "error" and "rate limited" in last["errorMessage"]


@pytest.mark.parametrize("api", APIS)
def test_streamed_tool_call_arguments_are_assembled(home: Path, api: str) -> None:
    content = "# Plan\n" + "".join(f"- step {i}: 数据库迁移 “quoted” \\ back\\slash {{json}}\n" for i in range(40))
    script = [
        {"text": "Writing the plan.", "tool_calls": [{"name": "write", "arguments": {"path": "plans/p.md",
                                                                                        "content": content}}]},
        {"text": "Done: plans/p.md"},
    ]
    with FakeProvider(script) as fake:
        rt = make_runtime(load(home, api, fake), None, memory=False)
        chunks: list[str] = []
        result = rt.run_turn(MAIN, "write the plan", lambda e: chunks.append(e.text) if isinstance(e, TextChunk)
                             else None)
    assert all(r.body.get("stream") for r in fake.requests)
    assert (home / "workspace" / "plans" / "p.md").read_text() == content
    assert result.tool_calls[0].arguments == {"path": "plans/p.md", "content": content}
    assert "".join(chunks) == "Writing the plan.Done: plans/p.md"
    assert result.reply == "Done: plans/p.md"


@pytest.mark.parametrize("api", APIS)
def test_transcript_after_each_turn(home: Path, api: str) -> None:
    script = [
        {"tool_calls": [{"name": "read", "arguments": {"path": "IDENTITY.md"}}], "text": "Let me look."},
        {"text": "I am Hermit."},
        {"text": "You asked who I am."},
    ]
    with FakeProvider(script) as fake:
        rt = make_runtime(load(home, api, fake), None, memory=False)
        rt.run_turn(MAIN, "who are you?")
        first = turns(rt, MAIN)
        rt.run_turn(MAIN, "what did I ask?")
        second = turns(rt, MAIN)
    header = first[0]
    rec = rt.session(MAIN)
    assert rec is not None
    assert header["type"] == "session" and header["id"] == rec.session_id and header["version"] == 1
    assert header["cwd"] == str(rt.agent.workspace) and header["sessionKey"] == MAIN
    assert header["timestamp"] == "2026-01-20T13:05:00.000Z"
    roles = [e["message"]["role"] for e in first[1:]]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    assert first[1]["message"]["content"][0]["text"] == "who are you?"
    assert first[2]["message"]["content"][1] == {"type": "toolCall", "id": first[3]["message"]["toolCallId"],
                                                 "name": "read", "arguments": {"path": "IDENTITY.md"}}
    assert "Name: Hermit" in first[3]["message"]["content"][0]["text"]
    assert second[: len(first)] == first  # append-only: nothing rewritten
    entries = second[1:]
    assert [e["message"]["role"] for e in entries[4:]] == ["user", "assistant"]
    assert entries[0]["parentId"] is None
    for prev, cur in zip(entries, entries[1:], strict=False):
        assert cur["parentId"] == prev["id"] and cur["type"] == "message" and cur["timestamp"]
    assert len({e["id"] for e in entries}) == len(entries)
    path = rt.store.transcript_path(rec.session_id)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # The second request carried the first turn's history, tool call and result included.
    assert len(tool_results(fake.requests[2])) == 1
    assert rec.input_tokens > 0 and rec.output_tokens > 0 and rec.context_tokens > 0


@pytest.mark.parametrize("api", APIS)
def test_memory_md_only_in_the_main_session(home: Path, e5: object, api: str) -> None:
    script = [
        {"text": "main reply"},
        {"tool_calls": [{"name": "memory_search", "arguments": {"query": "Alice Chen data platform",
                                                                 "minScore": 0}}]},
        {"tool_calls": [{"name": "memory_get", "arguments": {"path": "MEMORY.md"}},
                        {"name": "read", "arguments": {"path": "MEMORY.md"}}]},
        {"text": "group reply"},
    ]
    with FakeProvider(script) as fake:
        rt = make_runtime(load(home, api, fake), e5)  # type: ignore[arg-type]
        rt.run_turn(MAIN, "hello")
        rt.run_turn(GROUP, "who leads the data team?")
    main_system, group_system = system_text(fake.requests[0]), system_text(fake.requests[1])
    assert "## MEMORY.md" in main_system and "CANARY-PRIVATE-7731" in main_system
    assert "## MEMORY.md" not in group_system and "CANARY" not in group_system
    assert "## AGENTS.md" in group_system and "## SOUL.md" in group_system
    # Tools cannot fetch it in the group session either.
    search = json.loads(last_tool_result(fake.requests[2])[0])
    assert all(r["path"] != "MEMORY.md" for r in search["results"]) and "withheld" in search
    (get_text, get_err), (read_text, read_err) = tool_results(fake.requests[3])[-2:]
    assert get_err and read_err and "privacy rule" in get_text and "privacy rule" in read_text
    assert all("CANARY" not in json.dumps(r.body) for r in fake.requests[1:])
    rt.memory.close()  # type: ignore[union-attr]


@pytest.fixture
def two_agents(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    write(h / "workspace-work" / "secret.md", "TOP-SECRET-WORK-PLAN\n")
    write(h / "workspace" / "notes.md", "main notes\n")
    (h / "workspace").mkdir(parents=True, exist_ok=True)
    os.symlink(h / "workspace-work", h / "workspace" / "link-to-work")
    return h


def another_agents_secret_script(secret: Path) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [
            {"name": "read", "arguments": {"path": str(secret)}},
            {"name": "read", "arguments": {"path": "../workspace-work/secret.md"}},
            {"name": "read", "arguments": {"path": "link-to-work/secret.md"}},
            {"name": "write", "arguments": {"path": "link-to-work/new.md", "content": "x"}},
            {"name": "exec", "arguments": {"command": f"cat {secret}"}},
            {"name": "exec", "arguments": {"command": "cat link-to-work/secret.md"}},
            {"name": "read", "arguments": {"path": "notes.md"}},
        ]},
        {"text": "I cannot read that."},
    ]


@pytest.mark.parametrize("api", APIS)
def test_a_group_works_in_its_room_and_sees_nothing_else(two_agents: Path, api: str) -> None:
    """A non-owner session's paths are its room (plus memory and the instructions): the owner's files, the
    other agent's workspace and the symlink to it are not there, and what it writes stays in the room."""
    secret = two_agents / "workspace-work" / "secret.md"
    with FakeProvider(another_agents_secret_script(secret)) as fake:
        rt = make_runtime(load(two_agents, api, fake, agents=[{"id": "main"}, {"id": "work"}]), None, memory=False)
        assert rt.sandboxed(GROUP)
        result = rt.run_turn(GROUP, "show me the work plan")
    results = tool_results(fake.requests[1])
    assert [err for _, err in results[:4]] == [True, True, True, False] and results[6][1]
    assert "outside the workspace" in results[0][0] and "outside the workspace" in results[1][0]
    assert "not found" in results[2][0] and "not found" in results[6][0]  # not in its room
    assert "No such file" in results[4][0] and "No such file" in results[5][0]
    assert "TOP-SECRET" not in json.dumps(fake.requests[1].body), json.dumps(fake.requests[1].body)[-3000:]
    room = rt.confinement.room(GROUP).path
    assert (room / "link-to-work" / "new.md").read_text() == "x"
    assert not (two_agents / "workspace-work" / "new.md").exists()
    assert result.reply == "I cannot read that."


@pytest.mark.parametrize("api", APIS)
def test_sandboxed_main_session_cannot_read_another_agents_workspace(two_agents: Path, api: str) -> None:
    mode, key = "all", MAIN
    secret = two_agents / "workspace-work" / "secret.md"
    script = another_agents_secret_script(secret)
    agents = [{"id": "main", "sandbox": {"mode": mode}}, {"id": "work"}]
    with FakeProvider(script) as fake:
        rt = make_runtime(load(two_agents, api, fake, agents=agents), None, memory=False)
        assert rt.sandboxed(key)
        result = rt.run_turn(key, "show me the work plan")
    results = tool_results(fake.requests[1])
    assert [err for _, err in results] == [True] * 6 + [False]
    for text, _ in results[:6]:
        assert "outside the workspace" in text and "sandbox rule" in text
    assert "symlink" in results[2][0]
    assert results[6][0] == "main notes"
    assert "TOP-SECRET" not in json.dumps(fake.requests[1].body)
    assert not (two_agents / "workspace-work" / "new.md").exists()
    assert result.reply == "I cannot read that."
    assert "This session is sandboxed" in system_text(fake.requests[0])


def test_unsandboxed_main_session_may_read_outside(two_agents: Path) -> None:
    secret = two_agents / "workspace-work" / "secret.md"
    with FakeProvider([{"tool_calls": [{"name": "read", "arguments": {"path": str(secret)}}]}, "ok"]) as fake:
        rt = make_runtime(load(two_agents, "openai", fake, agents=[{"id": "main"}, {"id": "work"}]), None,
                          memory=False)
        assert not rt.sandboxed(MAIN)  # sandbox.mode non-main: the soft sandbox of the original
        rt.run_turn(MAIN, "read it")
    assert last_tool_result(fake.requests[1]) == ("TOP-SECRET-WORK-PLAN", False)


def test_dangling_tool_call_in_history_is_repaired(home: Path) -> None:
    with FakeProvider(["first", "second"]) as fake:
        rt = make_runtime(load(home, "anthropic", fake), None, memory=False)
        rt.run_turn(MAIN, "one")
        rec = rt.session(MAIN)
        assert rec is not None
        t = rt.store.open_transcript(rec)
        # A crash between a tool call and its result leaves the call unanswered on disk.
        t.append_message(AssistantMessage((ToolCallPart("toolu_x", "read", {"path": "a"}),), "tool_use").to_dict())
        result = rt.run_turn(MAIN, "two")
    assert result.reply == "second"  # the fake provider would 400 on an unanswered tool_use
    text, err = last_tool_result(fake.requests[1])
    assert err and "interrupted" in text


def test_silent_reply_is_not_delivered_nor_streamed(home: Path) -> None:
    model = ScriptedModel(["NO_REPLY", "  NO_REPLY", "Nothing to add. NO_REPLY", "NO"])
    loaded = load_offline(home)
    rt = AgentRuntime(loaded.agent(), model, clock=fixed_clock, fsync=False)
    streamed: list[list[str]] = []
    for expected_delivered in (False, False, False, True):
        chunks: list[str] = []
        streamed.append(chunks)
        res = rt.run_turn(GROUP, "lunch at 12?", lambda e: streamed[-1].append(e.text)
                          if isinstance(e, TextChunk) else None)
        assert res.delivered is expected_delivered
    assert streamed[0] == [] and streamed[1] == [] and streamed[3] == ["NO"]


def test_max_iterations_guard(home: Path) -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "read", "arguments": {"path": "SOUL.md"}}], "repeat": True}])
    loaded = load_offline(home, defaults={"max_tool_iterations": 3})
    rt = AgentRuntime(loaded.agent(), model, fsync=False)
    result = rt.run_turn(MAIN, "loop forever")
    assert result.stopped == "max_iterations" and len(model.requests) == 3 and len(result.tool_calls) == 3
    assert "max_tool_iterations" in result.reply
    roles = [e["message"]["role"] for e in turns(rt, MAIN)[1:]]
    assert roles == ["user"] + ["assistant", "toolResult"] * 3 + ["assistant"]


def test_ctrl_c_cancels_the_turn_and_history_stays_valid(home: Path) -> None:
    calls = {"n": 0}

    def reply(request: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            return {"tool_calls": [{"name": "exec", "arguments": {"command": "sleep 0.01"}},
                                   {"name": "read", "arguments": {"path": "SOUL.md"}}]}
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return "fine"

    loaded = load_offline(home)
    rt = AgentRuntime(loaded.agent(), FunctionModel(reply), fsync=False)
    with pytest.raises(KeyboardInterrupt):
        rt.run_turn(MAIN, "go")
    last = turns(rt, MAIN)[-1]["message"]
    assert last["stopReason"] == "error" and last["errorMessage"] == "cancelled by the user"
    assert rt.run_turn(MAIN, "again").reply == "fine"


def test_interrupt_during_tools_records_cancelled_results(home: Path) -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "boom", "arguments": {}}, {"name": "read", "arguments": {}}]},
                           "after"])
    loaded = load_offline(home)
    rt = AgentRuntime(loaded.agent(), model, fsync=False)
    from hermit.tools.base import ToolRunner, make_tool

    def boom() -> str:
        raise KeyboardInterrupt

    original = rt.tools_for
    rt.tools_for = lambda key: ToolRunner([*original(key).tools, make_tool(boom)])  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        rt.run_turn(MAIN, "go")
    results = [e["message"] for e in turns(rt, MAIN)[1:] if e["message"]["role"] == "toolResult"]
    assert [r["toolName"] for r in results] == ["boom", "read"] and all(r["isError"] for r in results)
    assert rt.run_turn(MAIN, "again").reply == "after"
    sent = model.requests[-1].messages
    assert isinstance(sent[-1], type(sent[0])) and sent[-1].text == "again"


def test_tool_exception_does_not_crash_the_run(home: Path) -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "crash", "arguments": {"n": 1}}]}, "recovered"])
    loaded = load_offline(home)
    rt = AgentRuntime(loaded.agent(), model, fsync=False)
    from hermit.tools.base import ToolRunner, make_tool

    def crash(n: int) -> str:
        return str(1 // (n - 1))

    original = rt.tools_for
    rt.tools_for = lambda key: ToolRunner([*original(key).tools, make_tool(crash)])  # type: ignore[method-assign]
    result = rt.run_turn(MAIN, "go")
    assert result.reply == "recovered"
    assert result.tool_calls[0].is_error and "ZeroDivisionError" in result.tool_calls[0].result
    assert isinstance(model.requests[1].messages[-1].to_dict()["content"], list)


def test_key_of_another_agent_is_refused(home: Path) -> None:
    loaded = load_offline(home)
    rt = AgentRuntime(loaded.agent(), ScriptedModel([]), fsync=False)
    from hermit.errors import SessionError

    with pytest.raises(SessionError, match="belongs to agent 'work'"):
        rt.run_turn(main_session_key("work"), "hi")


def test_assistant_text_before_tool_calls_is_kept(home: Path) -> None:
    model = ScriptedModel([AssistantMessage((TextPart("Checking."), ToolCallPart("c1", "read", {"path": "SOUL.md"})),
                                            "tool_use"), "Done."])
    loaded = load_offline(home)
    rt = AgentRuntime(loaded.agent(), model, fsync=False)
    assert rt.run_turn(MAIN, "check").reply == "Done."
    assert turns(rt, MAIN)[2]["message"]["content"][0] == {"type": "text", "text": "Checking."}


@pytest.mark.parametrize("api", APIS)
def test_closing_a_runtime_closes_its_memory_index_and_its_models_connections(home: Path, api: str) -> None:
    """AgentRuntime.close (the CLI after a command, the gateway at shutdown): the HTTP provider's client and the
    memory index's connection are closed; a model without connections (scripted) closes with nothing to do."""
    with FakeProvider([{"text": "hello"}, {"text": "again"}]) as fake:
        rt = make_runtime(load(home, api, fake), None)
        assert rt.run_turn(MAIN, "hi", lambda e: None).reply == "hello"
        assert isinstance(rt.model, ClosableModel) and rt.memory is not None
        store = rt.memory.store
        rt.close()
        with pytest.raises(Exception, match="closed"):
            rt.model.complete(ModelRequest(system="", messages=()))
        with pytest.raises(Exception, match="closed database"):
            store.conn.execute("select 1")  # the SQLite store's connection
        assert len(fake.requests) == 1
    scripted = AgentRuntime(rt.agent, ScriptedModel([]), clock=fixed_clock, fsync=False)
    assert not isinstance(scripted.model, ClosableModel)
    scripted.close()
