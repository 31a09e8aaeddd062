"""The config the running gateway goes by: hermit.yaml re-read when it changes, applied where it can be
live, and failing closed while it is invalid.

Revoking someone is an edit of hermit.yaml (`owners`, `allow_from`, `groups`, …), so it must count at once,
with no window: every admission, routing decision and scheduled delivery asks `LiveConfig.current()`, which
stats the config files (device, inode, size, mtime and ctime in ns: an edit in place and a replace by
rename both change it) and reloads them with the normal loader when that key changed, or while it is under
RACY_NS (2 s) old: an edit in place that keeps the size, within the same tick of the kernel's coarse clock as
the last read, leaves the key as it was (`racy`). A timer would leave a window; a stat per message costs
microseconds (a read within 2 s of a save, a few ms).

Applied live (each consumer rebuilds what it derives from the config when `current()` hands it a new
one): who may reach the assistant (each running channel account's `enabled`, `owners`, `dm_policy`,
`allow_from`, `group_policy`, `groups`, `group_allow_from`, `require_mention`), routing (`bindings`, each
agent's `session.dm_scope` and `dangerously_share_main_session_with_contacts`, the default agent), each
agent's `mention_patterns`, `heartbeat` settings and `max_concurrent_turns`, and the owner checks of cron deliveries. Not live,
named in the log line as waiting for a restart of the gateway: what was built at start from the config —
model providers, the gateway's bind, port and queues, channel tokens and accounts added or re-pointed,
the web chat switch, agents added, and every other agent setting (model, memory, sandbox, sessions).

Invalid, unreadable or missing (a YAML error, a failed validation, bindings naming no agent, a file that
is not the user's, a file moved away), or an edit that would hand an existing owner id another agent's main
session by a routing change alone (`owners_moved`: an agent and its bindings removed while its account stays): the last good config is kept only for the token holder. `current()` raises the ConfigError,
so no channel sender is an owner or a contact and nothing scheduled is delivered to a channel until the
file is valid again; the web chat and the CLI keep working. One error line names the file and the
problem; the next valid save is applied with no restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.agent.routing import RouteInput, Router
from hermit.channels.access import AccessControl, PairingStore
from hermit.config.load import LoadedConfig, StillWriting, load_config, writer_holds
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError, HermitError
from hermit.memory.policy.audience import RACY_NS

log = logging.getLogger("hermit.gateway")

FileKey = tuple[tuple[int, ...] | None, ...]
Loader = Callable[[StatePaths], LoadedConfig]

# The peer that stands for any contact of an account in the owner-move checks (no id is "*", no binding names it).
CONTACTS = "*"
# A running channel account's fields that access control reads at each message.
ACCESS_FIELDS = frozenset({"enabled", "owners", "dm_policy", "allow_from", "group_policy", "groups",
                           "group_allow_from", "require_mention"})
# An agent's settings that are read at each routing decision, admission or heartbeat.
AGENT_LIVE = ("heartbeat", "mention_patterns", "max_concurrent_turns", "session.dm_scope",
              "session.dangerously_share_main_session_with_contacts", "default", "is_default")


def racy(key: FileKey, now: int) -> bool:
    """Whether a file of `key` changed too recently (its ctime, which no user can set, under RACY_NS before `now`)
    for the key to tell a later change from it: the kernel stamps files from a coarse clock, so an edit in place
    that keeps the size, made within the same tick as a read (on an older kernel or a coarse filesystem), leaves the
    key as it was (git's "racily clean" entries)."""
    return any(k is not None and len(k) == 5 and k[4] + RACY_NS > now for k in key)


def _still_held(path: Path) -> bool:
    """Whether some program still holds the config file open for writing (config.load.writer_holds: one lease)."""
    try:
        return writer_holds(path, os.stat(path)) is True
    except OSError:
        return False


def file_key(paths: StatePaths) -> FileKey:
    """What changes when any config file is edited, replaced, created or removed."""
    out: list[tuple[int, ...] | None] = []
    for path in paths.config_candidates:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            out.append(None)
        except OSError as e:  # unreadable: a key of its own, so the load says what is wrong
            out.append((-1, e.errno or 0))
        else:
            out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


class LiveConfig:
    """The config in force, re-read when its file changes. Thread-safe: admission runs in worker threads."""

    def __init__(self, loaded: LoadedConfig, *, load: Loader = load_config,
                 clock: Callable[[], int] = time.time_ns, routing: bool = True) -> None:
        self.started = loaded
        # The channels' routing checks (bindings naming no agent, owners_moved): the gateway's. `hermit mcp serve`
        # routes no channel, and a refused owner move made its clients read as a non-owner until the file changed.
        self._routing = routing
        self._reached = self._remember({}, loaded, loaded) if routing else {}
        self._good = loaded
        self._load = load
        self._lock = threading.Lock()
        # A config read from a file is read again at the first look: it may have been edited while the
        # gateway started (runtimes can take seconds to build). One built in memory (tests) has no file.
        self._key: FileKey | None = file_key(loaded.paths) if loaded.source is None else None
        self._error: ConfigError | None = None
        # The file the last read failed on as held open for writing (load.StillWriting): read again once nobody
        # holds it, whatever its key (closed with nothing more written, the key is the one that failed; audit s22 t11).
        self._held: Path | None = None
        self.clock = clock  # ns, the wall clock: which keys are too recent to trust (racy)
        self._racy = False  # the last read's key was too recent: read again at the next look
        self._listeners: list[Callable[[LoadedConfig], None]] = []

    def listen(self, callback: Callable[[LoadedConfig], None]) -> None:
        """Have `callback(new)` called after each reload that applied a valid config, in the thread that called
        `current()` (a worker thread, the config watch, the event loop), outside the lock: it may call `current()`."""
        self._listeners.append(callback)

    @property
    def where(self) -> str:
        source = self._good.paths.config_file() or self._good.source
        return str(source) if source is not None else str(self._good.paths.home / "hermit.yaml")

    def current(self) -> LoadedConfig:
        """The config in force, reloaded first if its file changed; raises ConfigError while it is invalid."""
        applied = False
        with self._lock:
            key = file_key(self._good.paths)
            if self._held is not None and _still_held(self._held):
                pass  # still being saved (it failed as held open): a read would wait SETTLE_MAX_S to fail again
            elif key != self._key or self._racy or self._held is not None:
                again = key == self._key  # only because the key was too recent: an unchanged text changes nothing
                self._key = key  # taken before the read: an edit during the read changes it again
                self._racy = racy(key, self.clock())
                applied = self._reload(again)
            error, good = self._error, self._good
        if applied:
            for callback in list(self._listeners):
                try:
                    callback(good)
                except Exception:  # noqa: BLE001 - one listener's failure must not fail the admission that reloaded
                    log.exception("a listener of %s's reload failed", self.where)
        if error is not None:
            raise error
        return good

    def last_good(self) -> LoadedConfig:
        """The last valid config: only for the token holder's own uses (the web chat), never for a sender."""
        return self._good

    def error(self) -> str | None:
        return None if self._error is None else self._error.message

    def _reload(self, again: bool = False) -> bool:
        """Read the files again; True when a valid config was applied. `again`: a read of files whose key did not
        change (it was too recent to trust): a config equal to the one in force is kept as it is, unannounced."""
        self._held = None
        if self.started.source is not None and self._good.paths.config_file() is None:
            # Gone (or mid-save by an editor that moves the old file away first): the defaults would name
            # no channel account, but "the file is missing" is what the owner needs to read.
            self._fail(ConfigError(f"the config file {self.where} is missing",
                                   "put it back; the gateway applies it when it is there again"))
            return False
        try:
            new = self._load(self._good.paths)
            if self._routing:
                Router.from_config(new)  # bindings naming no agent: invalid for the gateway, which routes by them
                if (moved := owners_moved(self._good, new, self._reached)) is not None:
                    raise moved
                # Heirs and the records, as the start asks them (s23).
                from hermit.gateway.records_check import live_refusal

                if (refused := live_refusal(new.paths.home, self._reached, new, self.started)) is not None:
                    raise refused
        except ConfigError as e:
            if isinstance(e.__cause__, StillWriting) and e.__cause__.filename:
                self._held = Path(e.__cause__.filename)
            self._fail(e)
            return False
        except Exception as e:  # noqa: BLE001 - supervision boundary: whatever went wrong, fail closed
            self._fail(ConfigError(f"cannot load {self.where}: {type(e).__name__}: {e}",
                                   "fix the file; the gateway applies it when it is saved"))
            return False
        old, was_broken = self._good, self._error is not None
        if again and not was_broken and (new.config, new.agents, new.defaults) == (old.config, old.agents, old.defaults):
            return False
        self._good, self._error = new, None
        if self._routing:
            self._reached = self._remember(self._reached, new, self.started)
        applied, restart = changes(self.started, old, new)
        head = (f"{self.where} is valid again: channel senders and scheduled deliveries go by it" if was_broken
                else f"{self.where} changed")
        done = f"applied {', '.join(applied)}" if applied else "nothing that applies live changed"
        later = f"; not applied until the gateway is restarted: {', '.join(restart)}" if restart else ""
        level = logging.WARNING if restart else logging.INFO if applied or was_broken else logging.DEBUG
        log.log(level, "%s: %s%s", head, done, later)
        return True

    @staticmethod
    def _remember(reached: dict[str, str], loaded: LoadedConfig, started: LoadedConfig) -> dict[str, str]:
        from hermit.gateway.owner_routes import merged

        try:
            return merged(reached, loaded, started)
        except ConfigError:  # bindings naming no agent: the reload refuses it; nothing more to remember
            return reached

    def _fail(self, e: ConfigError) -> None:
        if self._error is None or self._error.message != e.message:
            log.error("%s is invalid, so until it is fixed no channel sender is treated as an owner or a contact "
                      "and nothing scheduled is delivered to a channel (the web chat and the CLI still work): "
                      "%s (%s)", self.where, e.message, e.hint)
        self._error = e


def owners_moved(old: LoadedConfig, new: LoadedConfig, reached: Mapping[str, str] | None = None) -> ConfigError | None:
    """Why `new` may not replace `old` in a running gateway: an id that was already an owner of a running channel
    account would reach another agent's main session — its MEMORY.md and unsandboxed owner tools — only because
    routing changed (an agent and its bindings removed, a binding moved or dropped, the default agent changed).
    The account's owners are the owners of the agent its DMs go to: a relative who owns the family bot, whose
    agent was removed from hermit.yaml, was at once the owner of the default agent's main session. An id added to
    `owners` in the same edit is a promotion the edit states, and is let through. A start is checked the same way
    against what the last gateway applied (gateway/owner_routes.py)."""
    from hermit.config.channels import platforms
    from hermit.gateway.owner_routes import Move, key_of

    before, after = Router.from_config(old), Router.from_config(new)
    moved: list[str] = []
    found: dict[str, Move] = {}  # the same moves, judged by owner_moves: those that widen nothing are let through
    for channel in platforms():
        was_accounts = old.config.channels.accounts_of(channel)
        for account_id, acc in new.config.channels.accounts_of(channel).items():
            prev = was_accounts.get(account_id)
            if prev is None or not prev.enabled or not acc.enabled:
                continue
            # Its contacts too ("*": any of them, the peer no binding names), which reach a main session only where
            # an agent shares it with contacts: the family account's contacts routed to a default agent with
            # dangerously_share_main_session_with_contacts were let into its main session.
            senders = [(o, True) for o in acc.owners if o in prev.owners] + [(CONTACTS, False)]
            for sender, is_owner in senders:
                # A DM carries no guild (Discord's never do); a Slack DM carries its workspace's team.
                for team in {t for _, t in dm_scopes(before, channel) | dm_scopes(after, channel)}:
                    inp = RouteInput(channel, account_id, "dm", sender, team_id=team, sender_is_owner=is_owner)
                    was, now = before.resolve(inp), after.resolve(inp)
                    # Into another agent's main session (MEMORY.md, owner tools), or a session of their own there:
                    # its shared notes (audit s22: the family bot's contacts read the owner's daily logs).
                    if now.agent_id != was.agent_id:
                        who = f"owner {sender}" if is_owner else "its contacts"
                        text = (f"channels.{channel}.accounts.{account_id} ({who}: agent {was.agent_id} "
                                f"-> agent {now.agent_id})")
                        key = key_of(channel, account_id, sender, *([team] if team else []))
                        found[text] = Move(key, (was.agent_id,), now.agent_id, now.main)
                        break
    if reached:  # what this gateway remembers of accounts turned off or renamed since (owner_routes.merged)
        from hermit.gateway.owner_routes import remembered_moves

        found.update(remembered_moves(dict(reached), old, new))
    if found:
        from hermit.gateway.owner_moves import judge
        from hermit.gateway.owner_routes import routes, routes_now

        judged = judge(list(found.values()), {**routes(old), **(reached or {})}, routes_now(new), new)
        moved = [text for text, m in zip(found, judged, strict=True) if m.harmless is None]
        for text, m in zip(found, judged, strict=True):
            if m.harmless is not None:
                log.info("let through %s: it widens nothing (%s)", text, m.harmless)
    if not moved:
        return None
    return ConfigError(f"this edit would give the senders of {', '.join(sorted(set(moved)))} another agent (an owner "
                       "its main session: MEMORY.md and owner tools; contacts its shared notes) because routing changed, "
                       "not their owners or allow_from entry",
                       "bind the account to its agent again (bindings), turn it off (enabled: false) or take those ids "
                       "out of its owners; to move them on purpose, run `hermit channels accept-routes` (it shows the "
                       f"moves and asks) or remove {new.paths.home / 'channels' / 'owner-routes.json'}, and restart "
                       "the gateway")


# ---- what changed ---------------------------------------------------------------------------------------

def _flat(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flat(v, f"{prefix}.{k}", out)
    else:
        out[prefix] = value
    return out


def _view(loaded: LoadedConfig) -> dict[str, Any]:
    """The config as paths → values: resolved agents (not the raw `agents` section), no `mcp` (read by
    `hermit mcp serve`, not the gateway)."""
    out: dict[str, Any] = {}
    cfg = loaded.config
    _flat(cfg.channels.model_dump(mode="json"), "channels", out)
    _flat(cfg.models.model_dump(mode="json"), "models", out)
    _flat(cfg.gateway.model_dump(mode="json"), "gateway", out)
    out["bindings"] = [b.model_dump(mode="json") for b in cfg.bindings]
    for a in loaded.agents:
        _flat(a.settings.model_dump(mode="json"), f"agents.{a.id}", out)
        out.update({f"agents.{a.id}.workspace": str(a.workspace), f"agents.{a.id}.index_path": str(a.index_path),
                    f"agents.{a.id}.sessions_dir": str(a.sessions_dir), f"agents.{a.id}.is_default": a.is_default})
    return out


def _live(path: str, started: LoadedConfig) -> bool:
    parts = path.split(".")
    if parts[0] == "bindings":
        return True
    if parts[0] == "channels" and len(parts) >= 5 and parts[2] == "accounts":
        return parts[4] in ACCESS_FIELDS and parts[3] in started.config.channels.accounts_of(parts[1])
    if parts[0] == "agents" and len(parts) >= 3 and any(a.id == parts[1] for a in started.agents):
        rest = ".".join(parts[2:])
        return any(rest == p or rest.startswith(p + ".") for p in AGENT_LIVE)
    return False


def _shown(path: str, a: LoadedConfig, b: LoadedConfig) -> str:
    """A path as the log names it: an account or an agent's setting at most, never a value; an agent or a
    channel account only one of the two configs (`a`, `b`) has is named whole (an agent added was ~60 lines of
    its settings' paths)."""
    parts = path.split(".")
    if parts[0] == "agents" and len(parts) > 2 and sum(any(x.id == parts[1] for x in c.agents) for c in (a, b)) == 1:
        return ".".join(parts[:2])
    if parts[0] == "channels" and len(parts) > 4 and parts[2] == "accounts" and \
            sum(parts[3] in c.config.channels.accounts_of(parts[1]) for c in (a, b)) == 1:
        return ".".join(parts[:4])
    return ".".join(parts[:5] if parts[0] == "channels" else parts[:4])


def changes(started: LoadedConfig, old: LoadedConfig, new: LoadedConfig) -> tuple[list[str], list[str]]:
    """(what the new config changed that is applied now, what differs from the config the gateway started
    with that needs a restart), as config paths."""
    before, now, start = _view(old), _view(new), _view(started)
    applied = {_shown(p, old, new) for p in before.keys() | now.keys()
               if before.get(p) != now.get(p) and _live(p, started)}
    restart = {_shown(p, started, new) for p in start.keys() | now.keys()
               if start.get(p) != now.get(p) and not _live(p, started)}
    return sorted(applied), sorted(restart)


# ---- access and routing by the config in force ------------------------------------------------------------

@dataclass(frozen=True)
class AccessView:
    """What admission and routing derive from one config."""

    loaded: LoadedConfig
    access: AccessControl
    router: Router
    patterns: Mapping[str, Sequence[str]]


class LiveAccess:
    """Access control and routing rebuilt whenever the config in force changes (cached per config)."""

    def __init__(self, live: LiveConfig, store: PairingStore, clock: Callable[[], float],
                 environ: Mapping[str, str] | None = None) -> None:
        self.live = live
        self.store = store
        self.clock = clock
        self.environ = environ  # the gateway's: which bot each account is (channels/account_identity.py)
        self._lock = threading.Lock()
        self._had: set[str] = set()  # platforms with accounts in a config this gateway applied
        self._view = self._build(live.last_good())

    def _build(self, loaded: LoadedConfig) -> AccessView:
        self._retire(loaded)
        return AccessView(loaded, AccessControl(loaded.config.channels, self.store, self.clock),
                          Router.from_config(loaded), {a.id: a.settings.mention_patterns for a in loaded.agents})

    def _retire(self, loaded: LoadedConfig) -> None:
        """An account gone from the config loses its pending codes and approved senders at once, so one added again
        under its id starts with none (channels/pairing.py `retire_absent`)."""
        from hermit.config.channels import platforms

        present = {p: set(loaded.config.channels.accounts_of(p)) for p in platforms()}
        # Only platforms that had accounts: in this config, the one before it, or a record of an earlier start. A
        # code someone asked for on a platform the owner never set up here (a seeded pairing.json) is left alone.
        had = {p for p, accounts in present.items() if accounts} | self._had
        with contextlib.suppress(OSError, ValueError, AttributeError):
            from hermit.channels.account_identity import RECORD

            seen = json.loads((self.store.dir / RECORD).read_text(encoding="utf-8")).get("accounts") or {}
            had |= {key.split("/", 1)[0] for key in seen}
        self._had = had
        present = {p: accounts for p, accounts in present.items() if p in had}
        try:
            for line in self.store.retire_absent(present):
                log.warning("channel account removed from the config: %s", line)
        except (HermitError, OSError) as e:
            log.error("could not retire the pairing state of removed channel accounts: %s", e)
        if self.environ is not None:
            from hermit.channels.account_identity import retire_and_log

            retire_and_log(self.store, loaded, self.environ)

    def view(self) -> AccessView:
        """The view of the config in force; raises ConfigError while hermit.yaml is invalid."""
        loaded = self.live.current()
        with self._lock:
            if self._view.loaded is not loaded:
                self._view = self._build(loaded)
            return self._view

    def is_owner(self, channel: str, account_id: str, sender_id: str, username: str | None) -> bool:
        """Whether a channel sender is one of the owner's ids by hermit.yaml as it is now (a runtime's
        `owner_check`, marking the owner's messages in a group); nobody while the file is invalid."""
        try:
            return self.view().access.is_owner(channel, account_id, sender_id, username)
        except ConfigError:
            return False

    def owner_of(self, agent_id: str) -> Callable[[str, str, str, str | None], bool]:
        """`is_owner` for one agent (its runtime's `owner_check`): an owner of the channel account whose DMs
        the bindings route to this agent, as only they reach its main session. An owner of the account whose
        DMs go to another agent (a relative's own agent on the family bot) is someone else's owner: marking
        their group messages as this agent's user's would have its model obey them and its transcript search
        take their words for the owner's (scheduler/targets.not_the_owner draws the same line)."""
        def check(channel: str, account_id: str, sender_id: str, username: str | None) -> bool:
            try:
                v = self.view()
            except ConfigError:
                return False
            if not v.access.is_owner(channel, account_id, sender_id, username):
                return False
            name = channel.lower()
            return any(v.router.resolve(RouteInput(name, account_id, "dm", sender_id, guild_id=guild, team_id=team,
                                                   sender_is_owner=True)).agent_id == agent_id
                       for guild, team in dm_scopes(v.router, name))
        return check

    def owner_view(self) -> AccessView:
        """For the web chat (the token holder, the owner whatever the file says): the last good config."""
        try:
            return self.view()
        except ConfigError:
            with self._lock:
                return self._view


def dm_scopes(router: Router, channel: str) -> set[tuple[str | None, str | None]]:
    """The (guild, team) a DM on `channel` may carry, as far as routing tells them apart: none, or one
    a binding names (a Slack DM carries its workspace's team_id, which a binding may route by)."""
    return {(None, None)} | {(b.match.guild_id, b.match.team_id) for b in router.bindings
                             if b.match.channel == channel and (b.match.guild_id or b.match.team_id)}
