"""Discord channel on discord.py (the `discord` extra): gateway websocket in, REST messages out.

discord.py is imported only inside this adapter's methods, so Hermit runs without it when no Discord
account is configured. discord.py already retries 429s (honouring retry_after up to the policy's
`max_retry_after`) and 500/502/504/524, five tries each: those are not retried again here, or a send
could take 25 attempts before the user hears anything. What discord.py does not retry on Linux — a
dropped or refused connection, a timeout — is retried with Hermit's policy (hermit.retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.channels import wordless
from hermit.channels.access import PARENT_GROUP
from hermit.channels.base import (
    Attachment,
    AttachmentKind,
    ChannelCapabilities,
    ChannelDeps,
    ChannelStatus,
    InboundMessage,
    InboundSink,
    Outbound,
    OutboundMessage,
    Target,
    TurnEnd,
    Typing,
)
from hermit.channels.credentials import resolve
from hermit.channels.discord_missed import Held, HeldChannel, gone, held_path
from hermit.channels.early_edits import EarlyEdits
from hermit.channels.forwarded import frame
from hermit.channels.in_order import Earlier, InOrder, after
from hermit.channels.inbox import StagedFile, sweep_staged
from hermit.channels.platforms import ChannelPlatform
from hermit.channels.retry import DEFAULT_POLICY
from hermit.channels.status import StatusTracker
from hermit.channels.tasks import TypingIndicators, cancel
from hermit.config.schema import DiscordAccountConfig
from hermit.errors import ChannelError
from hermit.messages import valid_text
from hermit.retry import RetryPolicy

log = logging.getLogger(__name__)

TYPING_REFRESH_SECONDS = 8.0  # Discord shows "typing…" for about 10 s per trigger
MAX_FILE_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True)
class _Deleted:
    """One message of a bulk delete, shaped as discord.py's single delete event (what `_on_change` reads)."""

    message_id: int
    channel_id: int
    guild_id: int | None
    cached_message: Any


@dataclass(frozen=True)
class _Edited:
    """An edit found at a fresh session, shaped as discord.py's raw edit event (what `_on_change` reads)."""

    message_id: int
    channel_id: int
    guild_id: int | None
    cached_message: Any
    data: dict[str, Any]


@dataclass(frozen=True)
class _Author:
    id: int


@dataclass(frozen=True)
class _Known:
    """A held message's author, as discord.py's cached message names it (a delete found missed: `_missed`)."""

    author: _Author


