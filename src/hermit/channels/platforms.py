"""The chat platforms Hermit has adapters for: how to build one account's channel, and which secrets it needs.

Composition roots (the gateway, `hermit channels`, `hermit doctor`) use this table; the adapters
themselves (and their SDKs) are imported only when an account of that platform is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.channels.base import Channel
from hermit.config.schema import (
    ChannelAccessConfig,
    ChannelsConfig,
    SlackAccountConfig,
    WhatsAppAccountConfig,
)


@dataclass(frozen=True)
class ChannelEnv:
    """What a composition root hands a factory: environment (for secrets by name), state dir, inbox."""

    environ: Mapping[str, str]
    state_dir: Path
    inbox_dir: Path  # the default agent's <workspace>/inbox: where received files are saved


@dataclass(frozen=True)
class Secret:
    field: str  # config field holding a plaintext value; `<field>_env` names the variable
    plaintext: str | None
    env_name: str


PLATFORMS = ("telegram", "discord", "slack", "whatsapp")
# Platform -> (module its adapter needs, the extra that installs it).
EXTRAS = {"discord": ("discord", "hermit[discord]"), "slack": ("websockets", "hermit[slack]")}
_SECRETS = {"telegram": ("token",), "discord": ("token",), "whatsapp": ("access_token", "app_secret", "verify_token")}


def secrets(name: str, cfg: ChannelAccessConfig) -> list[Secret]:
    """The secrets this account needs (Slack's depend on its mode)."""
    if isinstance(cfg, SlackAccountConfig):
        wanted: tuple[str, ...] = ("bot_token", "app_token" if cfg.mode == "socket" else "signing_secret")
    else:
        wanted = _SECRETS[name]
    return [Secret(f, getattr(cfg, f), getattr(cfg, f"{f}_env")) for f in wanted]


def accounts(channels: ChannelsConfig) -> Iterator[tuple[str, str, ChannelAccessConfig]]:
    """(platform, account id, account config) for every configured account, enabled or not."""
    for name in PLATFORMS:
        for account_id, cfg in getattr(channels, name).accounts.items():
            yield name, account_id, cfg


def build(name: str, account_id: str, cfg: ChannelAccessConfig, env: ChannelEnv) -> Channel:
    """One account's channel adapter (ConfigError when a secret is missing)."""
    module = importlib.import_module(f"hermit.channels.{name}")
    create: Callable[..., Channel] = module.create
    kwargs: dict[str, Any] = {"environ": env.environ, "state_dir": env.state_dir}
    if name != "slack":
        kwargs["inbox_dir"] = env.inbox_dir
    return create(account_id, cfg, **kwargs)


def webhook_path(name: str, account_id: str, cfg: ChannelAccessConfig) -> str | None:
    """The gateway path a platform posts to for this account, if it receives over HTTP."""
    if isinstance(cfg, WhatsAppAccountConfig) or (isinstance(cfg, SlackAccountConfig) and cfg.mode == "http"):
        return f"/hooks/{name}/{account_id}/"
    return None
