"""Re-audit 21 (t10) of this session's channel ordering, name pins and platform notices (t4), as an attacker.
These held; each test guards what was tried.

- **in_order's wait** (channels/in_order.py, Discord): a message waits only for the edits and deletes of *its own
  channel* pending as it arrives. A stranger's edit storm or hanging change in another channel holds it not at all;
  one in its channel that arrives after it does not hold it; a change whose handler fails releases it at once; a
  change that hangs holds it `MAX_WAIT_SECONDS` at most, and then it is handed on, never dropped.
- **Name pins in groups** (channels/access.py): a listed @name is pinned at its first sight only in a group the
  account lets in (a stranger's own group under `group_policy: allowlist`, or any group under `disabled`, pins
  nothing); a name once pinned to the contact never moves to whoever presents it next, in a group or a DM. (A
  stranger can pin a listed name only while nobody holds it on the platform: Telegram and Discord usernames are
  unique, and a DM presenting it pinned it before s21 as well.)
- **Telegram notices**: only a service message's own top-level field makes it a notice; the owner's reply to a pin
  notice (the notice nested in `reply_to_message`), or a message whose text names a service field, is a message.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from audit20_household import next_mid, push_raw
from channeldrivers import TelegramDriver
from channelhelpers import run
from hermit.channels.access import AccessControl
from hermit.channels.in_order import InOrder, after
from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths
from hermit.config.load import build_config
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_channel_gateway import stack, until

# -- in_order ------------------------------------------------------------------------------------------------------


async def handed_on(order: InOrder, channel: str, timeout: float, published: list[str], text: str) -> None:
    """What discord.py's on_message does: note the pending changes as it arrives, then publish after them."""
    earlier = order.earlier(channel)
    await after(earlier, timeout)
    published.append(text)


def test_a_change_storm_elsewhere_holds_no_message_here() -> None:
    async def main() -> list[str]:
        order, published = InOrder(), []
        release = asyncio.Event()

        async def change(channel: str) -> None:
            with order.pending(channel):
                await release.wait()  # a change whose handler hangs (a channel asked of Discord)

        storm = [asyncio.create_task(change("stranger-channel")) for _ in range(200)]
        await asyncio.sleep(0)  # (each handler's first step: its change is pending)
        await asyncio.wait_for(handed_on(order, "family", 30.0, published, "owner's message"), 5)
        late = asyncio.create_task(handed_on(order, "family", 30.0, published, "owner's second"))
        await asyncio.sleep(0)
        later = [asyncio.create_task(change("family")) for _ in range(50)]  # changes after it: not waited for
        await asyncio.wait_for(late, 5)
        release.set()
        await asyncio.gather(*storm, *later)
        assert order.earlier("family") == () and order.earlier("stranger-channel") == ()
        return published

    assert run(main) == ["owner's message", "owner's second"]


def test_a_failing_change_releases_its_channel_and_a_hanging_one_holds_it_only_so_long() -> None:
    async def main() -> list[str]:
        order, published = InOrder(), []
        hang = asyncio.Event()

        async def failing() -> None:
            with order.pending("family"):
                await asyncio.sleep(0)
                raise RuntimeError("Discord said 500")

        async def hanging() -> None:
            with order.pending("family"):
                await hang.wait()

        bad = asyncio.create_task(failing())
        await asyncio.sleep(0)
        waiting = asyncio.create_task(handed_on(order, "family", 30.0, published, "after a failed change"))
        await asyncio.gather(bad, return_exceptions=True)
        await asyncio.wait_for(waiting, 5)  # at once, not after 30 s
        stuck = asyncio.create_task(hanging())
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await handed_on(order, "family", 0.3, published, "after a hanging change")  # the bound, made short
        assert loop.time() - started >= 0.3
        hang.set()
        await stuck
        return published

    assert run(main) == ["after a failed change", "after a hanging change"]  # both handed on, none dropped


# -- name pins -----------------------------------------------------------------------------------------------------

OWNER, BEA, DAN, GROUP, OTHER_GROUP = "1000", "2000", "2600", "-100300", "-100999"
NAME = "bea_home"


def access(tmp_path: Path, **account: object) -> AccessControl:
    loaded = build_config({"channels": {"telegram": {"accounts": {"fam": {
        "owners": [OWNER], "allow_from": [f"@{NAME}"], **account}}}}}, StatePaths(tmp_path))
    return AccessControl(loaded.config.channels, PairingStore(tmp_path))


