"""`hermit cron list|add|edit|remove|run|runs`: scheduled jobs from the terminal; `run` needs no gateway."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hermit.cli.checks import Check, check
from hermit.cli.context import CliContext
from hermit.cli.terminal import warn
from hermit.errors import JobError

if TYPE_CHECKING:  # the commands load the scheduler themselves, so `hermit --help` stays quick
    from hermit.scheduler import CronJobs, Job


def configure(c: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit cron` (its name and help are in the table of cli/commands.py)."""
    cs = c.add_subparsers(dest="cron_command", metavar="SUBCOMMAND", required=True)

    p = cs.add_parser("list", help="all jobs with their next run in each job's time zone")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = cs.add_parser("add", help="add a job; prints its next three run times")
    _job_options(p, adding=True)
    p.set_defaults(func=cmd_add)

    p = cs.add_parser("edit", help="change a job (only the options given)")
    p.add_argument("id", help="the job id (see `hermit cron list`)")
    _job_options(p, adding=False)
    p.set_defaults(func=cmd_edit)

    p = cs.add_parser("remove", help="delete a job (its run log stays)")
    p.add_argument("id", help="the job id (see `hermit cron list`)")
    p.set_defaults(func=cmd_remove)

    p = cs.add_parser("run", help="run a job now in this process (no gateway needed); prints the reply")
    p.add_argument("id", help="the job id (see `hermit cron list`)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_run)

    p = cs.add_parser("runs", help="a job's recent runs")
    p.add_argument("id", help="the job id (see `hermit cron list`)")
    p.add_argument("--limit", type=int, default=20, help="how many recent runs (default 20)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_runs)


def _job_options(p: argparse.ArgumentParser, *, adding: bool) -> None:
    p.add_argument("--name", help="a short label")
    p.add_argument("-m", "--message", required=adding, help="what the agent is asked to do at each run")
    when = p.add_mutually_exclusive_group(required=adding)
    when.add_argument("--at", help="once, at this ISO time (no offset: the job's time zone), e.g. 2026-06-01T09:30, "
                      "or this long from now: 20m, 2h, 1d (a reminder)")
    when.add_argument("--every", help="at this interval: 90s, 30m, 2h, 1d")
    when.add_argument("--cron", help="cron expression: 5 fields, or 6 with seconds first ('0 8 * * 1-5')")
    p.add_argument("--anchor", help="with --every: count intervals from this ISO time")
    p.add_argument("--tz", help="IANA time zone (default: agents.defaults.timezone, else the host's)")
    p.add_argument("--main", action="store_const", const="main", dest="target",
                   help="run as a system event in the main session (default: an isolated cron:<id> session)")
    p.add_argument("--isolated", action="store_const", const="isolated", dest="target",
                   help="run in a fresh cron:<jobId> session (the default)")
    p.add_argument("--announce", metavar="CHANNEL:[ACCOUNT:]TO", help="deliver the reply to this peer, e.g. "
                   "telegram:12345 or telegram:work:12345 (through the gateway)")
    p.add_argument("--account", help="the channel account for --announce (default: 'default', or the only one)")
    p.add_argument("--group", action="store_true", help="--announce's peer is a group or channel, not a DM")
    p.add_argument("--no-delivery", action="store_true", help="do not deliver the reply")
    p.add_argument("--share-main-text", action="store_true",
                   help="with --main: let the replies (which can quote MEMORY.md and owner-only notes) go to "
                   "an --announce target that is not an owner of the agent, e.g. a group (refused otherwise)")
    p.add_argument("--keep", action="store_true", help="keep an --at job after it ran (default: delete it)")
    p.add_argument("--timeout", type=float, help="seconds before a run is cancelled (default 600)")
    p.add_argument("--json", action="store_true", help="print JSON")
    if adding:
        p.add_argument("--id", help="job id (default: generated)")
        p.add_argument("--disabled", action="store_true", help="add it switched off")
    else:
        p.add_argument("--enable", action="store_true", help="turn the job on")
        p.add_argument("--disable", action="store_true", help="turn the job off (kept, not run)")


def _spec(args: argparse.Namespace, *, adding: bool) -> dict[str, Any]:
    from hermit.scheduler.schedule import parse_duration_ms

    spec: dict[str, Any] = {}
    if args.name is not None:
        spec["name"] = args.name
    if args.message is not None:
        spec["message"] = sys.stdin.read() if args.message == "-" else args.message
    if args.at:
        spec["schedule"] = {"kind": "at", "at": _at(args.at)}
    elif args.every:
        spec["schedule"] = {"kind": "every", "every_ms": parse_duration_ms(args.every),
                            **({"anchor": args.anchor} if args.anchor else {})}
    elif args.cron:
        spec["schedule"] = {"kind": "cron", "expr": args.cron, **({"tz": args.tz} if args.tz else {})}
    if (args.tz and not args.cron) or (args.anchor and not args.every):
        raise JobError("--tz goes with --cron and --anchor with --every",
                       "for --at, write the offset into the time (2026-06-01T09:30+02:00) or set the user's zone")
    if args.target:
        spec["session_target"] = args.target
    delivery = _delivery(args, adding=adding)
    if delivery:
        spec["delivery"] = delivery
    if args.keep:
        spec["delete_after_run"] = False
    if args.timeout is not None:
        spec["timeout_seconds"] = args.timeout
    if adding:
        if args.id:
            spec["id"] = args.id
        spec["enabled"] = not args.disabled
    elif args.enable or args.disable:
        spec["enabled"] = bool(args.enable)
    return spec


# `--at 20m` (or `+20m`, `in 20m`): a reminder's natural form; a unit is required, so no ISO time is taken for one.
_FROM_NOW = re.compile(r"^\s*(?:\+|in\s+)?(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _at(text: str) -> str:
    """--at as given, or a time from now (20m, 2h, 1d) as the UTC instant it names."""
    m = _FROM_NOW.match(text)
    if not m:
        return text
    at = datetime.now(UTC) + timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2).lower()])
    whole = at.replace(microsecond=0) + timedelta(seconds=1 if at.microsecond else 0)  # never early; shown plainly
    return whole.isoformat()


