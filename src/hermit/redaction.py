"""Secret values (API keys, channel tokens, the gateway token) masked out of text before it is printed, logged or stored.

A provider that echoes the key it was sent ("invalid x-api-key: sk-ant-…") put that key in `hermit agent`'s
error output and in the session transcript, while only the gateway's log masked it. Every place that shows
or keeps error text masks through one `SecretMasker`: the model transport (each provider error, at the
source, so the transcript and every face get the masked text), the CLI's error printing, the agent loop's
error record, and the gateway's log filter. `KNOWN` holds the process's secrets: the model transport adds
the keys it sends, composition roots add what the config names (channel tokens, the gateway token). Every
tool result passes `mask` too (tools/base.py), so a key a command prints never reaches a transcript or a
provider. A key a command wrote to a file is still in the file: so the workspace files the system prompt is
made of are masked where they are read (workspace.read_bootstrap), the history where the transcript is
read (agent/context.load_history), a compaction's request and summary (agent/compaction.py), and the model's
own text before it is recorded or shown (agent/loop.py: the finished reply, and each streamed piece through
`StreamMasker`, which holds back what could be the start of a key). The files on disk stay as written.

The CLI registers the config's secrets for every command (`register_later`): reading them loads the config
and the provider table, which `hermit --help` and `hermit completion` should not pay for, so they are read
the first time anything is masked. Output cut for length (exec keeps a head and a tail) loses CUT_MARGIN
characters next to the cut (`mask_cut`): a key straddling a cut edge would leave two halves that no longer
match the whole key, and masking only pieces that match would answer a guess.
Masking is exact-string matching, plus a key shown in part as providers echo one (`echoes`: "sk-proj-****2b4d"),
and so best effort: a key a command encodes (base64, reversed, one
character per line) is not recognised — except the one encoding an HTTP client makes itself: a URL's
`user:password@` goes out as `Authorization: Basic base64(user:password)`, which a server may echo, so
`url_passwords` returns that form too.

What counts as a secret is decided broadly, not by what the current config happens to name (an audit read
the other Slack mode's token, a removed channel's old token and a GITHUB_TOKEN out of `cat hermit.env`):
the CLI registers every value of hermit.env and every variable whose name says it holds one
(`environment_secrets`), then, when first masking, whatever the config names. Every line the CLI and the
gateway print passes `mask` on its way out (cli/terminal.py), log records too (`MaskLog`, before a handler
formats them).

`keep_environment_private` is the other half: the keys sit in the process's environment, and a command the
owner's unsandboxed exec runs (same uid) could read them from /proc/<hermit pid>/environ whatever the exec
whitelist holds. A non-dumpable process's /proc files are root's: same-uid processes (its children) cannot
read them. Root's children can (CAP_SYS_PTRACE), so running Hermit as root keeps that hole open.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

MASK = "***"
MIN_SECRET_CHARS = 8  # shorter values ("x", "true", a port) would mask ordinary words, not secrets
# What a cut text loses next to the cut (mask_cut): longer than any key or token Hermit holds.
CUT_MARGIN = 256

log = logging.getLogger(__name__)

E = TypeVar("E", bound=BaseException)


Source = Callable[[], Iterable[str | None]]


class SecretMasker:
    """A set of secret values; `mask` replaces every occurrence of each with `***`."""

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

    @property
    def secrets(self) -> tuple[str, ...]:
        """The secrets, longest first."""
        self._read_pending()
        return self._secrets

    @property
    def longest(self) -> int:
        """The length of the longest secret (0 with none): what a stream must hold back (StreamMasker)."""
        self._read_pending()
        secrets = self._secrets
        return len(secrets[0]) if secrets else 0

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where secrets occur in `text`: every occurrence of every secret, overlapping ones merged, in order.
        One `str.find` scan a secret (C speed: ~0.2 ms for a 150k-char prompt and six secrets; one regex
        alternation of the same secrets takes ten times as long)."""
        self._read_pending()
        found: list[tuple[int, int]] = []
        for s in self._secrets:
            at = text.find(s)
            while at >= 0:
                found.append((at, at + len(s)))
                at = text.find(s, at + 1)
        found += echoes(text, self._secrets)
        if len(found) < 2:
            return found
        found.sort()
        merged = [found[0]]
        for start, end in found[1:]:
            if start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged

    def mask(self, text: str) -> str:
        """`text` with every character of every secret occurrence replaced (each run by one `***`): two keys
        that overlap are masked whole, where replacing one after the other left a piece of the second."""
        spans = self.spans(text)
        if not spans:
            return text
        out, at = [], 0
        for start, end in spans:
            out += [text[at:start], MASK]
            at = end
        out.append(text[at:])
        return "".join(out)

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