def test_a_stranger_presenting_a_free_listed_name_in_a_group_not_let_in_pins_nothing(tmp_path: Path) -> None:
    """Dan adds the bot to a group of his own and writes there as @bea_home before Bea ever writes: the group is
    not in `groups`, so nothing is pinned, and Bea's first DM is still the contact's."""
    ac = access(tmp_path / "allowlist", groups=[GROUP], dm_policy="pairing")
    for mentioned in (True, False):
        v = ac.check("telegram", "fam", "group", OTHER_GROUP, DAN, text="@bot hi", mentioned=mentioned,
                     sender_username=NAME)
        assert not v.allowed
    assert ac.pins.of("telegram") == {}
    assert ac.check("telegram", "fam", "dm", BEA, BEA, text="hi", sender_username=NAME).allowed
    assert ac.pins.of("telegram")[f"@{NAME}"].sender_id == BEA

    off = access(tmp_path / "disabled", group_policy="disabled")
    assert not off.check("telegram", "fam", "group", GROUP, DAN, text="@bot hi", mentioned=True,
                         sender_username=NAME).allowed
    assert off.pins.of("telegram") == {}


def test_a_pinned_name_never_moves_to_its_next_holder_in_a_group(tmp_path: Path) -> None:
    """Bea's name is pinned to her; she renames, and Dan takes @bea_home and writes in the family group (members
    open, and a group naming members): the pin stays hers, his DM is a stranger's."""
    for members in ([], [f"@{NAME}", "3000"]):
        ac = access(tmp_path / str(len(members)), groups=[GROUP], group_allow_from=members, dm_policy="allowlist")
        assert ac.check("telegram", "fam", "dm", BEA, BEA, text="hi", sender_username=NAME).allowed
        seen = ac.check("telegram", "fam", "group", GROUP, DAN, text="@bot it's Bea", mentioned=True,
                        sender_username=NAME)
        assert seen.allowed == (not members), seen  # a member of an open group may talk; a named list: not him
        assert ac.pins.of("telegram")[f"@{NAME}"].sender_id == BEA
        assert not ac.check("telegram", "fam", "dm", DAN, DAN, text="hi", sender_username=NAME).allowed
        assert ac.check("telegram", "fam", "dm", BEA, BEA, text="hi", sender_username="bea_renamed").allowed


# -- Telegram notices ----------------------------------------------------------------------------------------------


def test_the_owners_reply_to_a_notice_is_a_message(tmp_path: Path) -> None:
    """The owner replies to the pin notice, and writes a message naming `new_chat_members`: both start turns (only a
    service message's own field makes it a notice, never one nested in what it replies to)."""
    policies = {"fam": {"owners": [OWNER], "groups": [GROUP], "require_mention": False}}
    script = [{"match": {"contains": "RN-REPLY"}, "text": "reply-ok"},
              {"match": {"contains": "RN-NAMES"}, "text": "names-ok"}, {"text": "stray", "repeat": True}]
    chat = {"id": int(GROUP), "type": "supergroup"}
    owner = {"id": int(OWNER), "is_bot": False, "first_name": "Ann"}

    async def main() -> list[str]:
        with FakeProvider(script) as provider:
            async with stack(tmp_path, "telegram", provider, policies) as (d, _gw):
                assert isinstance(d, TelegramDriver)
                fake = d.fakes["fam"]
                notice = {"message_id": next_mid(fake), "date": 1, "chat": chat, "from": owner,
                          "pinned_message": {"message_id": 1, "date": 1, "chat": chat, "text": "dinner at 7"}}
                push_raw(fake, notice)
                push_raw(fake, {"message_id": next_mid(fake), "date": 1, "chat": chat, "from": owner,
                                "text": "RN-REPLY and at 8 on Sunday", "reply_to_message": notice})
                await until(lambda: "reply-ok" in d.texts("fam", GROUP), "the answer to the reply")
                fake.push_message(chat_id=int(GROUP), from_id=int(OWNER), chat_type="supergroup",
                                  text="RN-NAMES what do new_chat_members and pinned_message mean?")
                await until(lambda: "names-ok" in d.texts("fam", GROUP), "the answer to the second")
                assert d.texts("fam", GROUP) == ["reply-ok", "names-ok"], d.texts("fam", GROUP)
                return [json.dumps(r.body) for r in provider.requests]

    requests = run(main, timeout=PROC_TIMEOUT)
    assert len(requests) == 2 and "RN-REPLY" in requests[0] and "RN-NAMES" in requests[1]

