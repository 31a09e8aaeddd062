"""The gateway's WebSocket frames (SPEC §15): parsing client requests and building responses and events.

Client → gateway: `{"type": "req", "id": str, "method": str, "params": {...}}`; the first must be
`connect` with the token, or `connect.challenge` and then `connect` with a proof (`handshake_proof`): the
gateway proves it holds the token before the client shows anything, so a program squatting the gateway's
port while it restarts never sees the token (the web app connects so). A page opened with `hermit
dashboard`'s one-time ticket does the same handshake keyed by the ticket, and `hello-ok` gives it the token.
Gateway → client: `{"type": "res", "id", "ok": true, "payload"}` or
`{"type": "res", "id", "ok": false, "error": {"code", "message", "hint"}}`, and
`{"type": "event", "event", "payload", "seq"}` with `seq` counting up per connection.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hermit.wire import WireError, load_json

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 256 * 1024  # a chat message, generously; anything larger is refused and the socket closed
MAX_FRAME_DEPTH = 16  # a request nests three levels; deeper is refused before it is walked
# Files from the web app come in pieces (`chat.upload`), each frame well under MAX_FRAME_BYTES, written to the
# state dir's inbox as they come (channels/inbox.py), so no frame nor buffer ever holds a whole photo. At most
# MAX_UPLOAD_BYTES for the files of one message: a phone's photo is 2-6 MB; the channels take up to 20 MB, but a
# file the page sends is read into the tab's memory and base64'd piece by piece over a LAN or a tunnel, and a
# model is shown an image of at most 3.75 MiB anyway (gateway/attachments.py).
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MAX_UPLOAD_FILES = 4  # of one message, as many images as one message may show the model
UPLOAD_CHUNK_BYTES = 144 * 1024  # the most one chat.upload carries: 192 KiB as base64
UPLOAD_ID = r"^[A-Za-z0-9_-]{1,64}$"

# Close codes (RFC 6455 + the 4000-4999 private range).
CLOSE_TOO_BIG = 1009
CLOSE_POLICY = 1008
CLOSE_UNAUTHORIZED = 4401
CLOSE_PROTOCOL = 4400
CLOSE_SIGN_IN_TIMEOUT = 4408  # no `connect` within gateway.sign_in_seconds (gateway/unsigned.py)

# The web app's methods: the chat, and the owner's console (memory, cron, channels, pairing, logs). Every one
# needs the token holder's `connect` first; none has an HTTP route of its own.
METHODS = ("chat.send", "chat.upload", "chat.history", "chat.image", "sessions.list", "sessions.new",
           "memory.search", "memory.get", "memory.files", "memory.write", "memory.append", "memory.status",
           "cron.list", "cron.status", "cron.runs", "cron.run", "cron.update", "cron.add", "cron.remove",
           "channels.status", "pairing.list", "pairing.approve", "pairing.deny", "pairing.revoke",
           "logs.tail", "gateway.status", "tickets.create", "devices.list", "devices.revoke")


class ProtocolError(Exception):
    """A frame the gateway cannot act on: answered with an error response (and `close` to end the socket)."""

    def __init__(self, code: str, message: str, hint: str = "", *, request_id: str | None = None,
                 close: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.request_id = request_id
        self.close = close


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceParams(_Params):
    key: str = Field(pattern=r"^[A-Za-z0-9_-]{100,200}$")  # SPKI DER of an ECDSA P-256 public key, base64url
    name: str = Field("", max_length=200)


class ConnectParams(_Params):
    token: str | None = Field(None, min_length=1, max_length=512)
    proof: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")  # after connect.challenge, instead of the token
    # `hermit dashboard`'s one-time ticket, sent itself only outside a secure context (no WebCrypto; tickets.py)
    ticket: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{16,128}$")
    client_id: str | None = Field(None, alias="clientId", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    client: str | None = Field(None, max_length=200)  # e.g. "hermit-webchat/1"
    # A device's ECDSA signature (base64url r||s) after connect.challenge with its deviceId (gateway/devices.py)...
    signature: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{80,90}$")
    # ...or, signing in with a ticket, the device to record: its public key and that signature (proof it holds it).
    device: DeviceParams | None = None


# A name or IPv4 address, or a bracketed IPv6 one, and an optional port: nothing else (no space, no control).
HOST_PORT = re.compile(r"(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_.])?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


class ChallengeParams(_Params):
    nonce: str = Field(pattern=r"^[A-Za-z0-9_-]{16,128}$")  # the client's, fresh for this connection
    host: str = Field(min_length=1, max_length=300)  # the host[:port] the client believes it talks to
    # The sha256 (hex) of a one-time ticket from `hermit dashboard`: the handshake is then keyed by the ticket,
    # and `connect` answers with the token (tickets.py). Without it, keyed by the token.
    ticket_id: str | None = Field(None, alias="ticketId", pattern=r"^[0-9a-f]{64}$")
    # A signed-in device's id (the sha256 of its public key): keyed by that device instead (gateway/devices.py).
    device_id: str | None = Field(None, alias="deviceId", pattern=r"^[0-9a-f]{64}$")

    @field_validator("host")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if HOST_PORT.fullmatch(value) is None:  # it is logged when refused: nothing but a host and a port
            raise ValueError("not a host[:port] (the page's location.host)")
        return value


def handshake_proof(token: bytes, side: str, host: str, first: str, second: str) -> str:
    """HMAC-SHA256(token, "hermit-<side>|<host>|<first>|<second>") in hex. The gateway's proof is over (client
    nonce, gateway nonce), the client's over (gateway nonce, client nonce), so neither passes for the other;
    both name the address the page was loaded from, which the gateway accepts only if it is its own: a
    program holding the old port cannot relay a page's handshake to a gateway started on another one."""
    return hmac.new(token, f"hermit-{side}|{host}|{first}|{second}".encode(), hashlib.sha256).hexdigest()