def _delivery(args: argparse.Namespace, *, adding: bool) -> dict[str, Any]:
    """The delivery fields the options set: --announce (with --account, --group), --no-delivery, and the
    owner's opt-in --share-main-text (stored as delivery.shares_main)."""
    delivery: dict[str, Any] = {}
    if args.announce:
        from hermit.scheduler.targets import parse_announce

        channel, account, to = parse_announce(args.announce, args.account)
        delivery = {"mode": "announce", "channel": channel, "to": to, "peer_kind": "group" if args.group else "dm",
                    **({"account": account} if account else {})}
    elif args.no_delivery:
        delivery = {"mode": "none"}
    if args.share_main_text:
        if adding and (args.target != "main" or not args.announce):
            raise JobError("--share-main-text goes with --main and --announce",
                           "it lets a main-session job's replies reach a target that is not an owner of the agent")
        delivery["shares_main"] = True
    return delivery


def _jobs(ctx: CliContext) -> CronJobs:
    from hermit.scheduler import CronJobs

    return CronJobs(ctx.home, ctx.config())


def _when(at: str | None) -> str:
    if not at:
        return "-"
    dt = datetime.fromisoformat(at)
    return f"{dt:%Y-%m-%d %H:%M} {dt.tzname()}"


def _print_job(jobs: CronJobs, job: Job) -> None:
    d = jobs.describe(job)
    name = f' "{job.name}"' if job.name else ""
    print(f"{job.id}{name}: {job.schedule.describe()} in {d['timezone']}; {job.session_target} session; "
          f"delivery {job.delivery.describe()}{'' if job.enabled else ' (disabled)'}")
    risk = jobs.not_the_owner(job) if job.session_target == "main" and job.delivery.shares_main else None
    if risk:
        warn(f"its replies are main-session text (MEMORY.md, owner-only notes) and go to {risk}: shared on "
             "purpose (--share-main-text)")
    times = jobs.next_times(job) if job.enabled else []
    if times:
        print("next runs:")
        for t in times:
            print(f"  {t:%Y-%m-%d %H:%M:%S %Z (%a)}")


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    jobs = _jobs(ctx)
    listing = jobs.list_jobs()
    if args.json:
        print(json.dumps(listing, ensure_ascii=False, indent=2))
        return 0
    for bad in listing.get("invalid", []):
        warn(bad['error'])
    rows = listing["jobs"]
    if not rows:
        print("no jobs yet (add one with `hermit cron add --cron '0 8 * * *' -m '…'`)")
        return 0
    print(f"{'ID':<12} {'NAME':<18} {'SCHEDULE':<26} {'NEXT RUN':<22} {'LAST':<8} TARGET")
    for job in jobs.load().jobs:
        d = jobs.describe(job)
        nxt = _when(d["next_run_at"]) if job.enabled else "disabled"
        print(f"{job.id:<12} {job.name[:18]:<18} {job.schedule.describe()[:26]:<26} {nxt:<22} "
              f"{d['last_status'] or '-':<8} {job.session_target}→{job.delivery.describe()}")
        if d["last_status"] == "skipped" and d["last_error"]:  # e.g. its target is no longer let in
            print(f"{'':<12} not delivered: {d['last_error']}")
    return 0


