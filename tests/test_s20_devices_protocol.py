"""Signed-in devices (gateway/devices.py) over the real protocol: a `hermit gateway run`, WebSocket clients holding
real ECDSA P-256 keys (what the web app's WebCrypto makes), `hermit devices` as a subprocess, the store's file as it
is on disk. A ticket sign-in that gives a key records a device and brings no token; the device signs in again by
signing the gateway's fresh nonce, only from the origin it signed in at; forged, replayed or other keys' signatures
are refused; revoked or idle-too-long devices are refused with a proof the gateway gives; revoking closes the
device's open sockets at once (from the web app or the CLI); the file survives a kill -9 mid-write and is the
owner's alone, as root and as uid 65534."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from ciguard import need
from devicehelpers import running_gateway
from gatewayhelpers import GatewayProcess
from hermit.gateway.devices import IDLE_SECONDS, Devices, device_secret, signed_text
from hermit.gateway.protocol import handshake_proof
from hermit.gateway.tickets import issue_ticket, ticket_id
from prochelpers import PROC_TIMEOUT, python_as, pythonpath, shared_dir
from test_gateway_tickets import closed_with, frame, gateway_pid, host_of

REMEMBER = "  remember_devices: true\n"  # devices are opt-in (gateway.remember_devices)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_gateway(tmp_path_factory.mktemp("devices") / "home", extra=REMEMBER) as (gateway, _):
        yield gateway


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Key:
    """A device's key pair, as WebCrypto's ECDSA P-256 makes it: the public half as SPKI, signatures as r‖s."""

    def __init__(self) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.spki = b64(self.private.public_key().public_bytes(serialization.Encoding.DER,
                                                                 serialization.PublicFormat.SubjectPublicKeyInfo))

    def sign(self, message: bytes) -> str:
        r, s = decode_dss_signature(self.private.sign(message, ec.ECDSA(hashes.SHA256())))
        return b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def origin_of(gw: GatewayProcess) -> str:
    return f"http://{host_of(gw)}"


class Conn(contextlib.ExitStack):
    """One WebSocket to the gateway from the page's `origin`, through connect.challenge keyed by `ticket` or
    `device` (its id)."""

    def __init__(self, gw: GatewayProcess, *, ticket: str | None = None, device: str | None = None,
                 origin: str | None = None, host: str | None = None) -> None:
        from websockets.sync.client import connect

        super().__init__()
        self.host = host or host_of(gw)
        self.origin = origin or origin_of(gw)
        self.nonce = "n" + os.urandom(16).hex()
        url = f"ws://{self.host}/ws"
        self.ws = self.enter_context(connect(url, origin=self.origin))  # type: ignore[arg-type]
        params: dict[str, Any] = {"nonce": self.nonce, "host": self.host}
        if ticket is not None:
            params["ticketId"] = ticket_id(ticket)
        if device is not None:
            params["deviceId"] = device
        self.ws.send(frame("challenge", "connect.challenge", **params))
        self.challenge: dict[str, Any] = json.loads(self.ws.recv(10))

    @property
    def gateway_nonce(self) -> str:
        return str(self.challenge["payload"]["nonce"])

    def signed(self, origin: str | None = None) -> bytes:
        return signed_text(origin or self.origin, self.host, self.gateway_nonce, self.nonce)

    def connect(self, **params: Any) -> dict[str, Any]:
        self.ws.send(frame("connect", "connect", clientId="dev1", **params))
        reply: dict[str, Any] = json.loads(self.ws.recv(10))
        return reply

    def call(self, rid: str, method: str, **params: Any) -> dict[str, Any]:
        self.ws.send(frame(rid, method, **params))
        while True:
            got: dict[str, Any] = json.loads(self.ws.recv(10))
            if got.get("id") == rid:
                return got


def new_ticket(gw: GatewayProcess) -> str:
    return issue_ticket(gw.home, gateway_pid(gw))


def sign_in(gw: GatewayProcess, key: Key, name: str = "Chrome on Android") -> dict[str, Any]:
    """A ticket sign-in that gives `key`: the hello-ok's payload."""
    ticket = new_ticket(gw)
    with Conn(gw, ticket=ticket) as c:
        assert c.challenge["ok"], c.challenge
        proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        hello = c.connect(proof=proof, device={"key": key.spki, "name": name}, signature=key.sign(c.signed()))
    assert hello["ok"], hello
    payload: dict[str, Any] = hello["payload"]
    return payload


