"""The web app's signed-in devices on its sockets (gateway/devices.py has the records and the reasoning): a ticket
sign-in's new device checked and recorded, a device seen, its sockets closed once it is signed out — at once when the
web app revokes it (`devices.revoke`), within `device_watch_interval` when `hermit devices revoke` (another process)
does, which the gateway sees by watching the file while a device is connected — and the owner's methods `devices.list`,
`devices.revoke` and `tickets.create` (phone.py). WebchatApi's methods, kept here as webchat_sessions.py keeps the
session reads.

All of it only while devices are on (gateway/device_policy.py: `gateway.remember_devices: auto`, the default, is on
only when the service's socket unit holds the port; true; false; decided at start): off, a ticket sign-in that
offers a key is answered with the token as before devices (nothing recorded), no link is device-only, and a device's
sign-in is refused (`devices_off`, with the gateway's proof, so the page shows why and keeps its key: turning the
setting back on brings the device back). Why off: another local user's program that holds the port while the gateway
is down can serve its own page at the web app's address, and its script can use the device's key.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from typing import TYPE_CHECKING

from starlette.websockets import WebSocketDisconnect

from hermit.errors import HermitError
from hermit.gateway.device_policy import HOW_ON, WHY_UNHELD
from hermit.gateway.devices import TOUCH_SECONDS, Device, device_secret, public_key, signed_text, verify
from hermit.gateway.phone import phone_sign_in
from hermit.gateway.protocol import (
    CLOSE_UNAUTHORIZED,
    ChallengeParams,
    ConnectParams,
    ProtocolError,
    Request,
    handshake_proof,
    res_ok,
)

if TYPE_CHECKING:
    from hermit.gateway.webchat_api import WebchatApi, _Challenge, _Socket

log = logging.getLogger("hermit.gateway.webchat")


def signed(challenge: _Challenge) -> bytes:
    """What a device signs: the page's origin and address and both nonces of this handshake."""
    return signed_text(challenge.origin, challenge.host, challenge.gateway_nonce, challenge.client_nonce)


def touch(self: WebchatApi, did: str) -> bool:
    """Device `did` seen now: whether it is still signed in (a file that cannot be written: it is)."""
    if self.devices is None:
        return False
    try:
        return self.devices.touch(did)
    except (HermitError, OSError) as e:
        log.warning("could not record a device as seen: %s", getattr(e, "message", e))
        return self.devices.get(did) is not None


async def signs_in(self: WebchatApi, sock: _Socket, params: ConnectParams, challenge: _Challenge,
                   device: Device) -> bool:
    """Whether `connect` signs in as `device`: its signature of this handshake, from the origin it signed in at,
    and still signed in now (it may have been revoked since the challenge): then seen now."""
    ok = params.signature is not None and hmac.compare_digest(challenge.origin, device.origin) and \
        await asyncio.to_thread(verify, device.key, params.signature, signed(challenge))
    if ok and await asyncio.to_thread(self._touch, device.id):
        sock.device = device.id
        return True
    return False


DEVICES_OFF_HINT = ("set `gateway.remember_devices: true` in hermit.yaml and restart the gateway to keep browsers "
                    "signed in (only on a computer no one else logs in to), or sign this page in with a new link: run "
                    "`hermit dashboard` (on a phone, scan the code from Operations → Sign in a phone)")


def off_words(self: WebchatApi) -> tuple[str, str]:
    """The refusal's message and hint while devices are off: the setting and, under `auto`, why (device_policy.py)."""
    policy = self.device_policy
    if policy is None or "auto" not in policy.why:
        return "this gateway does not keep browsers signed in (gateway.remember_devices is off)", DEVICES_OFF_HINT
    return ("this gateway does not keep browsers signed in (gateway.remember_devices is off here: it is auto, and "
            f"{WHY_UNHELD})", f"{HOW_ON}; or sign this page in with a new link: run `hermit dashboard` (on a phone, "
            "scan the code from Operations → Sign in a phone)")


async def devices_off(self: WebchatApi, sock: _Socket, req: Request, params: ChallengeParams) -> None:
    """Refuse a device's sign-in while gateway.remember_devices is off: with a proof keyed by the device's secret that
    this gateway says so (the page shows why and keeps its key), then the socket closed."""
    assert params.device_id is not None
    self.refusals.warning("device sign-ins while gateway.remember_devices is off", "web chat sign-in of a device "
                          "refused: gateway.remember_devices is off")
    proof = handshake_proof(device_secret(self._token, params.device_id), "gateway", params.host, params.nonce,
                            "devices-off")
    message, hint = off_words(self)
    await sock.send_raw(json.dumps({"type": "res", "id": req.id, "ok": False, "error": {
        "code": "devices_off", "message": message, "hint": hint, "proof": proof}}))
    await sock.close(CLOSE_UNAUTHORIZED, "devices off")
    raise WebSocketDisconnect(CLOSE_UNAUTHORIZED)


def device_key(self: WebchatApi, challenge: _Challenge, params: ConnectParams) -> bytes | None:
    """The public key (SPKI DER) a ticket sign-in gives, if it signed the handshake with it; None otherwise."""
    assert params.device is not None
    der = public_key(params.device.key)
    if der is None or params.signature is None or not verify(params.device.key, params.signature,
                                                             signed(challenge)):
        return None
    return der


def record(self: WebchatApi, der: bytes, name: str, origin: str) -> Device | None:
    """The device recorded (the ticket being spent); None for a client with no origin (not a browser) or a
    store that cannot be written: that page gets the token, as before devices."""
    if self.devices is None or not origin:
        return None
    try:
        device = self.devices.add(der, name, origin)
    except (HermitError, OSError) as e:
        log.warning("could not record a signed-in device: %s", getattr(e, "message", e))
        return None
    log.info("the web app signed a device in: %s at %s", device.name, device.origin)
    return device


