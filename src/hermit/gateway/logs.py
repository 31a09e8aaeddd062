"""The gateway's logging: stderr and a rotating file in the state dir, text or JSON, secrets masked.

Every record passes a filter that replaces known secret values (the gateway token, provider API keys
read from the environment) with `***` before any handler formats it, so neither the log file nor the
terminal ever holds them, whichever library logged them: the handlers set here, and the root logger's
stderr handler, where every other library's lines go (httpx's `HTTP Request: POST http://user:pw@…`).
uvicorn's access log is off: page URLs carry the token. Then `OneLine` escapes every line break and
control character in the message (`\\n`,
`\\x1b`, `\\u2028`): a record is one line whatever a request path or header carried, so nobody writes an
entry of their own into the log that `hermit logs` and the web app read back. Only a traceback, which the
formatter appends, spans lines, and none of its lines can pass for an entry (`safe_traceback`). A run of
whitespace in a message becomes one space, too: a path padded with spaces drew, in the web app's wrapping
Log view, a forged entry that began a row of its own. The log
holds what people wrote, so `logs/` is 0700 and every log file 0600, the rotated ones included, whatever
the umask.

Under systemd stderr is the journal, which the adm and systemd-journal groups read too: there the log's lines
(peer ids, session keys, file names people sent, job labels, library lines with chat ids in URLs) are not
written. The journal gets the gateway's start and stop in its own words and, for a warning or an error, its
level, logger and exception type only, each pointing at `hermit logs`; gateway.log keeps every entry whole.
What Python itself would print there whole — an exception no code caught in a thread, a warning — is logged
instead, and a log line gateway.log cannot take (a full disk) is said once without its text.
stderr is the journal when JOURNAL_STREAM (`<dev>:<inode>`, set by systemd) names stderr's own file: a
process whose stderr was redirected elsewhere inherits the variable, not the stream.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import logging.handlers
import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hermit.config.paths import ensure_private_dir, private_file, tighten_dir
from hermit.redaction import MaskLog, register
from hermit.refusals import SUMMARY, RefusalLog

LOG_FILE = "gateway.log"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_TEXT_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) ([\w.\-]+): (.*)$")  # TEXT_FORMAT's lines

LOGGERS = ("hermit", "uvicorn", "uvicorn.error")

# C0 and C1 controls, DEL, the Unicode line and paragraph separators, and the bidi controls: what could end a
# line (str.splitlines breaks at \x1c-\x1e, \x85, U+2028/9 too), drive a terminal, or reorder what is shown.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SPACES = re.compile(r"\s{2,}")  # after one_line, only spaces are left of \s


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) <= 0xFF else f"\\u{ord(c):04x}")


def one_line(text: str) -> str:
    """`text` with every control character, line break and bidi control escaped (`\\n`, `\\x1b`, `\\u202e`)."""
    return _CONTROL.sub(_escape, text)


def one_spaced(text: str) -> str:
    """`text` one line (`one_line`) with each run of two or more whitespace characters (spaces, U+3000,
    U+2003 and the other Unicode spaces) made one space."""
    return _SPACES.sub(" ", one_line(text))


def safe_traceback(text: str) -> str:
    """A traceback (or stack) kept on its lines, each escaped, and indented where it would read as an entry
    of its own (an exception message can hold a forged log line)."""
    return "\n".join(f"  {line}" if line.startswith("{") or _TEXT_LINE.match(line) else line
                     for line in (one_line(part) for part in text.split("\n")))


class OneLine(logging.Filter):
    """Makes every record one line: its message (args included) escaped and its runs of whitespace made one
    space, its traceback escaped, as above."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        escaped = one_spaced(text)
        if escaped != text:
            record.msg, record.args = escaped, None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = safe_traceback(record.exc_text)
        if record.stack_info:
            record.stack_info = safe_traceback(record.stack_info)
        return True


