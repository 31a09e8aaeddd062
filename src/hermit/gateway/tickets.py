"""One-time sign-in tickets: what `hermit dashboard` puts in the URL instead of the gateway token (audit W2).

A browser records every URL it visits, fragment and all, in its global history (and syncs it), so a
`#token=…` link left the long-lived token in the browser profile for good. `hermit dashboard` now writes a
ticket — 32 random bytes, URL-safe — into an owner-only file `<state>/gateway/ticket-<sha256 of it>`, for
the gateway whose pid the lock file names, expiring in TICKET_TTL seconds; the URL carries `#ticket=…`.
The page exchanges it over the WebSocket handshake for the token (webchat_api.py), keyed by the ticket as
the token's handshake is keyed by the token: the page sends only the ticket's sha256, the gateway proves it
holds the ticket before the page answers with an HMAC, so whatever else answers on the port learns nothing
it can use. The gateway redeems a ticket once (removing its file: of two connections racing, one wins),
and only its own (a ticket made for a gateway that has since stopped is worthless to the next one, so a
program that took the port meanwhile and read a link opened there cannot use it either). "Its own" is its pid
and the time that process started (Linux /proc): in a container every gateway is pid 1 (or the same small pid),
and a ticket made for the one before a restart was the next one's too. What remains in
the browser's history is a link that was used, or expired, minutes after it was made.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermit.durable import write_atomic
from hermit.errors import HermitError
from hermit.gateway.state import gateway_dir

TICKET_TTL = 600.0  # seconds: long enough to paste a link through an SSH session, short enough to be worthless
MAX_PENDING = 16  # a gateway's tickets not used yet: a new one beyond takes the place of the oldest
PREFIX = "ticket-"
TICKET_ID = re.compile(r"[0-9a-f]{64}")
EXPIRED_MESSAGE = "this link was already used or expired"
# The link may have come from `hermit dashboard` (this computer) or from a QR code of the web app's "Sign in a
# phone" or `hermit dashboard --phone` (a phone, where no command can be run): where to get a new one, for both.
EXPIRED_HINT = ("get a new one — on a phone, from Operations → Sign in a phone in the web app on your computer (or "
                "`hermit dashboard --phone`); on the computer, run `hermit dashboard` again")


def ticket_id(ticket: str) -> str:
    """What names a ticket on the wire and on disk: its sha256 in hex (the ticket itself never travels until
    the gateway proved it holds it)."""
    return hashlib.sha256(ticket.encode()).hexdigest()


def private_gateway_dir(home: Path) -> Path:
    """`<state>/gateway/`, refused unless it is a directory of ours that no one else may enter."""
    folder = gateway_dir(home)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise HermitError(f"{folder} is not a private directory of yours",
                          f"chmod 700 {folder} (it holds the gateway token)")
    return folder


def process_started(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (Linux /proc: field 22 of its stat), else None. With
    the pid, it names one process: a pid the kernel gives another process later comes with a later start."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def issue_ticket(home: Path, gateway_pid: int, *, clock: Callable[[], float] = time.time,
                 ttl: float = TICKET_TTL) -> str:
    """A new ticket for the gateway running as `gateway_pid`, written O_EXCL|O_NOFOLLOW (0600) into the private
    gateway dir; the ones earlier runs left that no gateway can redeem any more (expired, or made for a gateway
    that has stopped since) are removed first, and the oldest pending ones beyond MAX_PENDING."""
    folder = private_gateway_dir(home)
    now = clock()
    gateway = (gateway_pid, process_started(gateway_pid))
    pending: list[tuple[float, Path]] = []
    for old in folder.glob(f"{PREFIX}*"):
        found = _read(old)  # None: not ours to judge, or one another run is writing this very moment
        if found is not None and (found[1] <= now or found[2] != gateway):
            with contextlib.suppress(OSError):
                old.unlink()
        elif found is not None:
            pending.append((found[1], old))
    # Bounded: a page that asks again and again (tickets.create in a loop) leaves MAX_PENDING live keys, not one
    # a request; the oldest go first.
    for _, old in sorted(pending)[:max(len(pending) - MAX_PENDING + 1, 0)]:
        with contextlib.suppress(OSError):
            old.unlink()
    ticket = secrets.token_urlsafe(32)
    path = folder / f"{PREFIX}{ticket_id(ticket)}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"ticket": ticket, "expires": now + ttl, "gateway": gateway_pid, "started": gateway[1]}, f)
    return ticket


def _load(path: Path) -> dict[str, Any] | None:
    """The JSON object of a ticket file that is a regular owner-only file of ours, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077 or st.st_size > 4096:
            return None
        data = json.loads(os.read(fd, 4096))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else None


