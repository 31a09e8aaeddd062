"""WhatsApp channel over the Cloud API: a signed webhook in (every POST checked), Graph API messages out.

The original assistant spoke the unofficial WhatsApp Web protocol; the Cloud API is Meta's supported
route for a business number, needs no phone left online, and is plain HTTP, so no SDK is involved.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Callable, Mapping
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
)
from hermit.channels.credentials import resolve
from hermit.channels.dedupe import SeenIds
from hermit.channels.early_edits import EarlyEdits
from hermit.channels.forwarded import frame
from hermit.channels.in_order import BySentTime, Earlier, after
from hermit.channels.inbox import StagedFile, sweep_staged
from hermit.channels.platforms import ChannelPlatform
from hermit.channels.status import StatusTracker
from hermit.channels.webhook import WebhookRequest, WebhookResponse, WebhookRoute, http_routes, same_secret
from hermit.config.schema import WhatsAppAccountConfig
from hermit.errors import ChannelError
from hermit.refusals import RefusalLog
from hermit.retry import RetryPolicy, retry_after_seconds
from hermit.wire import WireError, load_object

log = logging.getLogger(__name__)
# Anyone who knows the webhook URL can send unsigned requests: their refusals are logged a few a minute.
REFUSALS = RefusalLog(log)
# A user who shows a WhatsApp username instead of their number (no `from`): one line an hour per such user.
NUMBERLESS = RefusalLog(log, limit=1, window=3600.0, summary="%d more messages from %s in the last %.0f s were "
                        "ignored (only the first %d is logged)")

# A sender's `from` (the Cloud API's wa_id): the phone number's digits, no `+` (E.164: at most 15).
_WA_ID = re.compile(r"[0-9]{1,15}")

MEDIA_KINDS: dict[str, AttachmentKind] = {"image": "image", "document": "document", "audio": "audio",
                                          "video": "video", "sticker": "image"}

# A message sent longer ago than this is dropped. Why 24 hours: Meta redelivers a webhook that was not
# answered 200 for hours (with growing gaps), and a missed message is worse than a late one, so the bound
# must be generous; and a message older than 24 hours cannot be answered anyway (the Cloud API allows
# free-form replies only within 24 hours of the user's last message). The seen ids are kept on disk for
# the same span, so inside it a replayed or redelivered message id is recognised, after a restart too.
MAX_MESSAGE_AGE_SECONDS = 24 * 3600
# Ids kept at most (memory, and the file rewritten per message). A signature has no timestamp, so an id is
# never forgotten while its message is fresh: past this many within 24 hours, messages sent before the
# oldest id kept are refused instead (a late redelivery among them is lost, a replay cannot get through).
SEEN_IDS_LIMIT = 5_000

# Received media are fetched before access control runs (a stranger's too), so they are capped like
# Discord's (25 MB; Telegram's Bot API stops at 20 MB): bigger ones are passed on without their bytes.
MAX_FILE_BYTES = 25 * 1024 * 1024
# Senders whose latest handed-on message time is kept (to mark a late redelivery): the most recent ones.
LATE_SENDERS = 10_000


def signature_ok(app_secret: str, body: bytes, header: str) -> bool:
    """`X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`, compared in constant time."""
    if not app_secret or not header.startswith("sha256="):
        return False
    mac = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    return same_secret(header, f"sha256={mac}")


class WhatsAppChannel:
    name = "whatsapp"
    capabilities = ChannelCapabilities(max_chars=4000, typing=False)

    def __init__(self, account_id: str, cfg: WhatsAppAccountConfig, *, access_token: str, app_secret: str,
                 verify_token: str, inbox_dir: Path, state_dir: Path | None = None,
                 clock: Callable[[], float] = time.time, policy: RetryPolicy = retry.DEFAULT_POLICY) -> None:
        if not cfg.phone_number_id:
            raise ChannelError(f"channels.whatsapp.accounts.{account_id}: phone_number_id is not set",
                               "copy it from the Meta app dashboard: WhatsApp → API setup")
        self.account_id = account_id
        self.cfg = cfg
        self._token = access_token
        self._secret = app_secret
        self._verify = verify_token
        self._api = cfg.base_url.rstrip("/")
        self._inbox = inbox_dir
        self._clock = clock
        self._policy = policy
        self._tracker = StatusTracker(self.name, account_id, state_dir, clock)
        seen_path = None if state_dir is None else seen_ids_path(state_dir, cfg.phone_number_id)
        self._seen = SeenIds(seen_path, max_age=MAX_MESSAGE_AGE_SECONDS, limit=SEEN_IDS_LIMIT, clock=clock)
        self._early_edits = EarlyEdits()  # edits that came while (or before) their message was handed on
        self._order = BySentTime()  # a chat's messages handed on in the order they were sent
        self._newest: dict[str, float] = {}  # sender -> the latest send time of their messages handed on (`_late`)
        self._stale_logged = False
        self._group_logged = False
        self._client: httpx.AsyncClient | None = None
        self._sink: InboundSink | None = None

    async def start(self, sink: InboundSink) -> None:
        """Webhook-driven: nothing to connect; "connected" means the gateway serves the route."""
        self._sink = sink
        # Not replayed after a restart: what a killed gateway staged but never filed would wait forever.
        for name in sweep_staged(self._inbox, self.name, self.account_id):
            log.info("removed %s, a file received before the gateway stopped and never filed", name)
        # base_url (and a media URL it hands out) may be on this machine: the token goes to no other user's port.
        refuse = local_api.refusal("WhatsApp", f"channels.whatsapp.accounts.{self.account_id}.base_url",
                                   "the Graph API server you set as base_url")
        self._client = local_api.client(refuse, timeout=30.0)
        self._tracker.connected(True)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self._tracker.connected(False)

    def status(self) -> ChannelStatus:
        return self._tracker.status

    def webhook_routes(self) -> list[WebhookRoute]:
        return [WebhookRoute(f"/hooks/whatsapp/{self.account_id}/", ("GET", "POST"), self.handle_http)]

    def http_routes(self) -> list[Any]:
        """What the gateway mounts under /hooks/whatsapp/<account>/."""
        return http_routes(self.webhook_routes())

    # -- webhook --------------------------------------------------------------------------------------

    async def handle_http(self, req: WebhookRequest) -> WebhookResponse:
        if req.method == "GET":
            return self._verify_subscription(req.query)
        # Signature before anything else: an unsigned body is never parsed.
        if not signature_ok(self._secret, req.body, req.headers.get("x-hub-signature-256", "")):
            REFUSALS.warning(f"whatsapp {self.account_id} webhooks with a missing or wrong signature",
                             "whatsapp %s: refused a webhook with a missing or wrong signature", self.account_id)
            return WebhookResponse(401, b"invalid signature")
        try:
            body = load_object(req.body)
        except WireError as e:  # signed, so Meta's own (or a leaked secret's): refuse it, say why
            log.warning("whatsapp %s: refused a signed webhook: %s", self.account_id, e.reason)
            return WebhookResponse(400, e.reason.encode())
        try:
            for value in self._values(body):
                names = {str(c.get("wa_id")): str(_obj(c.get("profile")).get("name", ""))
                         for c in _objects(value.get("contacts"))}
                for m in _objects(value.get("messages")):
                    await self._message(m, names)
        except Exception as e:  # noqa: BLE001 - answer 500 so Meta redelivers; message ids dedupe it
            log.warning("whatsapp %s: webhook failed: %s", self.account_id, e)
            self._tracker.error(f"{type(e).__name__}: {e}")
            return WebhookResponse(500, b"retry later")
        return WebhookResponse(200, b"ok")

    def _verify_subscription(self, q: Mapping[str, str]) -> WebhookResponse:
        token = q.get("hub.verify_token", "")
        if q.get("hub.mode") == "subscribe" and self._verify and same_secret(token, self._verify):
            return WebhookResponse(200, q.get("hub.challenge", "").encode())
        return WebhookResponse(403, b"verification failed")

    def _values(self, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The change values meant for this account's number (one app can serve several numbers)."""
        out = []
        for entry in _objects(body.get("entry")):
            for change in _objects(entry.get("changes")):
                value = _obj(change.get("value"))
                if str(_obj(value.get("metadata")).get("phone_number_id")) == self.cfg.phone_number_id:
                    out.append(value)
        return out

    async def _message(self, m: Mapping[str, Any], names: Mapping[str, str]) -> None:
        assert self._sink is not None
        mid = str(m.get("id", ""))
        sent_at = _seconds(m.get("timestamp"))
        # A delete is taken however late: Meta retries a webhook for days, and one held back while the gateway was
        # down longer than a day was dropped here, its message left in use. A replayed one (it is signed: Meta's)
        # retracts only what its sender deleted.
        if sent_at is not None and self._clock() - sent_at > MAX_MESSAGE_AGE_SECONDS and m.get("type") != "revoke":
            self._stale(sent_at)
            return
        if m.get("group_id"):
            # A group's message (Cloud API groups) is no DM of its sender: taken as one, the owner's words in a
            # group ran in the main session and a member was answered in private. Groups are not supported here.
            self._group_skipped()
            return
        if not _WA_ID.fullmatch(str(m.get("from") or "")):
            # No number, or something else in its place (a BSUID `US.1349…` a relay put in `from`): not a sender
            # Hermit can know; a BSUID taken as an id would get a pairing code and a contact of its own.
            self._numberless(str(m.get("from_user_id") or m.get("from") or "")[:64])
            return
        kind = str(m.get("type", ""))
        if kind == "revoke":  # the sender deleted a message (numbers shared with the WhatsApp Business app)
            original = str(_obj(m.get("revoke")).get("original_message_id", ""))
            sender = str(m.get("from", ""))
            if original and sender:
                await self._sink.publish(InboundMessage(
                    channel=self.name, account_id=self.account_id, peer_kind="dm", peer_id=sender, sender_id=sender,
                    text="", message_id=original, received_at=sent_at or self._clock(), change="deleted"))
            return
        if kind == "edit":  # the sender changed a message (numbers shared with the WhatsApp Business app, too)
            await self._edited(m, sent_at)
            return
        if kind not in ("text", "button", "location", "contacts", *MEDIA_KINDS):
            return  # reactions, system notices: nothing for the agent
        if self._seen.seen(mid, sent_at):
            return  # handled before, or cannot be told from a replay (no id; sent before the ids kept)
        sender = str(m.get("from", ""))
        with self._order.running(sender, sent_at or self._clock()) as before:
            await self._handed_on(kind, m, mid, sender, sent_at, names, before)

    async def _handed_on(self, kind: str, m: Mapping[str, Any], mid: str, sender: str, sent_at: float | None,
                         names: Mapping[str, str], before: Callable[[], Earlier]) -> None:
        """A new message's content fetched, then handed on after the messages of its chat sent before it that are
        still being fetched (channels/in_order.py BySentTime): a text does not overtake the photo before it."""
        assert self._sink is not None
        try:
            text, attachments = await self._content(kind, m, sender, mid)
            self._tracker.inbound()
            await after(before())  # then an edit that came meanwhile is taken below
            if (edited := self._early_edits.newest(sender, mid)) is not None:
                text = edited  # its sender edited it while its media downloaded, or the edit's webhook came first
            context = _obj(m.get("context"))
            if context.get("forwarded") or context.get("frequently_forwarded"):
                text = frame(text, None)  # the Cloud API does not say who wrote a forwarded message
            text = self._late(sender, sent_at, text)
            msg = InboundMessage(
                channel=self.name, account_id=self.account_id, peer_kind="dm", peer_id=sender, sender_id=sender,
                text=text, message_id=mid, sender_name=names.get(sender) or None, attachments=attachments,
                reply_to=str(context["id"]) if context.get("id") else None,
                received_at=sent_at or self._clock())
            await self._sink.publish(msg)
        except BaseException:
            self._seen.forget(mid)
            raise
        self._commit_seen(mid, sent_at or self._clock())

    async def _content(self, kind: str, m: Mapping[str, Any], sender: str,
                       mid: str) -> tuple[str, tuple[Attachment, ...]]:
        """A new message's text and files: a location or a contact card told in words (channels/wordless.py)."""
        if kind == "text":
            return str(_obj(m.get("text")).get("body", "")), ()
        if kind in MEDIA_KINDS:
            media = _obj(m.get(kind))
            text = str(media.get("caption", ""))
            if kind == "sticker":
                text = wordless.joined(text, wordless.sticker())  # its picture too; the Cloud API names no emoji
            return text, (await self._download(MEDIA_KINDS[kind], media, sender, mid),)
        if kind in ("location", "contacts"):
            return wordless.from_whatsapp(kind, m) or ("(location)" if kind == "location" else "(contact card)"), ()
        return str(_obj(m.get("button")).get("text", "")), ()  # a button

    async def _edited(self, m: Mapping[str, Any], sent_at: float | None) -> None:
        """An edit, as a change of the message it names: the gateway runs that message with its new text while it
        waits for its turn (an edit from anyone but its sender changes nothing there). Only its text: the files
        came with the message, and fetching them again would stage files no turn ever files or deletes."""
        assert self._sink is not None
        edit = _obj(m.get("edit"))
        original, sender = str(edit.get("original_message_id", "")), str(m.get("from", ""))
        inner = _obj(edit.get("message"))
        inner_kind = str(inner.get("type", ""))
        if not original or not sender or inner_kind not in ("text", *MEDIA_KINDS):
            return
        body = _obj(inner.get(inner_kind))
        text = str(body.get("body" if inner_kind == "text" else "caption", ""))
        # Kept for the message too: one whose media is still downloading, or whose webhook comes later, is not in
        # the gateway yet, and this edit would change nothing there (channels/early_edits.py).
        if not self._early_edits.keep(sender, original, text, sent_at):
            # Meta delivered a later edit of it first (parallel deliveries, retries): that one's text stands.
            log.info("whatsapp %s: ignored an edit older than one already taken", self.account_id)
            return
        await self._sink.publish(InboundMessage(
            channel=self.name, account_id=self.account_id, peer_kind="dm", peer_id=sender, sender_id=sender,
            text=text, message_id=original, received_at=sent_at or self._clock(), change="edited"))

    def _late(self, sender: str, sent_at: float | None, text: str) -> str:
        """A message handed on after one its sender sent later (Meta retries a failed webhook for hours, with
        growing gaps; or a photo whose download outlasted the 30 s the text after it waits, channels/in_order.py)
        is marked: when it was sent, and that it came late. It is not put back among the messages
        answered since (they were answered, their turns stand); without the mark the model read an hours-old
        "yes, go ahead" as the answer to whatever it had asked last. The same second cannot be told apart."""
        if sent_at is None:
            return text
        newest = self._newest.pop(sender, sent_at)
        self._newest[sender] = max(newest, sent_at)  # most recent sender last: the oldest are forgotten first
        while len(self._newest) > LATE_SENDERS:
            del self._newest[next(iter(self._newest))]
        if sent_at >= newest:
            return text
        log.info("whatsapp %s: a message came %.0f s after a later one of its chat was handed on", self.account_id,
                 self._clock() - sent_at)
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(sent_at))
        note = f"(sent {when}; it came late, after later messages of this chat)"
        return f"{note}\n{text}" if text else note

    def _commit_seen(self, mid: str, sent_at: float) -> None:
        """The message was handed on: a failing disk must not make Meta redeliver it (it would be answered
        twice), so the failure is reported and the id stays known in memory until a restart."""
        try:
            self._seen.commit(mid, sent_at)
        except OSError as e:
            log.warning("whatsapp %s: could not save the seen message ids: %s", self.account_id, e)
            self._tracker.error(f"could not save the seen message ids: {type(e).__name__}")

    def _group_skipped(self) -> None:
        if not self._group_logged:
            self._group_logged = True
            log.warning("whatsapp %s: ignored a group message (Hermit answers WhatsApp DMs only); further ones are "
                        "ignored silently", self.account_id)

    def _numberless(self, user_id: str) -> None:
        """A message with no `from`: its sender shows a WhatsApp username, and the webhook carries only their
        business-scoped user id (BSUID, `from_user_id`; Meta's 2026 usernames). Hermit knows WhatsApp senders by
        phone number (owners, allow_from, pairing, replies), so it is dropped here, said once an hour per user,
        rather than taken as a sender "" (one person for every such user) or refused by routing on every message.
        Answering them would need BSUID entries and BSUID recipients (`recipient`), which Meta documents as
        subject to change: not supported yet."""
        who = f"user {user_id}" if user_id else "a user with no id at all"
        NUMBERLESS.warning(
            f"whatsapp {self.account_id} {who} (no phone number)",
            "whatsapp %s: ignored a message from a WhatsApp user who shows a username instead of their phone number "
            "(business-scoped %s; the webhook has no `from` number). Hermit knows WhatsApp senders by phone number "
            "only (owners, allow_from, pairing) and does not support WhatsApp usernames yet, so it cannot tell who this "
            "is and does not answer: if they should reach the assistant, ask them to write on another channel",
            self.account_id, who)

    def _stale(self, sent_at: float) -> None:
        """Reported once per run (a replay could be a flood), without the message's text or sender."""
        if not self._stale_logged:
            self._stale_logged = True
            log.warning("whatsapp %s: ignored a message sent %.0f hours ago (older than %d hours: a late "
                        "redelivery or a replay); further ones are ignored silently", self.account_id,
                        (self._clock() - sent_at) / 3600, MAX_MESSAGE_AGE_SECONDS // 3600)

    async def _download(self, kind: AttachmentKind, media: Mapping[str, Any], sender: str, mid: str) -> Attachment:
        """Media come in two steps: the id resolves to a short-lived URL, fetched with the token. This runs
        before access control (the sender may be a stranger), so a file over MAX_FILE_BYTES is passed on
        without its bytes, like Telegram's and Discord's: refused when the lookup says so, cut off (and
        nothing kept) when the download runs past it whatever the lookup said."""
        assert self._client is not None
        name = media.get("filename")
        mime = media.get("mime_type")
        auth = {"Authorization": f"Bearer {self._token}"}
        try:
            meta = await retry.request(self._client, "GET", f"{self._api}/{media['id']}", headers=auth,
                                       what="WhatsApp media lookup", policy=self._policy)
            meta.raise_for_status()
            info = _obj(meta.json())
            url = str(info["url"])
        except (ChannelError, httpx.HTTPError, KeyError, ValueError) as e:
            log.warning("whatsapp %s: could not download media: %s", self.account_id, e)
            return Attachment(kind, "", name, mime)
        declared = _size(info.get("file_size"))
        if declared is not None and declared > MAX_FILE_BYTES:
            self._too_large(declared)
            return Attachment(kind, "", name, mime, declared)
        base = name or f"{kind}.{(mime or 'bin').split('/')[-1].split(';')[0]}"
        try:
            with StagedFile(self._inbox, (self.name, self.account_id, sender, mid), str(base)) as staged:
                await self._fetch(url, auth, staged)
        except _TooLarge as e:
            self._too_large(e.size)
            return Attachment(kind, "", name, mime, e.size)
        except (ChannelError, httpx.HTTPError) as e:
            log.warning("whatsapp %s: could not download media: %s", self.account_id, e)
            return Attachment(kind, "", name, mime, declared)
        return staged.attachment(kind, name, mime)

    async def _fetch(self, url: str, auth: Mapping[str, str], staged: StagedFile) -> None:
        """Stream the media into `staged` within MAX_FILE_BYTES (raises _TooLarge past it), retrying 429,
        5xx and dropped connections as retry.request does, each attempt from the start."""
        assert self._client is not None
        attempt = 0
        while True:
            wait: float | None = None
            try:
                async with self._client.stream("GET", url, headers=auth) as resp:
                    if resp.status_code == 200:
                        length = _size(resp.headers.get("content-length"))
                        if length is not None and length > MAX_FILE_BYTES:
                            raise _TooLarge(length)
                        staged.rewind()
                        async for chunk in resp.aiter_bytes():
                            if staged.size + len(chunk) > MAX_FILE_BYTES:
                                raise _TooLarge(staged.size + len(chunk))
                            staged.write(chunk)
                        return
                    if resp.status_code != 429 and resp.status_code < 500:
                        raise ChannelError(f"WhatsApp media download: HTTP {resp.status_code}")
                    last = f"HTTP {resp.status_code}"
                    wait = retry_after_seconds(resp.headers)
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            delay = self._policy.delay(attempt, wait)
            if delay is None:
                raise ChannelError(f"WhatsApp media download failed after {attempt + 1} attempts: {last}")
            attempt += 1
            await asyncio.sleep(delay)

    def _too_large(self, size: int) -> None:
        log.warning("whatsapp %s: a file of %.1f MB was not downloaded (the limit is %d MB); the message is "
                    "passed on without it", self.account_id, size / 2**20, MAX_FILE_BYTES // 2**20)

    # -- sending ------------------------------------------------------------------------------------

    async def send(self, item: Outbound) -> None:
        if not isinstance(item, OutboundMessage):
            return
        assert self._client is not None, "start() first"
        payload = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": item.target.peer_id,
                   "type": "text", "text": {"body": item.text, "preview_url": False}}
        try:
            resp = await retry.request(self._client, "POST", f"{self._api}/{self.cfg.phone_number_id}/messages",
                                       json=payload, headers={"Authorization": f"Bearer {self._token}"},
                                       what="WhatsApp send", policy=self._policy)
            if resp.status_code >= 400:
                raise ChannelError(f"WhatsApp send failed: HTTP {resp.status_code} {_detail(resp)}",
                                   "check the access token, the phone_number_id and that the user wrote to "
                                   "you in the last 24 hours (outside it only templates may be sent)")
        except ChannelError as e:
            self._tracker.error(e.message, e.hint)
            raise
        self._tracker.outbound()


def seen_ids_path(state_dir: Path, phone_number_id: str) -> Path:
    """Per business number (message ids belong to it), next to the other channel state."""
    safe = re.sub(r"[^\w-]+", "_", phone_number_id) or "_"
    return state_dir / "channels" / "whatsapp" / safe / "seen-messages.json"


def _obj(value: Any) -> Mapping[str, Any]:
    """A JSON object from the webhook, or an empty one when a field holds something else."""
    return value if isinstance(value, dict) else {}


def _objects(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON array field; anything else in it (or a field that is not an array) is skipped."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _size(value: Any) -> int | None:
    """A byte count from the platform (a JSON number or a header), or None when it gives none."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite JSON number
        return None


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


def _seconds(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _detail(resp: httpx.Response) -> str:
    try:
        return str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return resp.text[:200]


def create_channel(deps: ChannelDeps, account_id: str, cfg: WhatsAppAccountConfig) -> WhatsAppChannel:
    """The gateway's factory (this module's PLATFORM): three secrets, each by variable name."""
    where = f"channels.whatsapp.accounts.{account_id}"
    env = deps.environ
    return WhatsAppChannel(
        account_id, cfg, inbox_dir=deps.inbox, state_dir=deps.state_dir, clock=deps.clock,
        access_token=resolve(cfg.access_token, cfg.access_token_env, env, where=where, field="access_token"),
        app_secret=resolve(cfg.app_secret, cfg.app_secret_env, env, where=where, field="app_secret"),
        verify_token=resolve(cfg.verify_token, cfg.verify_token_env, env, where=where, field="verify_token"))


# The one declaration of this platform (hermit.channels.platforms lists this module).
PLATFORM = ChannelPlatform("whatsapp", create_channel, WhatsAppChannel.capabilities)
