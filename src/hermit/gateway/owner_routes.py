"""Which agent's main session each channel account's owners reached, remembered across restarts.

An account's `owners` are the owners of the agent its DMs are routed to. Taking an agent and its binding out of
hermit.yaml while its channel account stays (a relative's family bot) sends that account's DMs to the default agent:
its owner — the relative — becomes the owner of the default agent's main session (MEMORY.md, unsandboxed tools).
A running gateway refuses such an edit (live_config.owners_moved); this module does the same when the gateway
starts, against what the last gateway applied: `<state>/channels/owner-routes.json` (0600), written at each start
and each applied reload. An owner id that already reached one agent's main session and would now reach another
agent's is refused, naming the account, the id and both agents; an id not recorded (new to `owners`, a new
account, the first start) is a promotion the config states. Moves that cannot widen what anyone reads are let through
(gateway/owner_moves.py). To move someone on purpose: `hermit channels accept-routes` (shows the moves, asks,
rewrites the record), or remove the file.

Contacts and groups too (audit s22): an account's contacts ("*") and each group it lets in (`group:<id>`,
`group:*` under `group_policy: open`) are recorded wherever they go, and moving them to another agent by a routing
change alone is refused: they would read that agent's shared notes (memory/ text outside origin blocks, the
owner's daily logs). gateway/owner_moves.py lets through the moves that widen nothing.

Also refused (audit s21 t12):
- an account not recorded (a new id, or the same bot renamed: `family` → `family2`) that gives an id recorded as
  reaching only other agents' main sessions the main session of an agent that already had recorded owners — the
  rename took the account out of the check above;
- an account's contacts ("*") reaching another agent's main session (one that shares it with contacts);
- a record that is there but cannot be trusted: not a regular file of this user (a symlink, another user's), too
  large, not the JSON this module writes, its folder `<state>/channels` a symlink or another user's (s23,
  config/records.py). A missing record is the first start, or the owner's explicit reset; anything else there is
  refused (fail closed), naming the file and `hermit channels accept-routes`.

And (s23 t5): the records of which bot each account is and which workspace each agent used, damaged or lost
(gateway/records_check.py), refuse the start the same way; an owner new to an agent whose owners are gone
(gateway/agent_heirs.py) is refused at start and at each live reload. A start writes its record only over the one
its check read (`check_start` returns it, `record(seen=…)`; both under `.owner-routes.lock`), so routes `hermit
channels accept-routes` accepted while the gateway was starting are kept.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from hermit.agent.routing import RouteInput, Router
from hermit.config import records, workspaces_check
from hermit.config.load import LoadedConfig
from hermit.config.schema import ChannelAccessConfig
from hermit.errors import ConfigError
from hermit.gateway.live_config import CONTACTS, dm_scopes

log = logging.getLogger("hermit.gateway")

FILE = "owner-routes.json"


def key_of(*parts: str) -> str:
    """A record key: its parts joined by "/", each with "%" and "/" escaped (an account id may hold a "/")."""
    return "/".join(p.replace("%", "%25").replace("/", "%2F") for p in parts)


def parts_of(key: str) -> list[str]:
    return [p.replace("%2F", "/").replace("%25", "%") for p in key.split("/")]


def path_of(home: Path) -> Path:
    return home / "channels" / FILE


def routes(loaded: LoadedConfig) -> dict[str, str]:
    """What is recorded: `channel/account/sender[/team]` → the agent that sender's DMs reach (running accounts).
    sender: an owner id or CONTACTS (any contact), recorded wherever it goes: the main session, or a session of
    their own, which reads that agent's shared notes (audit s22: contacts moved to another agent by a routing change
    alone read its owner's daily logs)."""
    return {k: agent for k, (agent, _main) in _routes(loaded).items()}


def _routes(loaded: LoadedConfig) -> dict[str, tuple[str, bool]]:
    from hermit.config.channels import platforms

    router = Router.from_config(loaded)
    out: dict[str, tuple[str, bool]] = {}
    for channel in platforms():
        for account_id, acc in loaded.config.channels.accounts_of(channel).items():
            if not acc.enabled:
                continue
            for sender, is_owner in [*((o, True) for o in acc.owners), (CONTACTS, False)]:
                for team in {t for _, t in dm_scopes(router, channel)}:  # a DM carries no guild
                    route = router.resolve(RouteInput(channel, account_id, "dm", sender, team_id=team,
                                                      sender_is_owner=is_owner))
                    key = key_of(channel, account_id, sender, *([team] if team else []))
                    out[key] = (route.agent_id, route.main)
            out.update(_group_routes(router, channel, account_id, acc))
    return out


