"""Slack channel: Socket Mode (over `websockets`) or the signed HTTP Events API in, Web API chat.postMessage out.

Why not slack-sdk: Hermit needs three Web API calls (auth.test, apps.connections.open, chat.postMessage)
and a websocket with three frame types; slack-sdk's asyncio Socket Mode client brings aiohttp and its own
reconnect and retry loops, which would hide the failures `hermit channels status` must show.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from hermit.channels import local_api, retry, slack_missed
from hermit.channels.base import (
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
from hermit.channels.platforms import ChannelPlatform
from hermit.channels.status import StatusTracker, with_hint
from hermit.channels.tasks import cancel
from hermit.channels.webhook import WebhookRequest, WebhookResponse, WebhookRoute, http_routes, same_secret
from hermit.config.paths import ensure_private_dir
from hermit.config.schema import SlackAccountConfig
from hermit.direct_http import websocket_proxy
from hermit.durable import write_atomic
from hermit.errors import ChannelError
from hermit.refusals import RefusalLog
from hermit.retry import RetryPolicy
from hermit.textfile import read_regular
from hermit.wire import WireError, load_object

log = logging.getLogger(__name__)
# Anyone who knows the webhook URL can send unsigned requests: their refusals are logged a few a minute.
REFUSALS = RefusalLog(log)

SIGNATURE_WINDOW_SECONDS = 300
# How long a handled event id is kept, on disk, so a captured signed event replayed after a restart is
# still recognised: a signature verifies for 10 minutes (its timestamp may be 5 minutes behind or ahead of
# our clock), and Slack's retries of an event come within about 5 minutes of the first delivery.
SEEN_EVENT_SECONDS = 3 * SIGNATURE_WINDOW_SECONDS
# The look at a new connection for changes missed while away holds the socket's frames at most this long.
MISSED_SECONDS = 60.0


def verify_signature(secret: str, timestamp: str, body: bytes, signature: str, now: float) -> bool:
    """Slack's v0 scheme: HMAC-SHA256 over `v0:{ts}:{body}`, within 5 minutes, compared in constant time."""
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    if abs(now - ts) > SIGNATURE_WINDOW_SECONDS:
        return False
    mac = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return same_secret(signature, f"v0={mac}")


