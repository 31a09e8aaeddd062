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
variable unset) is left as it is: that gateway cannot run it either. An account with approvals and no record yet
(files older than this record) adopts the identity it first runs with.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from hermit.channels.credentials import resolve
from hermit.channels.pairing import PairingStore
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
    if not now:
        return []
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
        if any(recorded.get(k) != v for k, v in now.items()):
            write_atomic(path, json.dumps({"version": _VERSION, "accounts": {**recorded, **now}}, indent=2) + "\n",
                         mode=0o600, keep_mode=False)
    return said


def _read(path: Any) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise HermitError(f"cannot read {path}: {e}", "remove the file: each account then records the bot it "
                          "runs with (approvals are kept)") from e
    accounts = data.get("accounts") if isinstance(data, dict) else None
    return {k: v for k, v in accounts.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(accounts, dict) else {}


def retire_and_log(store: PairingStore, loaded: LoadedConfig, environ: Mapping[str, str]) -> None:
    """The gateway's call (gateway/live_config.py LiveAccess): errors are logged, never raised."""
    try:
        for line in retire_changed(store, loaded, environ):
            log.warning("channel account's bot changed: %s", line)
    except (HermitError, OSError) as e:
        log.error("could not compare the channel accounts' bots with the ones recorded: %s", e)