GROUP = "group:"  # a record key's sender part for a group: `group:<id>`, `group:*` (any group open lets in)


def is_group(key: str) -> bool:
    return parts_of(key)[2].startswith(GROUP)


def _group_routes(router: Router, channel: str, account_id: str, acc: ChannelAccessConfig) -> dict[str, tuple[str, bool]]:
    """The agent each group the account lets in is routed to (audit s22): its members read that agent's shared
    notes, so a group moved to another agent by a routing change alone (the family agent and its group binding
    removed) is a move like a contact's."""
    if acc.group_policy == "disabled":
        return {}
    scopes = {(None, None)} | {(b.match.guild_id, b.match.team_id) for b in router.bindings
                               if b.match.channel == channel and (b.match.guild_id or b.match.team_id)}
    out = {}
    for gid in [*acc.groups, *([CONTACTS] if acc.group_policy == "open" else [])]:
        for guild, team in scopes:
            route = router.resolve(RouteInput(channel, account_id, "group", gid, guild_id=guild, team_id=team))
            key = key_of(channel, account_id, GROUP + gid, *[x for x in (guild, team) if x])
            out[key] = (route.agent_id, route.main)
    return out


UntrustedRecord = records.UntrustedRecord  # the record is there but is not what this module writes

_WHAT = "the record of which agent each channel owner reaches"


def _recorded(path: Path) -> dict[str, str]:
    """What the last gateway applied; nothing (no check) when there is no record. A record that is there but
    cannot be trusted raises UntrustedRecord: failing open would let whoever could damage or replace it (a
    kill -9 of another writer, a link planted there, its folder made a link: config/records.py) turn the check
    off."""
    return _parse(path, _raw(path))


def _raw(path: Path) -> bytes | None:
    return records.read(path, _WHAT, _how(path))


def _parse(path: Path, raw: bytes | None) -> dict[str, str]:
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise records.untrusted(path, _WHAT, "is not valid JSON (damaged)", _how(path)) from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise records.untrusted(path, _WHAT, "is not a JSON object of names to agent ids (damaged)", _how(path))
    return data


def _how(path: Path) -> str:
    return f"to accept hermit.yaml as it is, run `hermit channels accept-routes` (or remove {path}) and start the " \
           "gateway again"


@dataclass(frozen=True)
class Move:
    """One sender the config hands another agent's main session than the last gateway gave them."""

    key: str  # channel/account/sender[/team]
    was: tuple[str, ...]  # the agent(s) the record has them reaching
    now: str
    main: bool = True  # into B's main session (MEMORY.md, owner tools), else a session of their own (shared notes)
    renamed: bool = False  # an account not in the record (new, or renamed) whose owner reached other agents
    harmless: str | None = None  # why it cannot widen what anyone reads (let through), else None (refused)

    def __str__(self) -> str:
        return f"{self.key} (agent {'/'.join(self.was)} -> agent {self.now}" + (
            "; a new or renamed account)" if self.renamed else ")")


def all_moves(home: Path, loaded: LoadedConfig) -> list[Move]:
    """Each sender the config would hand another agent's main session than the last gateway gave them, with why
    the move is harmless where it is (owner_moves.harmless); UntrustedRecord when the record cannot be trusted."""
    from hermit.gateway.owner_moves import judge

    before = _recorded(path_of(home))
    everything = _routes(loaded)
    now = {k: agent for k, (agent, main) in everything.items() if main}
    found = [Move(k, (before[k],), agent, main) for k, (agent, main) in everything.items()
             if k in before and before[k] != agent]
    # An account not in the record (new, or renamed: the same bot under another id) escapes the rule above. An id
    # it owns that the record has reaching other agents' main sessions only, now given the main session of an
    # agent the record has other owners of, or of the default agent, is refused; another agent no one reached
    # before (a new agent with its own bot, the owner owning both) is not.
    accounts = {tuple(parts_of(k)[:2]) for k in before}
    reached: dict[tuple[str, ...], set[str]] = {}
    for k, agent in before.items():
        parts = parts_of(k)
        reached.setdefault((parts[0], *parts[2:]), set()).add(agent)
    # The default agent's main session is always someone's: the token holder's (web chat, CLI), with or without a
    # channel owner recorded.
    owned = {agent for k, agent in before.items() if parts_of(k)[2:3] != [CONTACTS] and not is_group(k)} | \
        {loaded.agent().id}
    for k, agent in now.items():
        parts = parts_of(k)
        if tuple(parts[:2]) in accounts or len(parts) < 3 or is_group(k):
            continue
        had = reached.get((parts[0], *parts[2:]))
        if had and agent not in had and agent in owned:
            found.append(Move(k, tuple(sorted(had)), agent, renamed=True))
    return judge(sorted(found, key=str), before, everything, loaded)


