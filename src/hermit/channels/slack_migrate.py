"""Slack sessions from before keys named the workspace continue after the upgrade: their keys are renamed.

A Slack member or channel id names someone only within one workspace, so a contact's and a group's session
key carries the workspace (`U0123@T0001`, agent/routing.py `session_peer`), and with it the room and the
memory audience. Keys made before that (`agent:main:slack:work:dm:U0123`, `agent:main:slack:group:C0456`)
would start anew: context, compaction summary and reset clock lost, the group's notes owner-only to it. This
renames them, once each, to the form routing now gives, when the workspace they belong to is certain:

- a key that names its account (dm_scope's per-account form, every contact's under `main`): that account's
  recorded workspace (`channels/slack/<account>/workspace.json`, written when the account first connects);
- any other key, and every audience (a DM's audience is the person's on the platform, whatever the account):
  the one workspace all configured Slack accounts recorded. Two workspaces, an account not connected yet, or
  an Enterprise Grid org-wide install (its messages came from many workspaces) and nothing is guessed: the
  key stays, and `hermit doctor` and the gateway's log say why.

An owner's DM key keeps the id as `owners` lists it (routing never adds the workspace to it): skipped.

What is renamed, for each agent: the sessions.json entry (one atomic write), the `sessionKey` of every
transcript that names the old key (line 1, rewritten whole under the transcript's lock as a scrub does), the
session's lock file, the audience of the group's or contact's notes in memory/ (under the memory write lock),
and their room (one rename). A journal (`channels/slack/key-migration.json`) lists the renames before the first
is made, and a re-run (the gateway's next start, or the next account to connect) finishes it: a kill -9 at any
point leaves each session under its old or its new key, usable either way. A new key that has a session of its
own already (started between the upgrade and this) is not overwritten: the old one stays, readable.

Sessions live in files (sessions.json and JSONL transcripts), with SQLite or PostgreSQL alike: the memory index
only mirrors them, and re-indexes the changed transcripts and notes at its next sync.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hermit.channels.slack import SlackChannel, _read_workspace, workspace_path
from hermit.channels.slack_bindings import warning as bindings_warning
from hermit.channels.slack_migrate_notes import audiences_in, rename_notes
from hermit.config.allowlist import AllowlistEntryError, normalize_entry
from hermit.config.load import AgentConfig, LoadedConfig
from hermit.config.paths import ensure_private_dir
from hermit.durable import write_atomic
from hermit.errors import ConfigError, HermitError, SessionBusy, SessionError
from hermit.locks import locked
from hermit.memory.policy.audience import audience_of_session
from hermit.sessions.files import read_own
from hermit.sessions.headers import header_key, rename_header
from hermit.sessions.keys import SessionKey, SessionKind, format_session_key, parse_session_key
from hermit.sessions.lock import lock_path, session_lock
from hermit.sessions.recovery import parse_store
from hermit.sessions.store import SessionStore
from hermit.textfile import read_regular
from hermit.tools.room_journal import finish_held
from hermit.tools.rooms import room_slug

log = logging.getLogger(__name__)

SLACK = "slack"
JOURNAL = "key-migration.json"
BUSY_WAIT_SECONDS = 2.0  # a turn running in a session being renamed: that one waits for the next run
GONE = " (no longer configured)"  # how a removed account is named in the plan
BUSY = "another process was answering in it; the gateway's next start renames it"

Step = Callable[[str], None]  # told after each change is made (what it was): the crash tests' kill point


@dataclass
class Plan:
    """What a run would rename: per agent, old key → new key and old audience → new audience; and what it
    leaves, each with why (`waiting` ones are done once every Slack account has connected)."""

    keys: dict[str, dict[str, str]] = field(default_factory=dict)
    audiences: dict[str, dict[str, str]] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not any(self.keys.values()) and not any(self.audiences.values())


@dataclass
class Report:
    moved: list[str] = field(default_factory=list)  # "agent: old -> new"
    notes: list[str] = field(default_factory=list)  # memory files whose audiences were renamed
    rooms: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)


def journal_path(state_dir: Path) -> Path:
    return state_dir / "channels" / SLACK / JOURNAL


def workspaces(loaded: LoadedConfig, state_dir: Path) -> dict[str, str | None]:
    """Each configured Slack account's recorded workspace (None: not recorded yet, or unreadable)."""
    out: dict[str, str | None] = {}
    for account_id in loaded.config.channels.accounts_of(SLACK):
        try:
            out[account_id] = _read_workspace(workspace_path(state_dir, account_id))
        except (OSError, ValueError, RecursionError):
            out[account_id] = None
    return out


