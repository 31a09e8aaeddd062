"""Helpers for long-session tests: a settable clock, small-window configs, runtimes, request and JSONL inspection."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agenthelpers import MODEL_REF, NOW, models_config
from hermit.agent.runtime import AgentRuntime
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.memory.embedders.base import Embedder
from hermit.memory.service import MemoryKey, MemoryService
from hermit.models.base import Model
from hermit.models.registry import build_model
from hermit.testing import FakeProvider, RecordedRequest

# Small enough that a dozen turns cross the flush and compaction thresholds: with a 10,000-token window
# compaction starts above 8,000 tokens, the flush at 6,500, and 2,500 tokens of turns are kept.
SMALL_WINDOW = 10_000
SMALL_COMPACTION: dict[str, Any] = {
    "reserve_tokens": 2000,
    "reserve_tokens_floor": 2000,
    "keep_recent_tokens": 2500,
    "summary_max_tokens": 512,
    "memory_flush": {"soft_threshold_tokens": 1500},
}
FILLER = ("The quarterly planning notes cover vendor contracts, office moves, hiring plans and the budget "
          "review for the next cycle, with owners and dates for each item. ")


class Clock:
    """An injected clock the test moves by hand."""

    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def user_text(n: int, size: int = 2800) -> str:
    """A ~size-char user message (≈ size/4 tokens) tagged turn-NN at both ends."""
    tag = f"turn-{n:02d}"
    body = (FILLER * (size // len(FILLER) + 1))[: size - 2 * len(tag) - 2]
    return f"{tag} {body} {tag}"


def small_config(home: Path, fake: FakeProvider | None = None, api: str = "openai", *,
                 window: int = SMALL_WINDOW, defaults: dict[str, Any] | None = None) -> LoadedConfig:
    raw: dict[str, Any] = {"agents": {"defaults": {"timezone": "Europe/Paris", **(defaults or {})}}}
    if fake is not None:
        models = models_config(api, fake)
        models["providers"]["fake"]["models"] = {"model-x": {"context_window": window}}
        raw["models"] = models
        raw["agents"]["defaults"]["model"] = MODEL_REF
    return build_config(raw, StatePaths(home))


def fake_model(loaded: LoadedConfig) -> Model:
    return build_model(MODEL_REF, loaded.config.models, {}, sleep=lambda s: None)


def memory_service(loaded: LoadedConfig, embedder: Embedder | None, *, sessions: bool = False,
                   clock_offset: float = 0.0) -> MemoryService:
    """The agent's memory service; `sessions=True` indexes transcripts too (clock_offset makes them quiet)."""
    import time

    agent = loaded.agent()
    return MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search,
                         embedder, sessions_dir=agent.sessions_dir if sessions else None,
                         clock=lambda: time.time() + clock_offset)


def runtime(loaded: LoadedConfig, model: Model, *, clock: Clock | None = None,
            memory: MemoryService | None = None) -> AgentRuntime:
    return AgentRuntime(loaded.agent(), model, memory=memory, clock=clock or Clock(), fsync=False,
                        home=loaded.paths.home)


def entries(rt: AgentRuntime, key: str) -> list[dict[str, Any]]:
    rec = rt.session(key)
    assert rec is not None
    return [json.loads(line) for line in rt.store.transcript_path(rec.session_id).read_text().splitlines()]


def transcript_bytes(rt: AgentRuntime, key: str) -> bytes:
    rec = rt.session(key)
    assert rec is not None
    return rt.store.transcript_path(rec.session_id).read_bytes()


def body_text(req: RecordedRequest) -> str:
    return json.dumps(req.body, ensure_ascii=False)


def requests_containing(fake: FakeProvider, needle: str) -> list[int]:
    return [r.index for r in fake.requests if needle in body_text(r)]
