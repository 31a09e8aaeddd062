"""Two agents in ordinary use (audit: normal use, no attacker): what one agent's owner keeps reaches another agent's
chats only when the owner says so.

A notes folder (a vault) in `agents.defaults.memory_search.extra_paths` — where the init template puts the key, and
where an owner with one agent writes it — was inherited by every agent added later. A family bot given to a relative
(`hermit agents add family`, its Telegram account's `owners` the relative's id, `sandbox.mode: all` as the docs
advise) then indexed the owner's vault: the relative's main session of that agent found and read it with
memory_search and memory_get (owner-only notes are its owners' to read, and its owners are the relative). Now a
folder outside an agent's workspace that only `agents.defaults` names belongs to the default agent, as
`agents.defaults.workspace` does; another agent indexes it only when its own entry lists it.

Real parts: the config loader, the agent runtime with a scripted model calling the real memory tools, the real
SQLite index and a real embedder (memhelpers.HashEmbedder: what a chat is shown is the point here, not
how well the model ranks, so the e5 model's cost is not paid).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.memory.embedders.base import Embedder
from hermit.memory.service import MemoryKey, MemoryService
from hermit.testing import ScriptedModel
from hermit.testing.scripted import request_text
from memhelpers import HashEmbedder

CANARY = "VAULTCANARY-biopsy-benign-7731"


def setup(tmp_path: Path, family: dict[str, Any] | None = None) -> tuple[LoadedConfig, Path]:
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    (vault / "health.md").write_text(f"# Health\n\n- {CANARY}: the biopsy result came back benign\n")
    raw = {"agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"extra_paths": [str(vault)]}},
                      "list": [{"id": "main"}, {"id": "family", "sandbox": {"mode": "all"}, **(family or {})}]}}
    return build_config(raw, StatePaths(home)), vault


def ask_main_session(loaded: LoadedConfig, agent_id: str, vault: Path, embedder: Embedder) -> str:
    """What the agent's own main session is shown when its model searches for the note and reads the file."""
    agent = loaded.agent(agent_id)
    model = ScriptedModel([{"tool_calls": [
        {"name": "memory_search", "arguments": {"query": "biopsy result"}},
        {"name": "memory_get", "arguments": {"path": str(vault / "health.md")}}]}, "done"])
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search, embedder)
    rt = AgentRuntime(agent, model, memory=svc, home=loaded.paths.home, fsync=False)
    try:
        rt.run_turn(f"agent:{agent_id}:main", "what was my biopsy result?")
    finally:
        rt.close()
    return request_text(model.requests[-1])


def test_a_vault_named_in_agents_defaults_is_the_default_agents_only(tmp_path: Path) -> None:
    loaded, vault = setup(tmp_path)
    assert loaded.agent("family").settings.memory_search.extra_paths == []
    assert CANARY not in ask_main_session(loaded, "family", vault, HashEmbedder())
    # The default agent (the owner's: the CLI and the web chat reach it) keeps it.
    assert loaded.agent("main").settings.memory_search.extra_paths == [str(vault)]
    assert CANARY in ask_main_session(loaded, "main", vault, HashEmbedder())


def test_an_agent_that_lists_the_vault_itself_reads_it(tmp_path: Path) -> None:
    """Sharing stays possible, said where it is meant: in the agent's own entry."""
    vault = tmp_path / "vault"
    loaded, _ = setup(tmp_path, {"memory_search": {"extra_paths": [str(vault)]}})
    assert loaded.agent("family").settings.memory_search.extra_paths == [str(vault)]
    assert CANARY in ask_main_session(loaded, "family", vault, HashEmbedder())


def test_a_folder_inside_each_workspace_is_still_every_agents_own(tmp_path: Path) -> None:
    """A relative entry of agents.defaults (`notes`) names a folder in each agent's own workspace: still inherited."""
    outside = str(tmp_path / "vault")
    raw = {"agents": {"defaults": {"memory_search": {"extra_paths": ["notes", outside]}},
                      "list": [{"id": "main"}, {"id": "family"}]}}
    loaded = build_config(raw, StatePaths(tmp_path / "home"))
    assert loaded.agent("family").settings.memory_search.extra_paths == ["notes"]
    assert loaded.agent("main").settings.memory_search.extra_paths == ["notes", outside]