@contextlib.contextmanager
def device_conn(gw: GatewayProcess, key: Key, did: str, **kw: Any) -> Iterator[tuple[Conn, dict[str, Any]]]:
    """A device sign-in by `key`: the gateway's proof checked, then the signature; (the connection, its reply)."""
    with Conn(gw, device=did, **kw) as c:
        if c.challenge["ok"]:
            secret = device_secret(gw.token.encode(), did)
            assert c.challenge["payload"]["proof"] == handshake_proof(secret, "gateway", c.host, c.nonce,
                                                                      c.gateway_nonce)
            yield c, c.connect(signature=key.sign(c.signed()))
        else:
            yield c, c.challenge


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "devices", *args],
                          capture_output=True, text=True, timeout=PROC_TIMEOUT)


def test_a_ticket_sign_in_with_a_key_records_the_device_and_never_gives_the_token(gw: GatewayProcess) -> None:
    key = Key()
    hello = sign_in(gw, key, "Chrome on Android\u202e\x1b[2J")
    assert "token" not in hello and gw.token not in json.dumps(hello)
    did = hello["device"]["id"]
    assert hello["deviceId"] == did
    assert base64.urlsafe_b64decode(hello["device"]["secret"] + "=") == device_secret(gw.token.encode(), did)
    path = gw.home / "gateway" / "devices.json"
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
    assert gw.token not in path.read_text()  # public keys, names, times: nothing that signs in
    with device_conn(gw, key, did) as (_, reply):  # later: no ticket, no token
        assert reply["ok"], reply
        assert reply["payload"]["deviceId"] == did and "token" not in reply["payload"]
    listed = json.loads(cli(gw.home, "list", "--json").stdout)
    mine = next(d for d in listed if d["id"] == did)
    assert mine["origin"] == origin_of(gw) and mine["name"] == "Chrome on Android [2J"  # hidden characters gone
    shown = cli(gw.home, "list")
    assert shown.returncode == 0 and did[:12] in shown.stdout and "\x1b" not in shown.stdout


