"""Building the gateway's chat channels from config, through the platform registry (hermit.channels.platforms).

A platform's adapter module is imported only when that platform has an enabled account, so an unused
platform's SDK is never loaded. Its `create(deps, account_id, account_config) -> Channel` is called once
per enabled account (see channels/base.py, which also describes the optional `http_routes()` for
webhooks). The web chat is built by the gateway itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from hermit.channels.base import Channel, ChannelDeps
from hermit.channels.credentials import MissingSecret
from hermit.channels.platforms import ADAPTERS, names, platform
from hermit.config.load import LoadedConfig
from hermit.gateway.unstarted import UnstartedChannel
from hermit.gateway.webhook_gate import gated_routes

log = logging.getLogger("hermit.gateway")


def build_channels(loaded: LoadedConfig, deps: ChannelDeps) -> list[Channel]:
    out: list[Channel] = []
    channels_cfg = loaded.config.channels
    for name in names():
        enabled = {a: c for a, c in channels_cfg.accounts_of(name).items() if c.enabled}
        if not enabled:
            continue
        if name not in ADAPTERS:
            log.warning("channels.%s is configured but this Hermit has no %s channel; its accounts are ignored",
                        name, name)
            continue
        create = platform(name).create
        for account_id, cfg in enabled.items():
            try:
                out.append(create(deps, account_id, cfg))
            except MissingSecret as e:  # that account alone stays down, said in the log and its status
                out.append(UnstartedChannel(deps, name, account_id, cfg, e))
    return out


def webhook_routes(channels: Sequence[Channel], current: Callable[[], LoadedConfig] | None = None) \
        -> list[tuple[str, str, Sequence[Any]]]:
    """(channel, account, routes) for each channel that receives webhooks; with `current` (the config in force),
    each answers only while its account is on there (gateway/webhook_gate.py)."""
    out = []
    for ch in channels:
        routes = getattr(ch, "http_routes", None)
        if callable(routes):
            gated = gated_routes(ch, current) if current is not None else None
            out.append((ch.name, ch.account_id, routes() if gated is None else gated))
    return out
