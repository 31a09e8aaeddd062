"""An MCP client's model reads the lines a search named: memory_search gives `startLine`/`endLine` (SPEC §4's
camelCase contract) and memory_get takes `from`/`lines`. A model that called memory_get with the names it had just
read — `{"path": …, "startLine": 3, "endLine": 3}` — had them dropped without a word and got the whole file (a day's
log, hundreds of lines, into a remote model's context) as if it had asked for it. Now memory_get takes `startLine`
and `endLine` too, as the lines a search named (both kinds at once, or lines backwards, are refused).

The SDK's client against the real server in process (the real local embedding model, as test_mcp_server)."""

from __future__ import annotations

from pathlib import Path

from mcp import Client

from hermit.config.schema import McpConfig
from hermit.mcp_server import build_server
from hermit.memory.embedders.base import Embedder
from hermit.memory.service import MemoryKey, MemoryService
from test_mcp_server import home_with_memory, run_with_client

DAY = "memory/2026-12-01.md"


def test_memory_get_reads_the_lines_a_search_named_by_its_own_names(tmp_path: Path, e5: Embedder) -> None:
    home, loaded = home_with_memory(tmp_path)
    agent = loaded.agent()
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), home / "idx.sqlite", agent.settings.memory_search, e5)
    server = build_server(agent, svc, McpConfig())

    async def body(client: Client) -> None:
        r = await client.call_tool("memory_search", {"query": "where is the staging database?", "maxResults": 1})
        [hit] = r.structured_content["results"]
        assert hit["path"] == DAY
        r = await client.call_tool("memory_get", {"path": DAY, "startLine": 3, "endLine": 3})
        assert not r.is_error, r.content
        assert r.structured_content == {"path": DAY,
                                        "text": "- The staging database moved to db-stage.internal:5433."}
        r = await client.call_tool("memory_get", {"path": DAY, "startLine": 3, "endLine": 4})
        assert r.structured_content["text"].splitlines() == [
            "- The staging database moved to db-stage.internal:5433.", "- Lunch with Priya on Friday."]
        r = await client.call_tool("memory_get", {"path": DAY, "startLine": hit["startLine"],
                                                  "endLine": hit["endLine"]})
        assert "db-stage.internal:5433" in r.structured_content["text"]
        # The documented names still work; the two kinds mixed, or lines backwards, are refused.
        r = await client.call_tool("memory_get", {"path": DAY, "from": 4, "lines": 1})
        assert r.structured_content["text"] == "- Lunch with Priya on Friday."
        r = await client.call_tool("memory_get", {"path": DAY, "startLine": 4, "endLine": 3})
        assert r.is_error and "endLine" in r.content[0].text, r.content
        r = await client.call_tool("memory_get", {"path": DAY, "from": 3, "startLine": 3})
        assert r.is_error and "either from/lines or startLine/endLine" in r.content[0].text, r.content
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed["memory_get"].input_schema["properties"]) == {"path", "from", "lines", "startLine", "endLine"}

    run_with_client(server, body)
    svc.close()
