"""`hermit doctor` checks of who can reach the assistant: bindings, owners and access policies, credential files.

The `access` check says, per channel account, how many owners it names and what its policies are, and
warns wherever someone who is not the owner could reach the main session (MEMORY.md, owner-only notes,
an unsandboxed shell) or run tools outside the sandbox (SPEC §18):
- `session.dangerously_share_main_session_with_contacts` (contacts' DMs in the main session);
- an owner named by @username (whoever holds that username later is the owner);
- a heartbeat whose alerts, or a main-session cron job whose replies (main-session output), are aimed at a
  group, at a DM peer who is not an owner, or at an owner whose DMs the bindings route to another agent
  (someone else's owner): delivered when the owner opted in (`heartbeat.share_alerts_with_target`, the
  job's `--share-main-text`), and otherwise refused at run time — said so, as they deliver nothing; and a
  job the cron tool aimed at the owner whose target no longer reaches them (its runs fail);
- `sandbox.mode: off` while chat accounts exist (contacts' and groups' sessions run tools unsandboxed);
- owners whose DMs reach another agent's unsandboxed main session but not the default agent's (someone else's
  own agent: its shell reads every agent's files);
- a Discord server's or Slack workspace's binding with no account_id, which takes the chats there of an account
  the bindings give to another agent;
- DMs or groups open to anyone.
An account without owners under `dm_scope: main` is fine (only the web chat and the CLI reach the main
session) and is said so, not warned about.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hermit.cli.checks import Check, CheckFn, check
from hermit.cli.context import CliContext
from hermit.errors import ConfigError, HermitError

if TYPE_CHECKING:  # loaded inside the checks, so `hermit --help` stays quick
    from hermit.agent.routing import Router
    from hermit.config.load import LoadedConfig
    from hermit.config.schema import ChannelAccessConfig
    from hermit.scheduler.jobs import Job

@check("bindings", fix="fix or remove these bindings (see docs/channels.md, 'Routing')", needs=("config",))
def bindings_check(ctx: CliContext) -> str:
    from hermit.agent.routing import binding_problems

    cfg = ctx.config()
    problems = binding_problems(cfg.config.bindings, [a.id for a in cfg.agents], cfg.config.channels)
    if problems:
        raise ConfigError("; ".join(problems), "fix or remove these bindings (see docs/channels.md, 'Routing')")
    return f"{len(cfg.config.bindings)} binding(s), default agent {cfg.agent().id}"


def _approved_count(ctx: CliContext, channel: str, account_id: str) -> int | None:
    from hermit.channels.pairing import PairingStore

    try:
        return len(PairingStore(ctx.home).approved_senders(channel, account_id))
    except (OSError, HermitError):  # a state dir that is not there yet, or an unreadable file
        return None


def _account_line(ctx: CliContext, router: Router, loaded: LoadedConfig, name: str, account_id: str,
                  acc: ChannelAccessConfig) -> str:
    from hermit.agent.routing import RouteInput

    approved = _approved_count(ctx, name, account_id)
    dms = f"DMs {acc.dm_policy}"
    if acc.dm_policy in ("pairing", "allowlist"):
        contacts = len(acc.allow_from) + (approved or 0)
        dms += f" ({contacts} contact{'s' if contacts != 1 else ''})"
    groups = f"groups {acc.group_policy}" + (f" ({len(acc.groups)})" if acc.group_policy == "allowlist" else "")
    line = f"{name}/{account_id}: owners {len(acc.owners)}, {dms}, {groups}"
    if not acc.enabled:
        return line + " [disabled]"
    agent = router.resolve(RouteInput(name, account_id, "dm", "?")).agent_id
    if not acc.owners and loaded.agent(agent).settings.session.dm_scope == "main":
        line += " — no owners: only the web chat and the CLI reach the main session"
    return line


def _not_the_owner(loaded: LoadedConfig, agent_id: str, channel: str, account: str | None, peer_kind: str,
                   to: str) -> str | None:
    """Who a delivery of agent `agent_id`'s main-session text reaches when that is not only that agent's
    owner (an owner of an account bound to another agent is someone else's owner), in words; else None."""
    from hermit.scheduler.targets import not_the_owner

    return not_the_owner(loaded, agent_id, channel, account, peer_kind, to)


def _main_text_risks(loaded: LoadedConfig, jobs: Sequence[Job]) -> list[str]:
    """Heartbeat alerts and main-session cron jobs aimed at someone other than an owner of their agent:
    delivered when the owner opted in, refused (and said so) when not; jobs the cron tool aimed at an
    owner that the config now sends elsewhere."""
    risks: list[str] = []
    for a in loaded.agents:
        hb = a.settings.heartbeat
        if hb.target is not None and hb.every_minutes > 0:
            t = hb.target
            risk = _not_the_owner(loaded, a.id, t.channel, t.account, t.peer_kind, t.to)
            if risk and hb.share_alerts_with_target:
                risks.append(f"agents {a.id}: heartbeat alerts (main-session text) go to {risk} "
                             "(heartbeat.share_alerts_with_target is on)")
            elif risk:
                # agents.defaults' opt-in is the default agent's only (config/load.py): say where another's goes
                where = "" if a.is_default else f" in agent {a.id}'s own agents.list entry"
                risks.append(f"agents {a.id}: heartbeat alerts (main-session text) would go to {risk}: they are "
                             "not delivered (point heartbeat.target at an owner, or set "
                             f"heartbeat.share_alerts_with_target: true{where})")
    for job in jobs:
        d = job.delivery
        if job.enabled and (job.session_target == "main" or d.owner_only) and d.target() is not None:
            risk = _not_the_owner(loaded, job.agent_id, d.channel or "", d.account, d.peer_kind, d.to or "")
            if risk and d.owner_only:
                risks.append(f"cron job {job.label}: the cron tool aimed its replies at the owner of agent "
                             f"{job.agent_id}, and they now go to {risk}: its runs fail until it is re-aimed")
            elif risk and job.session_target == "main" and d.shares_main:
                risks.append(f"cron job {job.label}: its replies (main-session text) go to {risk} "
                             "(shared on purpose: --share-main-text)")
            elif risk:
                risks.append(f"cron job {job.label}: its replies (main-session text) would go to {risk}, without "
                             f"the owner's opt-in: its runs fail and deliver nothing (`hermit cron edit {job.id} "
                             "--isolated`, or `--share-main-text`)")
    return risks


def _other_owners_risks(loaded: LoadedConfig, router: Router,
                        accounts: list[tuple[str, str, ChannelAccessConfig]]) -> list[str]:
    """Owners whose DMs reach the main session of an agent other than the default one, and who are not owners
    reaching the default agent's (the one the CLI and web chat holder answers to): a relative's own agent on a
    family bot, whom the cron tool treats as someone else's owner. That main session runs exec and the file tools
    unsandboxed unless its `sandbox.mode` is `all`, as Hermit's uid: they could read and change every other
    agent's workspace, notes and transcripts, and Hermit's keys."""
    from hermit.agent.routing import RouteInput

    default = loaded.agent().id
    reached: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (channel, account) -> [(agent, owner)]
    default_owners: set[tuple[str, str]] = set()
    # Accounts a binding gives (a group of, or all) to another agent: their owners are that agent's people, yet
    # their DMs, unbound, go to the default agent — a family bot whose group alone is bound to agent family.
    given: dict[tuple[str, str], list[str]] = {}
    for b in loaded.config.bindings:
        if b.match.account_id not in (None, "*") and b.agent_id != default:
            given.setdefault((b.match.channel, b.match.account_id), []).append(b.agent_id)
    astray: dict[tuple[str, str], list[str]] = {}  # (channel, account) -> its owners in the default's main session
    for name, account_id, acc in accounts:
        if not acc.enabled:
            continue
        for owner in acc.owners:
            route = router.resolve(RouteInput(name, account_id, "dm", owner, sender_is_owner=True))
            if not route.main:
                continue
            if route.agent_id == default:
                default_owners.add((name, owner))
                if (name, account_id) in given:
                    astray.setdefault((name, account_id), []).append(owner)
            elif loaded.agent(route.agent_id).settings.sandbox.mode != "all":
                reached.setdefault((name, account_id), []).append((route.agent_id, owner))
    risks: list[str] = []
    for (name, account_id), found_astray in astray.items():
        owners = list(dict.fromkeys(found_astray))
        other = ", ".join(dict.fromkeys(given[(name, account_id)]))
        risks.append(f"{name}/{account_id}: bindings give it to agent {other}, but the DMs of its owner"
                     f"{'s' if len(owners) > 1 else ''} {', '.join(owners)} go to the default agent {default}'s main "
                     f"session (MEMORY.md, its notes, its shell): if they are {other}'s people and not you, bind the "
                     f"account's DMs to {other} too (a binding with account_id and no peer)")
    for (name, account_id), found in reached.items():
        for agent_id in dict.fromkeys(a for a, _ in found):
            owners = list(dict.fromkeys(o for a, o in found if a == agent_id and (name, o) not in default_owners))
            if owners:
                mode = loaded.agent(agent_id).settings.sandbox.mode
                risks.append(f"{name}/{account_id}: owner{'s' if len(owners) > 1 else ''} {', '.join(owners)} "
                             f"reach{'' if len(owners) > 1 else 'es'} agent {agent_id}'s main session, whose exec "
                             f"and file tools are not sandboxed (sandbox.mode {mode}), and "
                             f"{'are not owners' if len(owners) > 1 else 'is not an owner'} of the default agent "
                             f"{default}: if that is someone else, they can read and change every agent's workspace, "
                             f"notes and transcripts and Hermit's keys — set sandbox.mode: all for agent {agent_id}")
    return risks


def _server_wide_risks(loaded: LoadedConfig) -> list[str]:
    """A `guild_id`/`team_id` binding with no `account_id` ranks above an account's binding (SPEC §15), so it takes
    that server's or workspace's chats of every bot account in it — also those of an account the bindings give to
    another agent (a relative's family bot in your own Discord server: its channel's members would reach your agent's
    group session and the notes it shares)."""
    risks: list[str] = []
    bindings = loaded.config.bindings
    for b in bindings:
        where = (f"Discord server {b.match.guild_id}" if b.match.guild_id else
                 f"Slack workspace {b.match.team_id}" if b.match.team_id else None)
        if where is None or b.match.account_id not in (None, "*"):
            continue
        others = dict.fromkeys(f"{o.match.account_id} (agent {o.agent_id})" for o in bindings
                               if o.match.channel == b.match.channel and o.match.account_id not in (None, "*")
                               and o.agent_id != b.agent_id and o.match.guild_id is None and o.match.team_id is None)
        if others:
            risks.append(f"bindings: {where} goes to agent {b.agent_id} with no account_id, so it also takes the "
                         f"chats there of {b.match.channel} account{'s' if len(others) > 1 else ''} "
                         f"{', '.join(others)} — give that binding the account_id of your own bot")
    return risks


def _risks(loaded: LoadedConfig, accounts: list[tuple[str, str, ChannelAccessConfig]],
           jobs: Sequence[Job] = (), router: Router | None = None) -> list[str]:
    """Every way a non-owner could reach the main session, main-session text or unsandboxed tools, one
    sentence each."""
    risks: list[str] = []
    for a in loaded.agents:
        session = a.settings.session
        if session.dangerously_share_main_session_with_contacts:
            effect = ("contacts' DMs (approved, allowlisted, or anyone under dm_policy open) land in its main "
                      "session: MEMORY.md, owner-only notes, an unsandboxed shell"
                      if session.dm_scope == "main" else
                      f"no effect while dm_scope is {session.dm_scope}, but it would put contacts into the main "
                      "session under dm_scope main")
            risks.append(f"agents {a.id}: session.dangerously_share_main_session_with_contacts is true — {effect}")
        if a.settings.sandbox.mode == "off" and accounts:
            risks.append(f"agents {a.id}: sandbox.mode is off — contacts' and groups' sessions run exec and file "
                         "tools unsandboxed on this machine")
    risks += _main_text_risks(loaded, jobs)
    risks += _server_wide_risks(loaded)
    if router is not None:
        risks += _other_owners_risks(loaded, router, accounts)
    for name, account_id, acc in accounts:
        if acc.enabled and (acc.dm_policy == "open" or (acc.group_policy == "open" and not acc.require_mention)):
            risks.append(f"{name}/{account_id}: open to anyone (as contacts, in sandboxed sessions of their own)")
    return risks


def _jobs(ctx: CliContext, loaded: LoadedConfig) -> Sequence[Job]:
    """The scheduled jobs, when the job file can be read (an unreadable one is the jobs check's failure)."""
    from hermit.scheduler.control import CronJobs

    try:
        return CronJobs(ctx.home, loaded).load().jobs
    except HermitError:
        return ()


@check("access", fix="fix channels.<name>.accounts in the config", needs=("config",))
def access_check(ctx: CliContext) -> str | Check:
    from hermit.agent.routing import Router
    from hermit.channels.pairing import PairingStore
    from hermit.channels.platforms import accounts as channel_accounts
    from hermit.channels.username_pins import UsernamePins, owner_username_notes

    loaded = ctx.config()
    channels = loaded.config.channels
    # Bindings to unknown agents are the bindings check's failure; here they simply never match.
    agents = {a.id: a.settings.session for a in loaded.agents}
    router = Router([b for b in loaded.config.bindings if b.agent_id in agents],
                    {a: s.dm_scope for a, s in agents.items()}, loaded.agent().id,
                    [a for a, s in agents.items() if s.dangerously_share_main_session_with_contacts])
    accounts: list[tuple[str, str, ChannelAccessConfig]] = list(channel_accounts(channels))
    parts = [_account_line(ctx, router, loaded, name, account_id, acc) for name, account_id, acc in accounts]
    detail = "; ".join(parts) or "no chat accounts configured (web chat only)"
    risks = _risks(loaded, accounts, _jobs(ctx, loaded), router)
    risks += owner_username_notes(UsernamePins(PairingStore(ctx.home)), accounts)  # pinned ids, to write in
    if risks:
        return Check("access", "warn", f"{detail} — {'; '.join(risks)}",
                     "only owners should reach the main session: turn dangerous settings off, name owners by "
                     "numeric id, point heartbeat.target and main-session cron jobs at an owner, keep sandbox.mode non-main, and use "
                     "dm_policy pairing or allowlist unless strangers should reach the assistant")
    return detail


@check("credentials", fix="chmod 700 the credentials dir and 600 its files")
def credentials_check(ctx: CliContext) -> str:
    from hermit.channels.pairing import credential_permission_problems

    problems = credential_permission_problems(ctx.home)
    if problems:
        base = ctx.home / "credentials"
        raise HermitError("; ".join(problems),
                          f"chmod 700 {base} && chmod 600 {base}/*  (pairing files decide who may talk to you)")
    return f"{ctx.home / 'credentials'}: owner-only"


# `hermit doctor` runs these after the config check ('*' outside open is a config error reported there).
DOCTOR_CHECKS: tuple[CheckFn, ...] = (bindings_check, access_check, credentials_check)