def cmd_add(ctx: CliContext, args: argparse.Namespace) -> int:
    jobs = _jobs(ctx)
    spec = _spec(args, adding=True)
    spec["agent_id"] = ctx.config().agent(ctx.agent_id).id
    added = jobs.add(spec)
    if added.get("warning"):  # aimed at someone not let in: its runs are skipped until they are
        warn(added["warning"])
    if args.json:
        print(json.dumps(added, ensure_ascii=False, indent=2))
        return 0
    print("added ", end="")
    _print_job(jobs, jobs.get(added["job"]["id"]))
    return 0


def cmd_edit(ctx: CliContext, args: argparse.Namespace) -> int:
    jobs = _jobs(ctx)
    patch = _spec(args, adding=False)
    if not patch:
        raise JobError("nothing to change", "give at least one option, e.g. --disable or --cron '0 9 * * *'")
    updated = jobs.update(args.id, patch)
    if updated.get("warning"):
        warn(updated["warning"])
    if args.share_main_text and not jobs.get(args.id).delivery.shares_main:
        warn("--share-main-text not kept: it is for a main-session job that announces (--main --announce …)")
    if args.json:
        print(json.dumps(updated, ensure_ascii=False, indent=2))
        return 0
    print("changed ", end="")
    _print_job(jobs, jobs.get(args.id))
    if updated.get("retired"):  # what its runs kept for the old target: owner-only now (scheduler/reaim.py)
        print("re-aimed: what its earlier runs kept is now yours alone: " + "; ".join(updated["retired"]))
    return 0


def cmd_remove(ctx: CliContext, args: argparse.Namespace) -> int:
    _jobs(ctx).remove(args.id)
    print(f"removed {args.id}")
    return 0


def cmd_runs(ctx: CliContext, args: argparse.Namespace) -> int:
    jobs = _jobs(ctx)
    try:
        runs = jobs.runs(args.id, args.limit)["runs"]
    except JobError:
        # A job that is gone (an --at reminder is deleted once it ran, `cron remove`) keeps its run log: show it.
        runs = jobs.store.runs(args.id, args.limit) if re.fullmatch(r"[\w][\w.-]*", args.id) else []
        if not runs:
            raise
        if not args.json:
            print(f"{args.id} is no longer a job (a one-shot --at job is deleted after it runs, unless --keep); "
                  "its runs:")
    if args.json:
        print(json.dumps(runs, ensure_ascii=False, indent=2))
        return 0
    if not runs:
        print(f"{args.id} has not run yet")
    for run in runs:
        sent = "delivered" if run.get("delivered") else "not delivered"
        err = f" — {run['error']}" if run.get("error") else ""
        print(f"{run.get('started_at', '?')}  {run.get('status', '?'):<7} {run.get('trigger', ''):<8} {sent}{err}")
    return 0


