"""The owner-only env file (`<state>/hermit.env`): API keys and bot tokens that `hermit setup` stores, so
they never go into hermit.yaml (which names the variables instead).

The format is the common subset of shell, dotenv and systemd's EnvironmentFile (the service unit reads
the same file): `NAME=value` lines, `#` comments, blank lines, and values optionally in single or double
quotes. Reading never fails a command: a line that is not `NAME=value` is reported and skipped. The
composition roots merge it under the process environment (a variable already set wins) — only they call
`read_env_file`. Writing replaces the file atomically, 0600, keeping its other lines and comments.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hermit.config.paths import not_own_file
from hermit.durable import write_atomic
from hermit.errors import ConfigError

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


def read_env_file(path: Path) -> EnvFile:
    """The file's variables; a missing file is empty. A file readable by others is made owner-only; one another
    user owns or may write (every user, or a group others are in: `not_own_file`) is not read."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return EnvFile()
    except OSError as e:
        return EnvFile(problems=[f"cannot read it: {e.strerror or e}"])
    if (why := not_own_file(st)) is not None:  # planted (HERMIT_HOME in a folder someone else made): never read
        return EnvFile(problems=[f"not read: it {why}; it holds your keys, so it must be yours and written by you "
                                 f"alone (check what it says, then: chown $(id -u) {path} && chmod 600 {path})"])
    if st.st_mode & 0o077:
        os.chmod(path, 0o600)  # it holds keys: never leave it readable (or writable) by others
    try:
        return parse_env_text(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        return EnvFile(problems=[f"cannot read it: {e}"])


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
    try:
        st = os.stat(path)
    except FileNotFoundError:
        text = HEADER
    else:
        if (why := not_own_file(st)) is not None:  # its lines would be kept beside the new keys
            raise ConfigError(f"{path} {why}: Hermit will not add your keys to it",
                              "remove it (or, after checking what it says, make it yours: chown $(id -u) "
                              f"{path} && chmod 600 {path}), then run this again")
        text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    pending = dict(updates)
    for i, line in enumerate(lines):
        m = _LINE.match(line)
        if m and m.group(1) in pending and not line.lstrip().startswith("#"):
            name = m.group(1)
            lines[i] = f"{name}={quote_value(pending.pop(name))}"
    lines += [f"{name}={quote_value(value)}" for name, value in pending.items()]
    write_atomic(path, "\n".join(lines) + "\n", mode=0o600, keep_mode=False)