async def device_only(self: WebchatApi, tid: str) -> bool:
    """Whether the ticket named `tid` may sign in a device only (tickets.py: a link at an https address). Never while
    gateway.remember_devices is off: no device exists then, so a link cannot turn one into the token."""
    return self.remember_devices and self.tickets is not None and await asyncio.to_thread(self.tickets.device_only, tid)


def device_only_refused(request_id: str) -> ProtocolError:
    return ProtocolError("device_link", "this link signs in a browser that keeps a key of its own, never a client "
                         "that takes the gateway token", "open it in the phone's browser (its page at this https "
                         "address signs in as a device); for another client run `hermit dashboard` on the computer",
                         request_id=request_id, close=CLOSE_UNAUTHORIZED)


async def proof_signs_in(self: WebchatApi, req: Request, params: ConnectParams,
                         challenge: _Challenge | None) -> tuple[bool, str | None, Device | None]:
    """`connect {proof}` after connect.challenge: (signed in, the id of the ticket it spent, the device it recorded).
    A ticket sign-in that gives a key is checked (its signature), then the ticket spent, then the device recorded, so
    of two connections racing one ticket only the winner's key is; a device-only ticket (tickets.py) that would
    bring the token instead is refused, unspent."""
    assert params.proof is not None
    expected = handshake_proof(challenge.key, "client", challenge.host, challenge.gateway_nonce,
                               challenge.client_nonce) if challenge is not None else ""
    ok = bool(expected) and hmac.compare_digest(params.proof, expected)
    ticket = challenge.ticket_id if ok and challenge is not None else None
    if ticket is None or challenge is None:
        return ok, None, None
    der = None  # the key of the device to record
    if params.device is not None and self.remember_devices:  # off: the key is not looked at, the token is the answer
        der = await asyncio.to_thread(self._device_key, challenge, params)
        if der is None:
            return False, None, None
    only = await self._device_only(ticket)
    if only and (der is None or not challenge.origin):
        raise device_only_refused(req.id)  # it would bring the token
    if not await self._redeem(ticket):
        raise self._expired(req.id)  # another tab redeemed it since the challenge, or it expired
    if der is None or params.device is None:
        return True, ticket, None
    device = await asyncio.to_thread(self._record, der, params.device.name, challenge.origin)
    if device is None and only:
        raise device_only_refused(req.id)  # spent, but no device recorded: not the token either
    return True, ticket, device


def watch(self: WebchatApi) -> None:
    if self._device_watch is None or self._device_watch.done():
        self._device_watch = asyncio.create_task(self._watching_devices(), name="web app device watch")


async def watching(self: WebchatApi) -> None:
    """While a device's socket is open: a device revoked by `hermit devices revoke` (another process) has
    its sockets closed within `device_watch_interval`; an open one is recorded as seen every hour."""
    assert self.devices is not None
    stamp, touched = self.devices.stamp(), asyncio.get_running_loop().time()
    await self._close_signed_out()  # revoked while it signed in, before this look
    while any(s.device for s in self._sockets):
        await asyncio.sleep(self.device_watch_interval)
        now = self.devices.stamp()
        if now != stamp:
            stamp = now
            await self._close_signed_out()
        if asyncio.get_running_loop().time() - touched > TOUCH_SECONDS:
            touched = asyncio.get_running_loop().time()
            for did in {s.device for s in self._sockets if s.device}:
                await asyncio.to_thread(self._touch, did)


async def close_signed_out(self: WebchatApi) -> None:
    """Tell and close every socket whose device is no longer signed in."""
    assert self.devices is not None
    try:
        kept = {d.id for d in await asyncio.to_thread(self.devices.all)}
    except HermitError as e:
        log.warning("cannot read the signed-in devices: %s", e.message)
        return
    for s in [s for s in self._sockets if s.device and s.device not in kept]:
        await self._sign_out(s)


async def sign_out(sock: _Socket) -> None:
    did, sock.device = sock.device, None  # told once
    with contextlib.suppress(Exception):  # noqa: BLE001 - a socket closing meanwhile is signed out as well
        await sock.send_event("device.revoked", {"id": did})
        await sock.close(CLOSE_UNAUTHORIZED, "device signed out")


async def sign_in_method(self: WebchatApi, sock: _Socket, req: Request) -> None:
    """tickets.create (phone.py), devices.list (`current`: this socket's own) and devices.revoke (the device's
    open sockets closed at once)."""
    assert self.devices is not None and self.tickets is not None
    if req.method == "tickets.create":
        server = sock.ws.scope.get("server")
        made = await asyncio.to_thread(phone_sign_in, self.tickets, self.origins, tuple(server) if server else None)
        if made["link"].startswith("https://") and self.remember_devices:  # the phone's page keeps a key: the link
            # never brings the token
            await asyncio.to_thread(self.tickets.restrict, made["link"].split("#ticket=", 1)[1])
        await sock.send_raw(res_ok(req.id, {**made, "remember": self.remember_devices}))
    elif req.method == "devices.revoke":
        gone = await asyncio.to_thread(self.devices.revoke, req.params.id)
        log.info("the web app signed a device out: %s", gone.name)
        await sock.send_raw(res_ok(req.id, {"revoked": gone.public()}))
        for s in [s for s in self._sockets if s.device == gone.id]:
            await self._sign_out(s)
    else:
        listed = await asyncio.to_thread(self.devices.all) if self.remember_devices else []
        why = {"why": self.device_policy.why, "hint": self.device_policy.hint} if self.device_policy else {}
        await sock.send_raw(res_ok(req.id, {"remember": self.remember_devices, **why, "devices": [
            {**d.public(), "current": d.id == sock.device} for d in listed]}))
