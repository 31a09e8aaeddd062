"""`hermit devices list|revoke`: the browsers signed in to the web app for good (gateway/devices.py), and signing one
out.

A browser that signed in with a one-time link or QR code (`hermit dashboard`, the web app's "Sign in a phone") is
recorded as a device: its public key, the name it gave, the address it signed in at, when it was added and last seen.
`revoke` removes one (by the id `list` shows, or the start of it; `--all` for every one): a running gateway closes
its open pages within a second, and it cannot sign in again without a new link. A device unused for 30 days is signed
out by itself. This works while the gateway runs: both lock the file. While devices are off (gateway/device_policy.py:
`gateway.remember_devices: false`, or `auto` on a gateway whose port no socket unit holds) no browser is kept signed
in: `list` says so, and why.

Names come from the browsers: printed through channels.pairing.printable (hidden characters escaped, length capped).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from hermit.cli.context import CliContext

DEVICES_OFF = "off — set gateway.remember_devices: true to keep browsers signed in"


def configure(s: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit devices` (its name and help are in the table of cli/commands.py)."""
    ss = s.add_subparsers(dest="devices_command", metavar="SUBCOMMAND", required=True)
    p = ss.add_parser("list", help="the browsers signed in to the web app: name, id, address, added, last seen")
    p.add_argument("--json", action="store_true", help="print [{id, name, origin, added, lastSeen, expires}] as JSON")
    p.set_defaults(func=cmd_list)
    p = ss.add_parser("revoke", help="sign a device out: its open pages close, and it needs a new sign-in link")
    p.add_argument("id", nargs="?", help="the device's id as `hermit devices list` shows it (its first 6+ characters)")
    p.add_argument("--all", action="store_true", help="sign every device out")
    p.set_defaults(func=cmd_revoke)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def cmd_list(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.pairing import printable
    from hermit.gateway.device_policy import shown
    from hermit.gateway.devices import IDLE_SECONDS, Devices
    from hermit.gateway.state import read_lock_info

    setting = ctx.config().config.gateway.remember_devices
    info = read_lock_info(ctx.home)
    policy = shown(setting, info)
    note = DEVICES_OFF if setting is False else policy.why + (
        f" — to keep browsers signed in: {policy.hint}" if policy.hint else "")
    if not policy.on and (setting is False or info):  # off (a running gateway's word, or the setting's)
        if args.json:
            print("[]")
        print(note if setting is False else f"off — {note.removeprefix('off ')}",
              file=sys.stderr if args.json else sys.stdout)
        return 0
    if not policy.on:  # auto, no gateway running: the records, and what decides whether they are used
        print(note, file=sys.stderr)
    devices = Devices(ctx.home, token=_token(ctx)).all()  # none of another token's (a new token signed them out)
    if args.json:
        print(json.dumps([d.public() for d in devices], ensure_ascii=False, indent=2))
        return 0
    if not devices:
        print("no devices signed in (a browser that signs in with a `hermit dashboard` link or a QR code of the web "
              "app's Operations → Sign in a phone is listed here)")
        return 0
    rows = [("ID", "NAME", "ADDRESS", "ADDED", "LAST SEEN")] + [
        (d.id[:12], printable(d.name, 40), printable(d.origin, 40), _when(d.added), _when(d.last_seen))
        for d in devices]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(f"a device unused for {IDLE_SECONDS // 86400} days is signed out by itself; sign one out now with: "
          f"hermit devices revoke {devices[0].id[:12]}")
    return 0


def _token(ctx: CliContext) -> str | None:
    """The gateway token, when there is one to read (devices recorded under another are signed out)."""
    from hermit.errors import HermitError
    from hermit.gateway.state import check_token_file, token_path

    try:
        return check_token_file(token_path(ctx.home))
    except (HermitError, OSError):
        return None


def cmd_revoke(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.channels.pairing import printable
    from hermit.errors import HermitError
    from hermit.gateway.devices import Devices

    store = Devices(ctx.home)
    if args.all == bool(args.id):
        raise HermitError("name one device to sign out, or --all", "see the ids with `hermit devices list`")
    gone = store.revoke_all() if args.all else [store.revoke(args.id)]
    for d in gone:
        print(f"signed out {printable(d.name, 40)} ({d.id[:12]}, {printable(d.origin, 40)}): its open pages close "
              "now; it signs in again only with a new link or QR code")
    if not gone:
        print("no devices were signed in")
    return 0
