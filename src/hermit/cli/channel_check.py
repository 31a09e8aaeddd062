"""`hermit setup`'s check of a bot token before saving it, as the model gets one tiny request.

A Telegram token pasted wrong (a character short, a space inside, another bot's) was stored without a word;
`hermit doctor` said the channel was fine, and the gateway's log said only "getMe failed: 401 Unauthorized".
Now setup asks Telegram's getMe with the token (the same call the gateway starts with), through the channel's
own HTTP client — a Bot API server on this machine that another login user runs gets nothing — and says which
bot the token is, or what Telegram answered and how to fix it, before anything is written. Secrets with a space
or a line break inside are refused first: no key or token has one, a paste that caught more of a line does.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from hermit.errors import ConfigError, HermitError

TIMEOUT_SECONDS = 10.0
BOTFATHER = "copy it again from @BotFather in Telegram (/mybots → your bot → API Token)"


@dataclass(frozen=True)
class TokenCheck:
    """What to check: a Telegram account's token at its Bot API base."""

    account: str
    api_base: str
    token: str


def refuse_inner_whitespace(value: str, what: str, flag: str) -> str:
    """`value` without the spaces around it; one with a space or line break inside is refused (never shown)."""
    value = value.strip()
    if re.search(r"\s", value):
        raise ConfigError(f"the {what} has a space or a line break inside it ({len(value)} characters), which no "
                          "key or token has: part of the line around it was pasted too",
                          f"paste it again as one piece, e.g. printf '%s\\n' \"$TOKEN\" | hermit setup … {flag}")
    return value


def check_telegram(check: TokenCheck) -> str:
    """The bot the token belongs to ("@name (id 123)"); a HermitError saying what Telegram answered, else."""
    return asyncio.run(_get_me(check))


async def _get_me(check: TokenCheck) -> str:
    import httpx

    from hermit.channels import local_api

    setting = f"channels.telegram.accounts.{check.account}.api_base"
    client = local_api.client(local_api.refusal("Telegram", setting, "your Bot API server"),
                              timeout=TIMEOUT_SECONDS)
    async with client:
        try:
            resp = await client.post(f"{check.api_base.rstrip('/')}/bot{check.token}/getMe")
        except httpx.TimeoutException:
            raise HermitError(f"Telegram did not answer within {TIMEOUT_SECONDS:g}s at {check.api_base}",
                              "check the network (or the proxy); pass --no-check to save the token unchecked") from None
        except httpx.HTTPError as e:
            raise HermitError(f"cannot reach Telegram at {check.api_base} ({type(e).__name__})",
                              "check the network (or the proxy); pass --no-check to save the token unchecked") from None
    try:
        data = resp.json()
    except ValueError:
        data = {}
    if resp.status_code in (401, 404) or (isinstance(data, dict) and data.get("error_code") in (401, 404)):
        raise HermitError(f"Telegram does not know this bot token ({resp.status_code} "
                          f"{data.get('description', 'Unauthorized') if isinstance(data, dict) else ''})".rstrip(),
                          f"{BOTFATHER}; it looks like 123456789:AA… with no spaces")
    if not isinstance(data, dict) or not data.get("ok") or not isinstance(data.get("result"), dict):
        raise HermitError(f"Telegram's getMe answered {resp.status_code}, not a bot",
                          f"check {setting} ({check.api_base}); pass --no-check to save the token unchecked")
    me = data["result"]
    name = f"@{me['username']}" if me.get("username") else str(me.get("first_name", "a bot"))
    return f"{name} (id {me.get('id')})"