def _agent_id() -> Any:
    return Field(None, alias="agentId", pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")


def _session_id() -> Any:
    """One session of a key (from sessions.list: the current one, or an ended one); it names a transcript file,
    so nothing but what a session id is made of (no dot first, no slash)."""
    return Field(None, alias="sessionId", pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$")


class SendParams(_Params):
    text: str = Field("", max_length=100_000)  # may be empty when files come with it
    session_key: str | None = Field(None, alias="sessionKey", max_length=300)
    agent_id: str | None = _agent_id()  # the agent whose session it is (from sessions.list), for keys naming none
    session_id: str | None = _session_id()  # the session the page shows: one that has ended answers read_only
    # Finished uploads of this socket (chat.upload) sent with the message, in order.
    files: tuple[Annotated[str, Field(pattern=UPLOAD_ID)], ...] = Field((), max_length=MAX_UPLOAD_FILES)

    @model_validator(mode="after")
    def _something(self) -> SendParams:
        if not self.text and not self.files:
            raise ValueError("a message needs text or a file")
        return self


class UploadParams(_Params):
    """One piece of a file the page sends: the first (`offset` 0) names it, the last says `done`."""

    upload_id: str = Field(alias="uploadId", pattern=UPLOAD_ID)
    name: str | None = Field(None, max_length=1_000)  # the file's name, the sender's to choose (made safe)
    offset: int = Field(ge=0, le=MAX_UPLOAD_BYTES)
    data: str = Field(max_length=4 * -(-UPLOAD_CHUNK_BYTES // 3))  # base64
    done: bool = False


class HistoryParams(_Params):
    session_key: str | None = Field(None, alias="sessionKey", max_length=300)
    agent_id: str | None = _agent_id()
    session_id: str | None = _session_id()  # an ended session of the key (default: its current one)
    limit: int = Field(200, ge=1, le=2000)
    # The images of the owner's own user turns (the web app's thumbnails; history.HISTORY_IMAGE_BUDGET)
    images: bool = False
    # ...named by their SHA-256 (with type and size), not sent: chat.image brings each one (history.py)
    image_refs: bool = Field(False, alias="imageRefs")


class ImageParams(_Params):
    """chat.image: one image of a user turn of that session (a `sha256` chat.history named)."""

    session_key: str | None = Field(None, alias="sessionKey", max_length=300)
    agent_id: str | None = _agent_id()
    session_id: str | None = _session_id()  # an ended session of the key (default: its current one)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class ListParams(_Params):
    pass


class SessionsListParams(_Params):
    all: bool = False  # also the ended sessions (`ended`) and, on each current session, how many it had before


class NewParams(_Params):
    session_key: str | None = Field(None, alias="sessionKey", max_length=300)
    agent_id: str | None = _agent_id()
    session_id: str | None = _session_id()


class AgentParams(_Params):
    agent_id: str | None = _agent_id()


class MemorySearchParams(AgentParams):
    query: str = Field(min_length=1, max_length=2_000)
    max_results: int | None = Field(None, alias="maxResults", ge=1, le=50)
    min_score: float | None = Field(None, alias="minScore", ge=0.0, le=1.0)


class MemoryGetParams(AgentParams):
    path: str = Field(min_length=1, max_length=1_000)
    from_line: int | None = Field(None, alias="from", ge=1)
    lines: int | None = Field(None, ge=1)


class MemoryWriteParams(AgentParams):
    path: str = Field(min_length=1, max_length=1_000)
    content: str = Field(max_length=200_000)
    # The sha256 of the text the edit started from (memory.get gives it): a file changed since is refused.
    base_sha256: str | None = Field(None, alias="baseSha256", pattern=r"^[0-9a-f]{64}$")


class MemoryAppendParams(AgentParams):
    text: str = Field(min_length=1, max_length=20_000)
    # Owner-only (an owner origin block) unless asked otherwise: the owner's own words, like the main session's
    # writes; `private: false` makes it a shared hand-written note every chat may read.
    private: bool = True


class CronJobParams(_Params):
    id: str = Field(min_length=1, max_length=64)


class CronRunsParams(CronJobParams):
    limit: int = Field(20, ge=1, le=200)


class CronUpdateParams(CronJobParams):
    enabled: bool


class CronAddParams(_Params):
    job: dict[str, Any]  # a job spec as `hermit cron add` and the cron tool take it (validated there)


class PairingListParams(_Params):
    channel: str | None = Field(None, max_length=40)


class PairingDecideParams(_Params):
    channel: str = Field(min_length=1, max_length=40)
    code: str = Field(min_length=1, max_length=20)


class PairingRevokeParams(_Params):
    channel: str = Field(min_length=1, max_length=40)
    sender: str = Field(min_length=1, max_length=200)
    account_id: str | None = Field(None, alias="accountId", max_length=100)


class DeviceRevokeParams(_Params):
    id: str = Field(pattern=r"^[0-9a-f]{6,64}$")


class LogsTailParams(_Params):
    lines: int = Field(200, ge=1, le=2_000)


PARAMS: dict[str, type[_Params]] = {
    "connect": ConnectParams, "connect.challenge": ChallengeParams, "chat.send": SendParams, "chat.upload": UploadParams,
    "chat.history": HistoryParams, "chat.image": ImageParams,
    "sessions.list": SessionsListParams,
    "sessions.new": NewParams,
    "memory.search": MemorySearchParams, "memory.get": MemoryGetParams, "memory.files": AgentParams,
    "memory.write": MemoryWriteParams, "memory.append": MemoryAppendParams, "memory.status": AgentParams,
    "cron.list": ListParams, "cron.status": ListParams, "cron.runs": CronRunsParams, "cron.run": CronJobParams,
    "cron.update": CronUpdateParams, "cron.add": CronAddParams, "cron.remove": CronJobParams,
    "channels.status": ListParams, "pairing.list": PairingListParams, "pairing.approve": PairingDecideParams,
    "pairing.deny": PairingDecideParams, "pairing.revoke": PairingRevokeParams, "logs.tail": LogsTailParams,
    "gateway.status": ListParams, "tickets.create": ListParams,
    "devices.list": ListParams, "devices.revoke": DeviceRevokeParams,
}


@dataclass(frozen=True)
class Request:
    id: str
    method: str
    params: Any  # the method's params model


def parse_request(raw: str | bytes) -> Request:
    """One client frame → Request, or ProtocolError saying exactly what is wrong with it."""
    if len(raw) > MAX_FRAME_BYTES:
        raise ProtocolError("frame_too_large", f"frame of {len(raw):,} bytes is over the {MAX_FRAME_BYTES:,} limit",
                            "send shorter messages", close=CLOSE_TOO_BIG)
    try:
        # Depth-capped (200 KB of `[[[[` raised RecursionError and dropped the socket) and made valid
        # Unicode (a lone surrogate in an id would fail the response frame that echoes it).
        frame = load_json(raw, max_depth=MAX_FRAME_DEPTH)
    except WireError as e:
        raise ProtocolError("bad_json", f"the frame is not usable JSON: {e.reason}",
                            "send one JSON object per frame") from None
    if not isinstance(frame, dict):
        raise ProtocolError("bad_frame", "the frame is not a JSON object", 'send {"type": "req", ...}')
    rid = frame.get("id")
    request_id = rid if isinstance(rid, str) and 0 < len(rid) <= 100 else None
    if frame.get("type") != "req":
        raise ProtocolError("bad_frame", f"frame type {frame.get('type')!r} is not 'req'",
                            "clients send only req frames", request_id=request_id)
    if request_id is None:
        raise ProtocolError("bad_frame", "the request has no 'id' (a string of 1-100 characters)",
                            "give every request an id; its response carries the same id")
    method = frame.get("method")
    model = PARAMS.get(method) if isinstance(method, str) else None
    if model is None:
        raise ProtocolError("unknown_method", f"unknown method {method!r}",
                            f"methods: connect, {', '.join(METHODS)}", request_id=request_id)
    params = frame.get("params", {})
    try:
        parsed = model.model_validate(params if params is not None else {})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "params"
        raise ProtocolError("bad_params", f"{method}: {where}: {first['msg']}",
                            "see the protocol in docs/gateway.md", request_id=request_id) from e
    return Request(request_id, method, parsed)  # type: ignore[arg-type]


def res_ok(request_id: str, payload: Any) -> str:
    return json.dumps({"type": "res", "id": request_id, "ok": True, "payload": payload}, ensure_ascii=False)


def res_error(request_id: str | None, code: str, message: str, hint: str = "") -> str:
    return json.dumps({"type": "res", "id": request_id, "ok": False,
                       "error": {"code": code, "message": message, "hint": hint}}, ensure_ascii=False)


def event_frame(event: str, payload: Any, seq: int) -> str:
    return json.dumps({"type": "event", "event": event, "payload": payload, "seq": seq}, ensure_ascii=False)
