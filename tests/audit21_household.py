"""Shared parts of the audit-21 household walk (tests/test_audit21_household_*.py): the household of audit 20
(tests/audit20_household.py: Ann the owner on Telegram 1000, Bea her spouse a contact, the family group -100300
served by a `family` agent, the canaries) in a gateway built exactly as `hermit gateway run` builds it
(cli/gateway.cmd_run, cli/assistant.build_runtime) but in this process, on a clock the test moves forward: a
heartbeat every 30 minutes is reached in no wall-clock time. Its channels are the real adapters against the fakes
in tests/fakes; its models are scripted functions (hermit.testing.scripted.FunctionModel), so a test can hold one
session's turn open while another runs.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from audit20_household import FAMILY_CANARIES, GROUP, MAIN_CANARIES, OWNER, SPOUSE
from channeldrivers import TelegramDriver
from hermit.agent.runtime import AgentRuntime
from hermit.channels.access import AccessControl
from hermit.channels.pairing import PairingStore
from hermit.cli.assistant import exec_environment
from hermit.cli.context import CliContext
from hermit.config.load import LoadedConfig, load_config
from hermit.config.paths import StatePaths
from hermit.gateway.state import ensure_token
from hermit.gateway.supervisor import Gateway
from hermit.scheduler import CronJobs, SchedulerService
from hermit.testing.scripted import FunctionModel

SHARED = "KIWI-SHARED-4400"  # in a hand-written daily log of main's: every chat of main may find it
__all__ = ["SHARED", "FAMILY_CANARIES", "GROUP", "MAIN_CANARIES", "OWNER", "SPOUSE", "InProcess", "StepClock", "household"]


class StepClock:
    """The gateway's clock (epoch seconds): real time plus an offset the test moves forward."""

    def __init__(self, start: float) -> None:
        self.offset = start - time.time()

    def __call__(self) -> float:
        return time.time() + self.offset

    def forward(self, seconds: float) -> None:
        self.offset += seconds


def household(home: Path, tg: TelegramDriver, extra_account: Mapping[str, Any] | None = None,
              defaults: Mapping[str, Any] | None = None, family: Mapping[str, Any] | None = None) -> LoadedConfig:
    """hermit.yaml of the household on one Telegram bot (`personal`) and the canaries in both workspaces."""
    cfg: dict[str, Any] = {
        "agents": {"defaults": {"timezone": "UTC", "memory_search": {"provider": "none"}, **(defaults or {})},
                   "list": [{"id": "main", "default": True},
                            {"id": "family", "sandbox": {"mode": "all"}, **(family or {})}]},
        "gateway": {"shutdown_grace_seconds": 5},
        "channels": {"telegram": {"accounts": {"personal": {
            **tg.account_config("personal"), "owners": [OWNER], "allow_from": [SPOUSE], "groups": [GROUP],
            **(extra_account or {})}}}},
        "bindings": [{"match": {"channel": "telegram", "account_id": "personal", "peer": {"kind": "group", "id": GROUP}},
                      "agent_id": "family"}]}
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    os.chmod(home / "hermit.yaml", 0o600)
    loaded = load_config(StatePaths(home))
    for agent, mem, priv in (("main", MAIN_CANARIES["memory"], MAIN_CANARIES["private"]),
                             ("family", FAMILY_CANARIES["fmemory"], FAMILY_CANARIES["fprivate"])):
        ws = loaded.agent(agent).workspace
        (ws / "memory" / "private").mkdir(parents=True, exist_ok=True)
        (ws / "MEMORY.md").write_text(f"# Memory\n\n- kiwi {mem}\n", encoding="utf-8")
        (ws / "memory" / "private" / "p.md").write_text(f"- kiwi {priv} (the dentist on Friday)\n", encoding="utf-8")
    # A hand-written daily log: shared, as in the original — what a contact's search does find (the probes' control).
    (loaded.agent("main").workspace / "memory" / "2026-01-05.md").write_text(f"- kiwi {SHARED}\n", encoding="utf-8")
    return loaded


class InProcess:
    """One gateway as `hermit gateway run` builds it, in this process, with `models[agent_id]` as each agent's
    model and `clock` as its clock. `async with` serves it; `scheduler` is its SchedulerService."""

    def __init__(self, home: Path, environ: Mapping[str, str], models: Mapping[str, FunctionModel],
                 clock: Callable[[], float]) -> None:
        ctx = CliContext(home=home, environ=dict(environ))
        loaded = ctx.config()
        self.runtimes = {a.id: AgentRuntime(
            a, models[a.id], memory=ctx.memory_service(a, long_lived=True) if a.settings.memory_search.enabled
            else None, exec_env=exec_environment(ctx.environ, loaded),
            cron=CronJobs(home, loaded, for_model=True, restart="restart the gateway"),
            owner_check=AccessControl(loaded.config.channels, PairingStore(home)).is_owner) for a in loaded.agents}
        self.gateway = Gateway(loaded, home, ctx.environ, self.runtimes, ensure_token(home), host="127.0.0.1", port=0,
                               clock=clock)
        [scheduler] = [s for s in self.gateway.services if isinstance(s, SchedulerService)]
        self.scheduler = scheduler
        self._serving: asyncio.Task[int] | None = None

    async def __aenter__(self) -> InProcess:
        ready = asyncio.Event()
        self._serving = asyncio.create_task(self.gateway.serve(on_ready=lambda _url: ready.set()))
        await asyncio.wait_for(ready.wait(), 120)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.gateway.request_stop()
        assert self._serving is not None
        assert await asyncio.wait_for(self._serving, 120) == 0
        for rt in self.runtimes.values():
            rt.close()

    def heartbeat(self, agent_id: str) -> dict[str, Any]:
        """The agent's heartbeat in the scheduler's status: every_minutes, next, target, last (the outcome)."""
        agents: dict[str, Any] = self.scheduler.status()["agents"]
        return dict(agents[agent_id]["heartbeat"])
