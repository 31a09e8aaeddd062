"""The channel seam: the message types a channel exchanges with the gateway, and what a channel is.

A channel (web chat, Telegram, Discord, Slack, WhatsApp) turns platform events into `InboundMessage`s
that it publishes on the gateway's bus, and turns `Outbound` items it is given back into platform
calls. It never sees the agent loop, models or memory (SPEC §15); access control, routing, session
keys, queueing and reply shaping happen on the gateway's side of this seam, so every channel gets them
the same way. Channels check platform signatures themselves, before publishing anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

PeerKind = Literal["dm", "group"]
AttachmentKind = Literal["image", "document", "audio", "video", "other"]


@dataclass(frozen=True)
class Attachment:
    """A file that came with a message, already saved by the channel (under `<state>/inbox/` until the gateway
    files it into the answering session's inbox: the workspace's for the owner, the room's for others)."""

    kind: AttachmentKind
    path: str  # where the channel saved it (absolute); "" when it could not be saved
    name: str | None = None
    mime: str | None = None
    size: int | None = None
    # (st_dev, st_ino) of the file the channel created at `path` (channels/inbox.py): the gateway files or
    # deletes that file only, never whatever else the name may hold by then; None: nothing is filed.
    staged: tuple[int, int] | None = None


@dataclass(frozen=True)
class InboundMessage:
    """One message from a platform, normalised. `peer_id` is the sender for a DM, the chat for a group."""

    channel: str  # "webchat", "telegram", "discord", "slack", "whatsapp"
    account_id: str  # the channel account from config (`channels.<name>.accounts.<id>`), "default" if one
    peer_kind: PeerKind
    peer_id: str
    sender_id: str
    text: str
    message_id: str = ""
    sender_name: str | None = None
    # The sender's platform username without '@' (Telegram, Discord), for `@username` entries in
    # owners/allow_from; None where the platform has none or it is not unique (an old Discord tag).
    sender_username: str | None = None
    thread_id: str | None = None  # Slack/Discord thread: a `:thread:<id>` session
    topic_id: str | None = None  # Telegram forum topic: a `:topic:<id>` session
    guild_id: str | None = None  # Discord guild (routing)
    team_id: str | None = None  # Slack team (routing)
    mentioned: bool = False  # the platform says the bot was mentioned
    reply_to_bot: bool = False  # a reply to one of the bot's messages (counts as a mention)
    reply_to: str | None = None  # platform id of the message this one answers
    attachments: tuple[Attachment, ...] = ()
    received_at: float = 0.0  # epoch seconds, from the gateway's clock when the channel does not know
    # Channel-private extras; the gateway reads one key only, access.PARENT_GROUP (a Discord private
    # thread's parent channel, whose `groups` entry and bindings apply to the thread).
    meta: Mapping[str, str] = field(default_factory=dict)
    # A session the sender chose (the web chat's session list). Honoured only for the gateway's own
    # token-authenticated web chat; every other channel is routed by bindings and dm_scope.
    session_key: str | None = None
    # The agent whose session `session_key` is, as the web chat resolved it: a key that names no agent
    # (a CLI session `notes`) may exist in several agents' stores, and only this one is meant.
    session_agent: str | None = None
    # Not a new message: the platform says the earlier message `message_id` (in this chat, by `sender_id`)
    # was "deleted", or "edited" to `text` (Slack message_deleted / message_changed, Discord MESSAGE_DELETE /
    # MESSAGE_UPDATE). The gateway drops or updates it while it still waits for its turn; nothing is answered.
    change: Literal["deleted", "edited"] | None = None


@dataclass(frozen=True)
class Target:
    """Where outbound items go: the same conversation the inbound message came from."""

    channel: str
    account_id: str
    peer_kind: PeerKind
    peer_id: str
    thread_id: str | None = None
    topic_id: str | None = None
    reply_to: str | None = None

    @classmethod
    def of(cls, msg: InboundMessage) -> Target:
        return cls(msg.channel, msg.account_id, msg.peer_kind, msg.peer_id, msg.thread_id, msg.topic_id,
                   msg.message_id or None)


@dataclass(frozen=True)
class OutboundMessage:
    """A whole message to deliver, already chunked to the channel's limits by the gateway."""

    target: Target
    text: str
    kind: Literal["reply", "pairing", "notice", "error"] = "reply"


@dataclass(frozen=True)
class Typing:
    """The typing/working indicator while a turn runs (channels without one ignore it)."""

    target: Target
    on: bool


@dataclass(frozen=True)
class StreamDelta:
    """A piece of streamed reply text; only sent to channels whose capabilities say `streaming`."""

    target: Target
    turn_id: str
    text: str


@dataclass(frozen=True)
class ToolActivity:
    target: Target
    turn_id: str
    call_id: str
    name: str
    status: Literal["running", "done", "failed"]


@dataclass(frozen=True)
class TurnEnd:
    """End of a turn. Non-streaming channels get the reply as OutboundMessage(s) before this."""

    target: Target
    turn_id: str
    status: Literal["done", "silent", "error", "interrupted"]
    # A failed turn's hint (what to do: a key refused, a server not running), for the owner's web app only: a
    # chat channel gets the apology, never the detail.
    hint: str | None = None


Outbound = OutboundMessage | Typing | StreamDelta | ToolActivity | TurnEnd


@dataclass(frozen=True)
class ChannelCapabilities:
    max_chars: int = 4000
    max_lines: int | None = None
    streaming: bool = False
    typing: bool = True
    replays: bool = False  # unanswered messages come again after a restart (a journal): their files stay staged


@dataclass
class ChannelStatus:
    """What `hermit channels status` and `hermit gateway status` show for one channel account."""

    channel: str
    account_id: str
    connected: bool = False
    last_error: str | None = None
    messages_in: int = 0
    messages_out: int = 0


PublishOutcome = Literal["queued", "refused", "queue_full", "ignored"]


class InboundSink(Protocol):
    """The gateway's side of the seam. `publish` returns once the message is safely queued (or refused):
    a channel that must not lose or repeat a message (Telegram's offset) commits only after it returns."""

    async def publish(self, msg: InboundMessage) -> PublishOutcome: ...


class Channel(Protocol):
    name: str
    account_id: str
    capabilities: ChannelCapabilities

    async def start(self, sink: InboundSink) -> None:
        """Connect and begin receiving; returns once running (receiving continues in its own task)."""

    async def send(self, item: Outbound) -> None:
        """Deliver one outbound item; raises ChannelError after its own retries are exhausted."""

    async def stop(self) -> None: ...

    def status(self) -> ChannelStatus: ...


@dataclass(frozen=True)
class ChannelDeps:
    """What the gateway gives a channel factory besides its account config: the state dir (for offsets,
    inbox files), the environment (tokens are read by variable name here, never from config values),
    and the clock."""

    state_dir: Path
    environ: Mapping[str, str]
    clock: Callable[[], float]
    # Where received files (photos, documents) are saved before access control has run: <state>/inbox by
    # default; the gateway moves an admitted message's files to the answering session's inbox.
    inbox_dir: Path | None = None
    # How the gateway running the channel is restarted, as a hint's last words (the gateway's HowRun: a service
    # manager's command, or stop and `hermit gateway run`); a channel cannot know, so it is told.
    restart: str = "restart the gateway"

    @property
    def inbox(self) -> Path:
        return self.inbox_dir or self.state_dir / "inbox"


# How the gateway builds channels: each platform's adapter module declares a `PLATFORM` (listed in
# hermit.channels.platforms.ADAPTERS, imported only when that platform has an enabled account), whose
#     create(deps: ChannelDeps, account_id: str, account_config: <Platform>AccountConfig) -> Channel
# once per configured account. A channel that receives webhooks may also define
#     def http_routes(self) -> Sequence[starlette.routing.BaseRoute]: ...
# whose routes the gateway mounts under /hooks/<channel>/<account_id>/ on its HTTP server; those
# requests carry no gateway token, so the channel checks the platform's signature before publishing.
class WebhookChannel(Channel, Protocol):
    def http_routes(self) -> Sequence[Any]: ...