def test_a_forged_replayed_or_other_keys_signature_is_refused(gw: GatewayProcess) -> None:
    key, other = Key(), Key()
    did = sign_in(gw, key)["device"]["id"]
    with device_conn(gw, key, did) as (c, reply):
        assert reply["ok"]
        used = key.sign(c.signed())
    forged = b64(os.urandom(64))
    for signature in (forged, used, "A" * 86):  # random, a connection's before (another nonce), zeros
        with Conn(gw, device=did) as c:
            reply = c.connect(signature=signature)
            assert not reply["ok"] and reply["error"]["code"] == "unauthorized", reply
            assert closed_with(c.ws) == 4401
    with Conn(gw, device=did) as c:  # a key that is not the device's, signing the right text
        assert not c.connect(signature=other.sign(c.signed()))["ok"]
    with Conn(gw, device=did) as c:  # the device's own key over another address's text
        assert not c.connect(signature=key.sign(signed_text(c.origin, "127.0.0.1:1", c.gateway_nonce,
                                                           c.nonce)))["ok"]
    with Conn(gw, device=did) as c:  # a proof keyed by the token is not a device's sign-in
        proof = handshake_proof(gw.token.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        assert not c.connect(proof=proof)["ok"]
    with device_conn(gw, key, did) as (_, reply):  # and the device itself still signs in
        assert reply["ok"]


def test_a_ticket_sign_in_with_a_key_it_cannot_sign_with_spends_nothing(gw: GatewayProcess) -> None:
    key, other = Key(), Key()
    ticket = new_ticket(gw)
    with Conn(gw, ticket=ticket) as c:
        proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        reply = c.connect(proof=proof, device={"key": key.spki, "name": "x"}, signature=other.sign(c.signed()))
        assert not reply["ok"] and closed_with(c.ws) == 4401
    before = {d.id for d in Devices(gw.home).all()}
    with Conn(gw, ticket=ticket) as c:  # the ticket is still good: one who holds the key signs in with it
        proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        assert c.connect(proof=proof, device={"key": key.spki, "name": "x"}, signature=key.sign(c.signed()))["ok"]
    assert len({d.id for d in Devices(gw.home).all()} - before) == 1


def test_another_origin_cannot_use_the_device(gw: GatewayProcess) -> None:
    """Signed in at http://127.0.0.1:<port>: from http://localhost:<port> (another origin of the same gateway) the
    same key's signature is refused, whatever origin it names."""
    key = Key()
    did = sign_in(gw, key)["device"]["id"]
    other = f"localhost:{gw.port}"
    with Conn(gw, device=did, origin=f"http://{other}", host=other) as c:
        assert c.challenge["ok"]
        assert not c.connect(signature=key.sign(c.signed()))["ok"]
        assert closed_with(c.ws) == 4401
    with Conn(gw, device=did, origin=f"http://{other}", host=other) as c:
        assert not c.connect(signature=key.sign(c.signed(origin_of(gw))))["ok"]


def test_an_idle_or_unknown_device_is_refused_with_the_gateways_proof(gw: GatewayProcess) -> None:
    key = Key()
    der = serialization.load_der_public_key(base64.urlsafe_b64decode(key.spki + "=" * (-len(key.spki) % 4)))
    spki = der.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    idle = Devices(gw.home, clock=lambda: time.time() - IDLE_SECONDS - 60).add(spki, "old phone", origin_of(gw))
    unknown = "ab" * 32
    for did in (idle.id, unknown):
        with Conn(gw, device=did) as c:
            error = c.challenge["error"]
            assert not c.challenge["ok"] and error["code"] == "device_signed_out", c.challenge
            secret = device_secret(gw.token.encode(), did)
            assert error["proof"] == handshake_proof(secret, "gateway", c.host, c.nonce, "signed-out")
            assert closed_with(c.ws) == 4401
    Devices(gw.home).touch(unknown)  # any write drops the idle ones
    assert idle.id not in json.loads((gw.home / "gateway" / "devices.json").read_text())["devices"].__repr__()


def test_revoking_closes_the_devices_open_sockets_at_once(gw: GatewayProcess) -> None:
    """From the web app (devices.revoke, on another signed-in socket) and from `hermit devices revoke`: the open
    socket is told (device.revoked) and closed 4401, and the device cannot sign in again."""
    first, second = Key(), Key()
    did1, did2 = sign_in(gw, first)["device"]["id"], sign_in(gw, second)["device"]["id"]
    with device_conn(gw, first, did1) as (c1, r1), device_conn(gw, second, did2) as (c2, r2):
        assert r1["ok"] and r2["ok"]
        listed = c2.call("l", "devices.list")["payload"]["devices"]
        assert {d["id"]: d["current"] for d in listed if d["id"] in (did1, did2)} == {did1: False, did2: True}
        assert c2.call("r", "devices.revoke", id=did1[:10])["ok"]
        told = json.loads(c1.ws.recv(10))
        assert told["type"] == "event" and told["event"] == "device.revoked" and told["payload"]["id"] == did1
        assert closed_with(c1.ws) == 4401
        done = cli(gw.home, "revoke", did2[:8])
        assert done.returncode == 0 and "signed out" in done.stdout, done.stderr
        told = json.loads(c2.ws.recv(10))  # the gateway watches the file: within a second
        assert told["event"] == "device.revoked"
        assert closed_with(c2.ws) == 4401
    for key, did in ((first, did1), (second, did2)):
        with device_conn(gw, key, did) as (_, reply):
            assert not reply["ok"] and reply["error"]["code"] == "device_signed_out"
    bad = cli(gw.home, "revoke", "ffffff")
    assert bad.returncode != 0 and "hermit devices list" in bad.stderr


KILLED_WRITER = """
import os, sys
from pathlib import Path
from hermit.gateway.devices import Devices
real = os.fsync
def held(fd):
    real(fd)
    sys.stdout.write("x"); sys.stdout.flush()
    sys.stdin.read()  # held here, the new list written to the temporary file, not renamed yet
os.fsync = held
Devices(Path(sys.argv[1])).add(bytes.fromhex(sys.argv[2]), "new", "http://127.0.0.1:1")
"""


def test_a_kill_mid_write_loses_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "gateway").mkdir(parents=True, mode=0o700)
    store = Devices(home)
    kept = store.add(b"\x30" * 91, "kept", "http://127.0.0.1:1")
    before = store.path.read_bytes()
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(home), (b"\x31" * 91).hex()],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.read(1) == b"x"
    child.send_signal(signal.SIGKILL)
    child.wait(PROC_TIMEOUT)
    assert store.path.read_bytes() == before and [d.id for d in store.all()] == [kept.id]
    assert list((home / "gateway").glob(".devices.json.tmp-*"))  # what it was writing, never renamed
    store.touch(kept.id)
    assert not list((home / "gateway").glob(".devices.json.tmp-*"))  # the next write clears it away
    assert [d.id for d in store.all()] == [kept.id]


