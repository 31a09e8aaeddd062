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
from hermit.loopback import url_host


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
    pid from the start, its address once it listens, `stopping` from its first step of shutting down; and how to
    stop or restart it by how it runs (HowRun: a systemd user unit, a launchd agent, or by hand)."""
    pid_n = info.get("pid") if isinstance(info.get("pid"), int) else None
    pid = f"pid {pid_n}" if pid_n is not None else "its pid not published yet"
    how = HowRun.of(pid_n, info.get("launchd"))
    if info.get("stopping"):
        return GatewayLocked(f"the gateway ({pid}) on {home} is still stopping: it lets running turns finish "
                             "(gateway.shutdown_grace_seconds) before it exits", how.wait_stopping())
    instead = f"; to restart it instead: {how.restart()}" if how.managed else ""
    if "port" not in info:
        return GatewayLocked(f"another gateway ({pid}) is starting on {home}{how.runs_as()}",
                             f"`hermit gateway status` shows it once it listens; stop it first ({how.stop()}), or use "
                             f"another --home{instead}")
    host = str(info.get("host"))
    where = f"http://{url_host(host)}:{info['port']}/"
    return GatewayLocked(f"another gateway is already running on {home} ({pid}, {where}){how.runs_as()}",
                         f"stop it first ({how.stop()}), or use another --home{instead}")


def systemd_service(pid: int) -> str | None:
    """The systemd user unit `pid` runs in (`hermit gateway install`'s), from its cgroup, else None."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.rsplit(":", 1)[-1].strip("/").split("/")
        if len(parts) >= 2 and parts[-1].endswith(".service") and any(p.startswith("user@") for p in parts[:-1]):
            # Printed into a command as is: a name with anything else (systemd's \x2d escapes) is not named.
            return parts[-1] if SYSTEMD_UNIT.fullmatch(parts[-1]) else None
    return None


SYSTEMD_UNIT = re.compile(r"[A-Za-z0-9:_.@-]{1,200}\.service")


@dataclass(frozen=True)
class HowRun:
    """How a gateway process runs — under a systemd user unit or as a launchd agent (`hermit gateway install`'s), or
    by hand — and so the commands that stop or restart it. Under a service manager `kill` and `hermit gateway run`
    are not the way: the unit and the plist restart only a gateway that failed, so a kill stops the service until
    the next login, and `hermit gateway run` then starts a second gateway outside it."""

    pid: int | None
    systemd: str | None = None  # the unit's name (systemd_service)
    launchd: str | None = None  # the agent's label (launchd_job)

    @classmethod
    def of(cls, pid: int | None, launchd_label: object = None) -> HowRun:
        """How process `pid` runs: its cgroup (Linux), the launchd label it published (macOS)."""
        return cls(pid, systemd_service(pid) if pid is not None else None, launchd_job(launchd_label))

    @classmethod
    def this_process(cls) -> HowRun:
        return cls.of(os.getpid(), os.environ.get("XPC_SERVICE_NAME"))

    @property
    def managed(self) -> bool:
        return bool(self.systemd or self.launchd)

    def _launchd_target(self) -> str:
        return f"gui/{os.getuid()}/{self.launchd}"

    def runs_as(self) -> str:
        """` (the systemd user service X)`, ` (the launchd agent X)`, or nothing."""
        if self.systemd:
            return f" (the systemd user service {self.systemd})"
        return f" (the launchd agent {self.launchd})" if self.launchd else ""

    def restart(self, run: str = "hermit gateway run") -> str:
        """`run`: the command that starts it again by hand (with flags a hint wants), used only when run by hand."""
        if self.systemd:
            return f"`systemctl --user restart {self.systemd}`"
        if self.launchd:
            return f"`launchctl kickstart -k {self._launchd_target()}`"
        return f"stop it ({self.stop()}) and start it again with `{run}`"

    def start(self) -> str:
        """How it is started again after stop()."""
        if self.systemd:
            return f"`systemctl --user start {self.systemd}`"
        if self.launchd:
            return f"`launchctl kickstart {self._launchd_target()}`"
        return "`hermit gateway run`"

    def stop(self) -> str:
        if self.systemd:
            return f"`systemctl --user stop {self.systemd}`"
        if self.launchd:  # a clean exit: the plist does not start it again (`launchctl kickstart` does)
            return f"`launchctl kill TERM {self._launchd_target()}`"
        return f"Ctrl-C where it runs, or `kill {self.pid}`" if self.pid is not None else \
            "Ctrl-C where it runs, or kill its pid"

    def wait_stopping(self) -> str:
        """The hint while it stops (it lets running turns finish first)."""
        if self.systemd:
            return (f"wait until it has exited (`systemctl --user status {self.systemd}`): a `systemctl --user "
                    "restart` starts the new one itself; else start this one again then")
        if self.launchd:
            return (f"wait until it has exited (`launchctl print {self._launchd_target()}`): a `launchctl kickstart "
                    "-k` starts the new one itself; else start this one again then")
        kill = f"`kill {self.pid}`" if self.pid is not None else "kill its pid"
        return f"wait until it has exited and start this one again (or {kill})"


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
