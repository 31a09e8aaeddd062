"""The reserved places of gateway/unsigned.py (`Reserved`: network addresses that signed in lately) kept across the
gateway's restarts, in `<state>/gateway/reserved.json` (0600, in the private gateway folder).

Kept in memory only, they were gone at every restart — the gateway's own (a service restart, an upgrade, SIGUSR1) —
and the owner's phone then competed as a stranger until it signed in again: on IPv6 a LAN guest in the phone's /64
holding 32 connections kept it out entirely. Now the file holds at most RESERVED_ADDRESSES addresses, each with the
wall-clock time of its last sign-in (an entry older than RESERVED_DAYS, or dated in the future, is dropped when read),
and each entry is bound to the gateway token by an HMAC keyed with it: entries written under another token (the
token renewed after a lost phone, which signs every device out) or by anyone else are not reserved. A reservation
grants only places among connections not signed in yet — every connection still has to sign in. It is written when an
address is added or its last write is REFRESH_SECONDS old (not at each sign-in: a page opens a socket at each load).
A file that cannot be read or written is logged and the gateway goes on with what it has in memory.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from hermit.errors import HermitError

log = logging.getLogger("hermit.gateway")

FILE = "reserved.json"
MAX_FILE_BYTES = 16384
REFRESH_SECONDS = 3600.0  # a reservation lasts days: its time on disk may lag its last sign-in by an hour
FUTURE_SLACK_SECONDS = 86400.0  # a time this far ahead of the clock is not one this gateway wrote


class ReservedFile:
    """`<home>/gateway/reserved.json`, its entries bound to `token`; `wall`: the wall clock (entries outlive a reboot)."""

    def __init__(self, home: Path, token: str, *, wall: Callable[[], float] = time.time) -> None:
        self.home, self.wall = home, wall
        self._key = hashlib.sha256(b"hermit-reserved|" + token.encode()).digest()

    @property
    def path(self) -> Path:
        return self.home / "gateway" / FILE

    def _mac(self, ip: str, at: float) -> str:
        return hmac.new(self._key, f"{ip}|{at!r}".encode(), hashlib.sha256).hexdigest()

    def load(self, seconds: float) -> list[tuple[str, float]]:
        """(address, wall time of its last sign-in), oldest first: those bound to this token, at most `seconds` old."""
        try:
            data = self._read()
        except (OSError, HermitError, ValueError) as e:
            log.warning("reserved places not restored: %s", getattr(e, "message", e))
            return []
        now, out = self.wall(), []
        entries = data.get("entries") if isinstance(data, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            ip, at, mac = entry.get("ip"), entry.get("at"), entry.get("mac")
            if not (isinstance(ip, str) and isinstance(at, float) and isinstance(mac, str)):
                continue  # `at` is written as a float (json keeps its repr, which the MAC covers)
            if hmac.compare_digest(mac, self._mac(ip, at)) and -FUTURE_SLACK_SECONDS <= now - at <= seconds:
                out.append((ip, at))
        return sorted(out, key=lambda x: x[1])

    def _read(self) -> object:
        try:
            # O_NONBLOCK: a FIFO there is refused below instead of hanging the gateway's start for a writer
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                raise HermitError(f"{self.path} is not a private file of yours (it is ignored)")
            return json.loads(os.read(fd, MAX_FILE_BYTES + 1) or b"{}")
        finally:
            os.close(fd)

    def save(self, entries: list[tuple[str, float]]) -> bool:
        """Replace the file with `entries` (address, wall time); False (logged) when it cannot be written."""
        from hermit.durable import write_atomic
        from hermit.gateway.tickets import private_gateway_dir

        body = {"entries": [{"ip": ip, "at": at, "mac": self._mac(ip, at)} for ip, at in entries]}
        try:
            private_gateway_dir(self.home)
            write_atomic(self.path, json.dumps(body), mode=0o600, keep_mode=False)
        except (OSError, HermitError) as e:
            log.warning("reserved places not kept for the next start: %s", getattr(e, "message", e))
            return False
        return True
