"""The web app's WebSocket endpoint: Origin and token checks, the §15 request methods, event delivery.

A connection must open with `connect` carrying the gateway token (compared in constant time), or the
`connect.challenge` handshake keyed by the token or by a one-time ticket of `hermit dashboard`'s
(tickets.py: redeemed once, and `hello-ok` then carries the token for the page's reconnects); a bad
token, a first frame that is not `connect`, or a frame over the size limit closes the socket with a
clear error frame first. After `connect`, a malformed frame or an unknown method gets an error
response and the socket stays open. The Origin header, when a browser sends one, must be the page's
own origin (or one listed in `gateway.allowed_origins`), so another web site open in the same browser
cannot drive the assistant even if it learned the port; a page on a rebinding name, whose Origin equals
its Host, is refused before it gets here by the Host check (app.py).

The chat methods are here; the owner's console (memory, cron, channels, pairing, logs) is console.py,
behind the same `connect`. Any listed session can be opened, including keys that name no agent
(`cron:<job>`, a CLI session `test2`: found in the agent store that holds them); only those
history.describe_session marks "chat" can be written to, the others answer `read_only`.

Files the page sends with a message (`chat.upload`, then `chat.send {files}`) are uploads.py's; `tickets.create`
(the page's "Sign in a phone": a new one-time link a phone can reach, with its QR code) is phone.py's.
What the pages read of the sessions (chat.history, chat.image, sessions.list) and how each tab follows the session
it shows (live sessions) is webchat_sessions.py's.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketDisconnected

from hermit.channels.base import Attachment
from hermit.channels.webchat import WebchatChannel
from hermit.errors import HermitError
from hermit.gateway import device_sockets, webchat_sessions
from hermit.gateway.agents import AgentHost
from hermit.gateway.attachments import MAX_IMAGE_BYTES
from hermit.gateway.console import Console
from hermit.gateway.device_policy import DevicePolicy
from hermit.gateway.devices import (
    Device,
    Devices,
    device_secret,
)
from hermit.gateway.image_index import PhotoIndex
from hermit.gateway.protocol import (
    CLOSE_POLICY,
    CLOSE_PROTOCOL,
    CLOSE_SIGN_IN_TIMEOUT,
    CLOSE_UNAUTHORIZED,
    MAX_UPLOAD_BYTES,
    MAX_UPLOAD_FILES,
    PROTOCOL_VERSION,
    UPLOAD_CHUNK_BYTES,
    ChallengeParams,
    ConnectParams,
    HistoryParams,
    NewParams,
    ProtocolError,
    Request,
    SendParams,
    SessionsListParams,
    UploadParams,
    event_frame,
    handshake_proof,
    parse_request,
    res_error,
    res_ok,
)
from hermit.gateway.tickets import EXPIRED_HINT, EXPIRED_MESSAGE, Tickets, ticket_id
from hermit.gateway.unsigned import Unsigned
from hermit.gateway.uploads import Uploads
from hermit.models.loopback import foreign_peer
from hermit.refusals import RefusalLog, clip
from hermit.sessions.keys import SessionKey, agent_id_of, main_session_key

log = logging.getLogger("hermit.gateway.webchat")


def _failed(req: Request, e: HermitError | OSError) -> str:
    """The error answer to a request that failed as requests may: a HermitError with its hint, or an OSError of
    a file the console reads or writes (a log, a job file) that is not what it should be."""
    if isinstance(e, HermitError):
        log.warning("web chat %s failed: %s", req.method, e.message)
        return res_error(req.id, "failed", e.message, e.hint)
    log.warning("web chat %s failed: %s", req.method, e)
    return res_error(req.id, "failed", f"{req.method}: {e.strerror or e}: {e.filename or ''}",
                     "check that file and the disk; the gateway log has the details")


class _Socket:
    """One accepted WebSocket: numbered events, one writer at a time; the session its page shows (`viewing`, set
    by chat.history) and the state of it the page has (`seen`: transcript version, a turn running, a turn waiting
    for a turn slot); the files
    it is sending (`uploads`, by upload id)."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.seq = 0
        self._lock = asyncio.Lock()
        self.viewing: tuple[str, str] | None = None
        self.seen: tuple[str, bool, bool] | None = None
        self.uploads = Uploads()
        self.device: str | None = None  # the id of the device it signed in as (gateway/devices.py)

    async def send_raw(self, text: str) -> None:
        async with self._lock:
            await self.ws.send_text(text)

    async def send_event(self, event: str, payload: dict[str, Any]) -> None:
        async with self._lock:
            self.seq += 1
            await self.ws.send_text(event_frame(event, payload, self.seq))

    async def close(self, code: int, reason: str) -> None:
        async with self._lock:
            await self.ws.close(code, reason)