def moves(home: Path, loaded: LoadedConfig) -> list[str]:
    """Each refused move (`all_moves` less the harmless ones), in words."""
    return [str(m) for m in all_moves(home, loaded) if m.harmless is None]


def heir_lines(home: Path, loaded: LoadedConfig) -> list[str]:
    """Each owner new to an agent whose recorded owners are all gone, in words (gateway/agent_heirs.py)."""
    from hermit.gateway.agent_heirs import heirs

    return heirs(_recorded(path_of(home)), _routes(loaded), loaded)


def refusal(home: Path, loaded: LoadedConfig) -> ConfigError | None:
    """The one answer, for every entry point, to "may a gateway start on this config?": the start itself
    (`hermit gateway run`, by hand, under the service, restarted in place), `hermit service install|start|restart`
    before they start one, and `hermit doctor` reporting it. None: yes. The commands that route no channel
    (`hermit chat`, `agent`, `cron run`, `mcp serve`: their user is the machine's owner) do not ask it.
    Also refused: the other records a start trusts (which bot each account is, which workspace each agent used)
    damaged, or missing where a gateway has run before (gateway/records_check.py)."""
    from hermit.gateway.records_check import damaged

    try:
        moved = moves(home, loaded)
        moved += heir_lines(home, loaded)  # an owner new to an agent whose owners are gone (t14)
        damaged(home, loaded)
    except UntrustedRecord as e:
        return e
    if not moved:
        return None
    return ConfigError(f"hermit.yaml would give {', '.join(moved)} another agent than the last gateway did (an "
                       "owner its main session: MEMORY.md and owner tools; contacts its shared notes), because routing "
                       "changed, not their owners or allow_from entry",
                       "bind the account to its agent again (bindings), turn it off (enabled: false) or take those "
                       "ids out of its owners; to move them on purpose, run `hermit channels accept-routes` "
                       f"(it shows the moves and asks) or remove {path_of(home)}, and start again")


def check_start(home: Path, loaded: LoadedConfig) -> bytes | None:
    """Refuse to start when an owner id would reach another agent's main session than the last gateway gave it.
    Returns the record as the check read it: the start's `record(seen=…)` writes only over that same record, not
    over one `hermit channels accept-routes` wrote meanwhile (t11 s22: the start's write put back the routes the
    owner had just accepted away, and the next start refused again)."""
    seen = _raw(path_of(home))
    if (e := refusal(home, loaded)) is not None:
        raise e
    return seen


def merged(before: dict[str, str], loaded: LoadedConfig, started: LoadedConfig | None = None) -> dict[str, str]:
    """The routes of `loaded`, keeping what `before` remembers of accounts that are not running in it (turned off,
    renamed or removed): their owners' routes are what a later edit turning them on again, or a renamed account,
    is measured against. Turning the family bot off, then removing its agent and turning it on again, was two
    edits each let through, and the relative owned main's main session. `started`: the config the gateway started
    with; an account it did not start with (added or renamed since) is not running, and is not recorded until a
    start checks it (recorded at a reload, a renamed account's owner passed the next start as already there)."""
    from hermit.config.channels import platforms

    def enabled(c: LoadedConfig) -> set[tuple[str, str]]:
        return {(channel, account_id) for channel in platforms()
                for account_id, acc in c.config.channels.accounts_of(channel).items() if acc.enabled}

    running = enabled(loaded) & enabled(started or loaded)
    kept = {k: v for k, v in before.items() if tuple(parts_of(k)[:2]) not in running}
    return {**kept, **{k: v for k, v in routes(loaded).items() if tuple(parts_of(k)[:2]) in running}}