class SlackChannel:
    name = "slack"
    capabilities = ChannelCapabilities(max_chars=4000, typing=False)

    def __init__(self, account_id: str, cfg: SlackAccountConfig, *, bot_token: str, app_token: str = "",
                 signing_secret: str = "", state_dir: Path | None = None, clock: Callable[[], float] = time.time,
                 policy: RetryPolicy = retry.DEFAULT_POLICY, reconnect_max_delay: float = 60.0) -> None:
        self.account_id = account_id
        self.cfg = cfg
        self._bot_token = bot_token
        self._app_token = app_token
        self._secret = signing_secret
        self._api = cfg.base_url.rstrip("/")
        self._clock = clock
        self._policy = policy
        self._reconnect_max = reconnect_max_delay
        self._tracker = StatusTracker(self.name, account_id, state_dir, clock)
        self._state_dir = state_dir
        self._wrong_workspace: ChannelError | None = None
        # Run (in a thread) once the token's workspace is known and before events are taken: the gateway renames
        # the sessions of before keys named the workspace then (channels/slack_migrate.py).
        self.on_workspace: Callable[[], None] | None = None
        # No count cap: every id needs Slack's signature (or the Socket Mode connection), and Slack caps
        # an app's events at 30,000 an hour per workspace, a few thousand ids within SEEN_EVENT_SECONDS.
        seen_path = None if state_dir is None else seen_events_path(state_dir, account_id)
        self._seen = SeenIds(seen_path, max_age=SEEN_EVENT_SECONDS, limit=None, clock=clock)
        self._no_id_logged = False
        self._client: httpx.AsyncClient | None = None
        self._sink: InboundSink | None = None
        self._task: asyncio.Task[None] | None = None
        self._bot_user = ""
        self._team = ""
        self._app = ""  # from auth.test when Slack includes it
        self._enterprise = ""
        self._org_install = False  # installed org-wide on an Enterprise Grid: events come from many teams
        self._foreign_logged: set[tuple[str, str, str]] = set()
        self._im_channels: dict[str, str] = {}  # user id -> the IM channel their DMs came from
        self._early_edits = EarlyEdits()  # edits delivered before their message (a retried delivery)
        # The messages handed on, per conversation: looked for at each new connection (channels/slack_missed.py).
        self._held = slack_missed.Held(None if state_dir is None else slack_missed.held_path(state_dir, account_id))
        self._refreshed = False  # the last connection ended by Slack's `disconnect` (it redelivers what it sends)
        # base_url may be a server on this machine: the tokens go to no other user's port, nor the websocket.
        self._refuse = local_api.refusal("Slack", f"channels.slack.accounts.{account_id}.base_url",
                                         "the Slack API server you set as base_url")

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink
        self._client = local_api.client(self._refuse, timeout=30.0)
        if self.cfg.mode == "socket":
            self._task = asyncio.create_task(self._socket_loop(), name=f"slack:{self.account_id}")
        else:
            await self._identify_or_report()
            if self._team:  # what was deleted or edited while the gateway was stopped (Slack's retries are over)
                self._task = asyncio.create_task(self._missed(), name=f"slack-missed:{self.account_id}")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self._tracker.connected(False)

    def status(self) -> ChannelStatus:
        return self._tracker.status

    # -- Web API ------------------------------------------------------------------------------------

    async def call(self, method: str, payload: Mapping[str, Any] | None = None, *, token: str | None = None,
                   form: bool = False) -> Any:
        """One Web API call; `form` for the methods that take no JSON body (conversations.history/replies)."""
        assert self._client is not None, "start() first"
        body: dict[str, Any] = {"data": dict(payload or {})} if form else {"json": dict(payload or {})}
        resp = await retry.request(self._client, "POST", f"{self._api}/{method}", what=f"Slack {method}",
                                   policy=self._policy, **body,
                                   headers={"Authorization": f"Bearer {token or self._bot_token}"})
        try:
            data = resp.json()
        except ValueError:
            raise ChannelError(f"Slack {method}: HTTP {resp.status_code}, not JSON",
                               "check channels.slack base_url") from None
        if not data.get("ok"):
            err = str(data.get("error", f"HTTP {resp.status_code}"))
            raise ChannelError(f"Slack {method} failed: {err}",
                               "check the app's tokens and scopes (chat:write, app_mentions:read, im:history)")
        return data

    async def _identify(self) -> None:
        me = await self.call("auth.test")
        team, enterprise = str(me.get("team_id", "")), str(me.get("enterprise_id") or "")
        org_install = bool(me.get("is_enterprise_install"))
        self._same_workspace(enterprise if org_install else team)  # before anything is taken from the token
        self._wrong_workspace = None
        if self.on_workspace is not None:
            await asyncio.to_thread(self.on_workspace)
        self._bot_user, self._team = str(me.get("user_id", "")), team
        self._app, self._enterprise, self._org_install = str(me.get("app_id") or ""), enterprise, org_install

    def _same_workspace(self, home: str) -> None:
        """Refuse a token of another workspace (or Grid org) than the one this account first ran in.

        Why: `owners`, `allow_from`, `groups` and the approved contacts of an account name member and channel
        ids of its workspace, and an id names someone only there: an account whose token was swapped for
        another workspace's would take that workspace's `U0123` for the owner listed as `U0123`. The workspace
        is recorded (0600, in the account's state folder) the first time auth.test names it; a token of another
        one is refused, with the error saying how to move the account on purpose. A record that cannot be read
        refuses too (fail closed)."""
        if self._state_dir is None or not home:
            return
        path = workspace_path(self._state_dir, self.account_id)
        where = f"channels.slack.accounts.{self.account_id}"
        try:
            pinned = _read_workspace(path)
        except (OSError, ValueError, RecursionError) as e:
            raise self._refused_workspace(ChannelError(
                f"cannot tell which Slack workspace account {self.account_id} belongs to: {path} cannot be read "
                f"({type(e).__name__}: {e})", f"check {where} (owners, allow_from, groups) and `hermit pairing list "
                f"slack` are for workspace {home}, then remove {path}: the account then records {home}")) from None
        if pinned is None:
            try:
                ensure_private_dir(path.parent, what="the Slack account's state folder")
                write_atomic(path, json.dumps({"workspace": home, "recorded_at": self._clock()}) + "\n")
            except OSError as e:  # NotOwnFolder is one too
                raise self._refused_workspace(ChannelError(
                    f"cannot record the Slack workspace of account {self.account_id} in {path} ({type(e).__name__}: "
                    f"{e})", "check the state dir's disk and owner")) from None
        elif pinned != home:
            raise self._refused_workspace(ChannelError(
                f"the Slack token of account {self.account_id} belongs to workspace {home}, but the account is "
                f"workspace {pinned}'s: its owners, allow_from, groups and approved contacts name ids of {pinned}, "
                f"and the same ids in {home} are other people, so nothing from {home} is taken",
                f"put {pinned}'s token back; or, to move the account on purpose, check {where} (owners, allow_from, "
                f"groups) and `hermit pairing list slack`, then remove {path} (the account then records {home})"))

    def _refused_workspace(self, e: ChannelError) -> ChannelError:
        self._wrong_workspace = e  # what an event that comes meanwhile (HTTP mode) is refused with
        return e

    async def _identify_or_report(self) -> None:
        try:
            await self._identify()
            self._tracker.connected(True)
        except ChannelError as e:  # HTTP mode keeps serving its route; the next event retries
            self._tracker.error(e.message, e.hint)  # with what to do (a refused token: check the app's tokens)

    # -- Socket Mode --------------------------------------------------------------------------------

    async def _socket_loop(self) -> None:
        import websockets

        delay = 1.0
        while True:
            try:
                if not self._bot_user:
                    await self._identify()
                opened = await self.call("apps.connections.open", token=self._app_token)
                async with websockets.connect(opened["url"], open_timeout=30, close_timeout=5,
                                              create_connection=local_api.websocket_class(self._refuse),
                                              proxy=websocket_proxy(opened["url"])) as ws:
                    async for raw in ws:
                        if await self._frame(ws, raw):
                            break  # Slack asked us to reconnect
                        delay = 1.0
                self._tracker.connected(False)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the receive loop is a supervision boundary
                text = with_hint(e.message, e.hint) if isinstance(e, ChannelError) else f"{type(e).__name__}: {e}"
                log.warning("slack %s: %s; reconnecting in %.0fs", self.account_id, text, delay)
                self._refreshed = False  # not the refresh Slack asked for: what came meanwhile is looked for
                self._tracker.error(text)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._reconnect_max)

    async def _frame(self, ws: Any, raw: str | bytes) -> bool:
        """Handle one Socket Mode frame; True when Slack asks for a reconnect."""
        try:
            frame = load_object(raw)
        except WireError as e:  # a frame we cannot read is dropped, not a reason to reconnect
            log.warning("slack %s: ignored a Socket Mode frame: %s", self.account_id, e.reason)
            return False
        kind = frame.get("type")
        if kind == "hello":
            self._tracker.connected(True)
            if not self._refreshed:  # a refresh Slack asked for (every few hours) loses nothing: no look then
                await self._missed()  # before the frames that follow: a next message comes after its retraction
            self._refreshed = False
        elif kind == "disconnect":
            self._refreshed = True
            return True
        elif frame.get("envelope_id"):
            if kind == "events_api":
                # Acked only after publish returned: an unacked envelope is redelivered by Slack, and the
                # event id dedupes that redelivery if the ack itself was lost.
                payload = frame.get("payload")
                await self._event_callback(payload if isinstance(payload, dict) else {})
            await ws.send(json.dumps({"envelope_id": frame["envelope_id"]}))
        return False

    async def _missed(self) -> None:
        """Deletes and edits made while the gateway was away, handed on as the events Slack no longer sends
        (channels/slack_missed.py); bounded, so a slow Slack cannot hold the socket's frames for long."""
        try:
            await asyncio.wait_for(slack_missed.sweep(self._held, self._history, self._take_change, self.account_id),
                                   MISSED_SECONDS)
        except TimeoutError:
            log.warning("slack %s: looking for changes missed while away took over %.0fs; the rest is looked for "
                        "at the next connection", self.account_id, MISSED_SECONDS)

    async def _history(self, method: str, args: dict[str, Any]) -> Any:
        return await self.call(method, args, form=True)

    async def _take_change(self, ev: dict[str, Any]) -> None:
        msg = self._change(ev, str(ev.get("team") or self._team))
        if msg is not None and self._sink is not None:
            self._tracker.inbound()
            await self._sink.publish(msg)

    # -- HTTP Events API ---------------------------------------------------------------------------

    def webhook_routes(self) -> list[WebhookRoute]:
        if self.cfg.mode != "http":
            return []
        return [WebhookRoute(f"/hooks/slack/{self.account_id}/", ("POST",), self.handle_http)]

    def http_routes(self) -> list[Any]:
        """What the gateway mounts under /hooks/slack/<account>/ (nothing in Socket Mode)."""
        return http_routes(self.webhook_routes())

    async def handle_http(self, req: WebhookRequest) -> WebhookResponse:
        """Signature first (401 on any doubt), then url_verification, then the event."""
        ok = verify_signature(self._secret, req.headers.get("x-slack-request-timestamp", ""), req.body,
                              req.headers.get("x-slack-signature", ""), self._clock())
        if not ok:
            REFUSALS.warning(f"slack {self.account_id} webhooks with a bad or stale signature",
                             "slack %s: refused a webhook with a bad or stale signature", self.account_id)
            return WebhookResponse(401, b"invalid signature")
        try:
            body = load_object(req.body)
        except WireError as e:  # signed, so Slack's own (or a leaked secret's): refuse it, say why
            log.warning("slack %s: refused a signed webhook: %s", self.account_id, e.reason)
            return WebhookResponse(400, e.reason.encode())
        if body.get("type") == "url_verification":
            return WebhookResponse(200, str(body.get("challenge", "")).encode())
        if body.get("type") == "event_callback":
            if not self._bot_user:
                await self._identify_or_report()
            try:
                await self._event_callback(body)
            except Exception as e:  # noqa: BLE001 - answer 500 so Slack retries; the dedupe keeps it once
                log.warning("slack %s: event failed: %s", self.account_id, e)
                self._tracker.error(f"{type(e).__name__}: {e}")
                return WebhookResponse(500, b"retry later")
        return WebhookResponse(200, b"ok")

    # -- events ------------------------------------------------------------------------------------

    async def _event_callback(self, body: Mapping[str, Any]) -> None:
        assert self._sink is not None
        if not self._ours(body):  # first: a refusal for want of auth.test must not mark the event as seen
            return
        event_id = str(body.get("event_id") or "")
        if self._seen.seen(event_id):
            if not event_id:
                self._refused_without_id()
            return  # a retry (X-Slack-Retry-Num), a redelivered envelope or a replay, after a restart too
        event = body.get("event")
        # Not a dict: nothing Hermit can answer (and a retry would bring the same).
        msg = self._inbound(event, str(body.get("team_id") or self._team), org_internal=_org_internal(body)) \
            if isinstance(event, dict) else None
        if msg is None:
            self._seen.forget(event_id)
            return
        self._tracker.inbound()
        try:
            outcome = await self._sink.publish(msg)
        except BaseException:
            self._seen.forget(event_id)
            raise
        slack_missed.remember(self._held, msg, event if isinstance(event, dict) else {}, outcome)
        try:
            self._seen.commit(event_id, self._clock())
        except OSError as e:  # handed on: a failing disk must not make Slack retry it (answered twice)
            log.warning("slack %s: could not save the seen event ids: %s", self.account_id, e)
            self._tracker.error(f"could not save the seen event ids: {type(e).__name__}")

    def _refused_without_id(self) -> None:
        """Slack gives every event an event_id; one without cannot be told from a replay. Logged once a run."""
        if not self._no_id_logged:
            self._no_id_logged = True
            log.warning("slack %s: ignored an event without an event_id (it could not be recognised if "
                        "replayed); further ones are ignored silently", self.account_id)

    def _ours(self, body: Mapping[str, Any]) -> bool:
        """Whether an event comes from the workspace (or Grid org) and app this account's token belongs to.

        Why: one signing secret signs the app's events from every workspace it is installed in, and owners
        are matched by user id alone, so an event from another workspace must never reach the gateway.
        Until auth.test has answered nothing can be compared: the event is refused with an error, so HTTP
        mode answers 500 and Slack retries it (Socket Mode identifies before it connects)."""
        if not self._team and not (self._org_install and self._enterprise):
            if self._wrong_workspace is not None:
                raise self._wrong_workspace
            raise ChannelError("Slack auth.test has not answered yet: cannot tell whether the event comes from "
                               "this account's workspace", "see `hermit channels status` for the error")
        team, app = str(body.get("team_id") or ""), str(body.get("api_app_id") or "")
        enterprise = str(body.get("enterprise_id") or "")
        if self._org_install:  # an org-wide install without an org id to compare accepts nothing
            ok = bool(self._enterprise) and enterprise == self._enterprise
        else:
            ok = team == self._team and (not self._enterprise or not enterprise or enterprise == self._enterprise)
        if ok and self._app:
            ok = app == self._app
        if not ok:
            key = (team, app, enterprise)
            if key not in self._foreign_logged and len(self._foreign_logged) < 100:
                self._foreign_logged.add(key)
                log.warning("slack %s: dropped an event from another workspace or app (team %r, app %r, "
                            "enterprise %r; this account is team %r, app %r, enterprise %r); further ones from "
                            "there are dropped silently", self.account_id, team[:40], app[:40], enterprise[:40],
                            self._team, self._app or "?", self._enterprise or "-")
        return ok

    def _member(self, item: Mapping[str, Any], team: str, org_internal: bool) -> str:
        """A sender's id as Hermit knows them. A member id names a member of one workspace, and `owners`,
        `allow_from`, bindings and memory audiences name the account's own members by bare id; a member of
        another workspace (a Slack Connect channel or DM shared with another organisation: Slack names their
        workspace in `user_team`) is `U…@T…`, so the same id from elsewhere is never the listed person and has
        a session of their own. Within one Enterprise Grid org ids are the org's (`org_internal`): bare."""
        user, home = str(item["user"]), str(item.get("user_team") or item.get("team") or "")
        own = {t for t in (team, self._team, self._enterprise) if t}
        return f"{user}@{home}" if home and home not in own and not org_internal else user

    def _change(self, ev: Mapping[str, Any], team: str, org_internal: bool = False) -> InboundMessage | None:
        """A message a member deleted or edited (subtype message_deleted / message_changed) as a change of
        the message it names: the gateway drops or updates it while it waits for its turn, or retracts it.

        A message with thread replies is not deleted but replaced by a tombstone ("This message was
        deleted."): Slack sends that as message_changed, which is a delete here. Such a thread parent carries
        `thread_ts` equal to its own ts once it has replies, but it was posted in the channel (a new message
        never has replies), so its change goes to the channel's session, where its turn ran, not the thread's."""
        sub = ev.get("subtype")
        prev = ev.get("previous_message")
        now = ev.get("message") if sub == "message_changed" else None
        before = prev if isinstance(prev, Mapping) else now if isinstance(now, Mapping) else None
        if before is None or before.get("bot_id") or not before.get("user") or before.get("user") == self._bot_user:
            return None
        ts = ev.get("deleted_ts") if sub == "message_deleted" else (now or {}).get("ts")
        if not ts or ev.get("channel_type") not in ("im", "channel", "group", "mpim"):
            return None
        deleted = sub == "message_deleted" or (now or {}).get("subtype") == "tombstone"
        dm = ev.get("channel_type") == "im"
        user, chan = self._member({**ev, **before}, team, org_internal), str(ev.get("channel", ""))
        text = "" if deleted else str((now or {}).get("text", ""))
        mention = f"<@{self._bot_user}>" if self._bot_user else None
        mentioned = bool(mention and mention in text)
        if mentioned and mention:
            text = text.replace(mention, "").strip()
        thread = before.get("thread_ts")
        if thread is not None and str(thread) == str(ts):
            thread = None  # a thread's parent: posted in the channel
        if not deleted:  # kept for the message too: a retried delivery of it may come after the edit
            self._early_edits.keep(user, f"{chan}:{ts}", text)
        return InboundMessage(
            channel=self.name, account_id=self.account_id, peer_kind="dm" if dm else "group",
            peer_id=user if dm else chan, sender_id=user, text=text, message_id=str(ts),
            thread_id=str(thread) if thread else None, team_id=team or None, mentioned=mentioned,
            received_at=float(ev.get("event_ts") or self._clock()), meta={"channel_id": chan},
            change="deleted" if deleted else "edited")

    def _inbound(self, ev: Mapping[str, Any], team: str, org_internal: bool = False) -> InboundMessage | None:
        kind = ev.get("type")
        if kind == "message" and ev.get("subtype") in ("message_deleted", "message_changed"):
            return self._change(ev, team, org_internal)
        if ev.get("bot_id") or ev.get("subtype") or not ev.get("user") or ev.get("user") == self._bot_user:
            return None  # our own and other bots' messages, edits, joins
        text = str(ev.get("text", ""))
        mention = f"<@{self._bot_user}>" if self._bot_user else None
        if kind == "message" and ev.get("channel_type") == "im":
            dm = True
        elif kind == "app_mention":
            dm = False
        elif kind == "message" and ev.get("channel_type") in ("channel", "group", "mpim"):
            if mention and mention in text:
                return None  # Slack sends this one again as app_mention: handle it once, there
            dm = False
        else:
            return None
        user, chan = self._member(ev, team, org_internal), str(ev.get("channel", ""))
        if dm:
            self._im_channels[user] = chan
        if mention:
            text = text.replace(mention, "").strip() if kind == "app_mention" else text
        if (edited := self._early_edits.newest(user, f"{chan}:{ev.get('ts', '')}")) is not None:
            text = edited  # its sender edited it before this delivery of it came (channels/early_edits.py)
        thread = ev.get("thread_ts")
        return InboundMessage(
            channel=self.name, account_id=self.account_id, peer_kind="dm" if dm else "group",
            peer_id=user if dm else chan, sender_id=user, text=text, message_id=str(ev.get("ts", "")),
            thread_id=str(thread) if thread else None, team_id=team or None,
            mentioned=kind == "app_mention", received_at=float(ev.get("event_ts") or ev.get("ts") or self._clock()),
            meta={"channel_id": chan})

    # -- sending ------------------------------------------------------------------------------------

    async def send(self, item: Outbound) -> None:
        if not isinstance(item, OutboundMessage):
            return  # no typing indicator for bots, no streaming: whole messages only
        t = item.target
        channel = self._im_channels.get(t.peer_id, t.peer_id) if t.peer_kind == "dm" else t.peer_id
        payload: dict[str, Any] = {"channel": channel, "text": to_mrkdwn(item.text)}
        if t.thread_id:
            payload["thread_ts"] = t.thread_id
        try:
            await self.call("chat.postMessage", payload)
        except ChannelError as e:
            self._tracker.error(e.message, e.hint)
            raise
        self._tracker.outbound()


