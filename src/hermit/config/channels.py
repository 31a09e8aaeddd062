"""The `channels:` section of the config: who may reach the assistant through each chat account (owners,
DM and group policies, allowlists; SPEC §15, §18) and each platform's own settings (tokens by env var name,
API bases). Allowlist entries are normalised here, at load, by config/allowlist.py.

Each platform is declared once on the config side: its account settings class carries the facts config,
routing, pairing and `hermit setup` need (the secrets it takes, how its sender ids are named, whether it
has guilds or teams), and one field of `ChannelsConfig` names it. Its adapter, next to the code, declares
the rest (hermit.channels.platforms).
"""

from __future__ import annotations

import builtins
from typing import ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from hermit.config.allowlist import STAR, AllowlistEntryError, normalize_entries, normalize_members


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


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
    title: ClassVar[str] = ""  # the platform's name in sentences: "Telegram"
    id_name: ClassVar[str] = ""  # what a sender id is called there, told to a stranger with their pairing code
    owner_hint: ClassVar[str] = ""  # how the owner finds their own id (`hermit setup`)
    secret_fields: ClassVar[tuple[str, ...]] = ()  # fields holding secrets; `<field>_env` names the variable
    group_scope: ClassVar[Literal["guild", "team"] | None] = None  # what groups belong to (bindings' guild_id/team_id)
    # Sender and group ids name someone only within the message's team (Slack: a workspace's `U…`/`C…`), so a
    # contact's or a group's session key carries the team too (agent.routing.session_peer).
    team_local_ids: ClassVar[bool] = False

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
    def _normalised(cls, v: builtins.list[str], info: ValidationInfo) -> builtins.list[str]:
        try:  # group_allow_from may also name a chat that speaks in groups (a Telegram linked channel)
            if info.field_name == "group_allow_from":
                return normalize_members(cls.platform, v)
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

    def secrets_wanted(self) -> tuple[str, ...]:
        """The secret fields this account needs (they may depend on its mode)."""
        return self.secret_fields

    def receives_webhooks(self) -> bool:
        """Whether the platform posts this account's events to the gateway over HTTP."""
        return False


# One class per platform so each adapter can declare its own settings (tokens by env var name, api_base…).
# Secrets: `<name>_env` names the environment variable that holds it (the recommended way); a plaintext
# `<name>` works too, wins over the variable, and makes `hermit doctor` warn. repr=False keeps them out of logs.
class TelegramAccountConfig(ChannelAccessConfig):
    platform: ClassVar[str] = "telegram"
    title: ClassVar[str] = "Telegram"
    id_name: ClassVar[str] = "Telegram user id"
    owner_hint: ClassVar[str] = "your numeric user id (ask @userinfobot)"
    secret_fields: ClassVar[tuple[str, ...]] = ("token",)

    token_env: str = "TELEGRAM_BOT_TOKEN"
    token: str | None = Field(None, repr=False)
    api_base: str = "https://api.telegram.org"  # Bot API root; files come from <api_base>/file/bot<token>/
    poll_timeout_seconds: int = Field(30, ge=0, le=50)  # getUpdates long-poll wait


class DiscordAccountConfig(ChannelAccessConfig):
    platform: ClassVar[str] = "discord"
    title: ClassVar[str] = "Discord"
    id_name: ClassVar[str] = "Discord user id"
    owner_hint: ClassVar[str] = "your user id (Developer Mode → Copy User ID)"
    secret_fields: ClassVar[tuple[str, ...]] = ("token",)
    group_scope: ClassVar[Literal["guild", "team"] | None] = "guild"

    token_env: str = "DISCORD_BOT_TOKEN"
    token: str | None = Field(None, repr=False)


class SlackAccountConfig(ChannelAccessConfig):
    platform: ClassVar[str] = "slack"
    title: ClassVar[str] = "Slack"
    id_name: ClassVar[str] = "Slack member id"
    owner_hint: ClassVar[str] = "your member id (U…)"
    secret_fields: ClassVar[tuple[str, ...]] = ("bot_token", "app_token", "signing_secret")
    group_scope: ClassVar[Literal["guild", "team"] | None] = "team"
    team_local_ids: ClassVar[bool] = True

    mode: Literal["socket", "http"] = "socket"  # Socket Mode (no public URL needed) or the HTTP Events API
    bot_token_env: str = "SLACK_BOT_TOKEN"  # xoxb-…: chat.postMessage
    bot_token: str | None = Field(None, repr=False)
    app_token_env: str = "SLACK_APP_TOKEN"  # xapp-…: Socket Mode only
    app_token: str | None = Field(None, repr=False)
    signing_secret_env: str = "SLACK_SIGNING_SECRET"  # HTTP Events API only
    signing_secret: str | None = Field(None, repr=False)
    base_url: str = "https://slack.com/api"

    def secrets_wanted(self) -> tuple[str, ...]:
        return ("bot_token", "app_token" if self.mode == "socket" else "signing_secret")

    def receives_webhooks(self) -> bool:
        return self.mode == "http"


