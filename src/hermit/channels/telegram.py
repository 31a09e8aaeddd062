"""Telegram channel over the Bot API with plain httpx: long polling, one poller per token, replies and files.

Plain httpx rather than python-telegram-bot: the Bot API calls used here are six JSON POSTs, httpx is
already a core dependency, and python-telegram-bot 22 pins `httpx<0.29` (Hermit runs 0.29).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from hermit.channels import local_api, retry, wordless
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
from hermit.channels.forwarded import frame
from hermit.channels.inbox import StagedFile
from hermit.channels.platforms import ChannelPlatform
from hermit.channels.status import StatusTracker, with_hint
from hermit.channels.tasks import TypingIndicators, cancel
from hermit.channels.telegram_markdown import to_telegram_markdown
from hermit.channels.telegram_state import PollerLock, PollState, token_dir
from hermit.config.schema import TelegramAccountConfig
from hermit.errors import ChannelError
from hermit.messages import valid_json
from hermit.retry import RetryPolicy

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 20 * 1024 * 1024  # the Bot API's getFile limit
TYPING_REFRESH_SECONDS = 4.0  # Telegram shows "typing…" for 5 s per sendChatAction


_TOKEN_IN_URL = re.compile(r"/bot\d+:[\w-]+")


class _RedactTokenInUrls(logging.Filter):
    """httpx logs every request URL at INFO, and Bot API URLs carry the token: never let one reach a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any("/bot" in str(a) for a in record.args):
            record.args = tuple(_TOKEN_IN_URL.sub("/bot<token>", str(a)) if "/bot" in str(a) else a
                                for a in record.args)
        if isinstance(record.msg, str) and "/bot" in record.msg:
            record.msg = _TOKEN_IN_URL.sub("/bot<token>", record.msg)
        return True


_REDACT = _RedactTokenInUrls()
# Telegram's service messages (Bot API "Message"): a member joining or leaving, a pin, a new title or photo, a topic
# opened, a video chat… They come as messages from whoever caused them, with no text: nobody's words to the
# assistant. In a group that needs no mention each one ran a turn and the group got its answer (s21).
_SERVICE = frozenset({
    "new_chat_members", "left_chat_member", "new_chat_title", "new_chat_photo", "delete_chat_photo",
    "group_chat_created", "supergroup_chat_created", "channel_chat_created", "message_auto_delete_timer_changed",
    "migrate_to_chat_id", "migrate_from_chat_id", "pinned_message", "successful_payment", "refunded_payment",
    "users_shared", "chat_shared", "connected_website", "write_access_allowed", "proximity_alert_triggered",
    "boost_added", "chat_background_set", "forum_topic_created", "forum_topic_edited", "forum_topic_closed",
    "forum_topic_reopened", "general_forum_topic_hidden", "general_forum_topic_unhidden", "giveaway_created",
    "giveaway_completed", "video_chat_scheduled", "video_chat_started", "video_chat_ended",
    "video_chat_participants_invited",
    # Bot API 9: a checklist's tasks done or added, a gift, a price changed, a suggested post's fate, an owner gone
    # (the re-audit found each running a turn on nothing)
    "checklist_tasks_done", "checklist_tasks_added", "gift", "unique_gift", "gift_upgrade_sent",
    "paid_message_price_changed", "direct_message_price_changed", "suggested_post_approved",
    "suggested_post_approval_failed", "suggested_post_declined", "suggested_post_paid", "suggested_post_refunded",
    "chat_owner_left", "chat_owner_changed"})


OTHER_POLLER = "stop the other program polling this bot (or remove its webhook)"


class TelegramApiError(ChannelError):
    def __init__(self, method: str, code: int, description: str) -> None:
        hint = {401: "the bot token is wrong or revoked: get a new one from @BotFather",
                409: f"{OTHER_POLLER}, then restart the gateway"}.get(code, "see the description from Telegram")
        msg = ("another poller uses this token (Telegram answered 409 Conflict to getUpdates)" if code == 409
               else f"Telegram {method} failed: {code} {description}")
        super().__init__(msg, hint)
        self.code = code
        self.description = description


