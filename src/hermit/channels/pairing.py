"""Pairing: codes for unknown DM senders and the owner-approved senders, stored owner-only in the state dir.

Files (SPEC §15), in `<state>/credentials/` (0700, files 0600, atomic writes):

    pairing.json                       pending (and recently expired or denied) requests
    allow-<channel>-<account>.json     senders the owner approved with `hermit pairing approve`:
                                       `allow_from` (the ids access control reads) and `senders`
                                       (name, username, when approved: what `pairing list` shows)

A code is 8 characters from an alphabet without 0 O 1 I, expires after one hour; a channel account has
at most 3 pending codes; a sender gets a new code at most once an hour, and a denied request keeps
counting as that sender's code until it expires (denying must not hand out a fresh code at once).
Approved senders are contacts, never owners: owners are named in the config.

A sender's name and username are whatever the stranger typed into their profile, and `hermit pairing
list` prints them on the owner's terminal: a name holding ESC sequences, a carriage return or a bidi
override could redraw the screen and fake rows. So they are stored as one line of visible text (`plain`,
at most NAME_MAX characters), and every label is printed with whatever is left escaped (`printable`),
which also covers files written before names were cleaned. The gateway issues codes
while `hermit pairing approve|deny|revoke` runs in another process, so every read-modify-write holds an
exclusive `flock` on `credentials/.lock` — neither side can lose the other's update; readers need no
lock, as every write is an atomic rename.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import stat
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from hermit.config.allowlist import AllowlistEntryError, is_username, normalize_entry, sender_key
from hermit.durable import write_atomic
from hermit.errors import AccessDenied, HermitError
from hermit.locks import locked
from hermit.messages import one_line

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0 O 1 I: codes are read aloud and retyped
CODE_LENGTH = 8
CODE_TTL_SECONDS = 3600.0
MAX_PENDING_PER_ACCOUNT = 3
# Expired requests are kept this long so `approve` can say "expired" instead of "unknown code".
_KEEP_EXPIRED_SECONDS = 24 * 3600.0
_VERSION = 1
NAME_MAX = 64  # a display name or username as stored and shown: any real one fits
_ID_MAX = 128
# Controls (C0, DEL, C1: ESC, CR…), format characters (bidi overrides and isolates, zero-width ones),
# line/paragraph separators, surrogates, private-use and unassigned code points.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def plain(text: str | None, limit: int = NAME_MAX) -> str | None:
    """A name from a platform as it is stored: one line of visible characters (messages.one_line), at
    most `limit` long; None when nothing visible is left."""
    return (one_line(text, limit) or None) if text is not None else None


def printable(text: str, limit: int) -> str:
    """`text` safe to print on a terminal: each hidden character as a visible escape (\\x1b, \\u202e),
    whitespace as single spaces, and at most `limit` characters (then "…")."""
    out = " ".join("".join(_escape(c) if unicodedata.category(c) in _HIDDEN else c for c in text).split())
    return out if len(out) <= limit else out[:limit - 1] + "…"


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _allow_from(data: dict[str, Any]) -> list[str]:
    """The approved sender ids of an allow file: the strings of its `allow_from` list. Anything else there
    (a hand-edited "allow_from": "12345" would have read as the senders 1, 2, 3, 4 and 5) approves nobody."""
    ids = data.get("allow_from", [])
    return [s for s in ids if isinstance(s, str) and s] if isinstance(ids, list) else []


def sender_label(sender_id: str, name: str | None, username: str | None) -> str:
    """How the CLI names a sender: "id (name, @username)", printable whatever the files hold."""
    extra = ", ".join(printable(x, NAME_MAX + 1) for x in (name, f"@{username}" if username else None) if x)
    return printable(sender_id, _ID_MAX) + (f" ({extra})" if extra else "")


@dataclass(frozen=True)
class PairingRequest:
    channel: str
    account_id: str
    sender_id: str
    code: str
    created_at: float
    expires_at: float
    sender_name: str | None = None
    sender_username: str | None = None
    denied: bool = False  # `hermit pairing deny`: kept until it expires so the sender gets no new code

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


@dataclass(frozen=True)
class ApprovedSender:
    """A contact the owner let in with `hermit pairing approve` (details are absent for older files)."""

    channel: str
    account_id: str
    sender_id: str
    sender_name: str | None = None
    sender_username: str | None = None
    approved_at: float | None = None

    def label(self) -> str:
        return sender_label(self.sender_id, self.sender_name, self.sender_username)


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
        with locked(self.dir / ".lock"):
            yield

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """The lock every read-modify-write of a file in the credentials dir holds (username pins too)."""
        return self._locked()

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
                if not r.expired(now) and not r.denied and (channel is None or r.channel == channel.lower())]

    def request(self, channel: str, account_id: str, sender_id: str, sender_name: str | None = None,
                sender_username: str | None = None) -> PairingRequest | None:
        """A new code for this sender, or None: they already have (or were denied) one this hour, or 3 are
        pending."""
        channel = channel.lower()
        now = self.clock()
        # Cleaned where a stranger's words enter the owner's files (the id is kept exact: access matches it).
        sender_name, sender_username = plain(sender_name), plain(sender_username)
        with self._locked():
            requests = [r for r in self._load_requests() if now - r.expires_at < _KEEP_EXPIRED_SECONDS]
            mine = [r for r in requests if (r.channel, r.account_id, r.sender_id) == (channel, account_id, sender_id)]
            if any(not r.expired(now) for r in mine):
                return None
            live = [r for r in requests if r.channel == channel and r.account_id == account_id
                    and not r.expired(now) and not r.denied]
            if len(live) >= MAX_PENDING_PER_ACCOUNT:
                return None
            req = PairingRequest(channel, account_id, sender_id, self._new_code({r.code for r in requests}),
                                 now, now + CODE_TTL_SECONDS, sender_name, sender_username)
            requests = [r for r in requests if r not in mine] + [req]
            self._save_requests(requests)
            return req

    def _find(self, requests: list[PairingRequest], channel: str, code: str, verb: str) -> PairingRequest:
        """The live request with this code on this channel, or AccessDenied saying why not."""
        wanted = normalize_code(code)
        now = self.clock()
        match = next((r for r in requests if r.channel == channel and r.code == wanted), None)
        if match is None:
            elsewhere = next((r for r in requests if r.code == wanted), None)
            hint = (f"that code belongs to channel {elsewhere.channel!r}: run `hermit pairing {verb} "
                    f"{elsewhere.channel} {wanted}`" if elsewhere else
                    f"check `hermit pairing list {channel}`; codes are 8 letters/digits and expire after 1 h")
            raise AccessDenied(f"no pending pairing request with code {wanted} on {channel}", hint)
        if match.denied:
            raise AccessDenied(f"pairing code {wanted} on {channel} was denied",
                               "once it expires the sender gets a new code on their next message; approve that one")
        if match.expired(now):
            raise AccessDenied(
                f"pairing code {wanted} on {channel} expired "
                f"{int((now - match.expires_at) // 60)} minutes ago",
                "ask the sender to message the assistant again: they get a new code")
        return match

    def approve(self, channel: str, code: str) -> PairingRequest:
        """Let the sender of `code` in for good, as a contact; AccessDenied (with a hint) for an unknown,
        denied or expired code."""
        channel = channel.lower()
        with self._locked():
            requests = self._load_requests()
            match = self._find(requests, channel, code, "approve")
            path = self.allow_file(channel, match.account_id)
            data = self._read_json(path)
            senders = _allow_from(data)
            if match.sender_id not in senders:
                senders.append(match.sender_id)
            details = _details(data)
            details[match.sender_id] = {"sender_name": match.sender_name, "sender_username": match.sender_username,
                                        "approved_at": self.clock()}
            # The request goes first: killed between the two writes, the sender is not let in (their next
            # message gets a new code). The other order left a request the owner could still deny after its
            # sender was already allowed, and the denial changed nothing.
            self._save_requests([r for r in requests if r != match])
            self._write_json(path, {"version": _VERSION, "allow_from": senders, "senders": details})
            return match

    def deny(self, channel: str, code: str) -> PairingRequest:
        """Drop a pending request; the sender gets no new code until it would have expired."""
        channel = channel.lower()
        with self._locked():
            requests = self._load_requests()
            match = self._find(requests, channel, code, "deny")
            denied = PairingRequest(**{**asdict(match), "denied": True})
            self._save_requests([denied if r == match else r for r in requests])
            return denied

    def approved_senders(self, channel: str, account_id: str) -> set[str]:
        data = self._read_json(self.allow_file(channel, account_id))
        return set(_allow_from(data))

    def _allow_files(self) -> list[tuple[str, str, Path]]:
        """(channel, account, path) of every approved-senders file."""
        if not self.dir.is_dir():
            return []
        out = []
        for path in sorted(self.dir.glob("allow-*.json")):
            channel, sep, account = path.stem.removeprefix("allow-").partition("-")
            if sep and channel and account:  # channel names have no '-'; quote() keeps the rest unambiguous
                out.append((unquote(channel), unquote(account), path))
        return out

    def approved(self, channel: str | None = None) -> list[ApprovedSender]:
        """Approved senders of every channel account (or of one channel), in approval order per account."""
        out: list[ApprovedSender] = []
        for ch, account, path in self._allow_files():
            if channel is not None and ch != channel.lower():
                continue
            data = self._read_json(path)
            details = _details(data)
            for sender in _allow_from(data):
                d = details.get(sender, {})
                approved_at = d.get("approved_at")
                out.append(ApprovedSender(ch, account, sender, _str(d.get("sender_name")),
                                          _str(d.get("sender_username")),
                                          float(approved_at) if isinstance(approved_at, int | float) else None))
        return out

    def revoke(self, channel: str, sender: str, account_id: str | None = None) -> list[ApprovedSender]:
        """Remove an approved sender (by id in any form an allowlist accepts, or @username) from one account
        or every account of the channel; AccessDenied when nobody matched."""
        channel = channel.lower()
        try:
            wanted = normalize_entry(channel, sender)
        except AllowlistEntryError:
            wanted = sender.strip()
        removed: list[ApprovedSender] = []
        with self._locked():
            everyone = self.approved(channel)
            for ch, account, path in self._allow_files():
                if ch != channel or (account_id is not None and account != account_id):
                    continue
                gone = [a for a in everyone if a.account_id == account and _is(a, channel, wanted)]
                if not gone:
                    continue
                data = self._read_json(path)
                ids = {a.sender_id for a in gone}
                details = {k: v for k, v in _details(data).items() if k not in ids}
                keep = [s for s in _allow_from(data) if s not in ids]
                self._write_json(path, {"version": _VERSION, "allow_from": keep, "senders": details})
                removed += gone
        if not removed:
            where = f"{channel}/{account_id}" if account_id else channel
            raise AccessDenied(f"{sender.strip()} is not an approved sender on {where}",
                               f"see `hermit pairing list {channel}`; senders listed under allow_from or owners in "
                               "the config are removed there")
        return removed


    def retire_absent(self, present: dict[str, set[str]]) -> list[str]:
        """Retire the pairing state of accounts the config no longer has (`present`: the accounts of each platform
        the config knows, off or on; a platform not in it is left alone): their pending codes are dropped and
        their approved senders' file is moved into `retired/` (kept for the owner to read, never read again).

        Why: the files are named by account id only. An account removed from hermit.yaml and later added again
        under that id — another bot, another workspace, another purpose — took over every sender approved for
        the old one and every code still pending for it (`hermit pairing approve` let a stranger who had written
        to the old bot into the new one). Approvals belong to the account as the owner knew it when approving.
        An account turned off (`enabled: false`) keeps them. Returns one line per account retired, for the log."""
        if not self.dir.is_dir():
            return []
        said: list[str] = []
        with self._locked():
            requests = self._load_requests()
            keep = [r for r in requests if r.channel not in present or r.account_id in present[r.channel]]
            gone = {(r.channel, r.account_id) for r in requests if r not in keep}
            if gone:
                self._save_requests(keep)
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.clock()))
            for ch, account, path in self._allow_files():
                if ch not in present or account in present[ch]:
                    continue
                aside = self.dir / "retired"
                aside.mkdir(mode=0o700, exist_ok=True)
                os.replace(path, aside / f"{path.stem}.{stamp}.json")
                said.append(f"{ch}/{account}: its approved senders were moved to {aside / path.stem}.{stamp}.json"
                            + (" and its pending pairing codes dropped" if (ch, account) in gone else ""))
                gone.discard((ch, account))
            said += [f"{ch}/{account}: its pending pairing codes were dropped" for ch, account in sorted(gone)]
        return said

    def retire_held(self, accounts: set[tuple[str, str]], *, why: str) -> list[str]:
        """Retire these accounts' approved senders (moved into `retired/`) and pending codes, `why` said in each
        line; the caller holds `locked()` (channels/account_identity.py: an account whose bot changed)."""
        requests = self._load_requests()
        keep = [r for r in requests if (r.channel, r.account_id) not in accounts]
        if len(keep) != len(requests):
            self._save_requests(keep)
        dropped = {(r.channel, r.account_id) for r in requests} - {(r.channel, r.account_id) for r in keep}
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.clock()))
        said: list[str] = []
        for ch, account, path in self._allow_files():
            if (ch, account) in accounts:
                aside = self.dir / "retired"
                aside.mkdir(mode=0o700, exist_ok=True)
                os.replace(path, aside / f"{path.stem}.{stamp}.json")
                said.append(f"{ch}/{account}: {why}; its approved senders were moved to {aside / path.stem}.{stamp}"
                            ".json" + (" and its pending pairing codes dropped" if (ch, account) in dropped else ""))
                dropped.discard((ch, account))
        return said + [f"{ch}/{account}: {why}; its pending pairing codes were dropped" for ch, account in sorted(dropped)]


def _details(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    raw = data.get("senders")
    return {k: v for k, v in raw.items() if isinstance(v, dict)} if isinstance(raw, dict) else {}


def _str(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def _is(a: ApprovedSender, channel: str, wanted: str) -> bool:
    if is_username(wanted):
        return a.sender_username is not None and "@" + a.sender_username.lstrip("@").lower() == wanted.lower()
    return sender_key(channel, a.sender_id) == sender_key(channel, wanted)


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
