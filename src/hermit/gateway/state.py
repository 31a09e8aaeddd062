"""The gateway's files in the state dir: the access token (owner-only) and the one-gateway lock.

`<state>/gateway/token`: 32 random bytes, URL-safe, created on first start with mode 0600 in a 0700
directory. A token file that other users can read is refused (fail closed) rather than trusted: the
token is the only thing between a local process or, on a non-loopback bind, the network and the
owner's assistant. `<state>/gateway/gateway.lock` is flock'd for the gateway's lifetime and holds its
pid, host and port, so a second gateway on the same state dir is refused and `hermit gateway status`
finds the running one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.config.paths import ensure_private_dir, tighten_dir
from hermit.errors import ConfigError, HermitError
from hermit.locks import LockFile, lock_fd


class GatewayLocked(HermitError):
    """Another gateway already runs on this state dir."""


def gateway_dir(home: Path) -> Path:
    return home / "gateway"


def token_path(home: Path) -> Path:
    return gateway_dir(home) / "token"


def lock_path(home: Path) -> Path:
    return gateway_dir(home) / "gateway.lock"


def _private_dir(path: Path) -> None:
    ensure_private_dir(path)  # the state dir too, when the gateway is what creates it
    tighten_dir(path)


def check_token_file(path: Path) -> str:
    """The token in `path`, refused unless the file is a regular file owned by us and not readable by others."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ConfigError(f"no gateway token at {path}", "start the gateway once (`hermit gateway run`) to "
                          "create it") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path} is not a regular file", f"remove it; the gateway creates a new token: rm {path}")
    if st.st_uid != os.getuid():
        raise ConfigError(f"{path} belongs to another user", f"remove it and restart the gateway: rm {path}")
    if st.st_mode & 0o077:
        raise ConfigError(f"gateway token {path} is readable by other users (mode {stat.S_IMODE(st.st_mode):o})",
                          f"chmod 600 {path} (or delete it for a new token)")
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < 32:
        raise ConfigError(f"gateway token in {path} is too short", f"delete it for a new one: rm {path}")
    return token


def ensure_token(home: Path) -> str:
    """The gateway token, created (0600) on first use."""
    path = token_path(home)
    _private_dir(path.parent)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
            f.flush()
            os.fsync(f.fileno())
    return check_token_file(path)


@dataclass
class GatewayLock:
    """The lock file of the running gateway (hermit.locks); released when the process ends, whatever the cause."""

    lock: LockFile

    @property
    def path(self) -> Path:
        return self.lock.path

    @classmethod
    def acquire(cls, home: Path, *, wait_stopping: float = 0.0,
                waiting: Callable[[int], None] | None = None) -> GatewayLock:
        """The lock; raises GatewayLocked while another gateway holds it. One that is stopping (it lets running
        turns finish first) is waited for, at most `wait_stopping` seconds, `waiting(pid)` told once."""
        path = lock_path(home)
        _private_dir(path.parent)
        lock = LockFile.try_acquire(path)
        info = (read_lock_info(home) or {}) if lock is None else {}
        if lock is None and info.get("stopping") and wait_stopping > 0:
            if waiting is not None:
                waiting(info.get("pid", 0))
            lock = LockFile.acquire_within(path, wait_stopping)
            info = (read_lock_info(home) or {}) if lock is None else {}
        if lock is None:
            raise _locked(home, info)
        # What a killed gateway published (its port) must not pass for this one's before it listens: the
        # port may be someone else's by now, and `hermit dashboard` would send the token there.
        lock.publish(json.dumps({"pid": os.getpid()}).encode())
        return cls(lock)

    def publish(self, info: dict[str, Any]) -> None:
        self.lock.publish(json.dumps(info).encode())

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.lock.publish(b"")
        self.lock.release()


def _locked(home: Path, info: dict[str, Any]) -> GatewayLocked:
    """What to say when another gateway holds the lock, from what it published (gateway/supervisor.py): its
    pid from the start, its address once it listens, `stopping` from its first step of shutting down."""
    pid = f"pid {info['pid']}" if isinstance(info.get("pid"), int) else "its pid not published yet"
    if info.get("stopping"):
        return GatewayLocked(f"the gateway ({pid}) on {home} is still stopping: it lets running turns finish "
                             "(gateway.shutdown_grace_seconds) before it exits",
                             "wait until it has exited and start this one again (or kill its pid)")
    if "port" not in info:
        return GatewayLocked(f"another gateway ({pid}) is starting on {home}",
                             "`hermit gateway status` shows it once it listens; stop it first (Ctrl-C or kill its "
                             "pid), or use another --home")
    host = str(info.get("host"))
    where = f"http://{f'[{host}]' if ':' in host else host}:{info['port']}/"
    return GatewayLocked(f"another gateway is already running on {home} ({pid}, {where})",
                         "stop it first (Ctrl-C or kill its pid), or use another --home")


LAUNCHD_JOB = re.compile(r"com\.hermit\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


def launchd_job(label: object) -> str | None:
    """The launchd agent a gateway runs as (`hermit gateway install`'s plists are labelled com.hermit.*), from
    the XPC_SERVICE_NAME launchd sets, recorded in the lock info; None for any other value (a terminal's job, or
    one that could not be printed into a command as is)."""
    return label if isinstance(label, str) and LAUNCHD_JOB.fullmatch(label) else None


def read_lock_info(home: Path) -> dict[str, Any] | None:
    """What the running gateway published in its lock file, or None when no gateway holds it."""
    path = lock_path(home)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if lock_fd(fd, shared=True, wait=False):
            return None  # nobody holds it: no gateway is running (closing the descriptor unlocks it)
        data = os.read(fd, 65536)
        try:
            info = json.loads(data or b"{}")
        except ValueError:
            return {}
        return info if isinstance(info, dict) else {}
    finally:
        os.close(fd)