def removed_accounts(loaded: LoadedConfig, state_dir: Path) -> dict[str, str | None]:
    """The recorded workspace of each Slack account no longer in the config (its folder under channels/slack/
    with a workspace.json), as "<folder> (no longer configured)". A key naming no account, and an audience, may
    be its: with it in another workspace, such a key is not the remaining accounts' to claim."""
    configured = {workspace_path(state_dir, a).parent.name for a in loaded.config.channels.accounts_of(SLACK)}
    out: dict[str, str | None] = {}
    with contextlib.suppress(OSError):
        for folder in sorted((state_dir / "channels" / SLACK).iterdir()):
            record = folder / "workspace.json"
            if folder.name in configured or folder.is_symlink() or not os.path.lexists(record):
                continue
            try:
                out[f"{folder.name}{GONE}"] = _read_workspace(record)
            except (OSError, ValueError, RecursionError):
                out[f"{folder.name}{GONE}"] = None
    return out


def _owners(loaded: LoadedConfig) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for account_id, acc in loaded.config.channels.accounts_of(SLACK).items():
        ids: set[str] = set()
        for raw in acc.owners:
            with contextlib.suppress(AllowlistEntryError):
                ids.add(normalize_entry(SLACK, raw))
        out[account_id] = ids
    return out


def _team(claimants: Iterable[str], ws: Mapping[str, str | None]) -> tuple[str | None, str, bool]:
    """(the one workspace `claimants` share, else None with why and whether it is only waiting)."""
    names = sorted(claimants)
    if not names:
        return None, "no Slack account is configured that could have made it", False
    unknown = [a for a in names if ws.get(a) is None]
    if gone := [a.removesuffix(GONE) for a in unknown if a.endswith(GONE)]:
        return None, (f"Slack account(s) {', '.join(gone)}, no longer in the config, may have made it, and the "
                      "workspace they recorded cannot be read (channels/slack/<account>/workspace.json; remove that "
                      "folder if the account is gone for good)"), False
    if unknown:
        return None, (f"the workspace of Slack account(s) {', '.join(unknown)} is not recorded yet (it is when the "
                      "account first connects to Slack)"), True
    teams = {str(ws[a]) for a in names}
    if any(not t.startswith("T") for t in teams):
        return None, ("an account is an Enterprise Grid org-wide install, whose messages came from several "
                      "workspaces"), False
    if len(teams) > 1:
        return None, (f"Slack accounts {', '.join(names)} are in different workspaces ({', '.join(sorted(teams))}): "
                      "the old key could be either's"), False
    return teams.pop(), "", False


def _slack_chat(key: str) -> tuple[SessionKey, str, str | None] | None:
    """A Slack contact's or group's key as (parsed, its bare peer id, the workspace its peer names: None in a key
    from before the upgrade); None for any other key (an owner's is told apart by the caller), a global Grid
    member id, or a peer of another form (`@account.<id>`)."""
    try:
        k = parse_session_key(key)
    except SessionError:
        return None
    if k.channel != SLACK or k.kind not in (SessionKind.DM, SessionKind.GROUP) or not k.peer_id:
        return None
    bare, at, team = k.peer_id.partition("@")
    if not bare or (k.kind is SessionKind.DM and bare[:1] == "W") or (at and not team.startswith("T")):
        return None
    return k, bare, team if at else None


def read_records(agent: AgentConfig) -> list[str]:
    """The keys in an agent's sessions.json, read only (a missing or damaged one: none)."""
    try:
        data, _ = read_own(agent.sessions_dir / "sessions.json", "the session index")
        return list(parse_store(data))
    except (OSError, HermitError):
        return []


