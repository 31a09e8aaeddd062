"""`hermit setup`'s check of a bot token before saving it, as the model gets one tiny request.

A Telegram token pasted wrong (a character short, a space inside, another bot's) was stored without a word;
`hermit doctor` said the channel was fine, and the gateway's log said only "getMe failed: 401 Unauthorized".
Now setup asks Telegram's getMe with the token (the same call the gateway starts with), through the channel's
own HTTP client — a Bot API server on this machine that another login user runs gets nothing — and says which
bot the token is, or what Telegram answered and how to fix it, before anything is written. Secrets with a space
or a line break inside are refused first: no key or token has one, a paste that caught more of a line does.
Slack's bot token is checked the same way with auth.test (naming the bot and the workspace), WhatsApp's access
token by reading its phone number from the Graph API (naming the number): each through the client of its channel.
Discord's bot token by reading the bot's own user (GET /users/@me, `Authorization: Bot <token>`, naming the bot),
through the same guarded client; discord.py talks to discord.com only, so `--api-base` points this check (and
nothing else: it is not saved) at another server, e.g. a fake one in tests.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermit.errors import ConfigError, HermitError

if TYPE_CHECKING:
    import httpx

TIMEOUT_SECONDS = 10.0
BOTFATHER = "copy it again from @BotFather in Telegram (/mybots → your bot → API Token)"


NETWORK = "check the network (or the proxy); pass --no-check to save the token unchecked"
CHECKED = ("telegram", "slack", "whatsapp", "discord")  # the channels whose token setup checks
DISCORD_API = "https://discord.com/api/v10"  # what discord.py talks to; --api-base only redirects the check


@dataclass(frozen=True)
class TokenCheck:
    """What to check: an account's token at its API base (Telegram's Bot API, Slack's Web API, the Graph API)."""

    account: str
    api_base: str
    token: str
    channel: str = "telegram"
    phone_number_id: str = ""  # WhatsApp: the number the access token must reach

    @property
    def title(self) -> str:
        return {"slack": "Slack", "whatsapp": "the Graph API", "discord": "Discord"}.get(self.channel, "Telegram")


