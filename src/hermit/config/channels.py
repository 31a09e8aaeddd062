"""The `channels:` section of the config: who may reach the assistant through each chat account (owners,
DM and group policies, allowlists; SPEC §15, §18) and each platform's own settings (tokens by env var name,
API bases). Allowlist entries are normalised here, at load, by config/allowlist.py.
"""

from __future__ import annotations

import builtins
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from hermit.config.allowlist import STAR, AllowlistEntryError, normalize_entries


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


DmPolicy = Literal["pairing", "allowlist", "open", "disabled"]
GroupPolicy = Literal["allowlist", "open", "disabled"]


def _entries_error(e: AllowlistEntryError) -> PydanticCustomError:
    # The hint rides in the error's context: config/load.py shows it as the fix.
    return PydanticCustomError("allowlist_entry", "{message}", {"message": e.message, "hint": e.hint})


class ChannelAccessConfig(_Strict):
    """Who may reach the assistant through one channel account (SPEC §15, §18). Fails closed: `*` only with open.

    `owners` are the senders whose DMs are the owner's (routed by `session.dm_scope`, so by default into
    the main session); they are always let in unless `dm_policy: disabled`. Everyone else who gets in —
    `allow_from`, approved by pairing, or anyone under `dm_policy: open` — is a contact with a non-main
    session of their own. Entries of `owners`, `allow_from` and `group_allow_from` are normalised by
    config/allowlist.py for the account's platform (`platform`, set by each subclass).
    """

    platform: ClassVar[str] = ""

    enabled: bool = True
    owners: builtins.list[str] = Field(default_factory=builtins.list)  # sender ids (or @usernames) of the owner
    dm_policy: DmPolicy = "pairing"
    allow_from: builtins.list[str] = Field(default_factory=builtins.list)  # sender ids allowed to DM (contacts)
    group_policy: GroupPolicy = "allowlist"
    groups: builtins.list[str] = Field(default_factory=builtins.list)  # group/channel ids (allowlist)
    group_allow_from: builtins.list[str] = Field(default_factory=builtins.list)  # senders inside groups; empty = all
    require_mention: bool = True  # in groups; a reply to the bot counts as a mention

    @field_validator("owners", "allow_from", "group_allow_from")
    @classmethod
    def _normalised(cls, v: builtins.list[str]) -> builtins.list[str]:
        try:
            return normalize_entries(cls.platform, v)
        except AllowlistEntryError as e:
            raise _entries_error(e) from None

    @model_validator(mode="after")
    def _star_only_when_open(self) -> ChannelAccessConfig:
        if STAR in self.owners:
            raise PydanticCustomError(
                "owner_star", "owners contains '*': that would make every sender the owner, with the main "
                "session, MEMORY.md and an unsandboxed shell",
                {"hint": "list your own sender ids under owners; use dm_policy: open for strangers (they get "
                         "sessions of their own)"})
        if STAR in self.allow_from and self.dm_policy != "open":
            raise ValueError(f"allow_from contains '*' but dm_policy is {self.dm_policy!r}: '*' lets every "
                             "stranger in, so it is only accepted with dm_policy: open")
        if STAR in self.groups and self.group_policy != "open":
            raise ValueError(f"groups contains '*' but group_policy is {self.group_policy!r}: use "
                             "group_policy: open to accept every group")
        return self


# One class per platform so each adapter can declare its own settings (tokens by env var name, api_base…).
# Secrets: `<name>_env` names the environment variable that holds it (the recommended way); a plaintext
# `<name>` works too, wins over the variable, and makes `hermit doctor` warn. repr=False keeps them out of logs.
class TelegramAccountConfig(ChannelAccessConfig):
    platform: ClassVar[str] = "telegram"

    token_env: str = "TELEGRAM_BOT_TOKEN"
    token: str | None = Field(None, repr=False)
    api_base: str = "https://api.telegram.org"  # Bot API root; files come from <api_base>/file/bot<token>/
    poll_timeout_seconds: int = Field(30, ge=0, le=50)  # getUpdates long-poll wait


class DiscordAccountConfig(ChannelAccessConfig):
    platform: ClassVar[str] = "discord"

    token_env: str = "DISCORD_BOT_TOKEN"
    token: str | None = Field(None, repr=False)


class SlackAccountConfig(ChannelAccessConfig):
    platform: ClassVar[str] = "slack"

    mode: Literal["socket", "http"] = "socket"  # Socket Mode (no public URL needed) or the HTTP Events API
    bot_token_env: str = "SLACK_BOT_TOKEN"  # xoxb-…: chat.postMessage
    bot_token: str | None = Field(None, repr=False)
    app_token_env: str = "SLACK_APP_TOKEN"  # xapp-…: Socket Mode only
    app_token: str | None = Field(None, repr=False)
    signing_secret_env: str = "SLACK_SIGNING_SECRET"  # HTTP Events API only
    signing_secret: str | None = Field(None, repr=False)
    base_url: str = "https://slack.com/api"


class WhatsAppAccountConfig(ChannelAccessConfig):
    platform: ClassVar[str] = "whatsapp"

    phone_number_id: str = ""  # the Cloud API's sender id (Meta app → WhatsApp → API setup)
    access_token_env: str = "WHATSAPP_ACCESS_TOKEN"
    access_token: str | None = Field(None, repr=False)
    app_secret_env: str = "WHATSAPP_APP_SECRET"  # checks X-Hub-Signature-256 on every webhook POST
    app_secret: str | None = Field(None, repr=False)
    verify_token_env: str = "WHATSAPP_VERIFY_TOKEN"  # echoed back in the webhook's GET verification
    verify_token: str | None = Field(None, repr=False)
    base_url: str = "https://graph.facebook.com/v21.0"


class TelegramChannelConfig(_Strict):
    accounts: dict[str, TelegramAccountConfig] = Field(default_factory=dict)


class DiscordChannelConfig(_Strict):
    accounts: dict[str, DiscordAccountConfig] = Field(default_factory=dict)


class SlackChannelConfig(_Strict):
    accounts: dict[str, SlackAccountConfig] = Field(default_factory=dict)


class WhatsAppChannelConfig(_Strict):
    accounts: dict[str, WhatsAppAccountConfig] = Field(default_factory=dict)


class WebchatConfig(_Strict):
    """The gateway's own web chat: whoever holds the gateway token is the owner (main session)."""

    enabled: bool = True


class ChannelsConfig(_Strict):
    webchat: WebchatConfig = WebchatConfig()
    telegram: TelegramChannelConfig = TelegramChannelConfig()
    discord: DiscordChannelConfig = DiscordChannelConfig()
    slack: SlackChannelConfig = SlackChannelConfig()
    whatsapp: WhatsAppChannelConfig = WhatsAppChannelConfig()
