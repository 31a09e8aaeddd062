"""The owner's console behind the web app: the non-chat methods (memory, cron, channels, pairing, logs, status)
dispatched to their handlers, and which DM sessions are the owner's own.

Only a socket that connected with the gateway token reaches here (webchat_api.py), the same rule as
the chat: the token holder is the owner. Handlers that touch files or SQLite run in a worker thread,
so a slow disk never stalls the event loop that streams replies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from hermit.agent.routing import WEBCHAT, RouteInput, Router
from hermit.channels.access import AccessControl
from hermit.channels.base import Channel
from hermit.channels.pairing import PairingStore
from hermit.channels.platforms import accounts
from hermit.config.load import LoadedConfig
from hermit.errors import ConfigError
from hermit.gateway.agents import AgentHost
from hermit.gateway.live_config import AccessView, dm_scopes
from hermit.gateway.memory_console import MemoryConsole
from hermit.gateway.ops_console import OpsConsole
from hermit.sessions.keys import SessionKey, SessionKind, parse_session_key


class Console:
    def __init__(self, host: AgentHost, loaded: LoadedConfig, home: Path, default_agent: str, *,
                 status: Callable[[], Awaitable[dict[str, Any]]], channels: Sequence[Channel],
                 services: Sequence[object], clock: Callable[[], float],
                 view: Callable[[], AccessView] | None = None) -> None:
        self.loaded = loaded
        self.memory = MemoryConsole(host, default_agent)
        # `view`: the bus's access and routing by the config in force (live_config.LiveAccess.view), so
        # the page's idea of the owner's DMs follows an edit of hermit.yaml as the bus does.
        self._view = view
        self.ops = OpsConsole(loaded, home, channels, services, clock,
                              config=(lambda: view().loaded) if view is not None else None)
        self.access = AccessControl(loaded.config.channels, PairingStore(home, clock), clock)
        self.router = Router.from_config(loaded)  # the bus's routing, from the same config
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

    def owner_dm(self, key: SessionKey) -> bool:
        """Whether a DM session is the owner's own: an account of the key's channel (of any channel for a
        per-peer key; the key's own account when it names one) lists the peer under `owners`, and a DM from
        that owner there is routed (bindings, dm_scope: what the bus does) to this very agent and session.
        A peer id that owns *another* account is not enough: a contact's session that merely shares the id
        (under per-channel-peer, or in another agent than the owner's account is bound to) stays read-only.
        An owner listed only by @username cannot be told from the key, so fails closed too. A web chat DM is
        the owner's (only the token holder writes them)."""
        if key.kind is not SessionKind.DM or key.peer_id is None or key.agent_id is None:
            return False
        if key.channel == WEBCHAT:
            return True
        if self._view is None:
            loaded, access, router = self.loaded, self.access, self.router
        else:
            try:
                v = self._view()
            except ConfigError:  # the config is invalid: no channel DM is the owner's (read-only)
                return False
            loaded, access, router = v.loaded, v.access, v.router
        for channel, account_id, _ in accounts(loaded.config.channels):
            if (key.channel not in (None, channel) or key.account_id not in (None, account_id)
                    or not access.is_owner(channel, account_id, key.peer_id)):
                continue
            for guild_id, team_id in dm_scopes(router, channel):
                route = router.resolve(RouteInput(channel, account_id, "dm", key.peer_id, key.thread_id,
                                                  key.topic_id, guild_id, team_id, sender_is_owner=True))
                if route.agent_id == key.agent_id and parse_session_key(route.session_key) == key:
                    return True
        return False
