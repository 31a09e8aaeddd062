"""A channel account's live status (connected, last error, messages in/out), mirrored to a file in the state dir.

`hermit channels status` reads these files, so it works whether or not it can reach the running gateway;
the gateway can also hand out `ChannelStatus` objects directly. A last error is masked before it is kept
(hermit.redaction): a platform's 401 may quote the bot token, and the status reaches `hermit channels
status`, `hermit gateway status`, GET /status and the web app's Ops view. A file an older version wrote is
masked when read.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hermit.channels.base import ChannelStatus
from hermit.durable import write_atomic
from hermit.locks import pid_alive
from hermit.redaction import mask

log = logging.getLogger(__name__)


def with_hint(message: str, hint: str | None) -> str:
    """An error's message and what to do about it, on one line (the hint only when it says something)."""
    return f"{message} — {hint}" if hint and hint not in message else message


def status_dir(state_dir: Path) -> Path:
    return state_dir / "channels" / "status"


class StatusTracker:
    """Owns one ChannelStatus; every change is written (atomically, without fsync: it is advisory)."""

    def __init__(self, channel: str, account_id: str, state_dir: Path | None,
                 clock: Callable[[], float] = time.time) -> None:
        self.status = ChannelStatus(channel, account_id)
        self._path = status_dir(state_dir) / f"{channel}.{account_id}.json" if state_dir else None
        self._clock = clock

    def connected(self, on: bool) -> None:
        if self.status.connected != on:  # last_error stays visible after a reconnect: it is the *last* one
            self.status.connected = on
            self._save()

    def error(self, message: str, hint: str | None = None) -> None:
        """Not connected, and why; with the error's hint (what to do: a refused token's "get a new one from
        @BotFather") kept after the message, as `hermit channels status` and the doctor show it."""
        self.status.connected = False
        self.status.last_error = mask(with_hint(message, hint))
        self._save()

    def inbound(self) -> None:
        self.status.messages_in += 1
        self._save()

    def outbound(self) -> None:
        self.status.messages_out += 1
        self._save()

    def _save(self) -> None:
        if self._path is None:
            return
        data = {**asdict(self.status), "updated_at": self._clock(), "pid": os.getpid()}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self._path, json.dumps(data), fsync=False)
        except OSError as e:  # status is advisory: never let it break message handling
            log.warning("could not write channel status %s: %s", self._path, e)


def read_statuses(state_dir: Path) -> list[dict[str, Any]]:
    """Every status file under the state dir, with `running` telling whether its process is still alive."""
    out: list[dict[str, Any]] = []
    d = status_dir(state_dir)
    if not d.is_dir():
        return out
    for p in sorted(d.glob("*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            out.append({"file": str(p), "last_error": f"unreadable status file: {e}"})
            continue
        if isinstance(data.get("last_error"), str):
            data["last_error"] = mask(data["last_error"])
        data["running"] = pid_alive(int(data.get("pid") or 0))
        out.append(data)
    return out