# A secret shown in part, as providers echo a key they refused ("Incorrect API key provided: sk-proj-****2b4d",
# "sk-…2b4d", "sk-abc...2b4d"): a run of mask characters, the key's end after it, maybe its start before it.
_HIDDEN = re.compile(r"(?:[*•·…]|\.(?=\.))+\.?")
_KEY_CHARS = re.compile(r"[A-Za-z0-9_-]+")
_KEY_CHAR_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
ECHO_END_CHARS = 4  # the shortest end of a key that counts as its echo (what OpenAI shows)


def echoes(text: str, secrets: Iterable[str]) -> list[tuple[int, int]]:
    """Where `text` shows one of `secrets` in part: a run of mask characters (`*`, `•`, `…`, `..`) followed by
    the secret's last ECHO_END_CHARS characters or more, with the secret's first characters before the run if
    they are there too (each is the secret's own, so masking them hides nothing of anyone else's). Exact-string
    masking left "sk-proj-****2b4d" in the owner's log and transcript: the key's type and its last four
    characters, which with a leaked list of keys names the key. One C-speed look for each secret's end first."""
    ends = [s for s in secrets if len(s) > ECHO_END_CHARS and s[-ECHO_END_CHARS:] in text]
    if not ends:
        return []
    found: list[tuple[int, int]] = []
    for run in _HIDDEN.finditer(text):
        after = _KEY_CHARS.match(text, run.end())
        if after is None or len(after.group()) < ECHO_END_CHARS:
            continue
        shown_end = after.group()
        for s in ends:
            if not s.endswith(shown_end) or len(shown_end) >= len(s):
                continue
            start = run.start()
            # The key characters just before the run, looked for no further back than the secret is long: a search
            # from the text's start tried every position before it (a 10,000-character word before "…2b4d" cost a
            # quarter of a second, twenty of them on a page 3 s; s21 re-audit).
            first = start
            while first > 0 and start - first <= len(s) and text[first - 1] in _KEY_CHAR_SET:
                first -= 1
            if first < start and s.startswith(text[first:start]):  # (one longer than the secret is none of it)
                start = first
            found.append((start, after.end()))
            break
    return found


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


def mask_data(value: Any) -> Any:
    """A JSON value (stored messages) with every string in it masked; `value` itself when nothing was. The
    common case is one C-speed look: its JSON text is searched for each secret as JSON writes it (a string
    holding a secret holds it so in JSON too); only a hit walks the value."""
    secrets = KNOWN.secrets
    if not secrets:
        return value
    text = json.dumps(value, default=str)
    if not any(json.dumps(s)[1:-1] in text or s[-ECHO_END_CHARS:] in text for s in secrets):
        return value
    return _masked_data(value, secrets, KNOWN)


def _masked_data(value: Any, secrets: tuple[str, ...], masker: SecretMasker) -> Any:
    if isinstance(value, str):
        return masker.mask(value) if any(s in value or s[-ECHO_END_CHARS:] in value for s in secrets) else value
    if isinstance(value, dict | list):
        out: Any = None
        for k, v in (value.items() if isinstance(value, dict) else enumerate(value)):
            masked = _masked_data(v, secrets, masker)
            if masked is not v:
                out = out if out is not None else value.copy()
                out[k] = masked
        return value if out is None else out
    return value