@dataclass(frozen=True)
class _Challenge:
    """What connect.challenge settled: both nonces, the page's address, the key the proofs are keyed by (the
    token, or a ticket) and that ticket's id."""

    client_nonce: str
    gateway_nonce: str
    host: str
    key: bytes
    ticket_id: str | None
    origin: str = ""  # the page's Origin header ("" when none was sent)
    device: Device | None = None  # the signed-in device the handshake is keyed by


def same_origin(origin: str, host: str | None, allowed: Iterable[str]) -> bool:
    if origin in allowed:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and host is not None and parts.netloc.lower() == host.lower()


class WebchatApi:
    def __init__(self, channel: WebchatChannel, host: AgentHost, token: str, default_session: str,
                 allowed_origins: Iterable[str] = (), console: Console | None = None,
                 tickets: Tickets | None = None, slot_wait: Callable[[str, str], bool] | None = None, *,
                 sign_in_seconds: float = 30.0, unsigned: Unsigned | None = None,
                 remember_devices: bool = False) -> None:
        """`default_session`: where the web chat talks when the page names no session (the main session
        of the agent the bindings give the web chat). `console`: the owner's console methods (None: the
        page offers only the chat). `tickets`: `hermit dashboard`'s one-time tickets (None: none accepted).
        `slot_wait(agent, key)`: whether the session's next turn waits for one of its agent's turn slots (the
        bus's; a page shows "waiting" instead of a reply being written). `sign_in_seconds`: how long an accepted
        socket may take to complete `connect` (gateway.sign_in_seconds); `unsigned`: the count of connections not
        signed in yet, which a socket leaves once signed in (gateway/unsigned.py). `remember_devices`
        (gateway.remember_devices): whether a ticket sign-in records a device that stays signed in (device_sockets.py);
        off, a ticket brings the token as before devices and a device's signature is refused."""
        self.sign_in_seconds = sign_in_seconds
        self.unsigned = unsigned
        self.slot_wait = slot_wait
        self.console = console
        self.tickets = tickets
        self.devices = Devices(tickets.home, token=token) if tickets is not None else None  # sign in as tickets do
        self.remember_devices = remember_devices
        self.device_policy: DevicePolicy | None = None  # set at start: why devices are off (device_policy.py)
        # Set at start when a socket unit holds the port: looks again at each device's sign-in whether it still does,
        # turning devices off if not (the once-a-second watch left a window; s23 t5). True: devices may stay on.
        self.devices_still_on: Callable[[], Awaitable[bool]] | None = None
        self._device_watch: asyncio.Task[None] | None = None
        self.channel = channel
        self.host = host
        self._token = token.encode()
        self.default_session = default_session
        self.default_agent = agent_id_of(default_session) or "main"
        self.origins = tuple(allowed_origins)  # as configured: the first is where a phone is sent (phone.py)
        self.allowed_origins = frozenset(self.origins)
        self.refusals = RefusalLog(log)  # anyone reaching the port can make it refuse: a flood logs a count
        self._sockets: set[_Socket] = set()  # connected (signed in)
        self.photos = PhotoIndex()  # where each photo of a shown transcript is: chat.image reads only its line
        self._watch: asyncio.Task[None] | None = None

    async def endpoint(self, ws: WebSocket) -> None:
        client, server = ws.scope.get("client"), ws.scope.get("server")
        if client and server:
            # A connection from this machine must come from a program of the owner's (the browser), root's or
            # a system account's (a proxy): another user's program could relay the owner's tab, handshake and
            # all, while it held the port during a restart and the gateway came back beside it.
            holder = await asyncio.to_thread(foreign_peer, str(client[0]), int(client[1]), str(server[0]),
                                             int(server[1]))
            if holder is not None:
                self.refusals.warning("connections from another user's program", "web chat connection from a "
                                      "program of another user (uid %d) refused", holder.uid)
                await ws.close(CLOSE_POLICY)
                return
        await ws.accept()
        sock = _Socket(ws)
        origin = ws.headers.get("origin")
        if origin is not None and not same_origin(origin, ws.headers.get("host"), self.allowed_origins):
            self.refusals.warning("connections from a foreign origin", "web chat connection from origin %r refused",
                                  clip(origin))
            await sock.send_raw(res_error(None, "origin_refused", f"origin {origin} may not use this gateway",
                                          "open the web chat from the gateway's own address, or add the origin "
                                          "to gateway.allowed_origins"))
            await sock.close(CLOSE_POLICY, "origin not allowed")
            return
        client_id: str | None = None
        challenge: _Challenge | None = None
        deadline = asyncio.get_running_loop().time() + self.sign_in_seconds
        try:
            while True:
                raw = await self._receive(sock, deadline if client_id is None else None)
                if raw is None or raw["type"] == "websocket.disconnect":
                    return
                data = raw.get("text")
                if data is None:
                    data = raw.get("bytes") or b""
                try:
                    req = parse_request(data)
                    if client_id is None and req.method == "connect.challenge" and challenge is None:
                        challenge = await self._challenge(sock, req, ws)
                        continue
                    if client_id is None:
                        client_id = await self._connect(sock, req, challenge)
                        continue
                    await self._dispatch(sock, client_id, req)
                except ProtocolError as e:
                    if e.code == "frame_too_large":
                        self.refusals.warning("oversized frames", "web chat frame refused: %s", e.message)
                    await sock.send_raw(res_error(e.request_id, e.code, e.message, e.hint))
                    close = e.close or (CLOSE_PROTOCOL if client_id is None else None)
                    if close is not None:
                        await sock.close(close, e.code)
                        return
        except (WebSocketDisconnect, WebSocketDisconnected):  # the tab went away, also while it was answered
            return
        except Exception:  # noqa: BLE001 - supervision boundary: one broken socket must not affect the others
            log.exception("web chat connection of %s failed", client_id or "an unconnected client")
        finally:
            self._gone(client_id, sock)

    async def _receive(self, sock: _Socket, deadline: float | None) -> Any:
        """The next message; before sign-in only until `deadline` (loop time), after which the socket is closed
        saying why and None is returned (pings alone kept a socket that never sent `connect` open for ever)."""
        if deadline is None:
            return await sock.ws.receive()
        try:
            async with asyncio.timeout_at(deadline):
                return await sock.ws.receive()
        except TimeoutError:
            await self._too_slow(sock)
            return None

    async def _too_slow(self, sock: _Socket) -> None:
        self.refusals.warning("connections that did not sign in in time", "web chat connection closed: no sign-in "
                              "within %.0f s", self.sign_in_seconds)
        await sock.send_raw(res_error(None, "sign_in_timeout", f"no sign-in within {self.sign_in_seconds:.0f} s",
                                      "reload the page; on a very slow network raise gateway.sign_in_seconds"))
        await sock.close(CLOSE_SIGN_IN_TIMEOUT, "sign-in timeout")

    def _gone(self, client_id: str | None, sock: _Socket) -> None:
        """A socket closed: no more events for it, its unsent files deleted, and no watching once no page is
        open."""
        sock.uploads.drop()
        if self.unsigned is not None:
            self.unsigned.release(sock.ws.scope.get("client"))
        if client_id is not None:
            self.channel.detach(client_id, sock)
        self._sockets.discard(sock)
        if not self._sockets and self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def _challenge(self, sock: _Socket, req: Request, ws: WebSocket) -> _Challenge:
        """The gateway's half of the handshake: it proves it holds the token, or the ticket the page names
        (over the client's nonce and its own), for the address the page names, refused unless that address is
        this gateway's own."""
        params: ChallengeParams = req.params
        if not self._own_address(params.host, ws):
            self.refusals.warning("handshakes for another address", "web chat handshake for another address (%r) "
                                  "refused", params.host)
            raise ProtocolError("wrong_address", f"this gateway does not serve {params.host}",
                                "open the URL printed by `hermit dashboard`", request_id=req.id,
                                close=CLOSE_UNAUTHORIZED)
        key, device, origin = self._token, None, ws.headers.get("origin") or ""
        if params.device_id is not None:
            if self.remember_devices and self.devices_still_on is not None:
                await self.devices_still_on()  # the socket unit stopped since the last look: off from now on
            if not self.remember_devices:
                await device_sockets.devices_off(self, sock, req, params)
            device = await self._device(sock, req, params.device_id, params)
            key = device_secret(self._token, device.id)
        elif params.ticket_id is not None:
            ticket = await asyncio.to_thread(self.tickets.find, params.ticket_id) if self.tickets else None
            if ticket is None:
                raise self._expired(req.id)
            key = ticket.encode()
        ours = secrets.token_urlsafe(32)
        await sock.send_raw(res_ok(req.id, {
            "nonce": ours, "proof": handshake_proof(key, "gateway", params.host, params.nonce, ours)}))
        return _Challenge(params.nonce, ours, params.host, key, params.ticket_id, origin, device)

    async def _device(self, sock: _Socket, req: Request, did: str, params: ChallengeParams) -> Device:
        """The signed-in device `did`; a device the gateway does not know (revoked, idle too long, or never) is
        refused with a proof that this gateway says so (the page then forgets its key), and the socket closed."""
        try:
            device = await asyncio.to_thread(self.devices.get, did) if self.devices is not None else None
        except HermitError as e:  # not "signed out": the page would forget its key over a file the owner can fix
            self.refusals.warning("device sign-ins while the device list is unreadable", "device sign-in refused: "
                                  "%s (%s)", e.message, e.hint)
            raise ProtocolError("devices_unreadable", "the gateway cannot read its list of signed-in devices",
                                "see the gateway log (`hermit logs`); this page signs in once the file is put right",
                                request_id=req.id, close=CLOSE_PROTOCOL) from e
        if device is not None:
            return device
        self.refusals.warning("signed-out devices", "web chat sign-in of a device that is not signed in refused")
        proof = handshake_proof(device_secret(self._token, did), "gateway", params.host, params.nonce, "signed-out")
        await sock.send_raw(json.dumps({"type": "res", "id": req.id, "ok": False, "error": {
            "code": "device_signed_out", "message": "this device is signed out (revoked, or not used for 30 days)",
            "hint": EXPIRED_HINT.replace("get a new one", "sign in again"), "proof": proof}}))
        await sock.close(CLOSE_UNAUTHORIZED, "device signed out")
        raise WebSocketDisconnect(CLOSE_UNAUTHORIZED)

    def _expired(self, request_id: str) -> ProtocolError:
        self.refusals.warning("used or expired sign-in links", "web chat sign-in with a used or expired "
                              "`hermit dashboard` link refused")
        return ProtocolError("ticket_expired", EXPIRED_MESSAGE, EXPIRED_HINT, request_id=request_id,
                             close=CLOSE_UNAUTHORIZED)

    async def _redeem(self, tid: str, ticket: str | None = None) -> bool:
        """Use the ticket named `tid` up (it must be `ticket` when the page sent that itself)."""
        if self.tickets is None:
            return False
        if ticket is not None:
            found = await asyncio.to_thread(self.tickets.find, tid)
            if found is None or not hmac.compare_digest(found.encode(), ticket.encode()):
                return False
        return await asyncio.to_thread(self.tickets.redeem, tid)

    def _own_address(self, host: str, ws: WebSocket) -> bool:
        """`host` (host[:port]) names this gateway: its port is the one it listens on, or it is the address of
        an origin listed in gateway.allowed_origins (a proxy's)."""
        if any(urlsplit(o).netloc.lower() == host.lower() for o in self.allowed_origins):
            return True
        server = ws.scope.get("server")
        try:
            port = urlsplit(f"//{host}").port
        except ValueError:
            return False
        if server is None:
            return False
        return port == server[1] or (port is None and server[1] in (80, 443))  # a default port is not written

    async def _connect(self, sock: _Socket, req: Request, challenge: _Challenge | None = None) -> str:
        if req.method != "connect":
            raise ProtocolError("not_connected", f"the first request must be 'connect', not {req.method!r}",
                                "send connect with the gateway token first", request_id=req.id)
        params: ConnectParams = req.params
        ticket: str | None = None  # the id of the ticket this connection signs in with
        new_device: Device | None = None
        if challenge is not None and challenge.device is not None:  # a signed-in device: its signature
            ok = await self._device_signs_in(sock, params, challenge, challenge.device)
        elif params.proof is not None:  # keyed by the token or a ticket (a ticket's may record a device)
            ok, ticket, new_device = await self._proof_signs_in(req, params, challenge)
        elif params.ticket is not None:  # outside a secure context: the ticket itself, as the token would be
            ticket = ticket_id(params.ticket)
            if await self._device_only(ticket):
                raise device_sockets.device_only_refused(req.id)
            if not await self._redeem(ticket, params.ticket):
                raise self._expired(req.id)
            ok = True
        else:
            ok = params.token is not None and hmac.compare_digest(params.token.encode(), self._token)
        if not ok:
            self.refusals.warning("connections with a wrong token", "web chat connection with a wrong token refused")
            raise ProtocolError("unauthorized", "wrong gateway token",
                                "open the URL printed by `hermit dashboard`",
                                request_id=req.id, close=CLOSE_UNAUTHORIZED)
        client_id = params.client_id or secrets.token_urlsafe(12)
        if self.unsigned is not None:  # signed in: not counted; a network address gets reserved places (unsigned.py)
            self.unsigned.signed_in(sock.ws.scope.get("client"))
        self.channel.attach(client_id, sock)
        self._sockets.add(sock)
        if self._watch is None:
            self._watch = asyncio.create_task(self._watch_sessions(), name="web app session watch")
        hello: dict[str, Any] = {
            "type": "hello-ok", "protocol": PROTOCOL_VERSION, "clientId": client_id,
            "agents": sorted(self.host.runtimes), "defaultAgent": self.default_agent,
            "mainSession": self.default_session, "mainSessions": self._main_sessions(),
            "imageRefs": True,  # chat.history names photos (`imageRefs`) and chat.image brings each one
            "uploads": {"maxBytes": MAX_UPLOAD_BYTES, "maxFiles": MAX_UPLOAD_FILES, "chunkBytes": UPLOAD_CHUNK_BYTES,
                        "imageBytes": MAX_IMAGE_BYTES}}
        if new_device is not None:  # signed in for good as this device: its secret, never the token
            sock.device = new_device.id
            hello["device"] = {"id": new_device.id, "name": new_device.name, "secret": base64.urlsafe_b64encode(
                device_secret(self._token, new_device.id)).decode().rstrip("=")}
        elif ticket is not None:  # what the page needs to reconnect, the ticket being used up now
            hello["token"] = self._token.decode()
        if sock.device is not None:
            hello["deviceId"] = sock.device
            self._watch_devices()
        await sock.send_raw(res_ok(req.id, hello))
        return client_id

    # ---- signed-in devices (gateway/device_sockets.py) ------------------------------------------------
    device_watch_interval = 0.5  # seconds between looks at devices.json while a device is connected
    _touch = device_sockets.touch
    _device_signs_in = device_sockets.signs_in
    _device_key = device_sockets.device_key
    _record = device_sockets.record
    _proof_signs_in = device_sockets.proof_signs_in
    _device_only = device_sockets.device_only
    _watch_devices = device_sockets.watch
    _watching_devices = device_sockets.watching
    _close_signed_out = device_sockets.close_signed_out
    _sign_out = staticmethod(device_sockets.sign_out)
    _sign_in_method = device_sockets.sign_in_method

    def _main_sessions(self) -> dict[str, str]:
        """Each agent's main session as the page reaches it: the default agent's is where the web chat talks
        (`mainSession`), another's its main session key (sessions/keys.py) — the page builds none itself."""
        return {a: self.default_session if a == self.default_agent else main_session_key(a)
                for a in sorted(self.host.runtimes)}

    @property
    def _reads(self) -> dict[str, Callable[[Any], dict[str, Any]]]:
        """The methods that only read the sessions' files: method -> what answers its params."""
        def listing(p: SessionsListParams) -> dict[str, Any]:
            return self._sessions(p.all)
        return {"chat.image": self._image, "sessions.list": listing}

    # The session reads (chat.history, chat.image, sessions.list) and live sessions: gateway/webchat_sessions.py.
    _image = webchat_sessions.image
    _locate = webchat_sessions.locate
    _writable = webchat_sessions.writable
    _end_reason = webchat_sessions.agent_end_reason
    _ended = webchat_sessions.ended
    _history = webchat_sessions.history
    _state = webchat_sessions.state
    _follow = webchat_sessions.follow
    _waiting = webchat_sessions.waiting
    _look = webchat_sessions.look
    _watch_sessions = webchat_sessions.watch_sessions
    _sessions = webchat_sessions.sessions
    _tell = staticmethod(webchat_sessions.tell)

    def _owner_dm(self, key: SessionKey) -> bool:
        return self.console is not None and self.console.owner_dm(key)

    # ---- live sessions: every tab showing a session follows it (gateway/webchat_sessions.py) ----------
    watch_interval = 0.5  # seconds between looks; a stat per shown session and per agent each time

    async def _dispatch(self, sock: _Socket, client_id: str, req: Request) -> None:
        try:
            if req.method == "connect":
                raise ProtocolError("already_connected", "this socket is already connected", "")
            if req.method == "chat.send":
                send: SendParams = req.params
                files = sock.uploads.take(send.files)
                queued = False
                try:
                    agent, key = await asyncio.to_thread(self._writable, send.session_key or self.default_session,
                                                         send.agent_id, send.session_id)
                    queued = await self._submit(sock, client_id, req.id, send.text, agent, key,
                                                tuple(f.attachment() for f in files))
                finally:
                    if not queued:  # refused, or failed: its files are deleted, never filed
                        for f in files:
                            f.remove()
            elif req.method == "chat.upload":
                upload: UploadParams = req.params
                got = await asyncio.to_thread(sock.uploads.piece, self.channel, client_id, upload)
                await sock.send_raw(res_ok(req.id, got))
            elif req.method == "sessions.new":
                new: NewParams = req.params
                agent, key = await asyncio.to_thread(self._writable, new.session_key or self.default_session,
                                                     new.agent_id, new.session_id)
                await self._submit(sock, client_id, req.id, "/new", agent, key)
            elif req.method == "chat.history":
                hist: HistoryParams = req.params
                agent, key = await asyncio.to_thread(self._locate, hist.session_key, hist.agent_id)
                history = await asyncio.to_thread(self._history, agent, key, hist)
                self._follow(sock, agent, key, history)
                await sock.send_raw(res_ok(req.id, history))
            elif (read := self._reads.get(req.method)) is not None:  # answered from the files, in a thread
                await sock.send_raw(res_ok(req.id, await asyncio.to_thread(read, req.params)))
            elif (req.method == "tickets.create" or req.method.startswith("devices.")) and self.tickets is not None:
                await self._sign_in_method(sock, req)  # only a signed-in (owner's) socket gets here
            elif self.console is not None and self.console.handles(req.method):
                await sock.send_raw(res_ok(req.id, await self.console.call(req.method, req.params)))
            else:
                raise ProtocolError("unavailable", f"{req.method} is not available in this gateway",
                                    "this gateway runs the chat only")
        except ProtocolError as e:
            e.request_id = req.id
            raise
        except (WebSocketDisconnect, WebSocketDisconnected):
            raise  # its answer found the tab gone (closed, its phone locked): the connection ends, no error
        except (HermitError, OSError) as e:
            await sock.send_raw(_failed(req, e))
        except Exception:  # noqa: BLE001 - supervision boundary: one request's failure must not end the owner's socket
            log.exception("web chat %s failed", req.method)
            await sock.send_raw(res_error(req.id, "internal", f"{req.method} failed unexpectedly",
                                          "see the gateway log (`hermit logs`)"))

    async def _submit(self, sock: _Socket, client_id: str, request_id: str, text: str, agent_id: str,
                      session_key: str, attachments: tuple[Attachment, ...] = ()) -> bool:
        """Queue the message for the session `_writable` found, in that agent: a CLI-named key may be in
        several agents' stores, so the bus is told which one the page meant. Whether it was queued."""
        outcome = await self.channel.submit(client_id, text, request_id, session_key, agent_id, attachments)
        if outcome == "queued":
            await sock.send_raw(res_ok(request_id, {"messageId": request_id, "sessionKey": session_key,
                                                    "status": outcome}))
            return True
        elif outcome == "queue_full":
            await sock.send_raw(res_error(request_id, "busy", "this session already has a full queue of messages",
                                          "wait for the current replies, then send again"))
        else:
            await sock.send_raw(res_error(request_id, "unavailable", "the gateway is not taking messages now",
                                          "it is stopping; reconnect when it is back"))
        return False