class DiscordChannel:
    name = "discord"
    capabilities = ChannelCapabilities(max_chars=2000, max_lines=17, typing=True)

    def __init__(self, account_id: str, cfg: DiscordAccountConfig, token: str, *, inbox_dir: Path | None = None,
                 state_dir: Path | None = None, clock: Callable[[], float] = time.time,
                 policy: RetryPolicy = DEFAULT_POLICY, reconnect_max_delay: float = 60.0) -> None:
        self.account_id = account_id
        self.cfg = cfg
        self._token = token
        self._inbox = inbox_dir
        self._clock = clock
        self._policy = policy
        self._reconnect_max = reconnect_max_delay
        self._tracker = StatusTracker(self.name, account_id, state_dir, clock)
        self._client: Any = None  # discord.Client, built per connection attempt
        self._sink: InboundSink | None = None
        self._task: asyncio.Task[None] | None = None
        self._dm_channels: dict[str, int] = {}  # user id -> DM channel id
        # Channel id -> the next message in it, for a lookup of that channel in flight (`_looked_up`).
        self._sightings: dict[int, asyncio.Future[Any]] = {}
        # The messages handed on, per channel: looked for at a fresh session (channels/discord_missed.py).
        self._held = Held(held_path(state_dir, account_id) if state_dir is not None else None)
        self._early_edits = EarlyEdits()  # edits that came while their message's files downloaded
        self._order = InOrder()  # a channel's message handed on after the edits and deletes that came before it
        self._typing = TypingIndicators(self._typing_once, TYPING_REFRESH_SECONDS)

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        """Log in and keep the gateway connection in its own task; failures show in status(), the gateway
        and its other channels keep running."""
        self._sink = sink
        self._task = asyncio.create_task(self._run(), name=f"discord:{self.account_id}")
        # Not replayed after a restart: what a killed gateway staged but never filed would wait forever.
        for name in sweep_staged(self._inbox, self.name, self.account_id):
            log.info("removed %s, a file received before the gateway stopped and never filed", name)

    async def stop(self) -> None:
        self._typing.stop_all()
        await cancel(self._task)
        self._task = None
        if self._client is not None:
            await self._client.close()
            self._client = None
        self._tracker.connected(False)

    def status(self) -> ChannelStatus:
        return self._tracker.status

    async def _login(self) -> Any:
        import discord

        intents = discord.Intents.default()
        intents.message_content = True  # privileged: enable "Message Content Intent" in the developer portal
        client = discord.Client(intents=intents, max_ratelimit_timeout=self._policy.max_retry_after)

        @client.event
        async def on_ready() -> None:
            self._tracker.connected(True)

        @client.event
        async def on_connect() -> None:
            # READY: a fresh session (a start, or a resume Discord refused); a resumed one replays what it missed.
            await self._missed(client)

        @client.event
        async def on_resumed() -> None:
            self._tracker.connected(True)

        @client.event
        async def on_disconnect() -> None:
            self._tracker.connected(False)

        @client.event
        async def on_message(message: Any) -> None:
            await self._on_message(client, message, self._order.earlier(str(message.channel.id)))

        @client.event
        async def on_raw_message_delete(payload: Any) -> None:
            with self._order.pending(str(payload.channel_id)):
                await self._on_change(client, payload, None)
            self._held.drop(str(payload.channel_id), [str(payload.message_id)])

        @client.event
        async def on_raw_bulk_message_delete(payload: Any) -> None:
            # A purge (a moderator's bot removing many messages at once) is a delete of each of them.
            # Newest first: the message just posted (a PIN the purge is for) is the likeliest to start its turn
            # while the older ones' removals are handled.
            cached = {m.id: m for m in payload.cached_messages}
            with self._order.pending(str(payload.channel_id)):
                for message_id in sorted(payload.message_ids, reverse=True):
                    await self._on_change(client, _Deleted(message_id, payload.channel_id, payload.guild_id,
                                                           cached.get(message_id)), None)
            self._held.drop(str(payload.channel_id), [str(m) for m in payload.message_ids])

        @client.event
        async def on_raw_message_edit(payload: Any) -> None:
            data = payload.data if isinstance(payload.data, dict) else {}
            with self._order.pending(str(payload.channel_id)):
                await self._on_change(client, payload, data)
            if isinstance(stamp := data.get("edited_timestamp"), str) and stamp:
                with contextlib.suppress(ValueError):
                    self._held.edited(str(payload.channel_id), str(payload.message_id),
                                      discord.utils.parse_time(stamp).isoformat())

        try:
            await client.login(self._token)
        except BaseException:
            await client.close()
            raise
        return client

    async def _run(self) -> None:
        """Supervise the gateway connection: discord.py reconnects by itself; what escapes it is retried here."""
        import discord

        delay = 1.0
        while True:
            try:
                if self._client is None:
                    self._client = await self._login()
                await self._client.connect(reconnect=True)
                if self._client.is_closed():
                    return  # stop() closed it
            except asyncio.CancelledError:
                raise
            except discord.LoginFailure:
                # Retrying a refused token only repeats the refusal: report it and stop this account.
                msg = (f"Discord refused the bot token of account {self.account_id!r}: copy it again from the "
                       "developer portal (Bot → Reset Token)")
                log.error("discord %s: %s", self.account_id, msg)
                self._tracker.error(msg)
                return
            except Exception as e:  # noqa: BLE001 - the receive loop is a supervision boundary
                text = e.message if isinstance(e, ChannelError) else f"{type(e).__name__}: {e}"
                log.warning("discord %s: %s; reconnecting in %.0fs", self.account_id, text, delay)
                self._tracker.error(text)
                client, self._client = self._client, None
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.close()
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._reconnect_max)

    # -- receiving ------------------------------------------------------------------------------------

    async def _on_message(self, client: Any, message: Any, earlier: Earlier = ()) -> None:
        import discord

        me = client.user
        if me is None or message.author.bot or message.author.id == me.id or self._sink is None:
            return
        if message.webhook_id is not None or getattr(message.author, "system", False):
            # A webhook's author is a name and avatar its poster chose (Discord marks it only by `webhook_id`; the
            # author need not say `bot`), Discord's system user is no person: neither speaks for anyone listed.
            return
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            # Discord's own notices in a channel — "joined the server" (posted as the newcomer, with no text), a pin,
            # a new thread (its name as text), a boost, a poll's result — are nobody's words to the assistant: in
            # a channel that needs no mention each one ran a turn and the group got its answer (s21).
            return
        channel = message.channel
        guild_id = str(message.guild.id) if message.guild else getattr(channel, "guild_id", None)
        dm = guild_id is None
        thread_id = None
        peer = str(message.author.id) if dm else str(channel.id)
        meta = {"channel_id": str(channel.id)}
        if isinstance(channel, discord.Thread):
            if channel.type == discord.ChannelType.private_thread:
                # Only the people invited see a private thread, fewer than its channel's members: it is a
                # group of its own (its own session, memory audience and room), while the channel's config
                # (`groups`, bindings) still decides who may use it. Without a parent id the thread's own
                # id is checked, which `groups` does not list: refused unless groups are open (fail closed).
                if channel.parent_id is not None:
                    meta[PARENT_GROUP] = str(channel.parent_id)
            else:
                # A public thread is seen by whoever sees its channel: it shares the channel's audience.
                thread_id, peer = str(channel.id), str(channel.parent_id)
        if dm:
            self._dm_channels[str(message.author.id)] = channel.id
        if (seen := self._sightings.pop(channel.id, None)) is not None and not seen.done():
            seen.set_result(message)  # a change's lookup of this channel waits for this (`_looked_up`)
        ref = message.reference
        forward = _is_forward(message)
        if forward:
            ref = None  # a forward's reference points at the original message elsewhere: it is no reply
        resolved = ref.resolved if ref is not None else None
        reply_to_bot = isinstance(resolved, discord.Message) and resolved.author.id == me.id
        files = await self._attachments(message, str(channel.id))
        # valid_text: a lone surrogate in a message or a name would fail the pairing and session writes.
        text = valid_text(re.sub(rf"<@!?{me.id}>", "", message.content).strip())
        if (edited := self._early_edits.newest(str(message.author.id), str(message.id))) is not None:
            text = edited  # its author edited it while its files downloaded: the gateway had nothing to change yet
        text = wordless.joined(text, _wordless(message))
        if forward:
            # Discord's snapshot carries the text but not its author; whatever the forwarder typed is theirs.
            quoted = "\n".join(valid_text(s.content) for s in message.message_snapshots if s.content)
            text = "\n\n".join(x for x in (text, frame(quoted, None)) if x)
        msg = InboundMessage(
            channel=self.name, account_id=self.account_id, peer_kind="dm" if dm else "group", peer_id=peer,
            sender_id=str(message.author.id), text=text, message_id=str(message.id),
            sender_name=valid_text(getattr(message.author, "display_name", None) or message.author.name or "") or None,
            sender_username=_username(message.author),
            thread_id=thread_id, guild_id=str(guild_id) if guild_id else None,
            mentioned=any(u.id == me.id for u in message.mentions), reply_to_bot=reply_to_bot,
            reply_to=str(ref.message_id) if ref is not None and ref.message_id else None,
            attachments=files, received_at=message.created_at.timestamp(),
            meta=meta)
        self._tracker.inbound()
        await after(earlier)  # an edit or delete that came before it is taken first (channels/in_order.py)
        # Held only when queued: one refused (chatter with no mention, a stranger) is in no session, and held it pushed
        # the owner's conversations out of the record's bounds (channels/held_messages.py).
        if await self._sink.publish(msg) == "queued":
            self._held.add(str(channel.id), str(guild_id) if guild_id else None, str(message.id),
                           str(message.author.id))

    async def _on_change(self, client: Any, payload: Any, data: dict[str, Any] | None) -> None:
        """A message deleted (MESSAGE_DELETE) or edited (MESSAGE_UPDATE: `data`) as a change of the message it
        names: the gateway drops or updates it while it waits for its turn. A delete names no author unless
        discord.py still caches the message (a moderator may delete anyone's): then any sender's matches. An
        update that is no edit (`_is_edit`: an embed, a pin) changes nothing."""
        import discord

        me = client.user
        if me is None or self._sink is None or (data is not None and not _is_edit(payload, data)):
            return
        cached = payload.cached_message
        author = (data or {}).get("author")
        author_id = str(cached.author.id) if cached is not None else str(author.get("id", "")) if isinstance(
            author, dict) else ""
        if author_id == str(me.id):
            return
        channel_id = str(payload.channel_id)
        thread_id = None
        meta = {"channel_id": channel_id}
        if payload.guild_id is None:  # a DM: its peer is the person, known by the DM channel we answered in
            peer = author_id or next((u for u, c in self._dm_channels.items() if str(c) == channel_id), "") or (
                await self._dm_recipient(client, payload.channel_id))
            if not peer:
                return
            author_id = author_id or peer  # only its author deletes a message of theirs in a DM
        else:
            peer = channel_id
            # An archived thread is no longer cached: asked of Discord, or its message's change would look
            # like one in a channel of the thread's id, a session that never had the message.
            ch = client.get_channel(payload.channel_id)
            if ch is None:
                ch, seen = await self._looked_up(client, payload.channel_id)
                ch = ch if seen is None else seen.channel  # the thread's next message names it (`_looked_up`)
            if isinstance(ch, discord.Thread) and ch.type != discord.ChannelType.private_thread:
                thread_id, peer = channel_id, str(ch.parent_id)
            elif isinstance(ch, discord.Thread) and ch.parent_id is not None:
                # Named as on its new message (`_on_message`): the parent's bindings choose the agent, and without
                # it the change went to another agent's session, which never had the message.
                meta[PARENT_GROUP] = str(ch.parent_id)
        content = valid_text(str((data or {}).get("content") or ""))
        if data is not None and author_id:
            # Kept for the message too: one whose files are still downloading is not in the gateway yet
            # (`_on_message`), and this edit would change nothing there (channels/early_edits.py).
            self._early_edits.keep(author_id, str(payload.message_id), re.sub(rf"<@!?{me.id}>", "", content).strip())
        mentions = (data or {}).get("mentions") or []
        await self._sink.publish(InboundMessage(
            channel=self.name, account_id=self.account_id, peer_kind="dm" if payload.guild_id is None else "group",
            peer_id=peer, sender_id=author_id, text=re.sub(rf"<@!?{me.id}>", "", content).strip(),
            message_id=str(payload.message_id), thread_id=thread_id,
            guild_id=str(payload.guild_id) if payload.guild_id else None,
            mentioned=any(isinstance(m, dict) and str(m.get("id")) == str(me.id) for m in mentions),
            meta=meta, change="edited" if data is not None else "deleted"))

    async def _dm_recipient(self, client: Any, channel_id: int) -> str:
        """The person of a DM channel this process has not answered in (a delete after a restart names only the
        channel, and discord.py caches no DM channel then), asked of Discord; "" when it cannot say."""
        import discord

        channel = client.get_channel(channel_id)
        if channel is None:
            channel, seen = await self._looked_up(client, channel_id)
            if seen is not None:
                return str(seen.author.id)
        recipient = getattr(channel, "recipient", None)
        if not isinstance(channel, discord.DMChannel) or recipient is None:
            return ""
        self._dm_channels[str(recipient.id)] = channel.id
        return str(recipient.id)

    async def _looked_up(self, client: Any, channel_id: int) -> tuple[Any, Any]:
        """(the channel as Discord says, None), or (None, the next message in it) when that came first. The next
        message names its channel too — a DM's person, an archived thread (THREAD_UPDATE unarchived it before it) —
        and it waits for this change (channels/in_order.py): it ends the wait rather than a lookup Discord may be
        slow to answer, which held it up to in_order's bound (30 s)."""
        seen = self._sightings.setdefault(channel_id, asyncio.get_running_loop().create_future())
        lookup = asyncio.ensure_future(self._fetched_channel(client, channel_id))
        try:
            await asyncio.wait((lookup, seen), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if self._sightings.get(channel_id) is seen and not seen.done():
                del self._sightings[channel_id]
            if not lookup.done():
                lookup.cancel()
        return (None, seen.result()) if seen.done() else (lookup.result(), None)

    async def _missed(self, client: Any) -> None:
        """At a fresh session: the held messages Discord no longer has were deleted while the gateway was away (its
        events are not replayed), handed on as the deletes they were (channels/discord_missed.py). A channel's next
        message waits for its channel's look (channels/in_order.py, its bound)."""
        channels = self._held.channels()
        holds = {c.channel_id: self._order.pending(c.channel_id) for c in channels}
        for hold in holds.values():
            hold.__enter__()  # before any await: a message arriving meanwhile waits
        try:
            for c in channels:
                try:
                    await self._missed_in(client, c)
                finally:
                    holds.pop(c.channel_id).__exit__(None, None, None)
        finally:
            for hold in holds.values():
                hold.__exit__(None, None, None)

    async def _missed_in(self, client: Any, c: HeldChannel) -> None:
        found = await gone(client, c)
        if found is None or not (found.deleted or found.edited):
            return
        log.info("discord %s: %d message(s) deleted and %d edited while the gateway was away: taking them",
                 self.account_id, len(found.deleted), len(found.edited))
        guild = int(c.scope) if c.scope else None
        for m in found.edited:  # as its MESSAGE_UPDATE would have said (`_on_change`)
            stamp = m.edited_at.isoformat()
            data = {"content": m.content, "edited_timestamp": stamp, "author": {"id": str(m.author.id)},
                    "mentions": [{"id": str(u.id)} for u in m.mentions]}
            await self._on_change(client, _Edited(m.id, int(c.channel_id), guild, None, data), data)
            self._held.edited(c.channel_id, str(m.id), stamp)
        for mid in found.deleted:
            await self._on_change(client, _Deleted(int(mid), int(c.channel_id), guild,
                                                   _Known(_Author(int(c.messages[mid])))), None)
        self._held.drop(c.channel_id, found.deleted)

    async def _fetched_channel(self, client: Any, channel_id: int) -> Any:
        """A channel discord.py does not cache, asked of Discord; None when it cannot say (the change is then
        routed by what the event names, as before: a failed lookup must not lose it)."""
        try:
            return await client.fetch_channel(channel_id)
        except Exception as e:  # noqa: BLE001 - HTTP, rate limit, connection or data errors alike
            log.warning("discord %s: could not look up the channel of a changed message: %s", self.account_id, e)
            return None

    async def _attachments(self, message: Any, channel_id: str) -> tuple[Attachment, ...]:
        """Each file into a new file of its own under inbox/: two bots in one channel see the same message
        id, and one message can carry two files of the same name (channels/inbox.py)."""
        out = []
        forwarded = [a for s in getattr(message, "message_snapshots", None) or () for a in s.attachments]
        for a in [*message.attachments, *forwarded]:
            mime = a.content_type or ""
            kind: AttachmentKind = "image" if mime.startswith("image/") else "document"
            att = Attachment(kind, "", a.filename, a.content_type, a.size)
            if self._inbox is not None and a.size <= MAX_FILE_BYTES:
                try:
                    data = await a.read()
                    with StagedFile(self._inbox, (self.name, self.account_id, channel_id, str(message.id)),
                                    a.filename) as staged:
                        staged.write(data)
                    att = staged.attachment(kind, a.filename, a.content_type, a.size)
                except Exception as e:  # noqa: BLE001 - the message still goes through without the file
                    log.warning("discord %s: could not save %s: %s", self.account_id, a.filename, e)
            out.append(att)
        return tuple(out)

    # -- sending ------------------------------------------------------------------------------------

    async def send(self, item: Outbound) -> None:
        if isinstance(item, OutboundMessage):
            await self._send_text(item)
        elif isinstance(item, Typing):
            self._typing.set(item.target, item.on)
        elif isinstance(item, TurnEnd):
            self._typing.set(item.target, False)

    async def _channel(self, t: Target) -> Any:
        client = self._client
        if client is None:
            raise ChannelError("Discord is not connected", "see `hermit channels status` for the last error")
        if t.thread_id:
            cid = int(t.thread_id)
        elif t.peer_kind == "dm":
            known = self._dm_channels.get(t.peer_id)
            if known is None:  # e.g. after a restart: open the DM channel again
                dm = await (await client.fetch_user(int(t.peer_id))).create_dm()
                known = self._dm_channels[t.peer_id] = dm.id
            cid = known
        else:
            cid = int(t.peer_id)
        return client.get_partial_messageable(cid)

    async def _send_text(self, item: OutboundMessage) -> None:
        import aiohttp
        import discord

        # The model's text may contain @everyone or role pings: never let a reply notify more than it names.
        allowed = discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=False)
        attempt = 0
        while True:
            try:
                ch = await self._channel(item.target)
                await ch.send(item.text, allowed_mentions=allowed)
                self._tracker.outbound()
                return
            except (discord.DiscordServerError, discord.RateLimited) as e:
                # discord.py has retried these itself (or judged the platform's wait too long): report.
                self._tracker.error(f"send failed: {e}")
                raise ChannelError(f"Discord send failed: {type(e).__name__}: {e}",
                                   "Discord is overloaded or rate limiting the bot; see `hermit channels status`"
                                   ) from e
            except discord.HTTPException as e:
                self._tracker.error(f"send failed: {e}")
                raise ChannelError(f"Discord refused the message: {e}",
                                   "check the bot's permissions in that channel (Send Messages)") from e
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                last = f"{type(e).__name__}: {e}"
            delay = self._policy.delay(attempt)
            if delay is None:
                break
            attempt += 1
            await asyncio.sleep(delay)
        self._tracker.error(last)
        raise ChannelError(f"Discord send failed after {attempt + 1} attempts: {last}",
                           "Discord is unreachable; see `hermit channels status`")

    async def _typing_once(self, target: Target) -> None:
        await (await self._channel(target)).typing()

