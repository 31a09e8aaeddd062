"""`hermit pairing list|approve|deny|revoke|unpin`: who waits to talk to the assistant, letting them in as contacts,
and sending them away again; `list` also shows which id each listed @username is pinned to
(channels/username_pins.py), and `unpin` lets the next sender presenting that name be pinned instead.

Pairing codes are issued by the gateway to unknown DM senders (dm_policy: pairing). Approving one makes the
sender a *contact*: they talk to the assistant in a sandboxed session of their own, never the owner's main
session; `approve` says so, and how to make someone an owner instead (their id under `owners`). All of
this works while the gateway runs: both sides lock the pairing files.

Names, usernames and ids come from strangers: every one is printed through channels.pairing.printable
(hidden characters escaped, length capped), so a name cannot move the cursor or fake a row.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from hermit.cli.context import CliContext
from hermit.errors import HermitError

if TYPE_CHECKING:  # the commands load these themselves, so `hermit --help` stays quick
    from hermit.channels.pairing import ApprovedSender, PairingRequest
    from hermit.channels.username_pins import Pin
    from hermit.config.load import LoadedConfig


def configure(s: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit pairing` (its name and help are in the table of cli/commands.py)."""
    ss = s.add_subparsers(dest="pairing_command", metavar="SUBCOMMAND", required=True)
    p = ss.add_parser("list", help="pending pairing requests and approved senders, per channel account")
    p.add_argument("channel", nargs="?", help="only this channel (a platform under channels: in the config, e.g. telegram)")
    p.add_argument("--json", action="store_true", help="print {pending: [...], approved: [...], pinned: [...]} as JSON")
    p.set_defaults(func=cmd_list)
    p = ss.add_parser("approve", help="let the sender of a pairing code talk to the assistant, as a contact")
    p.add_argument("channel", help="the channel the code was sent on")
    p.add_argument("code", help="the 8-character code the sender received")
    p.set_defaults(func=cmd_approve)
    p = ss.add_parser("deny", help="drop a pending pairing request (the sender gets no new code for an hour)")
    p.add_argument("channel", help="the channel the code was sent on")
    p.add_argument("code", help="the 8-character code the sender received")
    p.set_defaults(func=cmd_deny)
    p = ss.add_parser("revoke", help="remove an approved sender: their next DM is treated as a stranger's")
    p.add_argument("channel", help="the channel (a platform under channels: in the config, e.g. telegram)")
    p.add_argument("sender", help="the sender id as `pairing list` shows it (or @username)")
    p.add_argument("--account", help="only this channel account (default: every account of the channel)")
    p.set_defaults(func=cmd_revoke)
    p = ss.add_parser("unpin", help="forget the id an @username of owners/allow_from was pinned to (the next "
                                    "sender presenting it is pinned instead)")
    p.add_argument("channel", help="the channel (telegram, discord)")
    p.add_argument("username", help="the @username as `pairing list` shows it")
    p.set_defaults(func=cmd_unpin)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    from hermit.channels.pairing import printable

    rows = [tuple(printable(cell, 200) for cell in row) for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.pairing import PairingStore, printable
    from hermit.channels.username_pins import UsernamePins

    store = PairingStore(ctx.home)
    requests = sorted(store.pending(args.channel), key=lambda r: (r.channel, r.account_id, r.created_at))
    approved = sorted(store.approved(args.channel), key=lambda a: (a.channel, a.account_id))
    pins = [p for p in UsernamePins(store).all() if args.channel is None or p.channel == args.channel.lower()]
    now = time.time()
    if args.json:
        print(json.dumps({
            "pinned": [{"channel": p.channel, "username": p.username, "sender_id": p.sender_id,
                        "account_id": p.account_id, "pinned_at": p.pinned_at} for p in pins],
            "pending": [{"channel": r.channel, "account_id": r.account_id, "sender_id": r.sender_id,
                         "sender_name": r.sender_name, "sender_username": r.sender_username, "code": r.code,
                         "created_at": r.created_at, "expires_at": r.expires_at} for r in requests],
            "approved": [{"channel": a.channel, "account_id": a.account_id, "sender_id": a.sender_id,
                          "sender_name": a.sender_name, "sender_username": a.sender_username,
                          "approved_at": a.approved_at} for a in approved],
        }, ensure_ascii=False, indent=2))
        return 0
    where = f" on {args.channel}" if args.channel else ""
    if requests:
        print("Pending pairing requests (codes expire after 1 hour):")
        _table(("CHANNEL", "ACCOUNT", "SENDER", "CODE", "EXPIRES IN"),
               [(r.channel, r.account_id, _label(r) + _not_the_pinned(pins, r), r.code,
                 f"{max(0, int((r.expires_at - now) // 60))} min") for r in requests])
        print(f"approve one with: hermit pairing approve {requests[0].channel} {requests[0].code}   "
              f"(or deny it: hermit pairing deny {requests[0].channel} {requests[0].code})")
    else:
        print(f"no pending pairing requests{where}")
    print()
    if approved:
        print("Approved senders (contacts: each talks to the assistant in a sandboxed session of their own):")
        _table(("CHANNEL", "ACCOUNT", "SENDER", "APPROVED"),
               [(a.channel, a.account_id, a.label(), _when(a.approved_at)) for a in approved])
        print(f"revoke one with: hermit pairing revoke {approved[0].channel} {printable(approved[0].sender_id, 128)} "
              f"--account {approved[0].account_id}")
    else:
        print(f"no approved senders{where}")
    if pins:
        print()
        print("Usernames pinned to the first sender seen with them (another id presenting one is a stranger):")
        _table(("CHANNEL", "USERNAME", "PINNED TO", "SINCE"),
               [(p.channel, p.username, p.sender_id, _when(p.pinned_at)) for p in pins])
        print("write the pinned id into the config instead of the @username: names can change hands")
    print("Owners (the main session) are named in the config: channels.<channel>.accounts.<account>.owners")
    return 0


def _not_the_pinned(pins: list[Pin], r: PairingRequest) -> str:
    """A note on a request whose sender presents a username pinned to someone else: not the person the config
    names by it (a freed name taken by another account), whatever the label says."""
    from hermit.channels.username_pins import handle

    name = handle(r.sender_username)
    other = next((p for p in pins if p.channel == r.channel and p.username == name and p.sender_id != r.sender_id),
                 None)
    return f" [NOT the {name} pinned to {other.sender_id}]" if other else ""


def _label(r: PairingRequest) -> str:
    from hermit.channels.pairing import sender_label

    return sender_label(r.sender_id, r.sender_name, r.sender_username)


def _config(ctx: CliContext) -> LoadedConfig | None:
    """The config, or None when it does not load: the pairing files changed anyway, and the explanation
    then promises nothing about where the contact's messages go."""
    try:
        return ctx.config()
    except HermitError as e:
        print(f"(could not read the config to say more: {e.message})")
        return None


def cmd_approve(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.contact_terms import contact_terms
    from hermit.channels.pairing import PairingStore

    req = PairingStore(ctx.home).approve(args.channel, args.code)
    print(f"approved {_label(req)} on {req.channel}/{req.account_id} as a contact (not an owner): their next "
          "message reaches the assistant.")
    # The same terms the web app's pairing.approve answers (channels/contact_terms.py).
    for line in contact_terms(_config(ctx), req.channel, req.account_id, req.sender_id).lines():
        print(line)
    return 0


def cmd_deny(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.pairing import PairingStore

    req = PairingStore(ctx.home).deny(args.channel, args.code)
    print(f"denied {_label(req)} on {req.channel}/{req.account_id}: no reply, and no new code before "
          f"{_when(req.expires_at)}")
    return 0


def _after_revoke(loaded: LoadedConfig | None, gone: ApprovedSender) -> str:
    from hermit.config.allowlist import matches

    acc = None if loaded is None else loaded.config.channels.accounts_of(gone.channel).get(gone.account_id)
    if acc is None:
        return "their next message is treated as a stranger's"
    where = f"channels.{gone.channel}.accounts.{gone.account_id}"
    # A running gateway re-reads the config before each message, so the edit needs no restart.
    live = "a running gateway applies the edit at their next message, even one already waiting"
    if matches(gone.channel, acc.owners, gone.sender_id, gone.sender_username):
        also = (f" (and from {where}.allow_from, or they stay a contact)"
                if matches(gone.channel, acc.allow_from, gone.sender_id, gone.sender_username) else "")
        return (f"but they are listed under {where}.owners in the config, so they still reach the assistant as an "
                f"owner: remove them there{also}; {live}")
    if matches(gone.channel, acc.allow_from, gone.sender_id, gone.sender_username):
        return (f"but they are listed under {where}.allow_from in the config, so they still reach the assistant "
                f"as a contact: remove them there; {live}")
    return {"pairing": "their next message gets a new pairing code, and nothing reaches the assistant",
            "allowlist": "their next message is ignored",
            "open": f"but {where} has dm_policy: open, so they still reach the assistant as a contact",
            "disabled": "DMs are disabled on that account anyway"}[acc.dm_policy]


def cmd_revoke(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.pairing import PairingStore
    from hermit.scheduler.held import held_note

    removed = PairingStore(ctx.home).revoke(args.channel, args.sender, args.account)
    loaded = _config(ctx)
    for gone in removed:
        print(f"revoked {gone.label()} on {gone.channel}/{gone.account_id}: {_after_revoke(loaded, gone)}")
        if note := held_note(_jobs_held(ctx, loaded, gone)):
            print(note)
    return 0


def _jobs_held(ctx: CliContext, loaded: LoadedConfig | None, gone: ApprovedSender) -> list[str]:
    """The enabled jobs aimed at the sender just revoked, now skipped (scheduler/held.py, as the web app's Revoke
    says them); none when the config cannot be read."""
    from hermit.scheduler.control import CronJobs
    from hermit.scheduler.held import jobs_held

    if loaded is None:
        return []
    try:
        cron = CronJobs(ctx.home, loaded)
    except HermitError:
        return []
    return jobs_held(cron, loaded, gone)


def cmd_unpin(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.pairing import PairingStore, printable
    from hermit.channels.username_pins import UsernamePins
    from hermit.errors import AccessDenied

    gone = UsernamePins(PairingStore(ctx.home)).forget(args.channel, args.username)
    if gone is None:
        raise AccessDenied(f"{printable(args.username, 64)} is not pinned on {args.channel.lower()}",
                           f"see `hermit pairing list {args.channel.lower()}`")
    print(f"unpinned {gone.username} on {gone.channel} (it was {gone.sender_id}): the next sender presenting that "
          "username is pinned to it, and if it is listed under owners, becomes the owner; listing the id instead "
          "needs no pin")
    return 0
