"""A config's life, MCP side (audit s21 t3): `mcp.share_private_memory` and `mcp.allow_append` changed in
hermit.yaml while a client keeps its `hermit mcp serve` running (Claude Desktop, Claude Code and Cursor start the
server once and keep it for days). Turning sharing off must count at the client's next call, not at the next
restart of the client; a hermit.yaml that no longer loads must not leave the looser setting in force; the agent
being served removed from the config, or pointed at another workspace, stops the server's reads.

The real CLI (`python -m hermit.cli.main mcp serve`) as a stdio subprocess, the SDK's client, the real local
embedding model (MiniLM) and a real state dir; hermit.yaml is replaced by rename, as editors save."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from conftest import write
from test_mcp_server import FAST, run_with_client, subprocess_env

CANARY = "BANK-PIN-4471-CANARY"
SHARED = "The staging database moved to db-stage.internal:5433."


def save(home: Path, mcp: dict[str, Any] | None, *, text: str | None = None, agents: Any = None) -> None:
    """hermit.yaml replaced by rename (a new inode), as most editors and `hermit config set` save."""
    config: dict[str, Any] = {"agents": agents or {"defaults": {"timezone": "UTC", **FAST}}}
    if mcp is not None:
        config["mcp"] = mcp
    tmp = home / "hermit.yaml.tmp"
    tmp.write_text(text if text is not None else json.dumps(config), encoding="utf-8")
    os.replace(tmp, home / "hermit.yaml")


def make_home(tmp: Path) -> Path:
    home = tmp / "home"
    write(home / "workspace" / "MEMORY.md", f"# Memory\n\n- bank pin 4471 ({CANARY})\n")
    write(home / "workspace" / "memory" / "2026-12-01.md", f"# 2026-12-01\n\n- {SHARED}\n")
    save(home, {"share_private_memory": True, "allow_append": True})
    return home


def params(home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "hermit.cli.main", "mcp", "serve"],
                                 env=subprocess_env(home))


async def reads(client: Client) -> str:
    """What a client gets from every read it may try for the canary (errors included)."""
    out = []
    r = await client.call_tool("memory_get", {"path": "MEMORY.md"})
    out.append(r.content[0].text + json.dumps(r.structured_content))
    r = await client.call_tool("memory_search", {"query": "bank pin", "minScore": 0})
    out.append(r.content[0].text + json.dumps(r.structured_content))
    return "\n".join(out)


def test_turning_share_private_memory_off_counts_at_the_clients_next_call(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    seen: dict[str, str] = {}

    async def body(client: Client) -> None:
        seen["shared"] = await reads(client)
        save(home, {"share_private_memory": False, "allow_append": True})
        seen["after"] = await reads(client)
        r = await client.call_tool("memory_search", {"query": "staging database", "minScore": 0})
        seen["still"] = json.dumps(r.structured_content)
        save(home, {"share_private_memory": True, "allow_append": True})  # on again: applied too
        seen["again"] = await reads(client)

    run_with_client(params(home), body)
    assert CANARY in seen["shared"]
    assert CANARY not in seen["after"], seen["after"]
    assert "db-stage.internal" in seen["still"]  # the client keeps what it may read
    assert CANARY in seen["again"]


def test_turning_append_off_refuses_the_next_note_and_says_why(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    got: dict[str, Any] = {}

    async def body(client: Client) -> None:
        r = await client.call_tool("memory_append", {"note": "first note APPEND-ONE"})
        got["first"] = r.is_error
        save(home, {"share_private_memory": False, "allow_append": False})
        r = await client.call_tool("memory_append", {"note": "second note APPEND-TWO"})
        got["second"] = (r.is_error, r.content[0].text)

    run_with_client(params(home), body)
    assert got["first"] is False
    error, text = got["second"]
    assert error and "mcp.allow_append" in text, text
    notes = "".join(p.read_text() for p in (home / "workspace" / "memory").glob("*.md"))
    assert "APPEND-ONE" in notes and "APPEND-TWO" not in notes


def test_a_config_that_no_longer_loads_does_not_keep_sharing(tmp_path: Path) -> None:
    """Half an edit saved (a YAML error, a wrong type): the stricter reading applies until it is fixed."""
    home = make_home(tmp_path)
    seen: dict[str, Any] = {}

    async def body(client: Client) -> None:
        seen["before"] = await reads(client)
        save(home, None, text="mcp: {share_private_memory: [true\n")  # a YAML error
        seen["yaml"] = await reads(client)
        r = await client.call_tool("memory_append", {"note": "while broken APPEND-BROKEN"})
        seen["append"] = (r.is_error, r.content[0].text)
        save(home, {"share_private_memory": "maybe"})  # a failed validation
        seen["type"] = await reads(client)
        r = await client.call_tool("memory_search", {"query": "staging database", "minScore": 0})
        seen["shared_notes"] = json.dumps(r.structured_content)
        save(home, {"share_private_memory": True, "allow_append": True})
        seen["fixed"] = await reads(client)

    run_with_client(params(home), body)
    assert CANARY in seen["before"]
    assert CANARY not in seen["yaml"] and CANARY not in seen["type"]
    error, text = seen["append"]
    assert error and "hermit.yaml" in text, text
    assert "db-stage.internal" in seen["shared_notes"]  # still serves what any reader may see
    assert CANARY in seen["fixed"]
    notes = "".join(p.read_text() for p in (home / "workspace" / "memory").glob("*.md"))
    assert "APPEND-BROKEN" not in notes


def test_the_served_agent_removed_or_moved_stops_its_reads(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    other = tmp_path / "elsewhere"
    write(other / "MEMORY.md", "# Memory\n")
    seen: dict[str, Any] = {}

    async def body(client: Client) -> None:
        seen["before"] = await reads(client)
        save(home, {"share_private_memory": True},
             agents={"defaults": {"timezone": "UTC", **FAST, "workspace": str(other)}})
        r = await client.call_tool("memory_get", {"path": "MEMORY.md"})
        seen["moved"] = (r.is_error, r.content[0].text)
        r = await client.call_tool("memory_append", {"note": "to the old place APPEND-MOVED"})
        seen["append"] = r.is_error

    run_with_client(params(home), body)
    assert CANARY in seen["before"]
    error, text = seen["moved"]
    assert error and CANARY not in text and "restart" in text, text
    assert seen["append"] is True
