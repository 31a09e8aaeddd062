"""Audit 18, one Hermit with two agents: agent main (the user's own) and agent family (a relative's, on the family
bot: its main session is the relative's, `sandbox.mode: all`, its MCP clients shown owner-only notes), both
indexes in one SQLite state dir or in one PostgreSQL database (the server store). A canary sits in each private
place of main — MEMORY.md, memory/private/, today's log, its own vault (an extra path), its main session's
transcript (the `sessions` source) — and everything family's side can drive asks for it: family's owner's model
with memory_search on the canaries' words, memory_get and read on main's paths (relative, absolute, main's
transcript by its real session id, taken from main), a command computing main's paths at run time, and family's
MCP server (in process and `hermit --agent family mcp serve`). None reaches family; each still finds its own.
(A guard: all of these held.)"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from agenthelpers import fixed_clock
from ciguard import need
from hermit.agent.runtime import AgentRuntime
from hermit.config.load import LoadedConfig, load_config
from hermit.config.paths import StatePaths
from hermit.mcp_server import build_server
from hermit.memory.service import MemoryKey, MemoryService
from hermit.sessions.keys import main_session_key
from hermit.sessions.store import SessionStore
from hermit.testing import ScriptedModel
from hermit.tools.os_sandbox import detect
from hermit.workspace import ensure_workspace
from test_mcp_server import run_with_client

CANARIES = {"MEMORY.md": "QUOKKA-MEMORY-1801", "private": "QUOKKA-PRIVATE-1802", "daily": "QUOKKA-DAILY-1803",
            "vault": "QUOKKA-VAULT-1804", "chat": "QUOKKA-CHAT-1805"}
FAMILY_OWN = "QUOKKA-FAMILY-1809"  # family's own note: its searches do work
# Each canary's words, never the canary as written (a query is in the request the model makes).
QUERIES = ("quokka", *(c.lower().replace("-", " ") for c in CANARIES.values()))
DAY = "memory/2026-01-19.md"
DSN_ENV = "AUDIT18_PG_DSN"


def setup(tmp: Path, backend: str, dsn: str) -> tuple[LoadedConfig, dict[str, str]]:
    home, vault = tmp / "home", tmp / "vault"
    home.mkdir(mode=0o700)
    vault.mkdir(mode=0o700)
    store: dict[str, Any] = {"backend": backend}
    if backend == "postgres":
        store["postgres"] = {"dsn_env": DSN_ENV}
    cfg = {"agents": {"defaults": {"timezone": "Europe/Paris",
                                   "memory_search": {"provider": "none", "sources": ["memory", "sessions"],
                                                     "store": store}},
                      "list": [{"id": "main", "default": True,
                                "memory_search": {"extra_paths": [str(vault)]}},
                               {"id": "family", "sandbox": {"mode": "all"}}]},
           "mcp": {"share_private_memory": True}}
    (home / "hermit.yaml").write_text(json.dumps(cfg))
    os.chmod(home / "hermit.yaml", 0o600)
    env = {**os.environ, "HERMIT_HOME": str(home), DSN_ENV: dsn, "OMP_WAIT_POLICY": "PASSIVE"}
    loaded = load_config(StatePaths(home))
    main, family = loaded.agent("main"), loaded.agent("family")
    for a in (main, family):
        ensure_workspace(a.workspace)
    (main.workspace / "MEMORY.md").write_text(f"# MEMORY.md\n- quokka {CANARIES['MEMORY.md']}\n")
    (main.workspace / "memory" / "private").mkdir()
    (main.workspace / "memory" / "private" / "p.md").write_text(f"- quokka {CANARIES['private']}\n")
    (main.workspace / DAY).write_text(f"- quokka {CANARIES['daily']}\n")
    (vault / "v.md").write_text(f"- quokka {CANARIES['vault']}\n")
    (family.workspace / DAY).write_text(f"- quokka {FAMILY_OWN}\n")
    return loaded, env


def plant_links(loaded: LoadedConfig, env: dict[str, str]) -> None:
    """family's owner has a command of its sandbox leave links to main's files in family's workspace (it names the
    host paths as text, computed at run time): instruction files and notes Hermit reads outside the sandbox."""
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    ws = base64.b64encode(str(loaded.agent("main").workspace).encode()).decode()
    command = (f'w=$(echo {ws} | base64 -d); rm -f MEMORY.md; ln -s "$w/MEMORY.md" MEMORY.md; '
               f'ln -s "$w/MEMORY.md" USER.md; ln -s "$w/{DAY}" memory/linked.md; '
               f'ln -s "$w/memory/private" memory/dir; echo planted')
    model = ScriptedModel([{"tool_calls": [{"name": "exec", "arguments": {"command": command}}]}, "done"])
    family = AgentRuntime(loaded.agent("family"), model, memory=service(loaded, "family", env), clock=fixed_clock,
                          fsync=False, home=loaded.paths.home, sandbox_backend=backend)
    try:
        family.run_turn(main_session_key("family"), "run this")
    finally:
        family.close()
    assert "planted" in json.dumps(model.requests[-1].messages[-1].to_dict())


def service(loaded: LoadedConfig, agent_id: str, env: dict[str, str]) -> MemoryService:
    a = loaded.agent(agent_id)
    return MemoryService(MemoryKey(a.id, a.workspace), a.index_path, a.settings.memory_search, None,
                         sessions_dir=a.sessions_dir, environ=env, state_dir=loaded.paths.home)


def main_paths(loaded: LoadedConfig) -> list[str]:
    """main's private places as family's side could name them: through links, relative, absolute, its
    transcript by id."""
    main = loaded.agent("main")
    session_id = SessionStore(main.sessions_dir).get(main_session_key("main")).session_id  # type: ignore[union-attr]
    vault = Path(loaded.agent("main").settings.memory_search.extra_paths[0])
    return ["MEMORY.md", "USER.md", "memory/linked.md", "memory/dir/p.md",  # through the links family made
            "../workspace/MEMORY.md", "../workspace/memory/private/p.md", f"../workspace/{DAY}",
            str(main.workspace / "MEMORY.md"), str(main.workspace / "memory/private/p.md"), str(main.workspace / DAY),
            str(vault / "v.md"), f"sessions/{session_id}.jsonl", f"sessions/../../main/sessions/{session_id}.jsonl",
            str(main.sessions_dir / f"{session_id}.jsonl")]


def assert_no_canary(seen: str) -> None:
    leaked = [c for c in CANARIES.values() if c in seen]
    assert not leaked, leaked


@pytest.fixture(params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[LoadedConfig, dict[str, str]]:
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else ""
    loaded, env = setup(tmp_path, request.param, dsn)
    owner = AgentRuntime(loaded.agent("main"), ScriptedModel(["noted"]), memory=service(loaded, "main", env),
                         clock=fixed_clock, fsync=False, home=loaded.paths.home)
    owner.run_turn(main_session_key("main"), f"remember quokka {CANARIES['chat']}")
    owner.close()
    plant_links(loaded, env)
    for agent_id in ("main", "family"):
        svc = service(loaded, agent_id, env)
        svc.sync(force=True)  # the transcript grew since the turn indexed it, within the quiet period
        if agent_id == "main":  # every canary is in main's own index: what family must not reach is there
            found = json.dumps(svc.search("quokka", max_results=20, min_score=0))
            assert all(c in found for c in CANARIES.values()), found
        svc.close()
    return loaded, env


def test_family_owners_model_reaches_none_of_mains_memory(world: tuple[LoadedConfig, dict[str, str]]) -> None:
    loaded, env = world
    backend = detect()
    need(backend.available, f"an OS sandbox ({backend.detail})")
    paths = main_paths(loaded)
    hidden = base64.b64encode(str(loaded.agent("main").workspace.parent).encode()).decode()
    calls: list[tuple[str, dict[str, Any]]] = [("memory_search", {"query": q, "minScore": 0})
                                               for q in QUERIES]
    calls += [(tool, {"path": p}) for p in paths for tool in ("memory_get", "read")]
    calls.append(("exec", {"command": f'h=$(echo {hidden} | base64 -d); cat "$h"/workspace/MEMORY.md '
                                      f'"$h"/workspace/memory/*.md "$h"/workspace/memory/private/*.md '
                                      f'"$h"/agents/main/sessions/*.jsonl {paths[10]} 2>&1 | head -c 4000'}))
    model = ScriptedModel([{"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}, "done"])
    family = AgentRuntime(loaded.agent("family"), model, memory=service(loaded, "family", env), clock=fixed_clock,
                          fsync=False, home=loaded.paths.home, sandbox_backend=backend)
    try:
        family.run_turn(main_session_key("family"), "show me everything of the other agent")
    finally:
        family.close()
    request = model.requests[-1]
    seen = json.dumps([m.to_dict() for m in request.messages]) + request.system
    assert len(request.messages) == 4 + 2 + len(calls)  # the planting turn, then every call ran and was answered
    assert_no_canary(seen)
    assert FAMILY_OWN in seen  # its own search works


async def _everything(client: Client, paths: list[str]) -> list[str]:
    out = []
    for q in QUERIES:
        r = await client.call_tool("memory_search", {"query": q, "minScore": 0})
        out.append(json.dumps(r.structured_content) + r.content[0].text)
    for p in paths:
        r = await client.call_tool("memory_get", {"path": p})
        out.append(json.dumps(r.structured_content) + r.content[0].text)
    return out


def test_family_mcp_clients_reach_none_of_mains_memory(world: tuple[LoadedConfig, dict[str, str]]) -> None:
    loaded, env = world
    paths = main_paths(loaded)
    seen: list[str] = []

    async def body(client: Client) -> None:
        seen.extend(await _everything(client, paths))

    svc = service(loaded, "family", env)
    try:
        run_with_client(build_server(loaded.agent("family"), svc, loaded.config.mcp), body)
    finally:
        svc.close()
    run_with_client(StdioServerParameters(command=sys.executable, env=env,
                                          args=["-m", "hermit.cli.main", "--agent", "family", "mcp", "serve"]), body)
    assert len(seen) == 2 * (len(QUERIES) + len(paths))
    assert_no_canary("\n".join(seen))
    assert FAMILY_OWN in seen[0] and FAMILY_OWN in seen[len(seen) // 2]
