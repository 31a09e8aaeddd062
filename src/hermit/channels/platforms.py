"""The chat platforms Hermit has adapters for, as `hermit channels` and `hermit doctor` see them: accounts,
the secrets each needs, the extra that installs its SDK, its webhook path. (The gateway builds the
adapters through hermit.gateway.channels.CHANNEL_FACTORIES.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hermit.config.schema import (
    ChannelAccessConfig,
    ChannelsConfig,
    SlackAccountConfig,
    WhatsAppAccountConfig,
)


@dataclass(frozen=True)
class Secret:
    field: str  # config field holding a plaintext value; `<field>_env` names the variable
    plaintext: str | None
    env_name: str


PLATFORMS = ("telegram", "discord", "slack", "whatsapp")
# Platform -> (module its adapter needs, the extra that installs it).
EXTRAS = {"discord": ("discord", "hermit-assistant[discord]")}
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


def webhook_path(name: str, account_id: str, cfg: ChannelAccessConfig) -> str | None:
    """The gateway path a platform posts to for this account, if it receives over HTTP."""
    if isinstance(cfg, WhatsAppAccountConfig) or (isinstance(cfg, SlackAccountConfig) and cfg.mode == "http"):
        return f"/hooks/{name}/{account_id}/"
    return None
