"""Long-lived services the gateway runs beside the channels, and the one list that composes them.

A service is any object with `name`, `async start()`, `async stop()` and `status() -> dict`
(`hermit gateway status` prints each status). `SERVICE_FACTORIES` is the registration point: each
entry is "module:function", imported when the gateway starts, called as `factory(ctx)` with a
`ServiceContext`, returning a service or None (nothing to run for this config). The scheduler
registers here; through `ctx.host` (the bus) it runs turns in sessions and delivers replies:

    result = await ctx.host.run_turn(agent_id, session_key, text, heartbeat=True)  # -> TurnResult
    await ctx.host.deliver(Target(channel, account_id, "dm", peer_id), text)      # chunked, sent
    ctx.host.busy(session_key)                                                     # a turn queued/running?

`run_turn` goes through the session's FIFO queue, so it never overlaps a user's turn in that session.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hermit.config.load import LoadedConfig
from hermit.gateway.bus import Bus
from hermit.memory.index.sync import SyncReport
from hermit.memory.service import MemoryService

log = logging.getLogger("hermit.gateway")


class Service(Protocol):
    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def status(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ServiceContext:
    host: Bus
    loaded: LoadedConfig
    state_dir: Path
    environ: Mapping[str, str]
    clock: Callable[[], float]
    # The config in force (gateway/live_config.py): re-read when hermit.yaml changes, raising ConfigError
    # while it is invalid. `loaded` is the config the gateway started with.
    config: Callable[[], LoadedConfig] | None = None
    # "restart the gateway: …" in words for how this gateway runs (state.HowRun): the last words of a hint whose fix
    # needs the restart (the scheduler's target naming a channel with no account).
    restart: str | None = None


# "module:function" entries; the scheduler adds its own line here.
SERVICE_FACTORIES: list[str] = [
    "hermit.scheduler.service:gateway_service",  # cron jobs and heartbeats (hermit.scheduler)
    "hermit.channels.slack_migrate:gateway_service",  # renames Slack session keys from before they named the workspace
]


def build_services(ctx: ServiceContext, factories: list[str] | None = None) -> list[Service]:
    services = []
    for ref in SERVICE_FACTORIES if factories is None else factories:
        module, _, func = ref.partition(":")
        service = getattr(importlib.import_module(module), func)(ctx)
        if service is not None:
            services.append(service)
    return services


class MemoryWatcher:
    """Re-indexes an agent's memory when its Markdown changes on disk (hermit.memory.index.watch), so notes
    edited while the gateway runs are searchable without a restart. The watcher blocks, so it runs in
    a thread that `stop` ends through its stop event.

    A watcher that dies (an inotify limit reached, a sync that cannot open the index) is started again
    after `backoff` seconds, doubling up to `max_backoff` while it keeps failing, each failure logged with
    the error: search still works meanwhile (it syncs a dirty index itself), just not live. Each start
    syncs first, so notes changed while it was down are indexed. `watch` is the blocking watch function
    (hermit.memory.index.watch.watch_memory unless given)."""

    def __init__(self, agent_id: str, memory: MemoryService, *, backoff: float = 1.0, max_backoff: float = 300.0,
                 watch: Callable[..., None] | None = None) -> None:
        self.name = f"memory-watch:{agent_id}"
        self.memory = memory
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: SyncReport | None = None
        self._error: str | None = None
        self._backoff = (backoff, max_backoff)
        self._watch = watch
        self.restarts = 0
        self._up = False  # this start got as far as watching
        self.watching = threading.Event()  # set once file changes are seen (tests wait on it, not on time)
        self.failed = threading.Event()  # set at each failure, before the wait to restart (tests wait on it)
        self.synced = threading.Event()  # set after each sync the watcher ran (tests wait on it)

    async def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._watch is None:
            from hermit.memory.index.watch import watch_memory

            self._watch = watch_memory
        cfg = self.memory.cfg
        base, cap = self._backoff
        delay = base
        while not self._stop.is_set():
            self._up = False
            try:
                self._report(self.memory.sync())  # what changed while it was not watching
                self._watch(self.memory.workspace, cfg.extra_paths, self.memory.sync,
                            debounce_ms=cfg.sync.debounce_ms, stop=self._stop, on_report=self._report,
                            on_ready=self._ready)
                if self._stop.is_set():
                    return
                raise RuntimeError("the watch ended by itself")
            except Exception as e:  # noqa: BLE001 - supervision boundary: search still works, just not live
                self._error = f"{type(e).__name__}: {e}"
                self.restarts += 1
                log.exception("%s stopped; restarting it in %g s", self.name, delay)
            self.failed.set()
            if self._stop.wait(delay):
                return
            delay = base if self._up else min(delay * 2, cap)  # failing again at once: wait longer

    def _ready(self) -> None:
        self._error, self._up = None, True  # watching again
        self.watching.set()

    def _report(self, report: SyncReport) -> None:
        self._last = report
        self.synced.set()
        if report.files_indexed or report.files_deleted:
            log.info("%s: %s", self.name, report.summary())

    async def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)

    def status(self) -> dict[str, Any]:
        return {"running": self._thread is not None and self._thread.is_alive(), "error": self._error,
                "restarts": self.restarts, "last_sync": self._last.summary() if self._last else None}