def cmd_run(ctx: CliContext, args: argparse.Namespace) -> int:
    """Run the job here and now: the turn sees the time in the job's zone, the run is logged and the job's
    next run is kept in its zone. Nothing is delivered (the gateway owns the channels): the reply is printed."""
    import asyncio

    from hermit.cli.assistant import build_runtime
    from hermit.scheduler import LocalHost
    from hermit.scheduler.runner import execute, finish, local_time_text, new_handle, session_starter

    jobs = _jobs(ctx)
    job = jobs.get(args.id)
    zone = jobs.zone(job)
    runtime = build_runtime(dataclasses.replace(ctx, agent_id=job.agent_id, workspace=None))
    handle = new_handle(job, jobs.clock(), "manual")

    async def no_delivery(*_: object) -> None:
        raise JobError("nothing is delivered from the CLI", "start the gateway for deliveries")

    host = LocalHost({job.agent_id: runtime}, no_delivery, threaded=False)
    try:
        record = asyncio.run(execute(job, host, handle, zone, session_starter(jobs.loaded, jobs.clock),
                                     deliver=False))
    finally:
        runtime.close()
    record = finish(jobs.store, job, record, jobs.clock(), zone)
    after = jobs.load().jobs
    current = next((j for j in after if j.id == job.id), None)
    if args.json:
        print(json.dumps({**json.loads(record.to_json()),
                          "next_run_at": jobs.describe(current)["next_run_at"] if current else None},
                         ensure_ascii=False, indent=2))
        return 0 if record.status == "ok" else 1
    print(f"{job.label}: manual run at {local_time_text(handle.started_at, zone)}", file=sys.stderr)
    if record.status == "ok":
        runtime_reply = record.reply or ""
        print(runtime_reply)
        if job.delivery.mode == "announce":
            print(f"(not delivered to {job.delivery.describe()}: manual runs from the CLI print the reply; "
                  "the gateway delivers scheduled runs)", file=sys.stderr)
    else:
        print(f"error: {record.status}: {record.error}", file=sys.stderr)
    if current is None:
        print("the job is done and was deleted", file=sys.stderr)
    elif current.enabled and current.state.next_run_at is not None:
        print(f"next run: {local_time_text(current.state.next_run_at, zone)}", file=sys.stderr)
    return 0 if record.status == "ok" else 1


@check("cron jobs", needs=("config",))
def cron_jobs_check(ctx: CliContext) -> Check:
    from hermit.scheduler.health import jobs_health

    status, detail, fix = jobs_health(ctx.home, ctx.config())
    return Check("cron jobs", status, detail, fix)


@check("heartbeat", needs=("config",))
def heartbeat_check(ctx: CliContext) -> Check:
    from hermit.scheduler.health import heartbeat_health

    status, detail, fix = heartbeat_health(ctx.config())
    return Check("heartbeat", status, detail, fix)


@check("delivery targets", needs=("config",))
def delivery_targets_check(ctx: CliContext) -> Check:
    from hermit.cli.running_gateway import start_or_restart
    from hermit.scheduler.health import targets_health

    status, detail, fix = targets_health(ctx.home, ctx.config())
    if status != "ok":  # a channel with no account: its fix ends with the gateway's restart, in words for how it runs
        status, detail, fix = targets_health(ctx.home, ctx.config(), start_or_restart(ctx))
    return Check("delivery targets", status, detail, fix)


@check("job targets let in", needs=("config",))
def let_in_check(ctx: CliContext) -> Check:
    from hermit.scheduler.health import let_in_health

    status, detail, fix = let_in_health(ctx.home, ctx.config())
    return Check("job targets let in", status, detail, fix)


DOCTOR_CHECKS = (cron_jobs_check, heartbeat_check, delivery_targets_check, let_in_check)
