"""The agent's own memory_get takes the line names memory_search gives (`startLine`/`endLine`), as the MCP tool has
since 12d49b2, and refuses a bad range with a clear tool error: a line below 1, lines backwards, both kinds of names
at once, `true` or `2.5` for a line, and a start past the end of the file (which read as an empty success, so a
model took the lines it asked for as blank). The MCP server's memory_get is the same method: the same schema, the
same refusals, one service call.

Real parts: the agent's ToolRunner over a real MemoryService (keyword search on a real SQLite index), the MCP SDK's
in-process Client against the real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from conftest import write
from hermit.config.schema import McpConfig, MemorySearchConfig
from hermit.mcp_server import build_server
from hermit.memory.service import MemoryKey, MemoryService
from hermit.messages import ToolCallPart
from hermit.sessions.transcript import Transcript
from hermit.tools import MemoryTools, ToolRunner
from test_mcp_server import home_with_memory, run_with_client

DAY = "memory/2026-01-19.md"
DAY_TEXT = "# 2026-01-19\n- Alice Chen approved TICKET-4821.\n- The release train leaves on Thursday.\n"


@pytest.fixture
def memory(tmp_path: Path) -> Any:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n- Alice Chen leads the data platform team.\n")
    write(ws / DAY, DAY_TEXT)
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite",
                        MemorySearchConfig.model_validate({"provider": "none"}), None)
    yield svc
    svc.close()


def call(runner: ToolRunner, **arguments: Any) -> tuple[str, bool]:
    res = runner.run(ToolCallPart("c1", "memory_get", arguments)).result
    return res.content, res.is_error


def test_the_agent_tool_reads_the_lines_a_search_named_by_its_names(memory: MemoryService) -> None:
    runner = ToolRunner(MemoryTools(memory).tools())
    found = json.loads(runner.run(ToolCallPart("s", "memory_search", {"query": "TICKET-4821", "minScore": 0.0}))
                       .result.content)["results"]
    hit = next(h for h in found if h["path"] == DAY)
    text, err = call(runner, path=DAY, startLine=hit["startLine"], endLine=hit["endLine"])
    assert not err and "TICKET-4821" in json.loads(text)["text"], text
    text, err = call(runner, path=DAY, startLine=2, endLine=2)
    assert (json.loads(text), err) == ({"path": DAY, "text": "- Alice Chen approved TICKET-4821."}, False)
    text, err = call(runner, path=DAY, startLine=3)  # to the end of the file
    assert json.loads(text)["text"] == "- The release train leaves on Thursday.\n"
    text, err = call(runner, path=DAY, lines=1, **{"from": 2})  # SPEC §4's names are unchanged
    assert json.loads(text)["text"] == "- Alice Chen approved TICKET-4821."


@pytest.mark.parametrize(("arguments", "words"), [
    ({"startLine": 3, "endLine": 2}, "endLine 2 is before startLine 3"),
    ({"from": 2, "startLine": 2}, "either from/lines or startLine/endLine"),
    ({"lines": 1, "endLine": 2}, "either from/lines or startLine/endLine"),
    ({"from": -1}, "from: Input should be greater than or equal to 1 (got -1)"),
    ({"startLine": 0}, "startLine: Input should be greater than or equal to 1 (got 0)"),
    ({"endLine": -3}, "endLine: Input should be greater than or equal to 1 (got -3)"),
    ({"from": 2.5}, "from: Input should be a valid integer"),
    ({"startLine": "two"}, "startLine: Input should be a valid integer"),
    ({"startLine": True}, "a line number must be an integer, not true/false"),
    ({"from": 4}, f"line 4 is past the end of {DAY} (3 lines)"),
    ({"startLine": 9, "endLine": 12}, f"line 9 is past the end of {DAY} (3 lines)"),
    ({"start_line": 2}, "unexpected argument 'start_line'"),
])
def test_the_agent_tool_refuses_a_bad_range_clearly(memory: MemoryService, arguments: dict[str, Any],
                                                     words: str) -> None:
    text, err = call(ToolRunner(MemoryTools(memory).tools()), path=DAY, **arguments)
    assert err, text
    assert text.startswith("error: ") and words in text, text
    assert "Traceback" not in text and "TypeError" not in text
    if "past the end" in words:
        assert "hint: ask for a line from 1 to 3" in text


def test_a_session_transcript_past_its_end_is_refused_too(tmp_path: Path) -> None:
    ws, sessions = tmp_path / "ws", tmp_path / "sessions"
    ws.mkdir()
    t = Transcript.create(sessions / "s1.jsonl", cwd=str(ws), session_id="s1")
    t.append_message({"role": "user", "content": [{"type": "text", "text": "hello"}]})
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", MemorySearchConfig.model_validate(
        {"sources": ["memory", "sessions"], "provider": "none"}), None, sessions_dir=sessions)
    runner = ToolRunner(MemoryTools(svc).tools())
    text, err = call(runner, path="sessions/s1.jsonl", startLine=50)
    assert err and "line 50 is past the end of sessions/s1.jsonl" in text, text
    text, err = call(runner, path="sessions/s1.jsonl", startLine=2, endLine=2)
    assert not err and "hello" in json.loads(text)["text"], text
    svc.close()


def test_mcp_memory_get_is_the_agent_tool(tmp_path: Path) -> None:
    """The same schema (from the one signature) and the same refusals through the SDK's client."""
    home, loaded = home_with_memory(tmp_path)
    agent = loaded.agent()
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), home / "idx.sqlite",
                        MemorySearchConfig.model_validate({"provider": "none"}), None)
    server = build_server(agent, svc, McpConfig())
    agent_schema = {s.name: s for s in ToolRunner(MemoryTools(svc, private=False).tools()).schemas()}["memory_get"]

    async def body(client: Client) -> None:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        props = listed["memory_get"].input_schema["properties"]
        assert list(props) == list(agent_schema.parameters["properties"])
        for name, prop in props.items():
            assert prop.get("description") == agent_schema.parameters["properties"][name].get("description")
        day = "memory/2026-12-01.md"
        for arguments, words in [({"startLine": 40}, f"line 40 is past the end of {day} (4 lines)"),
                                 ({"from": True}, "a line number must be an integer"),
                                 ({"startLine": 3, "endLine": 1}, "endLine 1 is before startLine 3"),
                                 ({"from": 0}, "greater than or equal to 1")]:
            r = await client.call_tool("memory_get", {"path": day, **arguments})
            assert r.is_error and words in r.content[0].text, (arguments, r.content)
        r = await client.call_tool("memory_get", {"path": day, "startLine": 4, "endLine": 4})
        assert not r.is_error and r.structured_content["text"] == "- Lunch with Priya on Friday."

    run_with_client(server, body)
    svc.close()
