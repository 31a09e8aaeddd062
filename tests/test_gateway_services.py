"""Services the gateway runs: the memory watcher makes notes edited on disk searchable without a restart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from agenthelpers import load_offline
from hermit.gateway.services import MemoryWatcher, ServiceContext, build_services
from hermit.memory.service import MemoryKey, MemoryService
from prochelpers import PROC_TIMEOUT


def test_memory_watcher_indexes_a_note_written_while_the_gateway_runs(tmp_path: Path) -> None:
    loaded = load_offline(tmp_path, defaults={"memory_search": {
        "provider": "none", "sync": {"debounce_ms": 100, "on_search": False, "on_session_start": False}}})
    agent = loaded.agent()
    (agent.workspace / "memory").mkdir(parents=True)
    (agent.workspace / "MEMORY.md").write_text("# Memory\n", encoding="utf-8")
    svc = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path, agent.settings.memory_search, None)
    watcher = MemoryWatcher(agent.id, svc)

    async def main() -> dict[str, object]:
        await watcher.start()
        deadline = time.monotonic() + PROC_TIMEOUT
        assert await asyncio.to_thread(watcher.watching.wait, PROC_TIMEOUT)  # watching: a write is seen
        (agent.workspace / "memory" / "2026-01-20.md").write_text("Booked the dentist for Thursday 9am.\n",
                                                                  encoding="utf-8")
        while time.monotonic() < deadline:
            found = await asyncio.to_thread(svc.search, "dentist appointment")
            if found["results"]:
                break
            await asyncio.sleep(0.1)
        status = watcher.status()
        await watcher.stop()
        return {"found": found, "status": status}

    try:
        out = asyncio.run(main())
    finally:
        svc.close()
    found = out["found"]
    assert isinstance(found, dict) and found["results"][0]["path"] == "memory/2026-01-20.md"
    status = out["status"]
    assert isinstance(status, dict) and status["running"] and status["error"] is None
    assert not watcher.status()["running"]  # stopped through its stop event


def test_service_factories_are_imported_by_name_and_may_decline(tmp_path: Path) -> None:
    ctx = ServiceContext(host=None, loaded=load_offline(tmp_path), state_dir=tmp_path, environ={},  # type: ignore[arg-type]
                         clock=time.time)
    made = build_services(ctx, ["test_gateway_services:_declining", "test_gateway_services:_one"])
    assert [s.name for s in made] == ["one"]


class _One:
    name = "one"

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def status(self) -> dict[str, object]:
        return {}


def _declining(ctx: ServiceContext) -> None:
    return None


def _one(ctx: ServiceContext) -> _One:
    return _One()
