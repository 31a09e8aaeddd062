"""One driver per platform for end-to-end tests: it runs that platform's fake(s), says what a user says
(a DM, a group message with or without a mention) and reads back what the bot sent to a conversation.

Each account gets its own fake bot (own token / app / number) so one gateway can hold accounts with
different access policies side by side.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from fakes.fake_discord import BOT_ID, FakeDiscord
from fakes.fake_platform import FakePlatform
from fakes.fake_slack import BOT_USER, FakeSlack
from fakes.fake_telegram import FakeTelegram
from fakes.fake_whatsapp import FakeWhatsApp, sign, text_message, webhook_body


class Driver:
    name = ""
    groups = True  # WhatsApp's Cloud API has no group chats
    limit = (4000, None)  # (max chars, max lines) per delivered message

    def __init__(self, accounts: list[str]) -> None:
        self.accounts = accounts
        self.env: dict[str, str] = {}
        self.gateway_url = ""  # set once the gateway listens (webhook platforms post there)
        self.servers: list[FakePlatform] = []  # one fake bot per account, or one fake for all

    async def start(self) -> None:
        for f in self.servers:
            await f.start()

    async def stop(self) -> None:
        for f in self.servers:
            await f.stop()

    def account_config(self, account: str) -> dict[str, Any]:
        """Platform settings of `account` (secrets by env var name), merged with the test's access policy."""
        raise NotImplementedError

    async def dm(self, account: str, sender: str, text: str) -> None:
        raise NotImplementedError

    async def group(self, account: str, group: str, sender: str, text: str, *, mention: bool) -> None:
        raise NotImplementedError

    def texts(self, account: str, peer: str) -> list[str]:
        """Everything the bot delivered to the conversation with `peer` (a sender for DMs, else a group)."""
        raise NotImplementedError

    def group_id(self, n: int) -> str:
        return f"-100{n}"


class TelegramDriver(Driver):
    name = "telegram"

    def __init__(self, accounts: list[str]) -> None:
        super().__init__(accounts)
        self.fakes = {a: FakeTelegram(f"{i + 1}:TOKEN{a.upper()}") for i, a in enumerate(accounts)}
        self.servers = list(self.fakes.values())
        self.env = {f"TG_{a.upper()}": f.token for a, f in self.fakes.items()}

    def account_config(self, account: str) -> dict[str, Any]:
        return {"token_env": f"TG_{account.upper()}", "api_base": self.fakes[account].base_url,
                "poll_timeout_seconds": 1}

    async def dm(self, account: str, sender: str, text: str) -> None:
        self.fakes[account].push_message(chat_id=int(sender), text=text)

    async def group(self, account: str, group: str, sender: str, text: str, *, mention: bool) -> None:
        body = f"@{self.fakes[account].username} {text}" if mention else text
        self.fakes[account].push_message(chat_id=int(group), from_id=int(sender), chat_type="supergroup",
                                         text=body)

    def texts(self, account: str, peer: str) -> list[str]:
        return [m["text"] for m in self.fakes[account].sent() if str(m["chat_id"]) == peer]


class SlackDriver(Driver):
    name = "slack"

    def __init__(self, accounts: list[str]) -> None:
        super().__init__(accounts)
        self.fakes = {a: FakeSlack(f"xoxb-{a}", f"xapp-{a}") for a in accounts}
        self.servers = list(self.fakes.values())
        for a, f in self.fakes.items():
            self.env[f"SLACK_BOT_{a.upper()}"] = f.bot_token
            self.env[f"SLACK_APP_{a.upper()}"] = f.app_token

    def account_config(self, account: str) -> dict[str, Any]:
        return {"mode": "socket", "bot_token_env": f"SLACK_BOT_{account.upper()}",
                "app_token_env": f"SLACK_APP_{account.upper()}", "base_url": self.fakes[account].base_url + "/api"}

    async def dm(self, account: str, sender: str, text: str) -> None:
        f = self.fakes[account]
        ev, eid = f.message(text, user=sender, channel=f"D{sender}")
        await f.push(ev, eid)

    async def group(self, account: str, group: str, sender: str, text: str, *, mention: bool) -> None:
        f = self.fakes[account]
        if mention:
            ev, eid = f.message(f"<@{BOT_USER}> {text}", user=sender, channel=group, kind="app_mention")
        else:
            ev, eid = f.message(text, user=sender, channel=group, channel_type="channel")
        await f.push(ev, eid)

    def texts(self, account: str, peer: str) -> list[str]:
        return [m["text"] for m in self.fakes[account].posted() if m["channel"] in (peer, f"D{peer}")]

    def group_id(self, n: int) -> str:
        return f"C{n}"


