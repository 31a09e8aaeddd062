"""Helpers for agent tests: a runtime wired to a FakeProvider over real HTTP, and request inspection."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.memory.embedders.base import Embedder
from hermit.memory.service import MemoryKey, MemoryService
from hermit.messages import ToolCallPart
from hermit.models.registry import build_model
from hermit.testing import FakeProvider, RecordedRequest, ScriptedModel

NOW = datetime(2026, 1, 20, 13, 5, tzinfo=UTC)  # 14:05 in Europe/Paris
TODAY = "2026-01-20"
MODEL_REF = "fake/model-x"


def fixed_clock() -> datetime:
    return NOW


def models_config(api: str, fake: FakeProvider) -> dict[str, Any]:
    if api == "anthropic":
        provider = {"type": "anthropic", "base_url": fake.base_url, "api_key": "sk-ant-test"}
    else:
        provider = {"type": "openai-compatible", "base_url": fake.openai_base_url}
    return {"providers": {"fake": provider}}


def load_offline(home: Path, *, defaults: dict[str, Any] | None = None,
                 agents: list[dict[str, Any]] | None = None) -> LoadedConfig:
    """Config for runtimes built with a ScriptedModel/FunctionModel (no provider)."""
    raw = {"agents": {"defaults": {"timezone": "Europe/Paris", **(defaults or {})}, "list": agents or []}}
    return build_config(raw, StatePaths(home))


def load(home: Path, api: str, fake: FakeProvider, *, defaults: dict[str, Any] | None = None,
         agents: list[dict[str, Any]] | None = None) -> LoadedConfig:
    raw: dict[str, Any] = {
        "agents": {"defaults": {"model": MODEL_REF, "timezone": "Europe/Paris", **(defaults or {})},
                   "list": agents or []},
        "models": models_config(api, fake),
    }
    return build_config(raw, StatePaths(home))


def make_runtime(loaded: LoadedConfig, embedder: Embedder | None, *, agent_id: str | None = None,
                 sleeps: list[float] | None = None, memory: bool = True) -> AgentRuntime:
    agent = loaded.agent(agent_id)
    model = build_model(MODEL_REF, loaded.config.models, {},
                        sleep=(sleeps.append if sleeps is not None else lambda s: None))
    svc = (MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search,
                         embedder) if memory else None)
    return AgentRuntime(agent, model, memory=svc, clock=fixed_clock, fsync=False, home=loaded.paths.home)


def system_text(req: RecordedRequest) -> str:
    body = req.body
    if req.api == "anthropic":
        return "".join(b["text"] for b in body.get("system", []))
    first = body["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


def tool_results(req: RecordedRequest) -> list[tuple[str, bool]]:
    """(text, is_error) of every tool result in a request, in order."""
    out: list[tuple[str, bool]] = []
    for m in req.body["messages"]:
        if req.api == "anthropic":
            if isinstance(m["content"], list):
                for block in m["content"]:
                    if block.get("type") == "tool_result":
                        text = "".join(c.get("text", "") for c in block["content"])
                        out.append((text, bool(block.get("is_error"))))
        elif m["role"] == "tool":
            text = m["content"] if isinstance(m["content"], str) else str(m["content"])
            out.append((text, text.startswith("error:")))
    return out


def last_tool_result(req: RecordedRequest) -> tuple[str, bool]:
    results = tool_results(req)
    assert results, f"request #{req.index} carries no tool results"
    return results[-1]


def offline_tool_runtime(tmp_path: Path) -> AgentRuntime:
    """A runtime on a fresh state dir under `tmp_path` (an empty memory/, no model calls) for driving tools."""
    home = tmp_path / "state"
    (home / "workspace" / "memory").mkdir(parents=True)
    agent = load_offline(home).agent()
    return AgentRuntime(agent, ScriptedModel([]), fsync=False, home=tmp_path, clock=fixed_clock,
                        exec_env={"PATH": "/usr/bin:/bin"})


def tool_call(rt: AgentRuntime, session: str, name: str, **args: object) -> tuple[str, bool]:
    """One tool call in `session`, as the model would make it: (result text, is_error)."""
    res = rt.tools_for(session).run(ToolCallPart("c", name, args)).result
    return str(res.content), res.is_error