class TelegramChannel:
    name = "telegram"
    capabilities = ChannelCapabilities(max_chars=4000, typing=True, replays=True)  # the update journal

    def __init__(self, account_id: str, cfg: TelegramAccountConfig, token: str, *, state_dir: Path,
                 inbox_dir: Path, clock: Callable[[], float] = time.time,
                 policy: RetryPolicy = retry.DEFAULT_POLICY, reconnect_max_delay: float = 60.0,
                 restart: str = "restart the gateway") -> None:
        self.account_id = account_id
        self._restart = restart  # how the gateway running it is restarted (ChannelDeps.restart)
        self.cfg = cfg
        self._token = token
        self._api = cfg.api_base.rstrip("/")
        self._inbox = inbox_dir
        self._clock = clock
        self._policy = policy
        self._reconnect_max = reconnect_max_delay
        home = token_dir(state_dir, token)
        self._lock = PollerLock(home / "poller.lock")
        self._state_path = home / "state.json"
        self._state: PollState | None = None
        self._tracker = StatusTracker(self.name, account_id, state_dir, clock)
        self._client: httpx.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._sink: InboundSink | None = None
        self._bot_id = 0
        self._username = ""
        self._typing = TypingIndicators(self._typing_once, TYPING_REFRESH_SECONDS)
        self._replied: set[tuple[str, str]] = set()
        self._unpublished: set[int] = set()  # journaled updates whose publish has not returned yet

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        """Take the token's poller lock (a second poller is refused here, clearly) and start polling."""
        logging.getLogger("httpx").addFilter(_REDACT)  # idempotent: a filter is added once
        self._lock.acquire()
        try:
            self._state = PollState(self._state_path)
            self._unpublished = set(self._state.inflight)
        except BaseException:
            self._lock.release()
            raise
        self._sink = sink
        timeout = httpx.Timeout(30.0, read=self.cfg.poll_timeout_seconds + 15.0)
        # The Bot API server may be one of your own on this machine: the token goes to no other user's port.
        refuse = local_api.refusal("Telegram", f"channels.telegram.accounts.{self.account_id}.api_base",
                                   "your Bot API server")
        self._client = local_api.client(refuse, timeout=timeout)
        self._task = asyncio.create_task(self._run(), name=f"telegram:{self.account_id}")

    async def stop(self) -> None:
        self._typing.stop_all()
        await cancel(self._task)
        self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self._tracker.connected(False)
        self._lock.release()

    def status(self) -> ChannelStatus:
        return self._tracker.status

    # -- Bot API -------------------------------------------------------------------------------------

    async def call(self, method: str, params: Mapping[str, Any] | None = None,
                   timeout: float | None = None) -> Any:
        """One Bot API method; 429/5xx/drops retried; a Telegram error becomes TelegramApiError."""
        assert self._client is not None, "start() first"
        kwargs: dict[str, Any] = {"json": dict(params or {})}
        if timeout is not None:
            kwargs["timeout"] = httpx.Timeout(30.0, read=timeout)
        resp = await retry.request(self._client, "POST", f"{self._api}/bot{self._token}/{method}",
                                   what=f"Telegram {method}", policy=self._policy, **kwargs)
        try:
            data = resp.json()
        except ValueError:
            raise TelegramApiError(method, resp.status_code, "not JSON") from None
        if not data.get("ok"):
            raise TelegramApiError(method, int(data.get("error_code", resp.status_code)),
                                   str(data.get("description", "")))
        return data.get("result")

    # -- receiving -----------------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = 1.0
        while True:
            try:
                if not self._username:
                    me = await self.call("getMe")
                    self._bot_id, self._username = int(me["id"]), str(me.get("username", ""))
                await self._replay()
                await self._poll_once()
                delay = 1.0
            except asyncio.CancelledError:
                raise
            except TelegramApiError as e:
                if e.code in (401, 404, 409):  # fatal for this poller: looping would only repeat it
                    # With the hint (a 401: "the bot token is wrong or revoked: get a new one from @BotFather"):
                    # the log and `hermit channels status` said only "getMe failed: 401 Unauthorized".
                    hint = {404: "Telegram knows no bot by this token, or api_base is not a Bot API server: copy the "
                            "token again from @BotFather, and check "
                            f"channels.telegram.accounts.{self.account_id}.api_base",
                            409: f"{OTHER_POLLER}, then {self._restart}"}.get(e.code, e.hint)
                    log.error("telegram %s stopped: %s", self.account_id, with_hint(e.message, hint))
                    self._tracker.error(e.message, hint)
                    return
                await self._failed(e, delay)
                delay = min(delay * 2, self._reconnect_max)
            except Exception as e:  # noqa: BLE001 - the receive loop is a supervision boundary
                await self._failed(e, delay)
                delay = min(delay * 2, self._reconnect_max)

    async def _failed(self, e: Exception, delay: float) -> None:
        text = e.message if isinstance(e, ChannelError) else f"{type(e).__name__}: {e}"
        log.warning("telegram %s: %s; reconnecting in %.0fs", self.account_id, text, delay)
        self._tracker.error(text)
        await asyncio.sleep(delay)

    async def _replay(self) -> None:
        """Publish journaled updates whose publish never returned: left by a previous run that died before
        their turn ended, or by a publish that failed in this run."""
        assert self._state is not None
        for update_id in sorted(self._unpublished):
            msg = self._state.inflight.get(update_id)
            if msg is None:
                self._unpublished.discard(update_id)
                continue
            log.info("telegram %s: publishing update %d left in flight", self.account_id, update_id)
            await self._publish(update_id, msg)

    async def _poll_once(self) -> None:
        assert self._state is not None
        t = self.cfg.poll_timeout_seconds
        updates = await self.call("getUpdates", {"offset": self._state.offset, "timeout": t,
                                                 "allowed_updates": ["message", "edited_message"]},
                                 timeout=t + 15.0)
        self._tracker.connected(True)
        for u in updates or []:
            update_id = _update_id(u)
            if update_id is None:
                log.warning("telegram %s: skipped an update without a numeric update_id", self.account_id)
                continue
            if update_id < self._state.offset:
                continue  # already taken (Telegram resent it before our offset reached it)
            msg = await self._read_update(update_id, u)
            self._journal(update_id, msg)
            if msg is not None:
                self._unpublished.add(update_id)
                await self._publish(update_id, msg)

    async def _read_update(self, update_id: int, u: Mapping[str, Any]) -> InboundMessage | None:
        """The update's message with every string made valid (a lone surrogate from the platform would fail
        the journal write and, before this, stalled the whole account); an update that cannot be read at
        all is skipped and reported, so the offset still moves past it."""
        try:
            update = valid_json(u)
            if "edited_message" in update:  # its sender's new text, for a message still waiting (gateway/bus.py)
                return await self._inbound(update.get("edited_message"), edited=True)
            return await self._inbound(update.get("message"))
        except Exception as e:  # noqa: BLE001 - one malformed update must not stop every chat of the account
            self._skipped(update_id, e)
            return None

    def _journal(self, update_id: int, msg: InboundMessage | None) -> None:
        """Take the update (offset past it, message in flight). A write that fails because of the message
        itself skips the message; a failing disk (OSError) propagates, and the poll is retried later.
        An edit changes the journaled message it names in the same write (`_edit_journaled`)."""
        assert self._state is not None
        if msg is not None and msg.change == "edited":
            self._edit_journaled(msg)
        try:
            self._state.receive(update_id, msg)
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - the message could not be stored: skip it, keep the account
            if msg is None:
                raise
            self._skipped(update_id, e)
            self._state.inflight.pop(update_id, None)
            self._state.receive(update_id, None)

    def _edit_journaled(self, edit: InboundMessage) -> None:
        """Its sender's new text into the journaled copy of the message an edit names, as the bus changes the
        waiting message: a journal that kept the first text (a PIN pasted and at once edited out) held it on disk
        and, after a crash before that message's turn ended, had the restart replay it — answered and kept after
        all. Only its sender's message of that chat (Telegram lets no one else edit it)."""
        assert self._state is not None
        for update_id, m in self._state.inflight.items():
            if m.change is None and m.message_id == edit.message_id and m.sender_id == edit.sender_id \
                    and m.meta.get("chat_id") == edit.meta.get("chat_id"):
                self._state.inflight[update_id] = replace(m, text=edit.text, mentioned=m.mentioned or edit.mentioned)

    def _skipped(self, update_id: int, e: Exception) -> None:
        log.warning("telegram %s: skipped update %d that could not be read: %s: %s", self.account_id, update_id,
                    type(e).__name__, e)
        self._tracker.error(f"skipped update {update_id}: {type(e).__name__}")

    async def _publish(self, update_id: int, msg: InboundMessage) -> None:
        assert self._sink is not None and self._state is not None
        self._tracker.inbound()
        outcome = await self._sink.publish(msg)
        self._unpublished.discard(update_id)
        if outcome != "queued":  # refused, ignored or answered "busy": nothing more will come for it
            self._state.done(update_id)

    async def _inbound(self, m: Mapping[str, Any] | None, *, edited: bool = False) -> InboundMessage | None:
        """The message as the gateway takes it; `edited`: a change of a message sent before (Telegram's
        `edited_message`), carrying its new text only — its files came with the message, and fetching them
        again would stage files no turn ever files or deletes."""
        if not m or "from" not in m or not _SERVICE.isdisjoint(m):
            return None
        chat, sender = m["chat"], m["from"]
        if chat.get("type") not in ("private", "group", "supergroup") or sender.get("is_bot"):
            return None
        dm = chat["type"] == "private"
        # Posted on behalf of a chat (`sender_chat`; bots such as GroupAnonymousBot and Channel_Bot are dropped above,
        # so here: a linked channel's post, from 777000 "Telegram"): the sender is that chat — its id, its title, no
        # @username (a chat's name is no user's) — never the shared 777000 of every linked channel. A chat is no
        # owner (`owners` take user ids only) and is a member only where `group_allow_from` lists its id.
        as_chat = m.get("sender_chat")
        if isinstance(as_chat, dict):
            if dm or not isinstance(as_chat.get("id"), int) or as_chat["id"] >= 0:  # chats' ids are negative
                return None
            sender = {"id": as_chat["id"], "first_name": as_chat.get("title") or as_chat.get("username")}
        text = str(m.get("text") or m.get("caption") or "")
        entities = list(m.get("entities") or m.get("caption_entities") or [])
        topic = str(m["message_thread_id"]) if m.get("is_topic_message") and m.get("message_thread_id") else None
        reply = m.get("reply_to_message") or {}
        # In a forum topic every message "replies" to the topic's opening message: that is not a reply.
        real_reply = bool(reply) and not (topic and str(reply.get("message_id")) == topic)
        name = _person(sender)
        mentioned = self._mentions_me(text, entities)
        if not text and (described := wordless.from_telegram(m)) is not None:
            if edited or described == wordless.IGNORED:
                return None  # a dice throw; or a live location moving (an edit of no words): no turn, no change
            text = described  # a sticker, a poll, a location, a contact card (channels/wordless.py)
        text = wordless.joined(text, wordless.story_replied_to(m))  # the story it answers, named (wordless.py)
        if _is_forward(m):
            text = frame(text, _forward_author(m))
        elif isinstance(m.get("via_bot"), dict):
            # Chosen from an inline bot's results: the bot's author wrote the text (the sender's picker showed only
            # a title), so it is quoted as theirs, like a forward, never the sender's own words.
            text = frame(text, _inline_bot(m["via_bot"]))
        return InboundMessage(
            channel=self.name, account_id=self.account_id, peer_kind="dm" if dm else "group",
            peer_id=str(sender["id"] if dm else chat["id"]), sender_id=str(sender["id"]), text=text,
            message_id=str(m["message_id"]), sender_name=name, sender_username=sender.get("username") or None,
            topic_id=topic,
            mentioned=mentioned,
            reply_to_bot=real_reply and int((reply.get("from") or {}).get("id", 0)) == self._bot_id,
            reply_to=str(reply["message_id"]) if real_reply else None,
            attachments=() if edited else await self._attachments(m),
            received_at=float(m.get("date") or self._clock()),
            meta={"chat_id": str(chat["id"])}, change="edited" if edited else None)

    def _mentions_me(self, text: str, entities: list[Mapping[str, Any]]) -> bool:
        if not self._username:
            return False
        handle = "@" + self._username.lower()
        for e in entities:
            if e.get("type") == "mention":
                start, length = int(e.get("offset", 0)), int(e.get("length", 0))
                # Entity offsets are in UTF-16 code units.
                piece = text.encode("utf-16-le")[2 * start:2 * (start + length)].decode("utf-16-le", "replace")
                if piece.lower() == handle:
                    return True
            elif e.get("type") == "text_mention" and int((e.get("user") or {}).get("id", 0)) == self._bot_id:
                return True
        return re.search(re.escape(handle) + r"\b", text.lower()) is not None

    async def _attachments(self, m: Mapping[str, Any]) -> tuple[Attachment, ...]:
        found: list[tuple[AttachmentKind, Mapping[str, Any], str | None, str | None]] = []
        if m.get("photo"):
            biggest = max(m["photo"], key=lambda p: int(p.get("file_size") or 0) or int(p.get("width", 0)))
            found.append(("image", biggest, None, "image/jpeg"))
        if m.get("document"):
            d = m["document"]
            found.append(("document", d, d.get("file_name"), d.get("mime_type")))
        out = []
        for kind, f, name, mime in found:
            staged = await self._download(f, name, str(m["chat"]["id"]), str(m["message_id"]))
            out.append(staged.attachment(kind, name, mime, f.get("file_size")) if staged is not None
                       else Attachment(kind, "", name, mime, f.get("file_size")))
        return tuple(out)

    async def _download(self, f: Mapping[str, Any], name: str | None, chat_id: str,
                        message_id: str) -> StagedFile | None:
        """Save a file under inbox/ (a new file of its own: message ids repeat across chats and accounts);
        a file that cannot be fetched is passed on with an empty path."""
        assert self._client is not None
        if int(f.get("file_size") or 0) > MAX_FILE_BYTES:
            return None
        try:
            info = await self.call("getFile", {"file_id": f["file_id"]})
            url = f"{self._api}/file/bot{self._token}/{info['file_path']}"
            resp = await retry.request(self._client, "GET", url, what="Telegram file download",
                                       policy=self._policy)
            if resp.status_code != 200:  # (raise_for_status would put the URL, and so the token, in the log)
                raise ChannelError(f"Telegram file download: HTTP {resp.status_code}")
        except (ChannelError, KeyError) as e:
            log.warning("telegram %s: could not download a file: %s", self.account_id, e)
            return None
        except httpx.HTTPError as e:  # its text may hold the URL, and so the token: name the kind only
            log.warning("telegram %s: could not download a file: %s", self.account_id, type(e).__name__)
            return None
        base = name or Path(str(info["file_path"])).name or "file"
        with StagedFile(self._inbox, (self.name, self.account_id, chat_id, message_id), base) as staged:
            staged.write(resp.content)
        return staged

    # -- sending ------------------------------------------------------------------------------------

    async def send(self, item: Outbound) -> None:
        if isinstance(item, OutboundMessage):
            await self._send_text(item)
        elif isinstance(item, Typing):
            self._typing.set(item.target, item.on)
        elif isinstance(item, TurnEnd):
            self._typing.set(item.target, False)
            if self._state is not None and item.target.reply_to:
                chat = item.target.peer_id
                self._state.done_through(chat, item.target.reply_to)
        # StreamDelta / ToolActivity: Telegram gets whole messages only (capabilities.streaming is False).

    async def _send_text(self, item: OutboundMessage) -> None:
        t = item.target
        params: dict[str, Any] = {"chat_id": t.peer_id}
        if t.topic_id:
            params["message_thread_id"] = int(t.topic_id)
        key = (t.peer_id, t.reply_to or "")
        if t.peer_kind == "group" and t.reply_to and key not in self._replied:
            # In a busy group, the first chunk quotes the message it answers; later chunks follow it.
            params["reply_parameters"] = {"message_id": int(t.reply_to), "allow_sending_without_reply": True}
            self._replied.add(key)
            if len(self._replied) > 1000:
                self._replied.clear()
        try:
            await self.call("sendMessage", {**params, "text": to_telegram_markdown(item.text),
                                            "parse_mode": "Markdown"})
        except TelegramApiError as e:
            if e.code != 400 or "parse entities" not in e.description:
                self._tracker.error(e.message)
                raise
            # Telegram rejected the formatting: the words matter more than the bold, send them plain.
            await self.call("sendMessage", {**params, "text": item.text})
        except ChannelError as e:
            self._tracker.error(e.message)
            raise
        self._tracker.outbound()

    async def _typing_once(self, target: Target) -> None:
        params: dict[str, Any] = {"chat_id": target.peer_id, "action": "typing"}
        if target.topic_id:
            params["message_thread_id"] = int(target.topic_id)
        await self.call("sendChatAction", params)