def routes_now(loaded: LoadedConfig) -> dict[str, tuple[str, bool]]:
    """`channel/account/sender[/team]` → (the agent that sender's DMs reach, whether its main session)."""
    return _routes(loaded)


def remembered_moves(reached: dict[str, str], old: LoadedConfig, new: LoadedConfig) -> dict[str, Move]:
    """A live reload's moves measured against what the running gateway remembers (`merged` over each config it
    applied), not only the config in force: an account turned off in one edit, and on again without its agent in
    the next. An id not in the account's owners before this edit is a promotion it states; an account not in the
    config in force is not running until a restart (the start check's)."""
    out = {}
    for k, (agent, main) in _routes(new).items():
        if reached.get(k, agent) == agent:
            continue
        channel, account_id, sender = parts_of(k)[:3]
        prev = old.config.channels.accounts_of(channel).get(account_id)
        if prev is None or (sender != CONTACTS and not sender.startswith(GROUP) and sender not in prev.owners):
            continue
        if sender.startswith(GROUP) and (k not in _group_routes(Router.from_config(old), channel, account_id, prev)):
            continue  # a group the edit lets in: a promotion it states
        who = "its contacts" if sender == CONTACTS else f"group {sender[len(GROUP):]}" if sender.startswith(GROUP) \
            else f"owner {sender}"
        out[f"channels.{channel}.accounts.{account_id} ({who}: agent {reached[k]} -> agent {agent})"] = \
            Move(k, (reached[k],), agent, main)
    return out


ANY = object()  # `seen` of a write that replaces whatever record is there


def record(home: Path, loaded: LoadedConfig, started: LoadedConfig | None = None, seen: object = ANY) -> None:
    """Remember the routes of the config in force (at start, with `seen` the record its check read, and after each
    applied reload with `started`, the config the gateway started with), with what the record kept of accounts not
    running now (`merged`); logged, never fatal."""
    try:
        accept(home, loaded, started, seen=seen)
    except Exception:  # noqa: BLE001 - the check at the next start is weaker, the gateway goes on
        log.exception("could not record which agent each owner reaches in %s", path_of(home))


def accept(home: Path, loaded: LoadedConfig, started: LoadedConfig | None = None, *, seen: object = ANY) -> bool:
    """Write the record from `loaded` (`merged` with what it remembers; a record that cannot be trusted is
    replaced): the start's and reload's `record`, and `hermit channels accept-routes` after the owner confirmed
    the moves it showed. With `seen` (bytes, or None for no record), only over that very record: one written
    meanwhile (accepted by the owner) is kept, and False returned. Raises OSError, NotOwnFolder, or UntrustedRecord
    when the folder is a symlink (the write would land where it points)."""
    from hermit.config.paths import ensure_private_dir
    from hermit.durable import write_atomic
    from hermit.locks import locked

    path = path_of(home)
    ensure_private_dir(path.parent, own=True, what="the channels state folder")
    if records.folder_is_link(path):
        raise records.untrusted(path, _WHAT, "is not written: its folder is a symlink",
                                f"move {path.parent} away (look at what is in it first) and run the command again")
    with locked(path.parent / ".owner-routes.lock"):  # accept-routes and a start's write take turns
        try:
            raw = _raw(path)
            before, trusted = _parse(path, raw), True
        except UntrustedRecord:  # the start was refused on it; a reload's record, or the owner's accept, replaces it
            raw, before, trusted = None, {}, False
        if seen is not ANY and (raw != seen or not trusted):
            log.warning("not recording this start's routes in %s: it changed since the start checked it (`hermit "
                        "channels accept-routes` ran meanwhile); kept as it is", path)
            return False
        write_atomic(path, json.dumps(merged(before, loaded, started), sort_keys=True, indent=1), mode=0o600)
    # With the routes, the workspaces (config/workspaces_check.py): a routes record without it reads as a record
    # lost since (gateway/records_check.py), so whatever writes the one writes the other.
    workspaces_check.record(loaded.agents, loaded.paths)
    return True