def confirm_token(check: TokenCheck, yes: Callable[[str], bool]) -> bool:
    """Check the token given to setup: True to save (it is a bot's or a number's, or the user saves it anyway)."""
    how = {"telegram": "getMe", "slack": "auth.test", "discord": "users/@me"}.get(check.channel, "its phone number")
    print(f"checking the {check.channel} token with {how}…", flush=True)
    try:
        print(f"ok: {check_token(check)}")
        return True
    except HermitError as e:
        print(f"error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
    return yes("Save this token anyway?")


def check_token(check: TokenCheck) -> str:
    """What the token is ("it is the token of the bot @name (id 123)"); a HermitError saying what the platform
    answered, else (nothing is saved then)."""
    import asyncio  # here, as below: every error a command reports imports cli/setup.py (its hints), and so this

    if check.channel == "slack":
        return asyncio.run(_slack_auth_test(check))
    if check.channel == "whatsapp":
        return asyncio.run(_whatsapp_number(check))
    if check.channel == "discord":
        return asyncio.run(_discord_me(check))
    return f"it is the token of the bot {check_telegram(check)}"


async def _ask(check: TokenCheck, title: str, what: str, method: str, url: str,
               headers: Mapping[str, str]) -> httpx.Response:
    """One request through the channel's own client (no other user's port gets the token), errors said plainly."""
    import httpx

    from hermit.channels import local_api

    # Discord has no base setting (discord.py talks to discord.com): only --api-base points the check elsewhere.
    setting = "--api-base" if check.channel == "discord" else f"channels.{check.channel}.accounts.{check.account}.base_url"
    async with local_api.client(local_api.refusal(title, setting, what), timeout=TIMEOUT_SECONDS) as client:
        try:
            return await client.request(method, url, headers=dict(headers))
        except httpx.TimeoutException:
            raise HermitError(f"{title} did not answer within {TIMEOUT_SECONDS:g}s at {check.api_base}",
                              NETWORK) from None
        except httpx.HTTPError as e:
            raise HermitError(f"cannot reach {title} at {check.api_base} ({type(e).__name__})", NETWORK) from None


def _json(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


async def _slack_auth_test(check: TokenCheck) -> str:
    resp = await _ask(check, "Slack", "the Slack API server you set as base_url", "POST",
                      f"{check.api_base.rstrip('/')}/auth.test", {"Authorization": f"Bearer {check.token}"})
    data = _json(resp)
    if data.get("ok") and data.get("user_id"):
        team = f" in the workspace {data['team']}" if data.get("team") else f" in the workspace {data.get('team_id')}"
        return f"it is the token of the bot @{data.get('user') or data['user_id']} ({data['user_id']}){team}"
    error = str(data.get("error") or f"HTTP {resp.status_code}")
    if error in ("invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired") \
            or resp.status_code == 401:
        raise HermitError(f"Slack does not know this bot token ({error})",
                          "copy the Bot User OAuth Token (xoxb-…) again from api.slack.com/apps → your app → OAuth "
                          "& Permissions (reinstall the app if it was revoked); it has no spaces")
    raise HermitError(f"Slack's auth.test answered {error}, not a bot",
                      f"check channels.slack.accounts.{check.account}.base_url ({check.api_base}); pass --no-check "
                      "to save the token unchecked")


async def _discord_me(check: TokenCheck) -> str:
    resp = await _ask(check, "Discord", "the Discord API server you gave with --api-base", "GET",
                      f"{check.api_base.rstrip('/')}/users/@me", {"Authorization": f"Bot {check.token}"})
    data = _json(resp)
    if resp.status_code == 200 and data.get("id"):
        name = f"@{data['username']}" if data.get("username") else "a bot"
        return f"it is the token of the bot {name} (id {data['id']})"
    said = f"{resp.status_code} {data.get('message', '')}".rstrip()
    if resp.status_code == 401:
        raise HermitError(f"Discord does not know this bot token ({said})",
                          "copy it again from discord.com/developers/applications → your app → Bot → Reset Token "
                          "(a token is shown once; resetting it ends the old one); it has no spaces. Pass --no-check "
                          "to save it unchecked")
    raise HermitError(f"Discord's users/@me answered {said}, not a bot",
                      f"check --api-base ({check.api_base}), or leave it out for discord.com; pass --no-check to save "
                      "the token unchecked")


async def _whatsapp_number(check: TokenCheck) -> str:
    where = f"channels.whatsapp.accounts.{check.account}"
    resp = await _ask(check, "WhatsApp", "the Graph API server you set as base_url", "GET",
                      f"{check.api_base.rstrip('/')}/{check.phone_number_id}",
                      {"Authorization": f"Bearer {check.token}"})
    data = _json(resp)
    if resp.status_code == 200 and data.get("id"):
        number = data.get("display_phone_number") or data["id"]
        name = f" ({data['verified_name']})" if data.get("verified_name") else ""
        return f"it is an access token for the number {number}{name}, phone number id {data['id']}"
    error: dict[str, Any] = data["error"] if isinstance(data.get("error"), dict) else {}
    said = f"{resp.status_code} {error.get('message', '')}".rstrip()
    if resp.status_code == 401 or error.get("code") == 190:
        raise HermitError(f"the Graph API does not accept this access token ({said})",
                          "copy it again from developers.facebook.com → your app → WhatsApp → API Setup (a "
                          "temporary token lasts 24 hours: a system user's token does not expire); it has no spaces")
    raise HermitError(f"the Graph API found no phone number {check.phone_number_id} for this token ({said})",
                      f"check the phone number id (--phone-number-id; {where}.phone_number_id) and that the token "
                      "belongs to the app of that number; pass --no-check to save unchecked")



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
    import asyncio

    return asyncio.run(_get_me(check))


async def _get_me(check: TokenCheck) -> str:
    import httpx

    from hermit.channels import local_api

    setting = f"channels.telegram.accounts.{check.account}.api_base"
    client = local_api.client(local_api.refusal("Telegram", setting, "your Bot API server"), timeout=TIMEOUT_SECONDS)
    async with client:
        try:
            resp = await client.post(f"{check.api_base.rstrip('/')}/bot{check.token}/getMe")
        except httpx.TimeoutException:
            raise HermitError(f"Telegram did not answer within {TIMEOUT_SECONDS:g}s at {check.api_base}",
                              NETWORK) from None
        except httpx.HTTPError as e:
            raise HermitError(f"cannot reach Telegram at {check.api_base} ({type(e).__name__})", NETWORK) from None
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