def make_plan(loaded: LoadedConfig, state_dir: Path, keys_of: Callable[[AgentConfig], list[str]] = read_records) -> Plan:
    """What a migration would do now (reads only)."""
    plan = Plan()
    ws = workspaces(loaded, state_dir)
    owners = _owners(loaded)
    every_owner = set().union(*owners.values()) if owners else set()
    # An account removed from the config still made some of the keys that name no account, and some notes.
    gone = removed_accounts(loaded, state_dir)
    ws |= gone
    # The audience (notes, room) is the person's or the group's on Slack, whatever account: any account could
    # have written it. A renamed key's old audience is looked for too: it may have waited for another account.
    aud_team, aud_why, aud_waiting = _team([*owners, *gone], ws)
    for agent in loaded.agents:
        keys: dict[str, str] = {}
        audiences: dict[str, str] = {}
        unsure: dict[str, str] = {}
        present = keys_of(agent)
        for key in present:
            chat = _slack_chat(key)
            if chat is None:
                continue
            k, peer, has_team = chat
            claimants, own_audience = _claimants(k, peer, owners, every_owner)
            if claimants is None:
                continue
            if k.account_id is None:
                claimants = [*claimants, *gone]
            old_aud = audience_of_session(format_session_key(dataclasses.replace(k, peer_id=peer)))
            if has_team is None:
                team, why, waiting = _team(claimants, ws)
                if team is None:
                    (plan.waiting if waiting else plan.left).append(f"agent {agent.id}: {key} stays: {why}")
                elif (new := format_session_key(dataclasses.replace(k, peer_id=f"{peer}@{team}"))) in present:
                    plan.left.append(f"agent {agent.id}: {key} stays: {new} has a session of its own already "
                                     "(started since the upgrade); the old transcript stays readable")
                else:
                    keys[key] = new
                if aud_team is None and own_audience:
                    unsure[old_aud] = aud_why
            if own_audience and aud_team is not None and has_team in (None, aud_team):
                audiences[old_aud] = audience_of_session(format_session_key(
                    dataclasses.replace(k, peer_id=f"{peer}@{aud_team}")))
        if audiences or unsure:
            found = _audiences_kept(agent, {*audiences, *unsure})
            audiences = {old: new for old, new in audiences.items() if old in found}
            for old in sorted(found & set(unsure)):
                (plan.waiting if aud_waiting else plan.left).append(
                    f"agent {agent.id}: the notes and room of {old} stay as they are: {unsure[old]}")
        if keys:
            plan.keys[agent.id] = keys
        if audiences:
            plan.audiences[agent.id] = audiences
    plan.left = sorted(set(plan.left))
    plan.waiting = sorted(set(plan.waiting))
    return plan


def _claimants(k: SessionKey, peer: str, owners: Mapping[str, set[str]],
               every_owner: set[str]) -> tuple[list[str] | None, bool]:
    """(the Slack accounts whose messages could have made key `k`, or None for an owner's key: it keeps the id as
    `owners` lists it; and whether the chat's audience is its own: not when an account lists the id as its owner,
    whose DM sessions have that audience too)."""
    if k.kind is not SessionKind.DM:
        return list(owners), True
    try:
        person = normalize_entry(SLACK, peer)
    except AllowlistEntryError:
        return None, False
    if k.account_id is None:
        return (None, False) if person in every_owner else (list(owners), True)
    if k.account_id not in owners:
        return [], person not in every_owner
    if person in owners[k.account_id]:
        return None, False
    return [k.account_id], person not in every_owner


def _audiences_kept(agent: AgentConfig, wanted: set[str]) -> set[str]:
    """Which of `wanted` audiences have notes in the agent's memory files or a room."""
    rooms = agent.sessions_dir.parent / "rooms"
    found = {a for a in wanted if (rooms / room_slug(a)).is_dir()}
    return found | audiences_in(agent.workspace, wanted - found)


# -- applying ----------------------------------------------------------------------------------------------


def migrate(loaded: LoadedConfig, state_dir: Path, *, step: Step | None = None) -> Report:
    """Finish an interrupted run's journal, then rename what can be renamed now. Idempotent; one run at a time
    (a lock in the state dir). OSError/HermitError when a file cannot be changed: what was done stays done,
    and the journal makes the next run finish the rest."""
    report = Report()
    journal = journal_path(state_dir)
    ensure_private_dir(journal.parent, what="the Slack channel's state folder")
    with locked(journal.with_name(f".{JOURNAL}.lock")):
        pending = _read_journal(journal)
        if pending is not None:
            _apply(loaded, _checked(loaded, pending, report), report, step)
            journal.unlink()
        plan = make_plan(loaded, state_dir)
        report.left += plan.left
        report.waiting += plan.waiting
        if not plan.empty:
            write_atomic(journal, json.dumps({"version": 1, "keys": plan.keys, "audiences": plan.audiences},
                                             indent=1) + "\n", mode=0o600)
            _tell(step, "journal")
            _apply(loaded, plan, report, step)
            journal.unlink()
    return report


def _tell(step: Step | None, what: str) -> None:
    if step is not None:
        step(what)