class StreamMasker:
    """Masks text that arrives in pieces (a model's streamed reply): a key split across two pieces must not go
    out half in each. `feed` returns what is safe to send now and holds back the end that could still be
    the start of a secret (the longest secret's length less one, more only while a whole key sits across
    that edge); `finish` returns the rest. What the pieces add up to is the whole text masked."""

    def __init__(self, masker: SecretMasker | None = None) -> None:
        self._masker = masker if masker is not None else KNOWN  # looked up now: tests may swap KNOWN
        self._held = ""

    def feed(self, text: str) -> str:
        held = self._held + text
        cut = len(held) - max(self._masker.longest - 1, 0)
        if cut <= 0:
            self._held = held
            return ""
        # A secret not yet whole starts within the held end; one whole key across the cut is held with it.
        for start, end in self._masker.spans(held):
            if start < cut < end:
                cut = start
                break
        self._held = held[cut:]
        return self._masker.mask(held[:cut])

    def finish(self) -> str:
        rest, self._held = self._held, ""
        return self._masker.mask(rest)


class MaskLog(logging.Filter):
    """A log handler's filter: the record's message (arguments included) and its traceback masked through
    `KNOWN` before the handler formats it. Installed on the CLI's stderr handler (where httpx's
    `HTTP Request: POST http://u:pw@…` lines go) and on each of the gateway's handlers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not KNOWN:
            return True
        text = record.getMessage()
        masked = KNOWN.mask(text)
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = KNOWN.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = KNOWN.mask(record.stack_info)
        if masked != text:
            record.msg, record.args = masked, None
        return True


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

    try:
        # The process's own symbols (libc's among them), as main.py's first prctl: ctypes.util.find_library
        # ran `ldconfig -p` as a child process in every `hermit` command (~20-50 ms of wall time).
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def url_passwords(url: str | None) -> list[str]:
    """Every password a URL or DSN carries: the `user:password@` of a proxy's, a model server's or a
    database's URL — as written (errors quote the URL), percent-decoded, and as the `Basic` credentials an
    HTTP client sends for it (base64 of `user:password`, which a server may echo back) — and each libpq
    `password=…` / `sslpassword=…` (in a keyword DSN or a URL's query), as written."""
    if not url:
        return []
    found = [m.group(1).strip("'") for m in _KEYWORD_PASSWORD.finditer(url)]
    if "@" in url:
        with contextlib.suppress(ValueError):
            parts = urllib.parse.urlsplit(url.strip())
            if parts.password:
                user, password = parts.username or "", parts.password
                plain_user, plain = urllib.parse.unquote(user), urllib.parse.unquote(password)
                found += [password, plain, *{_basic(user, password), _basic(plain_user, plain)}]
    return list(dict.fromkeys(p for p in found if p))


def _basic(user: str, password: str) -> str:
    """What httpx (and curl, requests) send for a URL's userinfo: base64 of `user:password`, UTF-8."""
    return base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def without_userinfo(url: str) -> str:
    """`url` as shown to a person: without its `user:password@` (a password is no one's business on a
    screen or in a log; `***` in its place reads worse than nothing)."""
    if "@" not in url:
        return url
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


# A variable whose name says it holds a secret (HF_TOKEN, GITHUB_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY,
# PGPASSWORD…), unless it names a file holding one (…_FILE, …_PATH, …_DIR: a path, not the secret).
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|PASSPHRASE|API_?KEY|(?:^|_)KEY$|(?:^|_)AUTH$")
_PATH_NAME = re.compile(r"_(?:FILE|PATH|DIR|SOCK)$")


def environment_secrets(environ: Mapping[str, str], stored: Iterable[str] = ()) -> list[str]:
    """The secrets an environment holds, for a composition root to register: every value in `stored` (the
    values of hermit.env, which is for keys and tokens), every variable named like a secret, and the passwords
    of every URL or DSN in any variable (a proxy, a database, a package index)."""
    found = list(stored)
    for name, value in environ.items():
        if not value or len(value) < MIN_SECRET_CHARS:
            continue
        upper = name.upper()
        if _SECRET_NAME.search(upper) and not _PATH_NAME.search(upper):
            found.append(value)
        if "@" in value or "assword" in value:
            found += url_passwords(value)
    return found


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
