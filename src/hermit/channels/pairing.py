"""Pairing: codes for unknown DM senders and the owner-approved senders, stored owner-only in the state dir.

Files (SPEC §15), in `<state>/credentials/` (0700, files 0600, atomic writes):

    pairing.json                       pending (and recently expired) requests
    allow-<channel>-<account>.json     senders the owner approved with `hermit pairing approve`

A code is 8 characters from an alphabet without 0 O 1 I, expires after one hour; a channel account has
at most 3 pending codes; a sender gets a new code at most once an hour. The gateway issues codes while
`hermit pairing approve` runs in another process, so every read-modify-write holds an exclusive
`flock` on `credentials/.lock` — neither side can lose the other's update.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hermit.durable import write_atomic
from hermit.errors import AccessDenied, HermitError

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0 O 1 I: codes are read aloud and retyped
CODE_LENGTH = 8
CODE_TTL_SECONDS = 3600.0
MAX_PENDING_PER_ACCOUNT = 3
# Expired requests are kept this long so `approve` can say "expired" instead of "unknown code".
_KEEP_EXPIRED_SECONDS = 24 * 3600.0
_VERSION = 1


@dataclass(frozen=True)
class PairingRequest:
    channel: str
    account_id: str
    sender_id: str
    code: str
    created_at: float
    expires_at: float
    sender_name: str | None = None

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


def normalize_code(code: str) -> str:
    return code.strip().upper().replace("-", "").replace(" ", "")


class PairingStore:
    """Pending pairing requests and approved senders; safe to use from the gateway and the CLI at once."""

    def __init__(self, state_dir: Path, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self.dir = state_dir / "credentials"
        self.clock = clock
        self.rng: random.Random = rng or secrets.SystemRandom()

    # ---- files -------------------------------------------------------------------------------

    def _ensure_dir(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Tighten a directory created earlier with a looser umask: these files let people in.
        if stat.S_IMODE(self.dir.stat().st_mode) != 0o700:
            os.chmod(self.dir, 0o700)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._ensure_dir()
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @property
    def pairing_file(self) -> Path:
        return self.dir / "pairing.json"

    def allow_file(self, channel: str, account_id: str) -> Path:
        # quote(): an account id is a config key and must not be able to name another path.
        return self.dir / f"allow-{quote(channel.lower(), safe='')}-{quote(account_id, safe='')}.json"

    def _read_json(self, path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise HermitError(f"cannot read {path}: {e}",
                              "fix or delete the file (pending pairing codes are re-issued on the next message)") from e
        if not isinstance(data, dict):
            raise HermitError(f"{path} is not a JSON object", "fix or delete the file")
        return data

    def _write_json(self, path: Path, data: dict[str, Any]) -> None:
        text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
        write_atomic(path, text, mode=0o600, keep_mode=False)

    def _load_requests(self) -> list[PairingRequest]:
        raw = self._read_json(self.pairing_file).get("requests", [])
        out: list[PairingRequest] = []
        for item in raw if isinstance(raw, list) else []:
            try:
                out.append(PairingRequest(**item))
            except TypeError as e:
                raise HermitError(f"{self.pairing_file}: malformed request {item!r}",
                                  "delete the file; senders get a new code on their next message") from e
        return out

    def _save_requests(self, requests: list[PairingRequest]) -> None:
        self._write_json(self.pairing_file, {"version": _VERSION, "requests": [asdict(r) for r in requests]})

    def _new_code(self, taken: set[str]) -> str:
        while True:
            code = "".join(self.rng.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            if code not in taken:
                return code

    # ---- API ---------------------------------------------------------------------------------

    def pending(self, channel: str | None = None) -> list[PairingRequest]:
        """Unexpired requests, oldest first, optionally of one channel."""
        now = self.clock()
        requests = self._load_requests()  # no lock: writes are atomic renames, and a read creates nothing
        return [r for r in requests
                if not r.expired(now) and (channel is None or r.channel == channel.lower())]

    def request(self, channel: str, account_id: str, sender_id: str,
                sender_name: str | None = None) -> PairingRequest | None:
        """A new code for this sender, or None: they already have one this hour, or 3 are pending."""
        channel = channel.lower()
        now = self.clock()
        with self._locked():
            requests = [r for r in self._load_requests() if now - r.expires_at < _KEEP_EXPIRED_SECONDS]
            mine = [r for r in requests if (r.channel, r.account_id, r.sender_id) == (channel, account_id, sender_id)]
            if any(not r.expired(now) for r in mine):
                return None
            live = [r for r in requests if r.channel == channel and r.account_id == account_id
                    and not r.expired(now)]
            if len(live) >= MAX_PENDING_PER_ACCOUNT:
                return None
            req = PairingRequest(channel, account_id, sender_id, self._new_code({r.code for r in requests}),
                                 now, now + CODE_TTL_SECONDS, sender_name)
            requests = [r for r in requests if r not in mine] + [req]
            self._save_requests(requests)
            return req

    def approve(self, channel: str, code: str) -> PairingRequest:
        """Let the sender of `code` in for good; AccessDenied (with a hint) for an unknown or expired code."""
        channel = channel.lower()
        wanted = normalize_code(code)
        now = self.clock()
        with self._locked():
            requests = self._load_requests()
            match = next((r for r in requests if r.channel == channel and r.code == wanted), None)
            if match is None:
                elsewhere = next((r for r in requests if r.code == wanted), None)
                hint = (f"that code belongs to channel {elsewhere.channel!r}: run `hermit pairing approve "
                        f"{elsewhere.channel} {wanted}`" if elsewhere else
                        f"check `hermit pairing list {channel}`; codes are 8 letters/digits and expire after 1 h")
                raise AccessDenied(f"no pending pairing request with code {wanted} on {channel}", hint)
            if match.expired(now):
                raise AccessDenied(
                    f"pairing code {wanted} on {channel} expired "
                    f"{int((now - match.expires_at) // 60)} minutes ago",
                    "ask the sender to message the assistant again: they get a new code")
            path = self.allow_file(channel, match.account_id)
            data = self._read_json(path)
            senders = [s for s in data.get("allow_from", []) if isinstance(s, str)]
            if match.sender_id not in senders:
                senders.append(match.sender_id)
            self._write_json(path, {"version": _VERSION, "allow_from": senders})
            self._save_requests([r for r in requests if r != match])
            return match

    def approved_senders(self, channel: str, account_id: str) -> set[str]:
        data = self._read_json(self.allow_file(channel, account_id))
        return {s for s in data.get("allow_from", []) if isinstance(s, str)}


def credential_permission_problems(state_dir: Path) -> list[str]:
    """Files under <state>/credentials readable by others (or a directory others can enter)."""
    base = state_dir / "credentials"
    if not base.exists():
        return []
    problems: list[str] = []
    mode = stat.S_IMODE(base.stat().st_mode)
    if mode & 0o077:
        problems.append(f"{base} is {mode:o}, should be 700")
    for p in sorted(base.iterdir()):
        if p.is_file() and stat.S_IMODE(p.stat().st_mode) & 0o077:
            problems.append(f"{p} is {stat.S_IMODE(p.stat().st_mode):o}, should be 600")
    return problems