def _org_internal(body: Mapping[str, Any]) -> bool:
    """An event of an Enterprise Grid org in a conversation not shared outside it: its member ids are the org's,
    the same person in every workspace of it."""
    return bool(body.get("enterprise_id")) and body.get("is_ext_shared_channel") is False


def seen_events_path(state_dir: Path, account_id: str) -> Path:
    """Per account, next to the other channel state."""
    safe = re.sub(r"[^\w-]+", "_", account_id) or "_"
    return state_dir / "channels" / "slack" / safe / "seen-events.json"


def workspace_path(state_dir: Path, account_id: str) -> Path:
    """The workspace (team id, or the Grid org's id for an org-wide install) the account first ran in."""
    return seen_events_path(state_dir, account_id).with_name("workspace.json")


def _read_workspace(path: Path) -> str | None:
    """The recorded workspace id; None when none is recorded. OSError/ValueError: a record that is not one."""
    try:
        raw = read_regular(path, 4096, follow=False)
    except FileNotFoundError:
        return None
    data = json.loads(raw)
    if not isinstance(data, dict) or not isinstance(data.get("workspace"), str) or not data["workspace"]:
        raise ValueError("no workspace id in it")
    return str(data["workspace"])


_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)


def to_mrkdwn(text: str) -> str:
    """The model's Markdown → Slack mrkdwn (bold, links); code passes through untouched."""
    out, pos = [], 0
    for m in _CODE.finditer(text):
        out.append(_LINK.sub(r"<\2|\1>", _BOLD.sub(r"*\1*", text[pos:m.start()])))
        out.append(m.group(0))
        pos = m.end()
    out.append(_LINK.sub(r"<\2|\1>", _BOLD.sub(r"*\1*", text[pos:])))
    return "".join(out)


def create_channel(deps: ChannelDeps, account_id: str, cfg: SlackAccountConfig) -> SlackChannel:
    """The gateway's factory (this module's PLATFORM): the tokens of the account's mode, by variable name."""
    where = f"channels.slack.accounts.{account_id}"
    bot = resolve(cfg.bot_token, cfg.bot_token_env, deps.environ, where=where, field="bot_token")
    if cfg.mode == "socket":
        app = resolve(cfg.app_token, cfg.app_token_env, deps.environ, where=where, field="app_token")
        return SlackChannel(account_id, cfg, bot_token=bot, app_token=app, state_dir=deps.state_dir, clock=deps.clock)
    secret = resolve(cfg.signing_secret, cfg.signing_secret_env, deps.environ, where=where, field="signing_secret")
    return SlackChannel(account_id, cfg, bot_token=bot, signing_secret=secret, state_dir=deps.state_dir,
                        clock=deps.clock)


# The one declaration of this platform (hermit.channels.platforms lists this module).
PLATFORM = ChannelPlatform("slack", create_channel, SlackChannel.capabilities)
