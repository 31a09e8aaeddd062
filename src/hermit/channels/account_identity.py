"""Which bot a chat account is: a fingerprint of its identity, recorded beside the approvals it gave.

The pairing files are named by account id only (`credentials/allow-<channel>-<account>.json`, the pending codes in
`pairing.json`). An account whose bot changed under the same id — removed and added again while no gateway ran
(edit, edit, start), or `hermit setup` storing another bot's token under the same account — took over every sender
approved for the old bot and every code still pending for it: the new bot (maybe a different person's) let the old
bot's contacts in. channels/pairing.py `retire_absent` covers only an account a gateway saw removed.

So each account's identity is recorded in `credentials/accounts.json` (0600, under the credentials lock), as a
hash — never the secret itself — of what names the bot on its platform:

    telegram   the bot id, the token's part before ':' (a token revoked and reissued for one bot keeps it)
    discord    the bot user id, the token's first part (base64 of the id)
    slack      the team and bot user numbers of an xoxb- token (xoxb-<team>-<bot>-…)
    whatsapp   phone_number_id (the number the contacts wrote to)

and anything else a hash of the whole token. The gateway compares the identity it runs with against the record
whenever it builds access from a config (at start and at each live reload): a different one retires the account's
approved senders (moved to `credentials/retired/`, as `retire_absent` does) and drops its pending codes, then
records the new identity. A code approved by `hermit pairing approve` while no gateway ran lands in the file
recorded for the old bot, and is retired at the next start. An account whose secrets cannot be resolved (its
variable unset) is left as it is: that gateway cannot run it either. An account the record has no line for adopts
the identity it first runs with. The record itself fails closed (s23 t5, `trusted`, asked at every start and reload
through gateway/records_check.py): damaged (bad JSON, a link, another user's), or missing on a state dir a gateway
has run on while an account has approvals or pending codes, it refuses the start until `hermit channels
accept-routes` records the bots the config names (`rerecord`), after the owner's review.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path

from hermit.channels.credentials import resolve
from hermit.channels.pairing import PairingStore
from hermit.config import records
from hermit.config.channels import ChannelAccessConfig, platforms
from hermit.config.load import LoadedConfig
from hermit.durable import write_atomic
from hermit.errors import ConfigError, HermitError

log = logging.getLogger("hermit.gateway")

RECORD = "accounts.json"
_VERSION = 1


def identity(platform: str, account_id: str, cfg: ChannelAccessConfig, environ: Mapping[str, str]) -> str | None:
    """The fingerprint of the bot `cfg` is (a hash, safe to store), or None when it cannot be told (no secret)."""
    if platform == "whatsapp":
        number = str(getattr(cfg, "phone_number_id", "")).strip()
        return _hash(platform, "number", number) if number else None
    field = "bot_token" if platform == "slack" else "token"
    if not hasattr(cfg, field):
        return None
    try:
        token = resolve(getattr(cfg, field), getattr(cfg, f"{field}_env", ""), environ,
                        where=f"channels.{platform}.accounts.{account_id}", field=field)
    except ConfigError:
        return None
    return _hash(platform, *_names(platform, token.strip()))


def _names(platform: str, token: str) -> tuple[str, str]:
    """(kind, what names the bot) read from its token; the whole token when its form is not the known one."""
    if platform == "telegram":
        bot, sep, _ = token.partition(":")
        if sep and bot.isdigit():
            return "bot", bot
    elif platform == "discord":
        first = token.split(".", 1)[0]
        try:
            bot = base64.b64decode(first + "=" * (-len(first) % 4), altchars=b"-_", validate=True).decode("ascii")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            bot = ""
        if bot.isdigit():
            return "bot", bot
    elif platform == "slack":
        parts = token.split("-")
        if len(parts) >= 4 and parts[0] == "xoxb" and parts[1].isdigit() and parts[2].isdigit():
            return "bot", f"{parts[1]}-{parts[2]}"
    return "token", token


def _hash(platform: str, kind: str, value: str) -> str:
    return f"{kind}:" + hashlib.sha256(f"{platform}\0{kind}\0{value}".encode()).hexdigest()[:32]


def current(loaded: LoadedConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """`channel/account` → identity of every account of the config whose identity can be told (off ones too)."""
    out: dict[str, str] = {}
    for platform in platforms():
        for account_id, cfg in loaded.config.channels.accounts_of(platform).items():
            found = identity(platform, account_id, cfg, environ)
            if found is not None:
                out[f"{platform}/{account_id}"] = found
    return out


def retire_changed(store: PairingStore, loaded: LoadedConfig, environ: Mapping[str, str]) -> list[str]:
    """Retire the approvals and pending codes of every account whose bot is not the one recorded for it, and record
    what each account is now. Returns one line per account retired, for the log."""
    now = current(loaded, environ)
    if not now and not any(loaded.config.channels.accounts_of(p) for p in platforms()):
        return []  # no account: nothing to record (an account whose bot cannot be told yet records an empty record)
    said: list[str] = []
    with store.locked():
        path = store.dir / RECORD
        recorded = _read(path)
        changed = {tuple(key.split("/", 1)) for key, found in now.items()
                   if key in recorded and recorded[key] != found}
        if changed:
            said = store.retire_held({(ch, acct) for ch, acct in changed},
                                     why="its bot is not the one it approved them for")
            said += [f"{ch}/{acct}: its bot changed (nobody had been approved for the earlier one)"
                     for ch, acct in sorted(changed) if not any(s.startswith(f"{ch}/{acct}:") for s in said)]
        if any(recorded.get(k) != v for k, v in now.items()) or not path.exists():
            write_atomic(path, json.dumps({"version": _VERSION, "accounts": {**recorded, **now}}, indent=2) + "\n",
                         mode=0o600, keep_mode=False)
    return said


_WHAT = "the record of which bot each channel account is (for the senders it approved)"


def _read(path: Path) -> dict[str, str]:
    """The record; {} when there is none; UntrustedRecord when it is there but cannot be trusted (config/records.py):
    read as "no record", every account would adopt whatever bot it now runs with, and keep the approvals its
    earlier bot gave."""
    raw = records.read(path, _WHAT)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise records.untrusted(path, _WHAT, "is not valid JSON (damaged)") from None
    accounts = data.get("accounts") if isinstance(data, dict) else None
    if not isinstance(accounts, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in accounts.items()):
        raise records.untrusted(path, _WHAT, "is not the record Hermit writes (damaged)")
    return dict(accounts)


def record_path(home: Path) -> Path:
    return home / "credentials" / RECORD


def trusted(home: Path, loaded: LoadedConfig, ran_before: bool) -> None:
    """UntrustedRecord when the record is there and cannot be trusted, or is missing on a state dir a gateway has
    run on (`ran_before`) while a configured account has approved senders or pending codes: which bot gave them
    cannot be told, and adopting the one configured now would hand them to it (the record removed, then another
    bot put under the account)."""
    path = record_path(home)
    if _read(path) or path.exists() or not ran_before:
        return
    held = [f"{p}/{a}" for p in platforms() for a in loaded.config.channels.accounts_of(p)
            if _has_approvals(home / "credentials", p, a)]
    if held:
        raise records.untrusted(path, _WHAT, f"is missing, though a gateway has run here and {', '.join(held)} "
                                "approved senders or has pending codes: which bot they were approved for cannot be "
                                "told")


def _has_approvals(folder: Path, platform: str, account_id: str) -> bool:
    from urllib.parse import quote

    if (folder / f"allow-{quote(platform.lower(), safe='')}-{quote(account_id, safe='')}.json").exists():
        return True
    try:
        pending = json.loads((folder / "pairing.json").read_text(encoding="utf-8")).get("requests") or []
    except (OSError, ValueError, AttributeError):
        return (folder / "pairing.json").exists()  # unreadable: counted, not guessed
    return any(isinstance(r, dict) and r.get("channel") == platform and r.get("account_id", "default") == account_id
               for r in pending)


def rerecord(store: PairingStore, loaded: LoadedConfig, environ: Mapping[str, str]) -> None:
    """Record the bots the config names now as the accounts' own, over whatever is there (`hermit channels
    accept-routes`, after the owner reviewed a record that was missing or damaged): their approvals are kept."""
    with store.locked():
        write_atomic(store.dir / RECORD, json.dumps({"version": _VERSION, "accounts": current(loaded, environ)},
                                                    indent=2) + "\n", mode=0o600, keep_mode=False)


def retire_and_log(store: PairingStore, loaded: LoadedConfig, environ: Mapping[str, str]) -> None:
    """The gateway's call (gateway/live_config.py LiveAccess): errors are logged, never raised."""
    try:
        for line in retire_changed(store, loaded, environ):
            log.warning("channel account's bot changed: %s", line)
    except (HermitError, OSError) as e:
        log.error("could not compare the channel accounts' bots with the ones recorded: %s", e)