def _read(path: Path) -> tuple[str, float, tuple[int, int | None]] | None:
    """(ticket, expiry, (gateway pid, its start)) of a ticket file that is a regular owner-only file of ours, else
    None. A file without the start (an earlier version's) names no gateway: (-1, None)."""
    data = _load(path)
    if data is None:
        return None
    try:
        ticket, expires, pid, started = data["ticket"], data["expires"], data["gateway"], data.get("started", -1)
    except KeyError:
        return None
    if not isinstance(ticket, str) or not isinstance(expires, (int, float)) or not isinstance(pid, int):
        return None
    if started == -1 or not (started is None or isinstance(started, int)):
        return ticket, float(expires), (-1, None)
    return ticket, float(expires), (pid, started)


class Tickets:
    """The running gateway's side: look a ticket up by its id, redeem it once."""

    def __init__(self, home: Path, *, clock: Callable[[], float] = time.time, pid: int | None = None,
                 ttl: float = TICKET_TTL) -> None:
        self.home = home
        self.folder = gateway_dir(home)
        self.clock = clock
        self.pid = os.getpid() if pid is None else pid
        self.started = process_started(self.pid)
        self.ttl = ttl

    def issue(self) -> str:
        """A new ticket for this gateway (the web app's "Sign in a phone"), as `hermit dashboard` makes them."""
        return issue_ticket(self.home, self.pid, clock=self.clock, ttl=self.ttl)

    def restrict(self, ticket: str) -> None:
        """Make the new `ticket` (not shown to anyone yet) device-only (`device_only`): its file rewritten whole."""
        path = self.folder / f"{PREFIX}{ticket_id(ticket)}"
        data = _load(path)
        if data is None:
            raise HermitError(f"cannot read the new sign-in ticket {path}", "try again")
        # durable's temp files: one a killed writer left is swept, and backups know their names.
        write_atomic(path, json.dumps({**data, "deviceOnly": True}), mode=0o600, keep_mode=False, fsync=False)

    def device_only(self, tid: str) -> bool:
        """Whether ticket `tid` signs in only a browser that records a device, never bringing the token: the web
        app's phone link at an https address (a phone's page there can keep a key of its own). A signed-in device (or a script
        running as one) can make such links: were one to bring the token, revoking that device would not undo it."""
        data = _load(self.folder / f"{PREFIX}{tid}") if TICKET_ID.fullmatch(tid) else None
        return data is not None and data.get("deviceOnly") is True

    def find(self, tid: str) -> str | None:
        """The ticket named `tid` if it is pending, unexpired and made for this gateway; None otherwise (an
        expired one's file is removed)."""
        if TICKET_ID.fullmatch(tid) is None:
            return None
        path = self.folder / f"{PREFIX}{tid}"
        found = _read(path)
        if found is None:
            return None
        ticket, expires, gateway = found
        now = self.clock()
        if not hmac.compare_digest(ticket_id(ticket), tid) or gateway != (self.pid, self.started):
            return None
        if not now < expires <= now + self.ttl + 60:  # expired, or made with a clock far ahead: not trusted
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        return ticket

    def redeem(self, tid: str) -> bool:
        """Use the ticket named `tid` up: True for the one caller that removed its pending, unexpired file."""
        if self.find(tid) is None:
            return False
        try:
            (self.folder / f"{PREFIX}{tid}").unlink()
        except FileNotFoundError:
            return False  # another connection redeemed it a moment ago
        return True