class SecretMask(MaskLog):
    """Masks through hermit.redaction, the same masker as the CLI and stored errors; the secrets given are
    registered for the whole process (a turn's stored error masks a channel token as the log does)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        register(*secrets)


class ConnectionNoise(logging.Filter):
    """On uvicorn's logger: its lines below ERROR that anyone can cause by connecting (a WebSocket accepted,
    opened, closed or rejected, an invalid HTTP request) are limited like the gateway's refusals
    (hermit/refusals.py), per message, so a flood of bare connections cannot rotate the log's history out."""

    def __init__(self, log: logging.Logger) -> None:
        super().__init__()
        self.limit = RefusalLog(log, summary="%d more lines like %r left out in the last %.0f s (only the first "
                                             "%d are logged)")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR or getattr(record, SUMMARY, False):
            return True
        return self.limit.admit(str(record.msg))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            obj["exc"] = record.exc_text
        return json.dumps(obj, ensure_ascii=False)


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log whose every file, the first and each one opened after a rotation, is 0600.

    A line it cannot write (a full disk, a quota, the file size limit) is said once on stderr in words of its
    own, until a line is written again: logging's default printed each record's message and arguments there (peer
    ids, words of a chat), and under systemd stderr is the journal, which other groups read."""

    _failing = False
    _erred = False

    def _open(self) -> io.TextIOWrapper:
        private_file(Path(self.baseFilename))
        return super()._open()

    def emit(self, record: logging.LogRecord) -> None:
        self._erred = False
        super().emit(record)
        if not self._erred:
            self._failing = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        self._erred = True
        if self._failing:
            return
        self._failing = True
        exc = sys.exc_info()[1]
        why = (exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__)
        with contextlib.suppress(Exception):
            sys.stderr.write(f"hermit: {LOG_FILE} could not be written ({why}); its lines are lost until it can be "
                             "(a full disk?)\n")
            sys.stderr.flush()


def log_path(home: Path) -> Path:
    """Where the gateway of state dir `home` writes its log (`hermit logs` reads it)."""
    return home / "logs" / LOG_FILE


def split_lines(data: bytes) -> list[str]:
    """The lines of a log's bytes, split at "\n" only, as the handlers end them (str.splitlines would also
    break at U+2028, \x85 or \x1e inside an entry an older gateway wrote unescaped)."""
    lines = data.decode("utf-8", "replace").split("\n")
    return lines[:-1] if lines and not lines[-1] else lines


def log_entry(line: str) -> dict[str, Any] | None:
    """A line of the log, text or JSON, as {ts, level, logger, msg[, exc]}; None for a continuation line
    (a traceback's), which belongs to the entry above it."""
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            return {k: obj[k] for k in ("ts", "level", "logger", "msg", "exc") if k in obj}
    m = _TEXT_LINE.match(line)
    if m is None:
        return None
    return {"ts": m.group(1), "level": m.group(2).lower(), "logger": m.group(3), "msg": m.group(4)}


JOURNAL_HINT = "`hermit logs` shows the gateway's log"
# The gateway's own start and stop lines (the supervisor's, logged as hermit.gateway; known by how their format
# string starts) and what the journal says for them: their arguments (the URL, agent and channel account names)
# stay in gateway.log.
_START_STOP = (("gateway listening on", f"gateway started; its log is kept out of the journal: {JOURNAL_HINT}"),
               ("stopping:", "gateway stopping"), ("gateway stopped", "gateway stopped"))


def stderr_is_journal(environ: Mapping[str, str] | None = None, fd: int = 2) -> bool:
    """Whether `fd` (stderr) is the stream systemd's JOURNAL_STREAM names (module docstring)."""
    dev, _, ino = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(fd)
        return (int(dev), int(ino)) == (st.st_dev, st.st_ino)
    except (ValueError, OSError):
        return False


def _start_stop(record: logging.LogRecord) -> str | None:
    if record.name != "hermit.gateway" or record.levelno != logging.INFO:
        return None
    return next((said for start, said in _START_STOP if str(record.msg).startswith(start)), None)


class JournalOnly(logging.Filter):
    """What reaches the journal: the start and stop lines, warnings and errors (said by `JournalFormatter`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or _start_stop(record) is not None


class JournalFormatter(logging.Formatter):
    """A line without the record's message or traceback: start/stop in fixed words, else its level, logger and
    exception type (a class name), and where the whole entry is."""

    def format(self, record: logging.LogRecord) -> str:
        said = _start_stop(record)
        if said is None:
            exc = record.exc_info[1] if record.exc_info else None
            kind = f" ({type(exc).__name__})" if exc is not None else ""
            said = f"{record.levelname.lower()} logged{kind}: {JOURNAL_HINT}"
        return f"{record.levelname} {record.name}: {said}"


def _thread_crash(args: threading.ExceptHookArgs) -> None:
    """An exception no code caught in a thread other than the main one, logged (gateway.log: whole; the journal:
    its type) instead of printed on stderr whole by Python's default hook."""
    if args.exc_type is SystemExit:
        return
    thread = args.thread.name if args.thread is not None else "?"
    logging.getLogger("hermit.gateway").error("thread %s stopped by an exception nothing caught", thread,
                                              exc_info=args.exc_value)


def _to_stderr(handler: logging.Handler) -> bool:
    try:
        return isinstance(handler, logging.StreamHandler) and handler.stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a StringIO (pytest's capture), a closed stream
        return False


def setup_logging(log_dir: Path, fmt: str, secrets: Iterable[str], *, debug: bool = False,
                  max_bytes: int = 5_000_000, backups: int = 3) -> Path:
    """Attach the gateway's handlers to Hermit's and uvicorn's loggers; returns the log file path."""
    ensure_private_dir(log_dir)
    tighten_dir(log_dir)  # a logs/ an older version created 0755
    path = log_dir / LOG_FILE
    for old in [path, *(path.with_name(f"{LOG_FILE}.{n}") for n in range(1, backups + 1))]:
        if old.exists():
            os.chmod(old, 0o600)
    formatter: logging.Formatter = (JsonFormatter() if fmt == "json"
                                    else logging.Formatter(TEXT_FORMAT))
    mask = SecretMask(secrets)
    filters: list[logging.Filter] = [mask, OneLine()]  # masked, then made one line
    handlers: list[logging.Handler] = [logging.StreamHandler(),
                                       PrivateRotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups,
                                                                  encoding="utf-8")]
    for h in handlers:
        h.setFormatter(formatter)
        for f in filters:
            h.addFilter(f)
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = list(handlers)
        logger.filters = [f for f in logger.filters if not isinstance(f, ConnectionNoise)]
        if name == "uvicorn.error" and not debug:
            logger.addFilter(ConnectionNoise(logger))
        logger.setLevel(logging.DEBUG if debug else logging.INFO)
        logger.propagate = False
    journal = stderr_is_journal()
    for h in [*handlers, *logging.getLogger().handlers]:  # the root's: the CLI's stderr handler, other libraries'
        if journal and _to_stderr(h):
            h.setFormatter(JournalFormatter())
            if not any(isinstance(f, JournalOnly) for f in h.filters):
                h.addFilter(JournalOnly())
    if journal:  # what Python itself prints on stderr goes through the handlers above: its kind to the journal
        threading.excepthook = _thread_crash
        logging.captureWarnings(True)
    for h in logging.getLogger().handlers:
        if not any(isinstance(f, MaskLog) for f in h.filters):
            h.addFilter(mask)
    return path
