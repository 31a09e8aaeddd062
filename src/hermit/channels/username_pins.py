"""Usernames pinned to the platform id that first presented them, so a freed username cannot make its next
holder an owner.

`owners`, `allow_from` and `group_allow_from` may name a person by `@username` where the platform has them
(Telegram, Discord). A username can be changed, given up and taken by someone else; matched by name alone,
that someone else would become the owner (the main session, MEMORY.md, owner-only notes, unsandboxed
tools). So the first time a listed username is seen on a message that access control checks (a DM, or a
group message of an allowed group), the sender's id is pinned to it, and from then on the entry means that
id only: the same person still matches after renaming themselves, and a different id presenting the name is
a stranger (access.py logs it, at most once an hour per name, naming the fix: list the id).

Stored owner-only next to the pairing files, `<state>/credentials/usernames.json` (0600, atomic writes under
the pairing lock, so the gateway and the CLI never lose each other's update, and a crash leaves the old
file or the new one):

    {"version": 1, "pins": {"telegram": {"@ann_smith": {"id": "31", "account_id": "default",
                                                       "pinned_at": 1767000000.0}}}}

Pins are per platform, not per account: a Telegram username names one Telegram user whichever bot sees it.
A file that cannot be read pins nothing more and matches nobody by username (access.py fails closed);
`hermit doctor` names it. Removing a pin (`forget`) lets the next sender presenting the name be pinned.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.channels.pairing import PairingStore
from hermit.config.schema import ChannelAccessConfig
from hermit.durable import write_atomic
from hermit.errors import HermitError

PINS_FILE = "usernames.json"
_VERSION = 1


def handle(username: str | None) -> str | None:
    """A platform username as `@username` entries are written (config/allowlist.py): '@', lower case."""
    name = (username or "").strip().lstrip("@")
    return "@" + name.lower() if name else None


@dataclass(frozen=True)
class Pin:
    channel: str
    username: str  # "@name", lower case
    sender_id: str  # the platform id that first presented it
    account_id: str  # the account it was first seen on
    pinned_at: float


class UsernamePins:
    """The pins of one state dir; reads need no lock (atomic renames), pinning holds the pairing lock."""

    def __init__(self, store: PairingStore) -> None:
        self.store = store
        self._cache: tuple[tuple[int, int, int], dict[str, dict[str, Pin]]] | None = None

    @property
    def path(self) -> Path:
        return self.store.dir / PINS_FILE

    def _load(self) -> dict[str, dict[str, Pin]]:
        """channel -> username -> pin; HermitError when the file cannot be read or is malformed."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise HermitError(f"cannot read {self.path}: {e}", _FIX) from e
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise HermitError(f"cannot read {self.path}: {e}", _FIX) from e
        if not isinstance(data, dict):
            raise HermitError(f"{self.path} is not a JSON object", _FIX)
        pins = _parse(self.path, data)
        self._cache = (stamp, pins)
        return pins

    def of(self, channel: str) -> dict[str, Pin]:
        return dict(self._load().get(channel.lower(), {}))

    def all(self) -> list[Pin]:
        pins = self._load()
        return [p for ch in sorted(pins) for _, p in sorted(pins[ch].items())]

    def pin(self, channel: str, username: str, sender_id: str, account_id: str) -> Pin:
        """Pin `username` to `sender_id` unless it is pinned already; the pin in force either way (another
        process may have pinned it first: the first one stays)."""
        channel = channel.lower()
        with self.store.locked():
            pins = self._load()
            found = pins.get(channel, {}).get(username)
            if found is not None:
                return found
            new = Pin(channel, username, sender_id, account_id, self.store.clock())
            pins = {ch: dict(v) for ch, v in pins.items()}
            pins.setdefault(channel, {})[username] = new
            self._save(pins)
            return new

    def forget(self, channel: str, username: str) -> Pin | None:
        """Remove the pin of `username` (the next sender presenting it is pinned); the removed pin or None."""
        channel, name = channel.lower(), handle(username) or ""
        with self.store.locked():
            pins = {ch: dict(v) for ch, v in self._load().items()}
            gone = pins.get(channel, {}).pop(name, None)
            if gone is not None:
                self._save({ch: v for ch, v in pins.items() if v})
            return gone

    def _save(self, pins: dict[str, dict[str, Pin]]) -> None:
        data = {"version": _VERSION, "pins": {ch: {name: {"id": p.sender_id, "account_id": p.account_id,
                                                          "pinned_at": p.pinned_at}
                                                   for name, p in sorted(v.items())}
                                              for ch, v in sorted(pins.items())}}
        write_atomic(self.path, json.dumps(data, ensure_ascii=False, indent=2) + "\n", mode=0o600, keep_mode=False)
        self._cache = None


_FIX = ("fix the file, or delete it: each listed @username is then pinned again to the next sender presenting "
        "it; listing owners by numeric id needs no pin")


def _parse(path: Path, data: dict[str, Any]) -> dict[str, dict[str, Pin]]:
    raw = data.get("pins", {})
    if not isinstance(raw, dict):
        raise HermitError(f"{path}: 'pins' is not an object", _FIX)
    out: dict[str, dict[str, Pin]] = {}
    for channel, names in raw.items():
        if not isinstance(names, dict):
            raise HermitError(f"{path}: the pins of {channel!r} are not an object", _FIX)
        for name, item in names.items():
            sender = item.get("id") if isinstance(item, dict) else None
            if not isinstance(sender, str) or not sender or handle(name) != name:
                raise HermitError(f"{path}: malformed pin {name!r} of {channel!r}", _FIX)
            at = item.get("pinned_at")
            out.setdefault(str(channel), {})[name] = Pin(
                str(channel), name, sender, str(item.get("account_id") or ""),
                float(at) if isinstance(at, int | float) else 0.0)
    return out


def owner_username_notes(pins: UsernamePins, accounts: Iterable[tuple[str, str, ChannelAccessConfig]]) -> list[str]:
    """For `hermit doctor`: each owner listed by @username, with the id it is pinned to (to write into the
    config instead) or the warning that it is not pinned yet; the pins file when it cannot be read."""
    try:
        pinned: dict[str, dict[str, Pin]] = {name: pins.of(name) for name, _, _ in accounts}
    except HermitError as e:
        return [f"{e.message} — @username owners and allow_from entries match nobody until then ({e.hint})"]
    notes: list[str] = []
    for name, account_id, acc in accounts:
        where = f"channels.{name}.accounts.{account_id}.owners"
        for entry in acc.owners:
            if not entry.startswith("@"):
                continue
            pin = pinned[name].get(entry)
            if pin is None:
                notes.append(f"{name}/{account_id}: owner {entry} is matched by username and not pinned yet — the "
                             "first sender seen with that username becomes the owner (whoever holds it then); "
                             f"write your numeric id into {where} instead")
            else:
                notes.append(f"{name}/{account_id}: owner {entry} is pinned to id {pin.sender_id} (the first sender "
                             f"seen with it); write {pin.sender_id} into {where} in place of {entry}: names can change "
                             f"hands. If {pin.sender_id} is not you, remove {entry} and run `hermit pairing unpin "
                             f"{name} {entry}`")
    return notes