class DiscordDriver(Driver):
    name = "discord"
    limit = (2000, 17)

    def __init__(self, accounts: list[str]) -> None:
        super().__init__(accounts)
        self.tokens = {a: f"discord-token-{a}" for a in accounts}
        first, *rest = self.tokens.values()
        self.fake = FakeDiscord(first, more_tokens=tuple(rest))
        self.servers = [self.fake]
        self.env = {f"DISCORD_{a.upper()}": t for a, t in self.tokens.items()}

    def account_config(self, account: str) -> dict[str, Any]:
        return {"token_env": f"DISCORD_{account.upper()}"}

    async def dm(self, account: str, sender: str, text: str) -> None:
        await self.fake.say(text, author=sender, bot_token=self.tokens[account])

    async def group(self, account: str, group: str, sender: str, text: str, *, mention: bool) -> None:
        body = f"<@{BOT_ID}> {text}" if mention else text
        await self.fake.say(body, author=sender, channel_id=group, guild=True, mention_bot=mention,
                            bot_token=self.tokens[account])

    def texts(self, account: str, peer: str) -> list[str]:
        dm_channel = f"5{peer[1:]}"  # the fake's DM channel id for a user
        return [m["content"] for m in self.fake.sent(self.tokens[account]) if m["channel_id"] in (peer, dm_channel)]

    def group_id(self, n: int) -> str:
        return f"80000000000000{n:04d}"


class WhatsAppDriver(Driver):
    name = "whatsapp"
    groups = False

    def __init__(self, accounts: list[str]) -> None:
        super().__init__(accounts)
        # Each account its own phone number: two accounts naming one are refused when the config loads.
        self.fakes = {a: FakeWhatsApp(f"EAAG-{a}", f"10655501{i:02d}") for i, a in enumerate(accounts)}
        self.servers = list(self.fakes.values())
        for a, f in self.fakes.items():
            self.env[f"WA_TOKEN_{a.upper()}"] = f.access_token
            self.env[f"WA_SECRET_{a.upper()}"] = f"secret-{a}"
            self.env[f"WA_VERIFY_{a.upper()}"] = f"verify-{a}"
        self._n = 0

    def account_config(self, account: str) -> dict[str, Any]:
        u = account.upper()
        return {"phone_number_id": self.fakes[account].phone_number_id, "base_url": self.fakes[account].base_url,
                "access_token_env": f"WA_TOKEN_{u}", "app_secret_env": f"WA_SECRET_{u}",
                "verify_token_env": f"WA_VERIFY_{u}"}

    async def post(self, account: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        async with httpx.AsyncClient() as c:
            return await c.post(f"{self.gateway_url}/hooks/whatsapp/{account}/", content=body, headers=headers)

    async def deliver(self, account: str, message: dict[str, Any], name: str = "Ann") -> None:
        """Post `message` (a text_message, a revoke, a location...) to the gateway as the platform does: in a webhook
        body for the account's phone number, signed with its app secret; the gateway must acknowledge it."""
        body = json.dumps(webhook_body(message, phone_number_id=self.fakes[account].phone_number_id,
                                       name=name)).encode()
        r = await self.post(account, body, sign(f"secret-{account}", body))
        assert r.status_code == 200, r.text

    async def dm(self, account: str, sender: str, text: str) -> None:
        self._n += 1
        await self.deliver(account, text_message(sender, text, f"wamid.{account}.{self._n}"))

    def texts(self, account: str, peer: str) -> list[str]:
        return [m["text"]["body"] for m in self.fakes[account].sent() if m["to"] == peer]


DRIVERS: dict[str, type[Driver]] = {d.name: d for d in (TelegramDriver, SlackDriver, DiscordDriver, WhatsAppDriver)}