def create_channel(deps: ChannelDeps, account_id: str, cfg: DiscordAccountConfig) -> DiscordChannel:
    """The gateway's factory (this module's PLATFORM)."""
    token = resolve(cfg.token, cfg.token_env, deps.environ, where=f"channels.discord.accounts.{account_id}",
                    field="token")
    return DiscordChannel(account_id, cfg, token, inbox_dir=deps.inbox, state_dir=deps.state_dir, clock=deps.clock)


# The one declaration of this platform (hermit.channels.platforms lists this module).
PLATFORM = ChannelPlatform("discord", create_channel, DiscordChannel.capabilities,
                           sdk=("discord", "hermit-assistant[discord]"))


def _is_edit(payload: Any, data: dict[str, Any]) -> bool:
    """A MESSAGE_UPDATE that is its author's edit. Discord sets `edited_timestamp` on each edit; a link's embed
    unfurled, a pin or a crosspost sends an update too, with the timestamp unset (or as an earlier edit left it)
    and, but for an embed's, the message's text — for a forward only the forwarder's own, none of the quote.
    Taken as an edit it replaced a waiting forward's framed quote with that text (maybe none)."""
    import discord

    stamp = data.get("edited_timestamp")
    if "content" not in data or not isinstance(stamp, str) or not stamp:
        return False
    before = getattr(getattr(payload, "cached_message", None), "edited_at", None)
    try:
        return before is None or discord.utils.parse_time(stamp) != before
    except ValueError:
        return True  # a stamp discord.py cannot read is still an edit's: the author's new text decides


def _wordless(message: Any) -> str | None:
    """A sticker or a poll in words (channels/wordless.py): without them a sticker alone ran a turn with no text."""
    said = [wordless.sticker(None, s.name) for s in getattr(message, "stickers", None) or ()]
    if (p := getattr(message, "poll", None)) is not None:
        said.append(wordless.poll(p.question, (a.text for a in p.answers)))
    return " ".join(said) or None


def _is_forward(message: Any) -> bool:
    """A forward (Discord's message_reference type 1, with the original as a message snapshot)."""
    import discord

    ref = message.reference
    by_ref = ref is not None and getattr(ref, "type", None) == discord.MessageReferenceType.forward
    return by_ref or bool(getattr(message, "message_snapshots", None)) or bool(message.flags.forwarded)


def _username(author: Any) -> str | None:
    """The unique username of a migrated account; an old `name#1234` tag is not unique, so it is never used, nor is
    a webhook's "0000" (any name its poster chose)."""
    if str(getattr(author, "discriminator", "0") or "0") != "0":
        return None
    return str(author.name) or None
