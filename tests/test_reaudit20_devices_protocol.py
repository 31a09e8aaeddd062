"""Re-audit of the web app's signed-in devices (gateway/devices.py, device_sockets.py), as an attacker, over the real
protocol: a `hermit gateway run`, WebSocket clients holding real ECDSA keys, the store's file as it is on disk.

What broke: a device list the gateway could not read (a file not 0600 after a restore, a corrupt or oversized file)
was answered as "this device is signed out" *with the gateway's proof*, so every phone that connected then forgot its
key for good — a file the owner can fix cost every sign-in. What holds (guards): a forged key (another curve, not a
point, another algorithm, too long) spends no ticket and records nothing; another local user's program (uid 65534)
naming a device is refused before the gateway proves anything; nothing that signs in (token, ticket, a device's
secret) reaches the gateway's log or the store; revoking a device in the middle of its turn closes its socket and the
gateway goes on."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from ciguard import need
from devicehelpers import running_gateway
from gatewayhelpers import GatewayProcess
from hermit.gateway.devices import Devices, device_secret
from hermit.gateway.protocol import CLOSE_PROTOCOL, handshake_proof
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT, python_as, pythonpath
from test_gateway_tickets import closed_with
from test_s20_devices_protocol import Conn, Key, b64, device_conn, new_ticket, sign_in

REMEMBER = "  remember_devices: true\n"  # devices are opt-in (gateway.remember_devices)


class Served:
    def __init__(self, gw: GatewayProcess, fake: FakeProvider) -> None:
        self.gw, self.fake = gw, fake


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with running_gateway(tmp_path_factory.mktemp("reaudit-devices") / "home", extra=REMEMBER, replies=8) as served:
        yield Served(*served)


def spki(key: Any) -> str:
    return b64(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))


def test_a_device_list_the_gateway_cannot_read_signs_no_device_out(served: Served) -> None:
    """A devices.json left 0644 (a restore), corrupt, past the size limit (10,000 devices written by hand) or with a
    time as text: the device is refused with what is wrong but *without* the gateway's signed-out proof, so the page
    keeps its key, and once the file is put right it signs in as before. The file is never overwritten meanwhile."""
    gw = served.gw
    key = Key()
    did = sign_in(gw, key)["device"]["id"]
    path = gw.home / "gateway" / "devices.json"
    good = path.read_bytes()
    entry = json.loads(good)["devices"][0]
    spoils = {
        "not private": lambda: path.chmod(0o644),
        "corrupt": lambda: path.write_bytes(good[: len(good) // 2]),
        "10,000 devices": lambda: path.write_text(json.dumps({"version": 1, "devices": [entry] * 10_000})),
        "a time as text": lambda: path.write_text(json.dumps({"version": 1, "devices": [
            {**entry, "last_seen": "yesterday"}]})),
    }
    for what, spoil in spoils.items():
        spoil()
        spoiled = path.read_bytes()
        try:
            with Conn(gw, device=did) as c:
                error = c.challenge.get("error") or {}
                assert not c.challenge["ok"], (what, c.challenge)
                assert error["code"] != "device_signed_out" and "proof" not in error, (what, error)
                assert "devices" in error["message"] and error["hint"], (what, error)
                assert closed_with(c.ws) == CLOSE_PROTOCOL, what  # the page tries again; 4401 would stop it
            assert path.read_bytes() == spoiled, what  # nothing written over what the owner must look at
        finally:
            path.chmod(0o600)
            path.write_bytes(good)
    with device_conn(gw, key, did) as (_, reply):
        assert reply["ok"], reply


def forged_keys() -> dict[str, str]:
    der = base64.urlsafe_b64decode(Key().spki + "==")
    return {
        "P-384": spki(ec.generate_private_key(ec.SECP384R1()).public_key()),
        "secp256k1": spki(ec.generate_private_key(ec.SECP256K1()).public_key()),
        "Ed25519": spki(ed25519.Ed25519PrivateKey.generate().public_key()),
        "not a point": b64(der[:-1] + bytes([der[-1] ^ 1])),
        "truncated": b64(der[:80]),
        "huge": b64(der * 3),
        "not base64": "!" * 120,
    }


def test_a_forged_device_key_spends_no_ticket_and_records_nothing(served: Served) -> None:
    gw = served.gw
    ticket = new_ticket(gw)
    before = {d.id for d in Devices(gw.home).all()}
    signature = b64(os.urandom(64))
    for what, key in forged_keys().items():
        with Conn(gw, ticket=ticket) as c:
            assert c.challenge["ok"], c.challenge
            proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
            reply = c.connect(proof=proof, device={"key": key, "name": "x"}, signature=signature)
            assert not reply["ok"] and gw.token not in json.dumps(reply), (what, reply)
            assert closed_with(c.ws) in (4400, 4401), what
    assert {d.id for d in Devices(gw.home).all()} == before
    good = Key()
    with Conn(gw, ticket=ticket) as c:  # the ticket was never spent
        proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        assert c.connect(proof=proof, device={"key": good.spki, "name": "x"}, signature=good.sign(c.signed()))["ok"]


AS_NOBODY = """
import json, sys
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
host, did = sys.argv[1], sys.argv[2]
got = []
try:
    with connect(f"ws://{host}/ws", origin=f"http://{host}", open_timeout=10) as ws:
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect.challenge",
                            "params": {"nonce": "n" * 32, "host": host, "deviceId": did}}))
        got.append(ws.recv(10))