def _person(user: Mapping[str, Any]) -> str | None:
    name = " ".join(str(x) for x in (user.get("first_name"), user.get("last_name")) if x)
    return name or (str(user["username"]) if user.get("username") else None)


def _is_forward(m: Mapping[str, Any]) -> bool:
    """Bot API 7.0+ sends `forward_origin`; older servers (and a self-hosted Bot API) the `forward_*` fields."""
    return any(m.get(k) for k in ("forward_origin", "forward_from", "forward_from_chat", "forward_sender_name",
                                  "forward_date"))


def _forward_author(m: Mapping[str, Any]) -> str | None:
    """Who wrote a forwarded message, as far as Telegram says (a hidden user gives only a chosen name)."""
    origin = m.get("forward_origin")
    if isinstance(origin, dict):
        kind = origin.get("type")
        if kind == "user" and isinstance(origin.get("sender_user"), dict):
            return _person(origin["sender_user"])
        if kind == "hidden_user":
            return str(origin.get("sender_user_name") or "") or None
        chat = origin.get("sender_chat") if kind == "chat" else origin.get("chat") if kind == "channel" else None
        if isinstance(chat, dict):
            title = str(chat.get("title") or chat.get("username") or "")
            signature = str(origin.get("author_signature") or "")
            return f"{signature} in {title}" if signature and title else (title or signature or None)
        return None
    if isinstance(m.get("forward_from"), dict):
        return _person(m["forward_from"])
    if isinstance(m.get("forward_from_chat"), dict):
        return str(m["forward_from_chat"].get("title") or "") or None
    return str(m.get("forward_sender_name") or "") or None


def _inline_bot(bot: Mapping[str, Any]) -> str:
    name = str(bot.get("username") or "")
    return f"inline bot @{name}" if name else "an inline bot"


def _update_id(u: Any) -> int | None:
    try:
        return int(u["update_id"])
    except (KeyError, TypeError, ValueError):
        return None


def create_channel(deps: ChannelDeps, account_id: str, cfg: TelegramAccountConfig) -> TelegramChannel:
    """The gateway's factory (this module's PLATFORM): the token comes from the named environment variable."""
    token = resolve(cfg.token, cfg.token_env, deps.environ, where=f"channels.telegram.accounts.{account_id}",
                    field="token")
    return TelegramChannel(account_id, cfg, token, state_dir=deps.state_dir, inbox_dir=deps.inbox, clock=deps.clock,
                           restart=deps.restart)


# The one declaration of this platform (hermit.channels.platforms lists this module).
PLATFORM = ChannelPlatform("telegram", create_channel, TelegramChannel.capabilities)
