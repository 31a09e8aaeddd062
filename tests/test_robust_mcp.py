"""`hermit mcp serve` answers every line: a request with a lone surrogate is answered (text made valid),
bad JSON gets JSON-RPC -32700, a message that is not JSON-RPC gets -32600, and an over-long memory_search
query is refused at once with the limit named, over a real stdio subprocess and in process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from hermit.config.schema import McpConfig
from hermit.mcp_server import build_server
from hermit.memory.embedders.base import Embedder
from hermit.memory.service import MAX_QUERY_CHARS, MemoryKey, MemoryService
from prochelpers import PROC_TIMEOUT
from test_mcp_server import FAST, home_with_memory, subprocess_env


class RawClient:
    """The server as a subprocess, spoken to line by line (bytes, so any line can be sent as is)."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "mcp", "serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=subprocess_env(home))

    def send_raw(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def send(self, msg: dict[str, Any]) -> None:
        self.send_raw(json.dumps(msg).encode())

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the server closed stdout"
        return json.loads(line)

    def call(self, rid: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
        return self.receive()


def test_every_line_over_stdio_gets_an_answer(tmp_path: Path) -> None:
    home, _ = home_with_memory(tmp_path, **FAST)
    c = RawClient(home)
    try:
        c.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "raw-test", "version": "1.0"}}})
        assert c.receive()["id"] == 1
        c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

        # A lone surrogate (as a JSON escape) in the arguments: answered, the text made valid.
        c.send_raw(b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_search", '
                   b'"arguments": {"query": "lunch with Priya \\ud800"}}}')
        res = c.receive()
        assert res["id"] == 2 and res["result"]["isError"] is False
        assert res["result"]["structuredContent"]["results"][0]["path"] == "memory/2026-12-01.md"

        # Not JSON, nested too deep: JSON-RPC parse errors (id null), and the server goes on.
        for line in (b"{not json", b"[" * 100_000, b"\xff\xfe garbage"):
            c.send_raw(line)
            err = c.receive()
            assert err["id"] is None and err["error"]["code"] == -32700, err
        # JSON, but not a JSON-RPC message: invalid request, answered with its id when it has one.
        c.send({"id": 5, "params": {}})
        err = c.receive()
        assert err["id"] == 5 and err["error"]["code"] == -32600

        # A 200 KB query (it took 245 s) is refused at once, naming the limit.
        started = time.monotonic()
        res = c.call(6, "memory_search", {"query": "where " * 40_000})
        assert time.monotonic() - started < 10
        content = res["result"]["structuredContent"]
        assert content["results"] == [] and f"{MAX_QUERY_CHARS:,}" in content["error"]

        res = c.call(7, "memory_search", {"query": "staging database host"})
        assert res["result"]["structuredContent"]["results"][0]["path"] == "memory/2026-12-01.md"
    finally:
        out, err_text = c.proc.communicate(timeout=PROC_TIMEOUT)
    assert c.proc.returncode == 0, err_text
    assert out.strip() == b""
    assert b"Traceback" not in err_text


def test_query_cap_in_process_and_for_the_agent_tool(tmp_path: Path, e5: Embedder) -> None:
    home, loaded = home_with_memory(tmp_path)
    agent = loaded.agent()
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), home / "idx.sqlite", agent.settings.memory_search, e5)
    long_query = "x" * (MAX_QUERY_CHARS + 1)
    direct = svc.search(long_query)
    assert direct["results"] == [] and f"{MAX_QUERY_CHARS:,} characters" in direct["error"]
    assert svc.search("y" * MAX_QUERY_CHARS)["results"] is not None  # at the limit is fine
    server = build_server(agent, svc, McpConfig())

    async def main() -> None:
        async with Client(server) as client:
            r = await client.call_tool("memory_search", {"query": long_query})
            assert r.structured_content["results"] == [] and "characters" in r.structured_content["error"]
            r = await client.call_tool("memory_search", {"query": "staging \ud800 database"})
            assert r.structured_content["results"][0]["path"] == "memory/2026-12-01.md"

    anyio.run(main)
    svc.close()


def test_query_cap_on_the_cli(tmp_path: Path) -> None:
    home, _ = home_with_memory(tmp_path, **FAST)
    for extra in ([], ["--json"]):
        started = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "memory", "search", *extra, "where " * 500],
                           env=subprocess_env(home), capture_output=True, text=True, timeout=PROC_TIMEOUT)
        assert r.returncode == 1 and f"{MAX_QUERY_CHARS:,} characters" in (r.stderr + r.stdout), r.stderr
        assert time.monotonic() - started < 60 and "Traceback" not in r.stderr