def _read_journal(path: Path) -> Plan | None:
    try:
        data = json.loads(read_regular(path, 64 << 20, follow=False))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise SessionError(f"cannot read the Slack key migration journal {path}: {e}",
                           f"move {path} aside; the next start plans the renames again from sessions.json") from None

    def table(name: str) -> dict[str, dict[str, str]]:
        raw = data.get(name) if isinstance(data, dict) else None
        if not isinstance(raw, dict):
            return {}
        return {str(a): {str(o): str(n) for o, n in m.items()} for a, m in raw.items() if isinstance(m, dict)}

    return Plan(table("keys"), table("audiences"))


_TEAM = re.compile(r"T[A-Z0-9]{1,40}")
_OLD_AUDIENCE = re.compile(r"slack:(dm|group):([A-Za-z0-9]{1,64})")


def _checked(loaded: LoadedConfig, journal: Plan, report: Report) -> Plan:
    """The journal's renames that a run could have planned: a bare Slack id's key or audience to the same one
    with `@T…` added, never an owner's (by the config as it is now). It lives in the state dir, as sessions.json
    does, but it is replayed blind: anything else in it — the main session onto a contact's key, the owner's
    audience onto a chat's — would hand one person's conversation or notes to another. Those are said and
    skipped; the plan made after it still does what is due."""
    owners = _owners(loaded)
    every_owner = set().union(*owners.values()) if owners else set()
    out = Plan()
    for agent_id, renames in sorted(journal.keys.items()):
        for old, new in renames.items():
            if _key_rename(agent_id, old, new, owners, every_owner):
                out.keys.setdefault(agent_id, {})[old] = new
            else:
                report.left.append(f"agent {agent_id}: the journal's rename of {old} to {new} is not one this "
                                   f"migration makes: not done ({JOURNAL} was changed by hand?)")
    for agent_id, renames in sorted(journal.audiences.items()):
        for old, new in renames.items():
            m = _OLD_AUDIENCE.fullmatch(old)
            bare, at, team = new.partition("@")
            owner = m is not None and m.group(1) == "dm" and m.group(2) in every_owner
            if m is not None and bare == old and at and _TEAM.fullmatch(team) and not owner:
                out.audiences.setdefault(agent_id, {})[old] = new
            else:
                report.left.append(f"agent {agent_id}: the journal's rename of the audience {old} to {new} is not "
                                   f"one this migration makes: not done ({JOURNAL} was changed by hand?)")
    return out


def _key_rename(agent_id: str, old: str, new: str, owners: Mapping[str, set[str]], every_owner: set[str]) -> bool:
    chat, moved = _slack_chat(old), _slack_chat(new)
    if chat is None or moved is None or chat[2] is not None or moved[2] is None or not _TEAM.fullmatch(moved[2]):
        return False
    k, peer, _ = chat
    if k.agent_id != agent_id or _claimants(k, peer, owners, every_owner)[0] is None:
        return False
    return format_session_key(dataclasses.replace(k, peer_id=f"{peer}@{moved[2]}")) == new


def _apply(loaded: LoadedConfig, plan: Plan, report: Report, step: Step | None) -> None:
    agents = {a.id: a for a in loaded.agents}
    for agent_id in sorted(set(plan.keys) | set(plan.audiences)):
        agent = agents.get(agent_id)
        if agent is None:
            continue  # removed from the config since: its keys stay
        renamed: dict[str, str] = {}
        busy: set[str] = set()  # the audiences of sessions in a turn: their room may be in use, left for the next run
        for old, new in plan.keys.get(agent_id, {}).items():
            outcome = _move_key(agent, old, new, step)
            if outcome in ("moved", "done"):
                renamed[old] = new
                if outcome == "moved":
                    report.moved.append(f"agent {agent_id}: {old} -> {new}")
            elif outcome == BUSY:
                busy.add(audience_of_session(old))
                report.waiting.append(f"agent {agent_id}: {old} stays for now: {outcome}")
            elif outcome:
                report.left.append(f"agent {agent_id}: {old} stays: {outcome}")
        if renamed:
            _rename_headers(agent.sessions_dir, renamed, report, step)
        renames = {old: new for old, new in plan.audiences.get(agent_id, {}).items() if old not in busy}
        if renames:
            done = rename_notes(agent.workspace, renames, report.left, lambda what: _tell(step, what))
            report.notes += [f"agent {agent_id}: {rel}" for rel in done]
        for old_aud, new_aud in renames.items():
            room = _move_room(agent.sessions_dir.parent / "rooms", old_aud, new_aud, report, step)
            if room:
                report.rooms.append(f"agent {agent_id}: {room}")