except ConnectionClosed as e:
    got.append(f"closed {e.rcvd.code if e.rcvd else None}")
except Exception as e:
    got.append(f"refused {type(e).__name__}: {e}")
print(json.dumps(got))
"""


def test_another_users_program_naming_a_device_gets_no_proof(served: Served) -> None:
    """uid 65534 on this machine, with the device's (public) id, from the page's own origin: refused before the
    gateway proves anything or says whether the device is signed in."""
    gw = served.gw
    need(os.geteuid() == 0, "root, to run a client as uid 65534")
    nobody = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(nobody)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    did = sign_in(gw, Key())["device"]["id"]
    host = gw.url.split("//", 1)[1].split("/", 1)[0]
    done = subprocess.run([python, "-c", AS_NOBODY, host, did], capture_output=True, text=True, timeout=PROC_TIMEOUT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()}, cwd="/", **nobody)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert not any("proof" in g or "nonce" in g for g in got), got
    assert any("1008" in g or "403" in g for g in got), got
    assert "uid 65534" in gw.stderr()


def test_nothing_that_signs_in_reaches_the_log_or_the_store(served: Served) -> None:
    gw = served.gw
    key = Key()
    ticket = new_ticket(gw)
    with Conn(gw, ticket=ticket) as c:
        proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        hello = c.connect(proof=proof, device={"key": key.spki, "name": "phone"}, signature=key.sign(c.signed()))
    did = hello["payload"]["device"]["id"]
    secret = device_secret(gw.token.encode(), did)
    with device_conn(gw, key, did) as (c, reply):
        assert reply["ok"]
        c.call("r", "devices.revoke", id=did)
    secrets = {"token": gw.token, "ticket": ticket, "secret b64": b64(secret), "secret hex": secret.hex()}
    log = gw.stderr()
    store = (gw.home / "gateway" / "devices.json").read_text()
    assert "signed a device in" in log and "signed a device out" in log  # the log is the gateway's, and says it
    for what, value in secrets.items():
        assert value not in log and value not in store, what


def test_revoking_a_device_in_the_middle_of_its_turn(served: Served) -> None:
    """The device's turn is running (the model holds its answer) when `hermit devices revoke` (another process)
    signs it out: its socket is told and closed within the watch interval, the turn ends on its own, and the
    gateway goes on (another device signs in, the reply is in the transcript)."""
    gw, fake = served.gw, served.fake
    key, other = Key(), Key()
    did, other_id = sign_in(gw, key)["device"]["id"], sign_in(gw, other)["device"]["id"]
    fake.hold()
    try:
        with device_conn(gw, key, did) as (c, reply):
            assert reply["ok"]
            c.ws.send(json.dumps({"type": "req", "id": "s", "method": "chat.send", "params": {"text": "hello"}}))
            assert fake.waiting.wait(30)
            Devices(gw.home).revoke(did)
            seen: list[str] = []
            while True:
                frame = json.loads(c.ws.recv(10))
                seen.append(frame.get("event") or frame.get("id"))
                if frame.get("event") == "device.revoked":
                    break
            assert closed_with(c.ws) == 4401
    finally:
        fake.release()
    with device_conn(gw, other, other_id) as (c, reply):
        assert reply["ok"], reply
        history = c.call("h", "chat.history")
        assert history["ok"] and "hello" in json.dumps(history["payload"])
    with device_conn(gw, key, did) as (_, reply):
        assert not reply["ok"] and reply["error"]["code"] == "device_signed_out"
    assert gw.proc.poll() is None


def test_the_store_refuses_a_link_and_a_corrupt_file_and_keeps_32(tmp_path: Path) -> None:
    """A link planted as devices.json is not followed (read or written), a corrupt file (or one with a time as
    text) is reported and left as it is, and 40 sign-ins keep the 32 seen last."""
    from hermit.errors import HermitError

    home = tmp_path / "home"
    (home / "gateway").mkdir(parents=True, mode=0o700)
    store = Devices(home)
    target = tmp_path / "elsewhere.json"
    target.write_text('{"version": 1, "devices": []}')
    target.chmod(0o600)
    store.path.symlink_to(target)
    for act in (store.all, lambda: store.add(b"\x30" * 91, "x", "http://127.0.0.1:1")):
        with pytest.raises(HermitError) as e:
            act()
        assert str(store.path) in e.value.message and e.value.hint
    assert target.read_text() == '{"version": 1, "devices": []}' and store.path.is_symlink()
    store.path.unlink()
    store.path.write_text('{"version": 1, "devices": [{"id": 1}]}')
    store.path.chmod(0o600)
    with pytest.raises(HermitError) as e:
        store.add(b"\x30" * 91, "x", "http://127.0.0.1:1")
    assert "is not a device list Hermit wrote" in e.value.message and "remove it" in e.value.hint
    assert store.path.read_text() == '{"version": 1, "devices": [{"id": 1}]}'
    typed = {"id": "ab" * 32, "key": "k", "name": "n", "origin": "o", "added": 1, "last_seen": "yesterday"}
    store.path.write_text(json.dumps({"version": 1, "devices": [typed]}))
    for act in (store.all, lambda: store.revoke("ababab")):  # a clear error, not a TypeError's traceback
        with pytest.raises(HermitError) as e:
            act()
        assert "is not a device list Hermit wrote" in e.value.message
    store.path.unlink()
    clock = [1_000_000.0]
    store = Devices(home, clock=lambda: clock[0])
    added = []
    for i in range(40):
        clock[0] += 1
        added.append(store.add(bytes([i]) * 91, f"phone {i}", "http://127.0.0.1:1").id)
    assert [d.id for d in store.all()] == added[:-33:-1]
    assert os.stat(store.path).st_mode & 0o777 == 0o600


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway behind a TLS proxy: its phone links are https://hermit.example/#ticket=…"""
    home = tmp_path_factory.mktemp("reaudit-devices-https") / "home"
    with running_gateway(home, extra='  allowed_origins: ["https://hermit.example"]\n' + REMEMBER) as (gateway, _):
        yield gateway


