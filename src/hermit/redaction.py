"""Secret values (API keys, channel tokens, the gateway token) masked out of text before it is printed, logged or stored.

A provider that echoes the key it was sent ("invalid x-api-key: sk-ant-…") put that key in `hermit agent`'s
error output and in the session transcript, while only the gateway's log masked it. Every place that shows
or keeps error text masks through one `SecretMasker`: the model transport (each provider error, at the
source, so the transcript and every face get the masked text), the CLI's error printing, the agent loop's
error record, and the gateway's log filter. `KNOWN` holds the process's secrets: the model transport adds
the keys it sends, composition roots add what the config names (channel tokens, the gateway token).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TypeVar

MASK = "***"
MIN_SECRET_CHARS = 8  # shorter values ("x", "true", a port) would mask ordinary words, not secrets

E = TypeVar("E", bound=BaseException)


class SecretMasker:
    """A set of secret values; `mask` replaces each (longest first) with `***`."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()
        self.add(*secrets)

    def add(self, *values: str | None) -> None:
        new = {v.strip() for v in values if v and len(v.strip()) >= MIN_SECRET_CHARS}
        if not new:
            return
        with self._lock:
            self._secrets = tuple(sorted(set(self._secrets) | new, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def mask(self, text: str) -> str:
        for s in self._secrets:
            if s in text:
                text = text.replace(s, MASK)
        return text

    def mask_error(self, e: E) -> E:
        """`e` with its message, hint and args masked in place (HermitError's fields and any exception's
        args), returned so a caller can `raise masker.mask_error(e)`."""
        if not self._secrets:
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


def mask(text: str) -> str:
    """`text` with every registered secret replaced by `***`."""
    return KNOWN.mask(text)
