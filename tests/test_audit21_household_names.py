"""Audit 21, names in groups (closing20 Left): a contact listed by `@username` who talks only in the family group,
whose `group_allow_from` is empty (every member of the group may talk).

Until s21 a group with an empty `group_allow_from` asked nobody's name, so the contact's name was never pinned to her
id there; she renamed herself (or gave the name up), a newcomer took it, and the newcomer's first DM matched the
entry by name — the newcomer became the contact (her access, her pairing-free DMs) and pinned the name, and Bea
herself, back under a new name, was a stranger. Now a listed name presented in an allowed group is pinned to its
sender there as in a DM (the platform vouches for a sender's username in a group as in a DM; Telegram chats posting
as themselves and Discord webhooks present no username: channels/telegram.py, discord.py).

Real parts: `hermit gateway run` (a subprocess) with the real Telegram adapter against the fake Bot API, the fake
model provider; the decision itself (`AccessControl` on a real state dir) for Discord.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from channeldrivers import TelegramDriver
from channelhelpers import run
from hermit.channels.access import AccessControl
from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths
from hermit.config.load import build_config
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

OWNER, BEA, DAN, GROUP = "1000", "2000", "2600", "-100300"
NAME = "bea_home"
CODE_RE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")
POLICIES = {"fam": {"dm_policy": "pairing", "owners": [OWNER], "allow_from": [f"@{NAME}"], "groups": [GROUP],
                    "require_mention": True}}  # group_allow_from left empty: every member of the group


def test_a_contacts_name_seen_in_the_group_is_hers_and_a_newcomer_cannot_take_it(tmp_path: Path) -> None:
    script = [{"text": "agent says hi", "repeat": True}]

    async def main() -> None:
        with FakeProvider(script) as provider:
            async with stack(tmp_path, "telegram", provider, POLICIES) as (d, _gw):
                assert isinstance(d, TelegramDriver)
                fake = d.fakes["fam"]
                # Bea only ever talks in the family group, under the name the owner listed.
                fake.push_message(chat_id=int(GROUP), from_id=int(BEA), chat_type="supergroup", username=NAME,
                                  first_name="Bea", text=f"@{fake.username} BEA-GROUP what's for dinner?")
                await until(lambda: d.texts("fam", GROUP), "the group's answer")
                # She renames herself; Dan, new in the family, takes the name and DMs the bot.
                fake.push_message(chat_id=int(DAN), text="DAN-1 hi, it's Bea", username=NAME, first_name="Dan")
                await until(lambda: d.texts("fam", DAN), "Dan's reply")
                [reply] = d.texts("fam", DAN)
                assert CODE_RE.search(reply) and f"Your Telegram user id: {DAN}" in reply, reply
                # Bea, under her new name, is still the contact the owner listed (the pin means her id).
                fake.push_message(chat_id=int(BEA), text="BEA-DM it's me, renamed", username="bea_renamed",
                                  first_name="Bea")
                await until(lambda: d.texts("fam", BEA), "Bea's reply")
                assert d.texts("fam", BEA) == ["agent says hi"]
                assert "DAN-" not in json.dumps([r.body for r in provider.requests])
                pins = tmp_path / "credentials" / "usernames.json"
                assert json.loads(pins.read_text())["pins"]["telegram"][f"@{NAME}"]["id"] == BEA

    run(main, timeout=PROC_TIMEOUT)


def test_discord_a_listed_name_in_an_open_member_list_is_pinned_at_its_first_group_message(tmp_path: Path) -> None:
    loaded = build_config({"channels": {"discord": {"accounts": {"fam": {
        "owners": ["600000000000001000"], "allow_from": ["@bea.home"], "groups": ["800000000000000300"]}}}}},
        StatePaths(tmp_path))
    ac = AccessControl(loaded.config.channels, PairingStore(tmp_path))
    bea, dan = "600000000000002000", "600000000000002600"
    # Not even mentioned (so not answered): the name is hers all the same.
    seen = ac.check("discord", "fam", "group", "800000000000000300", bea, text="hello all", sender_username="Bea.Home")
    assert not seen.allowed
    assert ac.pins.of("discord")["@bea.home"].sender_id == bea
    taken = ac.check("discord", "fam", "dm", dan, dan, text="hi", sender_username="bea.home")
    assert not taken.allowed and taken.reply is not None  # a stranger: a pairing code, no turn
    assert ac.check("discord", "fam", "dm", bea, bea, text="hi", sender_username="bea.renamed").allowed
    # A name nobody listed is never pinned; the owner by id stays the owner.
    ac.check("discord", "fam", "group", "800000000000000300", dan, text="x", sender_username="dan.new")
    assert set(ac.pins.of("discord")) == {"@bea.home"}


def test_a_listed_name_is_pinned_in_a_group_that_does_not_let_its_holder_talk(tmp_path: Path) -> None:
    """`group_allow_from` names only Carl: Bea, a contact by `@bea_home` in allow_from, writing in the group is not
    answered there, and her name is hers from then on all the same."""
    loaded = build_config({"channels": {"telegram": {"accounts": {"fam": {
        "owners": [OWNER], "allow_from": [f"@{NAME}"], "groups": [GROUP], "group_allow_from": ["3000"]}}}}},
        StatePaths(tmp_path))
    ac = AccessControl(loaded.config.channels, PairingStore(tmp_path))
    seen = ac.check("telegram", "fam", "group", GROUP, BEA, text="@bot hi", mentioned=True, sender_username=NAME)
    assert not seen.allowed and "group_allow_from" in seen.reason
    assert ac.pins.of("telegram")[f"@{NAME}"].sender_id == BEA
    assert not ac.check("telegram", "fam", "dm", DAN, DAN, text="hi", sender_username=NAME).allowed
    assert ac.check("telegram", "fam", "dm", BEA, BEA, text="hi", sender_username="bea_renamed").allowed
    assert ac.check("telegram", "fam", "group", GROUP, "3000", text="@bot hi", mentioned=True).allowed