class WhatsAppAccountConfig(ChannelAccessConfig):
    platform: ClassVar[str] = "whatsapp"
    title: ClassVar[str] = "WhatsApp"
    id_name: ClassVar[str] = "WhatsApp number"
    owner_hint: ClassVar[str] = "your phone number"
    secret_fields: ClassVar[tuple[str, ...]] = ("access_token", "app_secret", "verify_token")

    phone_number_id: str = ""  # the Cloud API's sender id (Meta app → WhatsApp → API setup)
    access_token_env: str = "WHATSAPP_ACCESS_TOKEN"
    access_token: str | None = Field(None, repr=False)
    app_secret_env: str = "WHATSAPP_APP_SECRET"  # checks X-Hub-Signature-256 on every webhook POST
    app_secret: str | None = Field(None, repr=False)
    verify_token_env: str = "WHATSAPP_VERIFY_TOKEN"  # echoed back in the webhook's GET verification
    verify_token: str | None = Field(None, repr=False)
    base_url: str = "https://graph.facebook.com/v21.0"

    def receives_webhooks(self) -> bool:
        return True


Account = TypeVar("Account", bound=ChannelAccessConfig)


class PlatformConfig(_Strict, Generic[Account]):
    """One platform's section: its accounts by id."""

    accounts: dict[str, Account] = Field(default_factory=dict)



class WebchatConfig(_Strict):
    """The gateway's own web chat: whoever holds the gateway token is the owner (main session)."""

    enabled: bool = True


class ChannelsConfig(_Strict):
    """The web chat, then one line per chat platform: the config's list of platforms (see platforms())."""

    webchat: WebchatConfig = WebchatConfig()
    telegram: PlatformConfig[TelegramAccountConfig] = PlatformConfig[TelegramAccountConfig]()
    discord: PlatformConfig[DiscordAccountConfig] = PlatformConfig[DiscordAccountConfig]()
    slack: PlatformConfig[SlackAccountConfig] = PlatformConfig[SlackAccountConfig]()
    whatsapp: PlatformConfig[WhatsAppAccountConfig] = PlatformConfig[WhatsAppAccountConfig]()

    @model_validator(mode="after")
    def _one_number_per_whatsapp_account(self) -> ChannelsConfig:
        """Two enabled WhatsApp accounts may not name one phone number: its webhooks are one stream, and both would
        answer it (and share its seen-message record, `<state>/channels/whatsapp/<phone_number_id>/`)."""
        seen: dict[str, str] = {}
        for name, account in self.whatsapp.accounts.items():
            number = account.phone_number_id.strip()
            if not number or not account.enabled:
                continue
            if number in seen:
                raise PydanticCustomError(
                    "whatsapp_number_shared", "WhatsApp accounts {first} and {second} both have phone_number_id "
                    "{number}: each account is one phone number",
                    {"first": repr(seen[number]), "second": repr(name), "number": repr(number),
                     "hint": "give each account its own number's phone_number_id, or remove (or disable) one"})
            seen[number] = name
        return self

    def accounts_of(self, platform: str) -> dict[str, ChannelAccessConfig]:
        """The accounts configured for a chat platform (none for an unknown name)."""
        section = getattr(self, platform, None)
        return dict(section.accounts) if isinstance(section, PlatformConfig) else {}


def platforms() -> dict[str, type[ChannelAccessConfig]]:
    """Every chat platform the config knows, in config order, with its account settings class."""
    out: dict[str, type[ChannelAccessConfig]] = {}
    for name, field in ChannelsConfig.model_fields.items():
        meta = getattr(field.annotation, "__pydantic_generic_metadata__", None)
        if meta and meta["origin"] is PlatformConfig:
            (account,) = meta["args"]
            out[name] = account
    return out