def test_a_device_cannot_turn_a_phone_link_into_the_token(proxied: GatewayProcess) -> None:
    """A signed-in device (a lost phone in other hands, or a script running as the device) made a phone link (Sign in
    a phone) and redeemed it with a client that is not a browser: it got the gateway token, which revoking the device
    does not take back. A link at an https address signs in a browser that records a device only: the ticket itself
    (no key) and a proof with no key are refused without spending it, and a browser with a key signs in with it."""
    from websockets.sync.client import connect

    gw = proxied
    key = Key()
    did = sign_in(gw, key)["device"]["id"]
    with device_conn(gw, key, did) as (c, reply):
        assert reply["ok"]
        made = c.call("t", "tickets.create")
        assert made["ok"], made
        c.call("r", "devices.revoke", id=did)  # the owner revokes the lost device
    link = made["payload"]["link"]
    assert link.startswith("https://hermit.example/#ticket=")
    ticket = link.split("#ticket=", 1)[1]
    with connect(gw.ws_url) as ws:  # no Origin: not a browser
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"ticket": ticket}}))
        hello = json.loads(ws.recv(10))
        assert not hello["ok"] and hello["error"]["code"] == "device_link", hello
        assert gw.token not in json.dumps(hello) and closed_with(ws) == 4401
    with Conn(gw, ticket=ticket) as c:  # the handshake, but no key to record
        proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        refused = c.connect(proof=proof)
        assert not refused["ok"] and refused["error"]["code"] == "device_link", refused
    phone = Key()
    with Conn(gw, ticket=ticket) as c:  # unspent: a browser that keeps a key signs in as a device
        proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        hello = c.connect(proof=proof, device={"key": phone.spki, "name": "phone"}, signature=phone.sign(c.signed()))
        assert hello["ok"] and "device" in hello["payload"] and "token" not in hello["payload"], hello


def test_a_page_on_another_port_cannot_name_the_device(served: Served) -> None:
    """Another local user's web page open in the owner's browser (http://127.0.0.1:<another port>: another origin,
    with an IndexedDB of its own) learns the device id somehow and opens the gateway's socket: refused before the
    gateway proves anything, the device untouched."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    gw = served.gw
    key = Key()
    did = sign_in(gw, key)["device"]["id"]
    seen = next(d.last_seen for d in Devices(gw.home).all() if d.id == did)
    host = gw.url.split("//", 1)[1].split("/", 1)[0]
    for origin in (f"http://127.0.0.1:{gw.port + 1}", f"http://localhost:{gw.port}.evil.example", "null"):
        with connect(gw.ws_url, origin=origin) as ws:  # type: ignore[arg-type]
            with contextlib.suppress(ConnectionClosed):  # refused at once, maybe before this is sent
                ws.send(json.dumps({"type": "req", "id": "c", "method": "connect.challenge",
                                    "params": {"nonce": "n" * 32, "host": host, "deviceId": did}}))
            first = json.loads(ws.recv(10))
            assert first["ok"] is False and first["error"]["code"] == "origin_refused", first
            assert "proof" not in json.dumps(first) and closed_with(ws) == 1008
    assert next(d.last_seen for d in Devices(gw.home).all() if d.id == did) == seen
