"""Signed-in devices: a browser that signed in once with a one-time ticket stays signed in, without the gateway token.

A ticket (tickets.py) signed one tab in, and the tab kept the gateway token in sessionStorage: closing it, or opening
the web app from a phone's home screen, needed a new QR code. Keeping the token in the browser for good (localStorage)
would leave the key to everything in a profile that syncs, backs up and outlives the phone's owner's intent. Instead,
on a ticket sign-in the page makes a key pair of its own — ECDSA P-256 by WebCrypto, *non-extractable*: no script, not
even the page's, can read the private key, which IndexedDB keeps for the page's origin only — and the gateway records
the public key as a named device (`<state>/gateway/devices.json`, owner-only). Later connections do the
`connect.challenge` handshake keyed by the device:

1. the page sends its nonce, its address and its device id (the SHA-256 of its public key: public);
2. the gateway proves it is this gateway — an HMAC keyed by `device_secret(token, id)`, a secret derived from the
   gateway token that the page got once at sign-in and keeps as a non-extractable HMAC key — before the page shows
   anything: a program answering on the port while the gateway restarts (the reasoning of tickets.py and the
   [::1] twin of listen.py) learns the public id and a nonce, nothing it can use, and gets no signature;
3. the page signs `hermit-device|<origin>|<host>|<gateway nonce>|<client nonce>` with its private key; the gateway
   checks the signature against the recorded key, the origin against the one the device signed in at (a key is
   useless to another origin: IndexedDB is the origin's, and the gateway refuses the device elsewhere), and that the
   device was seen within IDLE_SECONDS. A signature covers the gateway's fresh nonce: replayed, it is refused.

A refusal of a device the gateway does not know (revoked, idle too long) carries a proof too, so the page forgets its
key only when the gateway itself says so (a squatter cannot make a phone forget it). Revoking a device (the web app's
Operations → Devices, or `hermit devices revoke`) closes its open sockets at once (the gateway watches the file).
A new gateway token (its file removed) signs every device out: their secrets were derived from the old one. The file
records a fingerprint of the token its devices signed in under (`token`: an HMAC keyed by the token, which tells
nothing of it); a store given the token (the gateway's, `hermit devices list`'s) finds no device in a file of another
token — so Operations → Devices and the CLI stop listing them at once — and the gateway's next write empties it. A
file written before fingerprints keeps its devices (and gets the fingerprint at its next write).

The file is written whole by durable.write_atomic (a temporary file, fsynced and renamed over the old one) under a
lock file (the gateway and the CLI both write it): a kill -9 mid-write leaves the old file or the new, never half of
one; the temporary file a killed writer left is removed at the next write (under the lock: no other writer is at it).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import stat
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hermit.durable import write_atomic
from hermit.errors import HermitError
from hermit.gateway.tickets import private_gateway_dir
from hermit.locks import left_unheld

FILE = "devices.json"
LOCK = "devices.lock"
IDLE_SECONDS = 30 * 86400  # a device not seen for 30 days is signed out
MAX_DEVICES = 32  # beyond, the one seen longest ago makes room
MAX_FILE_BYTES = 256 * 1024
NAME_CHARS = 60
TOUCH_SECONDS = 3600  # an open device's "last seen" is written again at most this often


@dataclass(frozen=True)
class Device:
    """One signed-in browser: `id` (sha256 hex of `key`), its public key (SPKI DER, base64url), the name it gave, the
    origin it signed in at, when it was added and last seen (epoch seconds)."""

    id: str
    key: str
    name: str
    origin: str
    added: float
    last_seen: float

    def idle(self, now: float) -> bool:
        return now - self.last_seen > IDLE_SECONDS

    def public(self) -> dict[str, object]:
        """What the web app's list and `hermit devices list --json` show."""
        return {"id": self.id, "name": self.name, "origin": self.origin, "added": self.added,
                "lastSeen": self.last_seen, "expires": self.last_seen + IDLE_SECONDS}


def b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def device_id(key_der: bytes) -> str:
    return hashlib.sha256(key_der).hexdigest()


def device_secret(token: bytes, did: str) -> bytes:
    """The key of the gateway's proofs to device `did`: derived from the gateway token, stored nowhere."""
    return hmac.new(token, f"hermit-device-secret|{did}".encode(), hashlib.sha256).digest()


def token_mark(token: str) -> str:
    """The fingerprint of the gateway token devices.json records: which token its devices' secrets derive from."""
    return hmac.new(token.encode(), b"hermit-devices-file", hashlib.sha256).hexdigest()[:32]


def signed_text(origin: str, host: str, gateway_nonce: str, client_nonce: str) -> bytes:
    return f"hermit-device|{origin}|{host}|{gateway_nonce}|{client_nonce}".encode()


def clean_name(name: str) -> str:
    """A device's name as the page gave it, printable and short (it is shown in the list and the CLI)."""
    kept = "".join(c if unicodedata.category(c)[0] not in "CZ" or c == " " else " " for c in name)
    return " ".join(kept.split())[:NAME_CHARS] or "a browser"


