"""Secret values (API keys, channel tokens, the gateway token) masked out of text before it is printed, logged or stored.

A provider that echoes the key it was sent ("invalid x-api-key: sk-ant-…") put that key in `hermit agent`'s
error output and in the session transcript, while only the gateway's log masked it. Every place that shows
or keeps error text masks through one `SecretMasker`: the model transport (each provider error, at the
source, so the transcript and every face get the masked text), the CLI's error printing, the agent loop's
error record, and the gateway's log filter. `KNOWN` holds the process's secrets: the model transport adds
the keys it sends, composition roots add what the config names (channel tokens, the gateway token). Every
tool result passes `mask` too (tools/base.py), so a key a command prints never reaches a transcript or a
provider.

The CLI registers the config's secrets for every command (`register_later`): reading them loads the config
and the provider table, which `hermit --help` and `hermit completion` should not pay for, so they are read
the first time anything is masked. Output cut for length (exec keeps a head and a tail) loses CUT_MARGIN
characters next to the cut (`mask_cut`): a key straddling a cut edge would leave two halves that no longer
match the whole key, and masking only pieces that match would answer a guess.
Masking is exact-string matching and so best effort: a key a command encodes (base64, reversed, one
character per line) is not recognised.

`keep_environment_private` is the other half: the keys sit in the process's environment, and a command the
owner's unsandboxed exec runs (same uid) could read them from /proc/<hermit pid>/environ whatever the exec
whitelist holds. A non-dumpable process's /proc files are root's: same-uid processes (its children) cannot
read them. Root's children can (CAP_SYS_PTRACE), so running Hermit as root keeps that hole open.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from typing import TypeVar

MASK = "***"
MIN_SECRET_CHARS = 8  # shorter values ("x", "true", a port) would mask ordinary words, not secrets
# What a cut text loses next to the cut (mask_cut): longer than any key or token Hermit holds.
CUT_MARGIN = 256

log = logging.getLogger(__name__)

E = TypeVar("E", bound=BaseException)


Source = Callable[[], Iterable[str | None]]


class SecretMasker:
    """A set of secret values; `mask` replaces each (longest first) with `***`."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()
        self._pending: list[Source] = []
        # Reading a pending source may log, and the gateway's log filter masks: that thread must not wait
        # for itself. Other threads wait until the values are in.
        self._reading = threading.RLock()
        self._reader: int | None = None
        self.add(*secrets)

    def add(self, *values: str | None) -> None:
        new = {v.strip() for v in values if v and len(v.strip()) >= MIN_SECRET_CHARS}
        if not new:
            return
        with self._lock:
            self._secrets = tuple(sorted(set(self._secrets) | new, key=len, reverse=True))

    def add_later(self, source: Source) -> None:
        """Add the values `source()` returns the first time this masker is used (see the module docstring)."""
        with self._lock:
            self._pending.append(source)

    def _read_pending(self) -> None:
        if not self._pending or self._reader == threading.get_ident():
            return
        with self._reading:
            self._reader = threading.get_ident()
            try:
                while self._pending:
                    source = self._pending[0]
                    try:
                        self.add(*source())
                    except Exception:  # masking must not fail; the secrets it could not read stay unmasked
                        log.warning("could not read the secrets to mask", exc_info=True)
                    finally:
                        with self._lock:
                            self._pending.remove(source)
            finally:
                self._reader = None

    def __bool__(self) -> bool:
        self._read_pending()
        return bool(self._secrets)

    def mask(self, text: str) -> str:
        self._read_pending()
        for s in self._secrets:
            if s in text:
                text = text.replace(s, MASK)
        return text

    def mask_error(self, e: E) -> E:
        """`e` with its message, hint and args masked in place (HermitError's fields and any exception's
        args), returned so a caller can `raise masker.mask_error(e)`."""
        if not self:
            return e
        for attr in ("message", "hint"):
            value = getattr(e, attr, None)
            if isinstance(value, str):
                setattr(e, attr, self.mask(value))
        e.args = tuple(self.mask(a) if isinstance(a, str) else a for a in e.args)
        return e


KNOWN = SecretMasker()


def register(*values: str | None) -> None:
    """Add secret values the whole process must never show (idempotent; short or empty values ignored)."""
    KNOWN.add(*values)


def register_later(source: Source) -> None:
    """Register the values `source()` returns, read the first time anything is masked."""
    KNOWN.add_later(source)


def mask(text: str) -> str:
    """`text` with every registered secret replaced by `***`."""
    return KNOWN.mask(text)


def mask_cut(head: str, tail: str) -> tuple[str, str]:
    """The two ends of a text whose middle was cut out, each without the CUT_MARGIN characters next to the
    cut: a key the cut split in two leaves no half there. The same for every text, whatever it holds —
    masking only the pieces that match a secret told a chat's command, which chooses what ends at the cut,
    whether its guess was the start of a key (an audit read a key prefix in ~32 calls a character)."""
    return head[:max(0, len(head) - CUT_MARGIN)], tail[CUT_MARGIN:]


PR_SET_DUMPABLE = 4


def keep_environment_private() -> bool:
    """Make this process non-dumpable (prctl PR_SET_DUMPABLE 0; Linux only, best effort): its
    /proc/<pid>/environ, mem, fd… become unreadable to other processes of the same (non-root) uid, the
    commands its exec runs included; it also means no core dumps. Children get their own dumpable flag back at
    exec. True when it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # here, not at the top: every module that masks imports this one
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def url_passwords(url: str | None) -> list[str]:
    """Every password a URL or DSN carries: the `user:password@` of a proxy's or a database's URL and each
    libpq `password=…` / `sslpassword=…` (in a keyword DSN or a URL's query), as written."""
    if not url:
        return []
    found = [m.group(1).strip("'") for m in _KEYWORD_PASSWORD.finditer(url)]
    if "@" in url:
        with contextlib.suppress(ValueError):  # as written: errors quote the URL
            found.append(urllib.parse.urlsplit(url.strip()).password or "")
    return [p for p in found if p]


_KEYWORD_PASSWORD = re.compile(r"(?:^|[\s?&])(?:ssl)?password\s*=\s*('[^']*'|[^\s&]+)")


def header_secret(name: str, value: str) -> str | None:
    """The secret an HTTP header carries, by its name (Authorization, X-API-Key, a `…-Token`, a cookie):
    `Bearer <key>` → the key; None for an ordinary header (Content-Type, HTTP-Referer), which must not be
    masked wherever its value appears."""
    if not value or not _CREDENTIAL_HEADER.search(name):
        return None
    scheme, _, rest = value.strip().partition(" ")
    return rest.strip() if rest and scheme.lower() in ("bearer", "basic", "token") else value.strip()


_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|passw|cookie|signature", re.IGNORECASE)
