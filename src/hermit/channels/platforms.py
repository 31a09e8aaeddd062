"""The registry of chat platforms: one line per adapter module, each of which declares its platform once
(`PLATFORM`, next to the adapter's code). The gateway builds channels from it; `hermit channels`,
`hermit doctor`, `hermit setup`, pairing and cron delivery read it.

A new platform is: an adapter module defining `PLATFORM = ChannelPlatform(...)` and its
`create_channel(deps, account_id, cfg)`; its account settings class in config/channels.py (one field of
`ChannelsConfig`, plus its sender-id rules in config/allowlist.py: config is validated at load, before any
adapter is imported, so those live on the config side); and one line in ADAPTERS below. Adapter modules
import their SDK inside their methods, so reading a PLATFORM never loads an unused platform's SDK.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermit.config.channels import ChannelAccessConfig, ChannelsConfig, platforms

if TYPE_CHECKING:
    from hermit.channels.base import Channel, ChannelCapabilities, ChannelDeps

# Platform name (its section under `channels:` in the config) -> the module that declares it.
ADAPTERS: dict[str, str] = {
    "telegram": "hermit.channels.telegram",
    "discord": "hermit.channels.discord",
    "slack": "hermit.channels.slack",
    "whatsapp": "hermit.channels.whatsapp",
}


@dataclass(frozen=True)
class ChannelPlatform:
    """What Hermit knows about one chat platform beyond its config: how to build its channel, what it can show
    (its capabilities give reply chunking its limits), and the SDK an extra installs for it."""

    name: str
    create: Callable[[ChannelDeps, str, Any], Channel]  # (deps, account id, account config) -> channel
    capabilities: ChannelCapabilities
    sdk: tuple[str, str] | None = None  # (module the adapter imports, the pip extra that installs it)


@dataclass(frozen=True)
class Secret:
    field: str  # config field holding a plaintext value; `<field>_env` names the variable
    plaintext: str | None
    env_name: str


def names() -> tuple[str, ...]:
    """Every chat platform, in the config's order."""
    return tuple(platforms())


def platform(name: str) -> ChannelPlatform:
    """The platform declared by `name`'s adapter module (imported on first use); KeyError for an unknown name."""
    declared: ChannelPlatform = importlib.import_module(ADAPTERS[name]).PLATFORM
    return declared


def secrets(name: str, cfg: ChannelAccessConfig, *, every: bool = False) -> list[Secret]:
    """The secrets this account needs (Slack's depend on its mode); with `every`, each secret field it has
    whatever its mode (for masking: a token set for the other mode is a secret all the same)."""
    fields = cfg.secret_fields if every else cfg.secrets_wanted()
    return [Secret(f, getattr(cfg, f), getattr(cfg, f"{f}_env")) for f in fields]


def accounts(channels: ChannelsConfig) -> Iterator[tuple[str, str, ChannelAccessConfig]]:
    """(platform, account id, account config) for every configured account, enabled or not."""
    for name in names():
        for account_id, cfg in channels.accounts_of(name).items():
            yield name, account_id, cfg


def webhook_path(name: str, account_id: str, cfg: ChannelAccessConfig) -> str | None:
    """The gateway path a platform posts to for this account, if it receives over HTTP."""
    return f"/hooks/{name}/{account_id}/" if cfg.receives_webhooks() else None
