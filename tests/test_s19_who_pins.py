"""Session 19 (t9), pins across lists: the owner listed by id in `owners` while their @name is listed only in
`allow_from` / `group_allow_from` matched by id and returned before the other list was read, so the name stayed
unpinned and its next holder got a contact's place in DMs and a member's in groups. A sender matched by id who
presents a name listed in any list of the account pins it (access._match, one rule). Real `hermit gateway run`, the
real Telegram adapter polling the fake Bot API, the scripted model; and AccessControl with the real pairing files."""

from __future__ import annotations

from pathlib import Path

from audit19_who import (
    SCRIPT,
    check_owner_history_clean,
    check_spoofers_got_nothing,
    gateway,
    requests_for,
    until,
)
from channeldrivers import TelegramDriver
from channelhelpers import run
from hermit.channels.access import AccessControl
from hermit.channels.pairing import PairingStore
from hermit.channels.username_pins import UsernamePins
from hermit.config import StatePaths
from hermit.config.load import build_config
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_audit19_who_telegram import chats, push

OWNER, GROUP, MEMBER = 1001, -1007, 3003
OWNER_USER = {"id": OWNER, "is_bot": False, "first_name": "Ann", "username": "ann_owner"}
STRANGER_CODE = "Hi! This assistant only talks to people its owner has approved."


def test_the_owners_name_in_another_list_is_pinned_to_the_owner(tmp_path: Path) -> None:
    account = {"owners": [str(OWNER)], "allow_from": ["@ann_owner"], "group_allow_from": ["@ann_owner", str(MEMBER)],
               "dm_policy": "pairing", "group_policy": "allowlist", "groups": [str(GROUP)], "require_mention": False}
    group_chat = {"id": GROUP, "type": "supergroup", "title": "Family"}

    async def body() -> tuple[FakeProvider, dict[str, list[str]]]:
        with FakeProvider(SCRIPT) as provider:
            driver = TelegramDriver(["personal"])
            fake = driver.fakes["personal"]
            async with gateway(tmp_path / "home", driver, provider, account):
                push(fake, chat_id=OWNER, text="OWNER-SAYS remember quoll QUOLL-CHAT-7733", **{"from": OWNER_USER})
                await until(lambda: chats(fake).get(str(OWNER)) == ["noted"], "the owner's first answer")
                # The owner gave @ann_owner up; a stranger took it. In a DM, then in the group.
                impostor = {"id": 6006, "is_bot": False, "first_name": "Ann", "username": "ann_owner"}
                push(fake, chat_id=6006, text="SPOOF-dm it's me, Ann, new phone", **{"from": impostor})
                push(fake, chat_id=GROUP, chat_type="supergroup", text="SPOOF-group Ann here", chat=group_chat,
                     **{"from": impostor})
                # A member listed by id, after the impostor in the same group: their answer comes after its refusal.
                push(fake, chat_id=GROUP, chat_type="supergroup", text="SPOOF-member hello", chat=group_chat,
                     **{"from": {"id": MEMBER, "is_bot": False, "first_name": "Cy"}})
                push(fake, chat_id=OWNER, text="OWNER-SENTINEL anything new?", **{"from": OWNER_USER})
                await until(lambda: chats(fake).get(str(OWNER), [])[-1:] == ["sentinel-ok"], "the sentinel")
                await until(lambda: chats(fake).get("6006") and chats(fake).get(str(GROUP)), "the DM's and group's answers")
                return provider, chats(fake)

    provider, sent = run(body, timeout=PROC_TIMEOUT)
    check_owner_history_clean(provider)
    check_spoofers_got_nothing(provider, [t for chat, texts in sent.items() if chat != str(OWNER) for t in texts])
    # The name was pinned to the owner by their first DM: its new holder is a stranger (a pairing code), not a contact,
    # and not a member of the group; the member listed by id is answered.
    assert [t.split("\n")[0] for t in sent["6006"]] == [STRANGER_CODE], sent
    assert sent[str(GROUP)] == ["spoof-answer"], sent
    assert requests_for(provider, "SPOOF-member") and not requests_for(provider, "SPOOF-group")
    assert not requests_for(provider, "SPOOF-dm")
    pins = {p.username: p.sender_id for p in UsernamePins(PairingStore(tmp_path / "home")).all()}
    assert pins == {"@ann_owner": str(OWNER)}, pins


def test_a_name_in_any_list_is_pinned_by_whoever_any_list_names_by_id(tmp_path: Path) -> None:
    """Each combination: the owner (owners by id) presenting a name of `group_allow_from` in a DM, a contact
    (allow_from by id) presenting a name of `group_allow_from`, a member (group_allow_from by id) presenting a name of
    `allow_from` in the group. Each name goes to the listed id; its next holder is a stranger everywhere."""
    account = {"owners": ["1001"], "allow_from": ["2002", "@cy_member"], "group_allow_from": ["3003", "@ann_owner",
               "@bob_contact"], "dm_policy": "allowlist", "groups": [str(GROUP)]}
    loaded = build_config({"channels": {"telegram": {"accounts": {"default": account}}}}, StatePaths(tmp_path))
    ac = AccessControl(loaded.config.channels, PairingStore(tmp_path))
    assert ac.check("telegram", "default", "dm", "1001", "1001", sender_username="ann_owner").allowed
    assert ac.check("telegram", "default", "dm", "2002", "2002", sender_username="bob_contact").allowed
    assert ac.check("telegram", "default", "group", str(GROUP), "3003", text="hi", mentioned=True,
                    sender_username="cy_member").allowed
    pins = {p.username: p.sender_id for p in UsernamePins(PairingStore(tmp_path)).all()}
    assert pins == {"@ann_owner": "1001", "@bob_contact": "2002", "@cy_member": "3003"}
    for name in ("ann_owner", "bob_contact", "cy_member"):
        assert not ac.check("telegram", "default", "dm", "6006", "6006", sender_username=name).allowed, name
        assert not ac.check("telegram", "default", "group", str(GROUP), "6006", text="hi", mentioned=True,
                            sender_username=name).allowed, name
        assert not ac.is_owner("telegram", "default", "6006", name)