def _move_key(agent: AgentConfig, old: str, new: str, step: Step | None) -> str:
    """"moved", "done" (an earlier run moved it), "" (nothing under either key) or why it stays."""
    store = SessionStore(agent.sessions_dir)
    folder = agent.sessions_dir
    try:
        with session_lock(folder, old, wait_seconds=BUSY_WAIT_SECONDS), \
                session_lock(folder, new, wait_seconds=BUSY_WAIT_SECONDS):
            outcome = _move_record(store, old, new)
            with contextlib.suppress(FileNotFoundError):
                lock_path(folder, old).unlink()  # held: a session of the old key is not started any more
    except SessionBusy:
        return BUSY
    if outcome == "moved":
        _tell(step, f"record {old}")
    return outcome


def _move_record(store: SessionStore, old: str, new: str) -> str:
    outcome = store.rename(old, new)  # the store's own lock and atomic write: one os.replace moves the entry
    if outcome == "taken":
        return f"{new} has a session of its own already; the old transcript stays readable"
    return {"moved": "moved", "done": "done"}.get(outcome, "")


def _rename_headers(folder: Path, renamed: Mapping[str, str], report: Report, step: Step | None) -> None:
    """Every transcript naming an old key (the current session's and the ended ones') names the new one."""
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(folder.glob("*.jsonl")):
            if header_key(path) not in renamed:
                continue
            try:
                rename_header(path, renamed)
            except (OSError, SessionError) as e:
                report.left.append(f"{path}: its header still names the old key ({type(e).__name__}: {e})")
                continue
            _tell(step, f"header {path.name}")


def _move_room(base: Path, old: str, new: str, report: Report, step: Step | None) -> str:
    src, dst = room_slug(old), room_slug(new)
    if not (base / src).is_dir():
        return ""
    with locked(base / f".{min(src, dst)}.lock"), locked(base / f".{max(src, dst)}.lock"):
        if not (base / src).is_dir():
            return ""
        if os.path.lexists(base / dst):
            report.left.append(f"{base / src}: the room of {old} stays: {new} has a room already ({base / dst})")
            return ""
        finish_held(base, src, moving_to=dst)  # a merge a stopped Hermit left: the room moves whole, its notes too
        os.rename(base / src, base / dst)
    _tell(step, f"room {src}")
    return f"rooms/{src} -> rooms/{dst}"


# -- in the gateway ----------------------------------------------------------------------------------------


class _Host(Protocol):
    @property
    def channels(self) -> Mapping[tuple[str, str], object]: ...


class GatewayContext(Protocol):
    """What the gateway hands a service factory (its ServiceContext), as far as this reads it."""

    @property
    def host(self) -> _Host: ...

    @property
    def loaded(self) -> LoadedConfig: ...

    @property
    def state_dir(self) -> Path: ...

    @property
    def config(self) -> Callable[[], LoadedConfig] | None: ...


def log_report(report: Report) -> None:
    if report.moved:
        log.info("slack: %d session(s) from before keys named the workspace continue under their new key: %s",
                 len(report.moved), "; ".join(report.moved))
    for line in report.notes:
        log.info("slack: notes' audience renamed in %s", line)
    for line in report.rooms:
        log.info("slack: room renamed: %s", line)
    for line in report.left:
        log.warning("slack: a session from before keys named the workspace was not renamed: %s "
                    "(`hermit doctor` lists them)", line)
    for line in report.waiting:
        log.info("slack: not renamed yet: %s", line)


def gateway_service(ctx: GatewayContext) -> None:
    """The gateway's service factory entry (gateway/services.py): nothing runs in the background. It renames
    what the accounts' recorded workspaces allow now, before any channel starts, and has each Slack account
    run it again when it has identified itself (it may record its workspace then), before it takes events."""
    current = ctx.config or (lambda: ctx.loaded)
    state_dir = ctx.state_dir

    def run() -> None:
        try:
            log_report(migrate(current(), state_dir))
        except ConfigError as e:
            log.warning("slack: old session keys not renamed now (the config is invalid: %s)", e.message)
        except Exception as e:  # noqa: BLE001 - never stops the gateway or the account; the journal finishes later
            log.warning("slack: renaming old session keys failed (%s: %s); the next start finishes it",
                        type(e).__name__, e)

    if not loaded_has_slack(ctx.loaded):
        return
    if (unscoped := bindings_warning(ctx.loaded)) is not None:
        log.warning("slack: %s (add account_id or team_id to each; `hermit doctor` lists them)", unscoped)
    run()
    for channel in ctx.host.channels.values():
        if isinstance(channel, SlackChannel):
            channel.on_workspace = run


def loaded_has_slack(loaded: LoadedConfig) -> bool:
    return bool(loaded.config.channels.accounts_of(SLACK))
