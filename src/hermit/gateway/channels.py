"""Building the gateway's chat channels from config: the one registration point for channel adapters.

`CHANNEL_FACTORIES` maps a channel name (a section of `channels:` in the config) to "module:function";
the module is imported only when that channel has an enabled account, so an unused platform's SDK is
never loaded. The function is called once per enabled account as
`create(deps: ChannelDeps, account_id, account_config) -> Channel` (see channels/base.py, which also
describes the optional `http_routes()` for webhooks). The web chat is built by the gateway itself.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import Any

from hermit.channels.base import Channel, ChannelDeps
from hermit.config.load import LoadedConfig

log = logging.getLogger("hermit.gateway")

# Channel adapters register here, e.g. "telegram": "hermit.channels.telegram:create_channel".
CHANNEL_FACTORIES: dict[str, str] = {
    "telegram": "hermit.channels.telegram:create_channel",
    "discord": "hermit.channels.discord:create_channel",
    "slack": "hermit.channels.slack:create_channel",
    "whatsapp": "hermit.channels.whatsapp:create_channel",
}


def build_channels(loaded: LoadedConfig, deps: ChannelDeps,
                   factories: dict[str, str] | None = None) -> list[Channel]:
    registry = CHANNEL_FACTORIES if factories is None else factories
    out: list[Channel] = []
    channels_cfg = loaded.config.channels
    for name in type(channels_cfg).model_fields:
        section = getattr(channels_cfg, name)
        accounts = getattr(section, "accounts", None)
        if not accounts:
            continue
        enabled = {a: c for a, c in accounts.items() if getattr(c, "enabled", True)}
        if not enabled:
            continue
        ref = registry.get(name)
        if ref is None:
            log.warning("channels.%s is configured but this Hermit has no %s channel; its accounts are ignored",
                        name, name)
            continue
        module, _, func = ref.partition(":")
        factory = getattr(importlib.import_module(module), func)
        for account_id, cfg in enabled.items():
            out.append(factory(deps, account_id, cfg))
    return out


def webhook_routes(channels: Sequence[Channel]) -> list[tuple[str, str, Sequence[Any]]]:
    """(channel, account, routes) for each channel that receives webhooks."""
    out = []
    for ch in channels:
        routes = getattr(ch, "http_routes", None)
        if callable(routes):
            out.append((ch.name, ch.account_id, routes()))
    return out