def public_key(key_b64: str) -> bytes | None:
    """The SPKI DER of an ECDSA P-256 public key given as base64url, else None."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        der = b64decode(key_b64)
        key = serialization.load_der_public_key(der)
    except (ValueError, binascii.Error, TypeError):
        return None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        return None
    return der


def verify(key_b64: str, signature_b64: str, message: bytes) -> bool:
    """Whether `signature_b64` (WebCrypto's ECDSA: r‖s, 64 bytes, base64url) signs `message` with the P-256 key."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    try:
        raw = b64decode(signature_b64)
        key = serialization.load_der_public_key(b64decode(key_b64))
    except (ValueError, binascii.Error, TypeError):
        return False
    if len(raw) != 64 or not isinstance(key, ec.EllipticCurvePublicKey):
        return False
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        key.verify(der, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


class Devices:
    """The device records of the state dir `home`, read and written whole under the lock."""

    def __init__(self, home: Path, *, clock: Callable[[], float] = time.time, token: str | None = None) -> None:
        """`token`: the gateway token now; devices recorded under another are none (the module's docstring)."""
        self.home = home
        self.clock = clock
        self.mark = token_mark(token) if token is not None else None
        self._stored_mark: str | None = None  # what the file read last records

    @property
    def path(self) -> Path:
        return self.home / "gateway" / FILE

    def stamp(self) -> tuple[int, int, int] | None:
        """What changes when the file is replaced (inode, size, mtime): the gateway's watch compares it."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _read(self) -> list[Device]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise HermitError(f"cannot read {self.path}: {e.strerror}", "it must be a regular file of yours") from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                raise HermitError(f"{self.path} is not a private file of yours",
                                  f"chmod 600 {self.path} (or remove it: every device then signs in again)")
            if st.st_size > MAX_FILE_BYTES:
                raise HermitError(f"{self.path} is too large ({st.st_size} bytes)",
                                  "remove it: every device then signs in again with a new code")
            data = json.loads(os.read(fd, MAX_FILE_BYTES + 1))
            stored = data.get("token")
            if stored is not None and not isinstance(stored, str):
                raise TypeError("its token fingerprint is not text")
            self._stored_mark = stored
            if stored is not None and self.mark is not None and not hmac.compare_digest(stored, self.mark):
                return []  # signed in under another gateway token: their secrets are gone with it
            devices = [Device(**{k: d[k] for k in Device.__dataclass_fields__}) for d in data["devices"]]
            for d in devices:  # a field of another type would fail later, far from here (a time as text)
                if not all(isinstance(v, str) for v in (d.id, d.key, d.name, d.origin)) or \
                        not all(type(t) in (int, float) for t in (d.added, d.last_seen)):
                    raise TypeError(f"device {str(d.id)[:12]!r} has a field that is not as Hermit writes it")
            return devices
        except (ValueError, KeyError, TypeError) as e:
            raise HermitError(f"{self.path} is not a device list Hermit wrote ({e})",
                              "remove it: every device then signs in again with a new code") from e
        finally:
            os.close(fd)

    def _write(self, devices: list[Device]) -> None:
        """Under the lock: the whole list, replacing the file (durable.write_atomic), with the token's fingerprint
        (this store's, else the one the file had). A temporary file a killed writer left is removed first: no other
        writer can be at work."""
        folder = private_gateway_dir(self.home)
        for stale in left_unheld(folder, f".{FILE}.tmp-"):
            with contextlib.suppress(OSError):
                os.unlink(stale)
        mark = self.mark or self._stored_mark
        body = {"version": 1, **({"token": mark} if mark else {}), "devices": [asdict(d) for d in devices]}
        write_atomic(self.path, json.dumps(body, indent=1), mode=0o600, keep_mode=False)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        folder = private_gateway_dir(self.home)
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _change(self, change: Callable[[list[Device]], list[Device]]) -> list[Device]:
        if not (self.home / "gateway").exists() and not change([]):  # no gateway ever ran here: no device either
            return []
        with self._locked():
            self._stored_mark = None
            before = self._read()
            now = self.clock()
            after = change([d for d in before if not d.idle(now)])  # the idle ones go on every write
            if after != before or (self.mark is not None and self._stored_mark not in (None, self.mark)):
                self._write(after)  # another token's file is emptied by the first write under this one
            return after

    def all(self) -> list[Device]:
        """The devices still signed in (not idle too long), most recently seen first."""
        now = self.clock()
        return sorted((d for d in self._read() if not d.idle(now)), key=lambda d: -d.last_seen)

    def get(self, did: str) -> Device | None:
        """Device `did` if it is signed in and was seen within IDLE_SECONDS."""
        return next((d for d in self.all() if hmac.compare_digest(d.id, did)), None)

    def add(self, key_der: bytes, name: str, origin: str) -> Device:
        """Record a new device (the same key again: renamed, seen now); the one seen longest ago makes room."""
        now = self.clock()
        new = Device(device_id(key_der), base64.urlsafe_b64encode(key_der).decode().rstrip("="), clean_name(name),
                     origin, now, now)

        def change(devices: list[Device]) -> list[Device]:
            kept = sorted((d for d in devices if d.id != new.id), key=lambda d: -d.last_seen)[:MAX_DEVICES - 1]
            return [*kept, new]
        self._change(change)
        return new

    def touch(self, did: str) -> bool:
        """Device `did` was seen now: whether it is (still) signed in."""
        now = self.clock()
        after = self._change(lambda devices: [replace(d, last_seen=now) if d.id == did else d for d in devices])
        return any(d.id == did for d in after)

    def revoke(self, did: str) -> Device:
        """Remove the device whose id is `did` or starts with it (at least 6 hex digits, one device); HermitError
        saying what is listed otherwise."""
        found: list[Device] = []

        def change(devices: list[Device]) -> list[Device]:
            found[:] = [d for d in devices if len(did) >= 6 and d.id.startswith(did.lower())]
            return [d for d in devices if d not in found] if len(found) == 1 else devices
        self._change(change)
        if len(found) != 1:
            what = "no signed-in device" if not found else f"{len(found)} devices"
            raise HermitError(f"{what} has an id starting with {did!r}",
                              "give more of its id, as `hermit devices list` (or Operations → Devices) shows it")
        return found[0]

    def revoke_all(self) -> list[Device]:
        gone: list[Device] = []

        def change(devices: list[Device]) -> list[Device]:
            gone[:] = devices
            return []
        self._change(change)
        return gone