AS_USER = """
import json, os, stat, sys
from pathlib import Path
from hermit.errors import HermitError
from hermit.gateway.devices import Devices
home = Path(sys.argv[1])
(home / "gateway").mkdir(parents=True, mode=0o700)
store = Devices(home)
d = store.add(b"\\x30" * 91, "phone", "http://127.0.0.1:1")
st = os.stat(store.path)
try:
    Devices(Path(sys.argv[2])).all()
    other = "read"
except HermitError as e:
    other = e.message
print(json.dumps({"uid": st.st_uid, "mode": stat.S_IMODE(st.st_mode), "ids": [x.id for x in store.all()],
                  "other": other, "me": d.id}))
"""


@pytest.mark.parametrize("uid", [None, 65534])
def test_the_store_is_the_owners_alone_as_root_and_as_another_user(uid: int | None, tmp_path: Path) -> None:
    """The same as root and as uid 65534: the file is 0600 and the writer's; a store whose file another user owns is
    refused with what to do, never read or written."""
    as_user: dict[str, Any] = {}
    if uid is not None:
        need(os.geteuid() == 0, "root, to run Hermit as uid 65534")
        as_user = {"user": uid, "group": uid, "extra_groups": []}
    python = python_as(as_user) if uid is not None else sys.executable
    assert python is not None
    with shared_dir("t7-devices-") as base:
        foreign = base / "foreign"
        (foreign / "gateway").mkdir(parents=True, mode=0o700)
        (foreign / "gateway" / "devices.json").write_text('{"version": 1, "devices": []}')
        os.chmod(foreign / "gateway" / "devices.json", 0o644)  # not private: refused, whoever owns it
        if uid is not None:
            os.chown(foreign / "gateway", uid, uid)
        home = base / "home"
        if uid is not None:
            os.chown(base, uid, uid)
        done = subprocess.run([python, "-c", AS_USER, str(home), str(foreign)], capture_output=True, text=True,
                              timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()},
                              **as_user)
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert got["uid"] == (uid if uid is not None else os.getuid()) and got["mode"] == 0o600
        assert got["ids"] == [got["me"]] and "not a private file of yours" in got["other"]


def test_two_connections_racing_with_one_ticket_record_one_device(gw: GatewayProcess) -> None:
    """One ticket signs one browser in: of two connections holding it, each with a key of its own, the one that
    loses the race records no device either."""
    first, second = Key(), Key()
    ticket = new_ticket(gw)
    before = {d.id for d in Devices(gw.home).all()}
    with Conn(gw, ticket=ticket) as a, Conn(gw, ticket=ticket) as b:
        replies = []
        for c, key in ((a, first), (b, second)):
            proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
            replies.append(c.connect(proof=proof, device={"key": key.spki, "name": "x"}, signature=key.sign(c.signed())))
    assert [r["ok"] for r in replies] == [True, False] and replies[1]["error"]["code"] == "ticket_expired"
    assert {d.id for d in Devices(gw.home).all()} - before == {replies[0]["payload"]["deviceId"]}


def test_a_device_revoked_while_it_signs_in_is_not_let_in(gw: GatewayProcess) -> None:
    """Revoked between the gateway's challenge and the device's signature: refused, not signed in with a record that
    is gone."""
    key = Key()
    did = sign_in(gw, key)["device"]["id"]
    with Conn(gw, device=did) as c:
        assert c.challenge["ok"]
        Devices(gw.home).revoke(did)
        reply = c.connect(signature=key.sign(c.signed()))
        assert not reply["ok"] and closed_with(c.ws) == 4401


def test_the_cli_on_a_state_dir_where_no_gateway_ran(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermit.yaml").write_text("gateway:\n" + REMEMBER, encoding="utf-8")
    listed = cli(home, "list")
    assert listed.returncode == 0 and listed.stdout.startswith("no devices signed in")
    gone = cli(home, "revoke", "abcdef")
    assert gone.returncode == 1 and "no signed-in device has an id starting with 'abcdef'" in gone.stderr
    assert "Traceback" not in gone.stderr
    both = cli(home, "revoke")
    assert both.returncode == 1 and "name one device to sign out, or --all" in both.stderr
    assert cli(home, "revoke", "--all").stdout.strip() == "no devices were signed in"
    assert [p.name for p in home.iterdir()] == ["hermit.yaml"]  # nothing made
