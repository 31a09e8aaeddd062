"""The owner's console behind the web app: the non-chat methods (memory, cron, channels, pairing, logs, status)
dispatched to their handlers, and who counts as an owner in a DM session.

Only a socket that connected with the gateway token reaches here (webchat_api.py), the same rule as
the chat: the token holder is the owner. Handlers that touch files or SQLite run in a worker thread,
so a slow disk never stalls the event loop that streams replies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from hermit.channels.access import AccessControl
from hermit.channels.base import Channel
from hermit.channels.pairing import PairingStore
from hermit.channels.platforms import accounts
from hermit.config.load import LoadedConfig
from hermit.gateway.agents import AgentHost
from hermit.gateway.memory_console import MemoryConsole
from hermit.gateway.ops_console import OpsConsole


class Console:
    def __init__(self, host: AgentHost, loaded: LoadedConfig, home: Path, default_agent: str, *,
                 status: Callable[[], Awaitable[dict[str, Any]]], channels: Sequence[Channel],
                 services: Sequence[object], clock: Callable[[], float]) -> None:
        self.loaded = loaded
        self.memory = MemoryConsole(host, default_agent)
        self.ops = OpsConsole(loaded, home, channels, services, clock)
        self.access = AccessControl(loaded.config.channels, PairingStore(home, clock), clock)
        self._status = status
        m, o = self.memory, self.ops
        self.handlers: dict[str, Callable[[Any], dict[str, Any]]] = {
            "memory.search": m.search, "memory.get": m.get, "memory.files": m.files, "memory.write": m.write,
            "memory.append": m.append, "memory.status": m.status,
            "cron.list": o.cron_list, "cron.status": o.cron_status, "cron.runs": o.cron_runs, "cron.run": o.cron_run,
            "cron.update": o.cron_update, "cron.add": o.cron_add, "cron.remove": o.cron_remove,
            "channels.status": o.channels_status, "pairing.list": o.pairing_list, "pairing.approve": o.pairing_approve,
            "pairing.deny": o.pairing_deny, "pairing.revoke": o.pairing_revoke, "logs.tail": o.logs_tail,
        }

    def handles(self, method: str) -> bool:
        return method in self.handlers or method == "gateway.status"

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        """Run one console method; HermitErrors (with their hints) go back to the page as error responses."""
        if method == "gateway.status":
            return await self._status()
        return await asyncio.to_thread(self.handlers[method], params)

    def owner_dm(self, channel: str | None, account_id: str | None, peer_id: str) -> bool:
        """Whether a DM session's peer is one of the owners the config names (any account of the channel
        when the key does not say which; any channel for a per-peer key). A web chat DM is the owner's."""
        configured = list(accounts(self.loaded.config.channels))
        if channel is None:
            return any(self.access.is_owner(name, acc, peer_id) for name, acc, _ in configured)
        accs = [account_id] if account_id else [acc for name, acc, _ in configured if name == channel] or ["default"]
        return any(self.access.is_owner(channel, acc, peer_id) for acc in accs)
