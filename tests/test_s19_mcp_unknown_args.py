"""`hermit mcp serve` refuses argument names a tool does not take, naming those it does. The SDK's argument model
ignores unknown names: a client sending `start_line` got the whole file back, one sending `query_text` next to its
query had it dropped, `maxresults` (wrong case) got 6 results, as if the call had been right. The tools' input
schemas say so too (`additionalProperties: false`).

Through the SDK's in-process Client, a stdio subprocess with the SDK's client, and a raw JSON-RPC exchange."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from hermit.config.schema import McpConfig, MemorySearchConfig
from hermit.mcp_server import build_server
from hermit.memory.service import MemoryKey, MemoryService
from prochelpers import PROC_TIMEOUT
from test_mcp_server import home_with_memory, run_with_client, subprocess_env

DAY = "memory/2026-12-01.md"
KEYWORD = {"memory_search": {"provider": "none"}}  # no model to load: these tests are about the arguments


async def refusals(client: Client) -> None:
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == {"memory_search", "memory_get", "memory_append"}
    assert all(t.input_schema.get("additionalProperties") is False for t in listed.values())
    for tool, arguments, named, takes in [
        ("memory_get", {"path": DAY, "start_line": 3, "end_line": 3}, "'end_line', 'start_line'",
         "path, from, lines, startLine, endLine"),
        ("memory_get", {"path": DAY, "offset": 3}, "'offset'", "path, from, lines, startLine, endLine"),
        ("memory_search", {"query": "staging database", "query_text": "lunch"}, "'query_text'",
         "query, maxResults, minScore"),
        ("memory_search", {"query": "staging database", "maxresults": 1}, "'maxresults'",
         "query, maxResults, minScore"),
        ("memory_append", {"note": "x", "path": "MEMORY.md"}, "'path'", "it takes note"),
    ]:
        r = await client.call_tool(tool, arguments)
        text = r.content[0].text
        assert r.is_error, (tool, arguments, text)
        assert f"{tool} does not take the argument" in text and named in text and takes in text, text
    r = await client.call_tool("memory_get", {"path": DAY, "startLine": 3, "endLine": 3})  # the right names work
    assert not r.is_error and r.structured_content["text"] == "- The staging database moved to db-stage.internal:5433."
    assert "db-stage" not in (await client.call_tool("memory_get", {"path": DAY, "start_line": 4})).content[0].text


def test_in_process_client(tmp_path: Path) -> None:
    home, loaded = home_with_memory(tmp_path, **KEYWORD)
    agent = loaded.agent()
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), home / "idx.sqlite",
                        MemorySearchConfig.model_validate({"provider": "none"}), None)
    run_with_client(build_server(agent, svc, McpConfig()), refusals)
    assert [p.name for p in (agent.workspace / "memory").iterdir()] == ["2026-12-01.md"]  # nothing appended
    svc.close()


def test_stdio_subprocess_with_the_sdk_client(tmp_path: Path) -> None:
    home, _ = home_with_memory(tmp_path, **KEYWORD)
    params = StdioServerParameters(command=sys.executable, args=["-m", "hermit.cli.main", "mcp", "serve"],
                                   env=subprocess_env(home))
    run_with_client(params, refusals)
    assert [p.name for p in (home / "workspace" / "memory").iterdir()] == ["2026-12-01.md"]  # nothing appended


def test_raw_json_rpc(tmp_path: Path) -> None:
    home, _ = home_with_memory(tmp_path, **KEYWORD)
    proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "mcp", "serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(home), text=True)
    assert proc.stdin is not None and proc.stdout is not None

    def ask(msg: dict[str, Any]) -> dict[str, Any] | None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", **msg}) + "\n")
        proc.stdin.flush()
        if "id" not in msg:
            return None
        line = proc.stdout.readline()
        assert line, "the server closed stdout"
        reply: dict[str, Any] = json.loads(line)
        assert reply["id"] == msg["id"]
        return reply

    try:
        ask({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                         "clientInfo": {"name": "raw-test", "version": "1.0"}}})
        ask({"method": "notifications/initialized"})
        tools = {t["name"]: t for t in (ask({"id": 2, "method": "tools/list"}) or {})["result"]["tools"]}
        assert tools["memory_get"]["inputSchema"]["additionalProperties"] is False
        res = ask({"id": 3, "method": "tools/call",
                   "params": {"name": "memory_get", "arguments": {"path": DAY, "start_line": 3}}})
        assert res is not None and res["result"]["isError"] is True
        assert res["result"]["content"][0]["text"] == (
            "memory_get does not take the argument 'start_line'; it takes path, from, lines, startLine, endLine "
            "(names are case-sensitive, as in the tool's input schema)")
        res = ask({"id": 4, "method": "tools/call",
                   "params": {"name": "memory_get", "arguments": {"path": DAY, "startLine": 3, "endLine": 3}}})
        assert res is not None and res["result"]["isError"] is False
        assert res["result"]["structuredContent"]["text"] == "- The staging database moved to db-stage.internal:5433."
    finally:
        out, err = proc.communicate(timeout=PROC_TIMEOUT)
    assert proc.returncode == 0, err
    assert out.strip() == ""
