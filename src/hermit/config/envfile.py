"""The owner-only env file (`<state>/hermit.env`): API keys and bot tokens that `hermit setup` stores, so
they never go into hermit.yaml (which names the variables instead).

The format is the common subset of shell, dotenv and systemd's EnvironmentFile (the service unit reads
the same file): `NAME=value` lines, `#` comments, blank lines, and values optionally in single or double
quotes. Reading never fails a command: a line that is not `NAME=value` is reported and skipped. The
composition roots merge it under the process environment (a variable already set wins) — only they call
`read_env_file`. Writing replaces the file atomically, 0600, keeping its other lines and comments.
Both open the name without following a link and judge, chmod and read what the descriptor is: a link there (to
/etc/passwd, for a root-run Hermit), a FIFO or a folder is reported and left as it is, nothing read from it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hermit.config.paths import not_own_file
from hermit.durable import write_atomic
from hermit.errors import ConfigError
from hermit.textfile import file_kind

ENV_FILE = "hermit.env"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
_PLAIN = re.compile(r"^[A-Za-z0-9_./:+=@%,~-]*$")
HEADER = ("# Hermit's secrets (API keys, bot tokens): owner-only, read at start by every hermit command and by\n"
          "# the gateway service. hermit.yaml names these variables; a variable set in the environment wins.\n")


def env_file_path(home: Path) -> Path:
    return home / ENV_FILE


@dataclass
class EnvFile:
    values: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # "line N: …" for lines that were skipped


def _unquote(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1]
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r'\\(["\\$`])', r"\1", raw[1:-1])
    return raw.split(" #", 1)[0].rstrip()  # an unquoted value ends at a comment


def parse_env_text(text: str) -> EnvFile:
    out = EnvFile()
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            out.problems.append(f"line {n}: not NAME=value, skipped")
            continue
        out.values[m.group(1)] = _unquote(m.group(2))
    return out


MAX_ENV_BYTES = 1 << 20  # keys and tokens: a file past this is not an env file Hermit wrote


class Unusable(Exception):
    """hermit.env is there but is not a file Hermit may read: the message says why and what to do."""


def _open_own(path: Path) -> tuple[int, os.stat_result] | None:
    """A descriptor of the env file and its fstat (None: there is none). The name is opened without following a
    link (O_NOFOLLOW) and without blocking (O_NONBLOCK: a FIFO there must not hang every command), and judged by
    the descriptor, never by the name again: a link planted at `<state>/hermit.env` had a root-run Hermit chmod
    what it names (/etc/passwd to 0600) and read it. Raises Unusable for a link, anything but a regular file, or
    a file another user owns or may write (`not_own_file`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Unusable(f"it is a symbolic link; Hermit reads and writes your keys only in a regular file at "
                           f"that name, never in what a link there names. Check where it points (ls -l {path}): "
                           f"if to your own keys file, put that file in its place (mv \"$(readlink -f {path})\" "
                           f"{path}); if anywhere else (/etc/passwd…), remove the link (rm {path})") from None
        if e.errno == errno.ENXIO:
            raise Unusable(f"it is a socket, not a file: remove it (rm {path}) and store your keys again "
                           f"with hermit setup") from None
        with contextlib.suppress(OSError):  # another user's 0600 file: say whose, as for one we may open
            if (why := not_own_file(os.lstat(path))) is not None:
                raise Unusable(_not_yours(path, why)) from None
        raise Unusable(f"cannot read it: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unusable(f"it is {file_kind(st.st_mode)}, not a regular file: nothing was read from it; move it "
                           f"out of the way (mv {path} {path}.not-keys) and store your keys again with hermit setup")
        if (why := not_own_file(st)) is not None:  # planted (HERMIT_HOME in a folder someone else made)
            raise Unusable(_not_yours(path, why))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _not_yours(path: Path, why: str) -> str:
    return (f"not read: it {why}; it holds your keys, so it must be yours and written by you alone "
            f"(check what it says, then: chown $(id -u) {path} && chmod 600 {path})")


def _read_own(path: Path) -> str | None:
    """The text of the env file (None: there is none), made owner-only when others could read it — on the
    descriptor read (fchmod), so the mode changed is the file's, never a link's target."""
    opened = _open_own(path)
    if opened is None:
        return None
    fd, st = opened
    try:
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # it holds keys: never leave it readable (or writable) by others
        if st.st_size > MAX_ENV_BYTES:
            raise Unusable(f"it is {st.st_size:,} bytes, over the {MAX_ENV_BYTES:,} an env file of keys needs: "
                           f"nothing was read from it; check what it is ({path})")
        data = b""
        while len(data) <= MAX_ENV_BYTES and (block := os.read(fd, 1 << 16)):
            data += block
        if len(data) > MAX_ENV_BYTES:
            raise Unusable(f"it grew past {MAX_ENV_BYTES:,} bytes while read: nothing was read from it; check what "
                           f"it is ({path})")
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unusable(f"cannot read it: it is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise Unusable(f"cannot read it: {e.strerror or e}") from None
    finally:
        os.close(fd)


def read_env_file(path: Path) -> EnvFile:
    """The file's variables; a missing file is empty. A file readable by others is made owner-only; one another
    user owns or may write (every user, or a group others are in: `not_own_file`) is not read, nor a link, a
    FIFO or anything but a regular file (`_open_own`): a problem says why and what to do."""
    try:
        text = _read_own(path)
    except Unusable as e:
        return EnvFile(problems=[str(e)])
    return EnvFile() if text is None else parse_env_text(text)


def quote_value(value: str) -> str:
    if _PLAIN.match(value):
        return value
    if "'" not in value:
        return f"'{value}'"
    return '"' + re.sub(r'(["\\$`])', r"\\\1", value) + '"'


def set_env_values(path: Path, updates: Mapping[str, str]) -> None:
    """Set (or replace) variables in the env file, keeping its other lines; created 0600 with a header."""
    for name, value in updates.items():
        if not _NAME.match(name):
            raise ConfigError(f"{name!r} is not a valid environment variable name",
                              "use letters, digits and underscores, e.g. ANTHROPIC_API_KEY")
        if "\n" in value or "\r" in value or "\x00" in value:
            raise ConfigError(f"the value for {name} contains a line break", "paste the key on one line")
    try:  # its lines are kept beside the new keys: read as read_env_file reads it (never through a link)
        text = _read_own(path)
    except Unusable as e:
        raise ConfigError(f"{path}: Hermit will not add your keys to it: {e}",
                          "fix what it says, then run this again") from None
    if text is None:
        text = HEADER
    lines = text.splitlines()
    pending = dict(updates)
    for i, line in enumerate(lines):
        m = _LINE.match(line)
        if m and m.group(1) in pending and not line.lstrip().startswith("#"):
            name = m.group(1)
            lines[i] = f"{name}={quote_value(pending.pop(name))}"
    lines += [f"{name}={quote_value(value)}" for name, value in pending.items()]
    write_atomic(path, "\n".join(lines) + "\n", mode=0o600, keep_mode=False)
