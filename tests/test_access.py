"""Access control and pairing with an injected clock: codes, expiry, the cap of 3, one code an hour,
approval, deny and revoke, owners, every DM and group policy, mention gating, allowlist normalisation (and
entries that can never match, refused at load), and owner-only files on disk."""

from __future__ import annotations

import json
import random
import stat
from pathlib import Path
from typing import Any

import pytest

from hermit.channels.access import AccessControl, PairingStore
from hermit.channels.pairing import CODE_ALPHABET, credential_permission_problems
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.config.schema import ChannelsConfig
from hermit.errors import AccessDenied, ConfigError


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def channels(**account: Any) -> ChannelsConfig:
    return ChannelsConfig.model_validate({"telegram": {"accounts": {"bot": account}},
                                          "slack": {"accounts": {"corp": {}}}})


def make(tmp_path: Path, **account: Any) -> tuple[AccessControl, PairingStore, Clock]:
    clock = Clock()
    store = PairingStore(tmp_path, clock=clock, rng=random.Random(7))
    return AccessControl(channels(**account), store, clock=clock), store, clock


def dm(ac: AccessControl, sender: str, **kw: Any) -> Any:
    return ac.check("telegram", "bot", "dm", sender, sender, text="hi", **kw)


def test_pairing_life_cycle(tmp_path: Path) -> None:
    ac, store, clock = make(tmp_path)
    first = dm(ac, "100")
    assert not first.allowed and first.reply is not None
    [req] = store.pending("telegram")
    assert req.sender_id == "100" and req.code in first.reply
    assert len(req.code) == 8 and set(req.code) <= set(CODE_ALPHABET)
    assert not set(req.code) & set("0O1I")
    assert "hermit pairing approve telegram " + req.code in first.reply
    assert "Your Telegram user id: 100\n" in first.reply  # the owner needs it for owners/allow_from

    # the same sender within the hour: no new code, nothing sent, agent not called
    clock.advance(59 * 60)
    again = dm(ac, "100")
    assert (again.allowed, again.reply) == (False, None)
    assert [r.code for r in store.pending()] == [req.code]

    approved = store.approve("TELEGRAM", req.code.lower())
    assert approved.sender_id == "100"
    assert store.pending() == []
    assert store.approved_senders("telegram", "bot") == {"100"}
    ok = dm(ac, "100")
    assert ok.allowed and ok.reply is None and "approved" in ok.reason


def test_codes_expire_after_an_hour_and_the_sender_gets_a_new_one(tmp_path: Path) -> None:
    ac, store, clock = make(tmp_path)
    dm(ac, "100")
    [old] = store.pending()
    clock.advance(3600)
    assert store.pending() == []
    with pytest.raises(AccessDenied, match="expired") as info:
        store.approve("telegram", old.code)
    assert "message the assistant again" in info.value.hint
    fresh = dm(ac, "100")
    assert fresh.reply is not None and old.code not in fresh.reply
    [new] = store.pending()
    assert new.code != old.code and new.created_at == clock.t


def test_at_most_three_pending_per_account(tmp_path: Path) -> None:
    ac, store, clock = make(tmp_path)
    replies = [dm(ac, s).reply for s in ("1", "2", "3", "4")]
    assert all(r is not None for r in replies[:3]) and replies[3] is None
    assert sorted(r.sender_id for r in store.pending("telegram")) == ["1", "2", "3"]
    # another account has its own three
    other = AccessControl(ChannelsConfig.model_validate({"telegram": {"accounts": {"bot": {}, "bot2": {}}}}),
                          store, clock=clock)
    assert other.check("telegram", "bot2", "dm", "4", "4").reply is not None
    clock.advance(3601)
    assert dm(ac, "4").reply is not None  # the old three expired: room again


def test_unknown_code_is_refused_with_a_hint(tmp_path: Path) -> None:
    ac, store, _ = make(tmp_path)
    dm(ac, "100")
    [req] = store.pending()
    with pytest.raises(AccessDenied, match="no pending pairing request with code ABCDEFGH") as info:
        store.approve("telegram", "ABCDEFGH")
    assert "hermit pairing list telegram" in info.value.hint
    with pytest.raises(AccessDenied) as info:
        store.approve("slack", req.code)
    assert f"hermit pairing approve telegram {req.code}" in info.value.hint
    assert store.approved_senders("telegram", "bot") == set()


def test_allowlist_never_sends_a_code(tmp_path: Path) -> None:
    ac, store, _ = make(tmp_path, dm_policy="allowlist", allow_from=["7"])
    stranger = dm(ac, "100")
    assert (stranger.allowed, stranger.reply) == (False, None)
    assert store.pending() == [] and not store.pairing_file.exists()
    assert dm(ac, "7").allowed


def test_open_needs_no_code_and_disabled_ignores(tmp_path: Path) -> None:
    ac, store, _ = make(tmp_path, dm_policy="open", allow_from=["*"])
    assert dm(ac, "anyone").allowed and store.pending() == []
    ac, store, _ = make(tmp_path, dm_policy="disabled", allow_from=["7"])
    for sender in ("7", "100"):
        d = dm(ac, sender)
        assert (d.allowed, d.reply) == (False, None)
    assert store.pending() == []


def test_allow_from_skips_pairing(tmp_path: Path) -> None:
    ac, store, _ = make(tmp_path, allow_from=["42"])
    assert dm(ac, "42").allowed and store.pending() == []


@pytest.mark.parametrize("key", ["allow_from", "groups"])
@pytest.mark.parametrize("policy", ["pairing", "allowlist", "disabled"])
def test_star_is_refused_outside_open(tmp_path: Path, key: str, policy: str) -> None:
    policy_key = "dm_policy" if key == "allow_from" else "group_policy"
    if key == "groups" and policy == "pairing":
        policy = "allowlist"
    raw = {"channels": {"telegram": {"accounts": {"bot": {policy_key: policy, key: ["*"]}}}}}
    with pytest.raises(ConfigError, match="'\\*'"):
        build_config(raw, StatePaths(tmp_path))


def test_unknown_or_disabled_accounts_fail_closed(tmp_path: Path) -> None:
    ac, store, _ = make(tmp_path, enabled=False)
    assert not dm(ac, "1").allowed
    assert not ac.check("telegram", "nope", "dm", "1", "1").allowed
    assert not ac.check("matrix", "bot", "dm", "1", "1").allowed
    assert not ac.check("slack", "corp", "channel", "1", "1").allowed
    assert store.pending() == []
    assert ac.check("webchat", "default", "dm", "browser", "owner").allowed


@pytest.mark.parametrize(
    ("account", "kw", "allowed"),
    [
        ({}, {"mentioned": True}, False),  # allowlist with no groups: no groups at all
        ({"groups": ["G1"]}, {"mentioned": True}, True),
        ({"groups": ["G2"]}, {"mentioned": True}, False),
        ({"groups": ["G1"]}, {}, False),  # require_mention
        ({"groups": ["G1"]}, {"reply_to_bot": True}, True),
        ({"groups": ["G1"]}, {"text": "hey HERMIT, what's up", "mention_patterns": [r"\bhermit\b"]}, True),
        ({"groups": ["G1"]}, {"text": "hermitage", "mention_patterns": [r"\bhermit\b"]}, False),
        ({"groups": ["G1"], "require_mention": False}, {}, True),
        ({"group_policy": "open"}, {"mentioned": True}, True),
        ({"group_policy": "open", "groups": ["*"], "require_mention": False}, {}, True),
        ({"group_policy": "disabled", "groups": ["G1"]}, {"mentioned": True}, False),
        ({"group_policy": "open", "group_allow_from": ["11"]}, {"mentioned": True}, True),
        ({"group_policy": "open", "group_allow_from": ["tg:11"]}, {"mentioned": True}, True),
        ({"group_policy": "open", "group_allow_from": ["22"]}, {"mentioned": True}, False),
        # the owners always count as members of a restricted group
        ({"group_policy": "open", "group_allow_from": ["22"], "owners": ["11"]}, {"mentioned": True}, True),
        ({"group_policy": "open", "group_allow_from": ["@Ann_Smith"]}, {"mentioned": True,
                                                                       "sender_username": "ann_smith"}, True),
        ({"group_policy": "open", "group_allow_from": ["*"]}, {"mentioned": True}, True),
    ],
)
def test_group_gating(tmp_path: Path, account: dict[str, Any], kw: dict[str, Any], allowed: bool) -> None:
    ac, store, _ = make(tmp_path, **account)
    decision = ac.check("telegram", "bot", "group", "G1", "11", **kw)
    assert decision.allowed is allowed
    assert decision.reply is None  # groups never get pairing codes or answers
    assert store.pending() == []


def test_files_are_owner_only_and_atomic(tmp_path: Path) -> None:
    (tmp_path / "credentials").mkdir(mode=0o755)
    (tmp_path / "credentials").chmod(0o755)
    ac, store, _ = make(tmp_path)
    dm(ac, "100")
    store.approve("telegram", store.pending()[0].code)
    cred = tmp_path / "credentials"
    assert stat.S_IMODE(cred.stat().st_mode) == 0o700
    files = sorted(p.name for p in cred.iterdir())
    assert files == [".lock", "allow-telegram-bot.json", "pairing.json"]
    for p in cred.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert json.loads((cred / "allow-telegram-bot.json").read_text())["allow_from"] == ["100"]
    assert credential_permission_problems(tmp_path) == []
    (cred / "pairing.json").chmod(0o644)
    assert credential_permission_problems(tmp_path) == [f"{cred / 'pairing.json'} is 644, should be 600"]


def test_an_allow_file_whose_list_is_not_a_list_approves_nobody(tmp_path: Path) -> None:
    """A hand-edited `"allow_from": "12345"` was read character by character: senders 1 to 5 got in."""
    ac, store, _ = make(tmp_path)
    path = store.allow_file("telegram", "bot")
    path.parent.mkdir(parents=True)
    for broken in ('"12345"', '{"1": true}', '[1, 2, null, ""]'):
        path.write_text(f'{{"version": 1, "allow_from": {broken}}}', encoding="utf-8")
        assert store.approved_senders("telegram", "bot") == set() and store.approved("telegram") == []
        assert not dm(ac, "1").allowed
    path.write_text('{"version": 1, "allow_from": ["100", 7]}', encoding="utf-8")
    assert dm(ac, "100").allowed and not dm(ac, "7").allowed


def test_account_ids_cannot_escape_the_credentials_dir(tmp_path: Path) -> None:
    store = PairingStore(tmp_path)
    assert store.allow_file("telegram", "../../x").parent == tmp_path / "credentials"


def test_a_second_store_sees_the_first_ones_writes(tmp_path: Path) -> None:
    # the gateway issues, `hermit pairing approve` (another process, another store) approves
    ac, gateway_store, clock = make(tmp_path)
    dm(ac, "100")
    cli_store = PairingStore(tmp_path, clock=clock)
    [req] = cli_store.pending()
    cli_store.approve("telegram", req.code)
    assert dm(ac, "100").allowed


# ---- allowlist entries --------------------------------------------------------------------------------------

def account(tmp_path: Path, platform: str, **acc: Any) -> Any:
    loaded = build_config({"channels": {platform: {"accounts": {"a": acc}}}}, StatePaths(tmp_path))
    return getattr(loaded.config.channels, platform).accounts["a"]


@pytest.mark.parametrize(
    ("platform", "written", "stored"),
    [
        ("telegram", " 123456 ", "123456"),
        ("telegram", "telegram:123456", "123456"),
        ("telegram", "TG:123456", "123456"),
        ("telegram", " tg: 123456 ", "123456"),
        ("telegram", "Telegram:123456", "123456"),
        ("telegram", "@Ann_Smith", "@ann_smith"),
        ("telegram", "tg:@Ann_Smith", "@ann_smith"),
        ("discord", "discord:600000000000001001", "600000000000001001"),
        ("discord", "DISCORD:<@!600000000000001001>", "600000000000001001"),
        ("discord", "<@600000000000001001>", "600000000000001001"),
        ("discord", "@Ann.Smith", "@ann.smith"),
        ("slack", "slack:U012AB3CD", "U012AB3CD"),
        ("slack", "<@U012AB3CD|ann>", "U012AB3CD"),
        ("slack", "u012ab3cd", "U012AB3CD"),
        ("whatsapp", "+1 555-123 4567", "15551234567"),
        ("whatsapp", "whatsapp:+15551234567", "15551234567"),
        ("whatsapp", "WA:1 (555) 123.4567", "15551234567"),
        ("whatsapp", "15551234567", "15551234567"),
    ],
)
def test_entries_are_normalised_at_load(tmp_path: Path, platform: str, written: str, stored: str) -> None:
    acc = account(tmp_path, platform, owners=[written], allow_from=[written], group_allow_from=[written])
    assert acc.owners == acc.allow_from == acc.group_allow_from == [stored]


def test_duplicates_collapse_and_star_is_kept(tmp_path: Path) -> None:
    acc = account(tmp_path, "telegram", dm_policy="open", allow_from=["tg:1", "1", " * "],
                  group_allow_from=["*"])
    assert acc.allow_from == ["1", "*"] and acc.group_allow_from == ["*"]


@pytest.mark.parametrize(
    ("platform", "written", "error", "hint"),
    [
        ("telegram", "john_doe", "neither a numeric Telegram user id nor an @username", "write '@john_doe'"),
        ("telegram", "discord:123", "discord: prefix, which names discord, on a telegram account",
         "put it under channels.discord.accounts"),
        ("telegram", "-1001234", "a group or channel id, not a user", "`groups`"),
        ("telegram", "@a", "not a Telegram username", "numeric user id"),
        ("telegram", "tg:", "a prefix without an id", "numeric user id"),
        ("telegram", "  ", "an empty entry matches nobody", "remove it"),
        ("telegram", "+1 555 123", "neither a numeric Telegram user id", "numeric user id"),
        ("discord", "ann#1234", "old Discord tag", "Copy User ID"),
        ("discord", "ann", "neither a numeric Discord user id nor an @username", "write '@ann'"),
        ("discord", "tg:123", "tg: prefix, which names telegram", "channels.telegram.accounts"),
        ("slack", "@ann", "member ids, never names", "Copy member ID"),
        ("slack", "ann smith", "not a Slack member id", "U012AB3CD"),
        ("whatsapp", "+1 555 CALL ME", "has letters", "country code"),
        ("whatsapp", "1234567890123456", "at most 15", "country code"),
        ("whatsapp", "slack:U1", "slack: prefix, which names slack, on a whatsapp account", "channels.slack"),
    ],
)
@pytest.mark.parametrize("key", ["owners", "allow_from", "group_allow_from"])
def test_entries_that_can_never_match_are_config_errors_with_a_hint(
        tmp_path: Path, platform: str, written: str, error: str, hint: str, key: str) -> None:
    raw = {"channels": {platform: {"accounts": {"a": {key: ["1", written] if platform != "slack" else
                                                          ["U1", written]}}}}}
    if (platform, written, key) == ("telegram", "-1001234", "group_allow_from"):
        # A chat that speaks in groups (a Telegram linked channel) is a member there if listed: never in owners or
        # allow_from (test_s19_who_telegram_linked.py).
        acc = build_config(raw, StatePaths(tmp_path)).config.channels.accounts_of("telegram")["a"]
        assert acc.group_allow_from == ["1", "-1001234"]
        return
    with pytest.raises(ConfigError) as info:
        build_config(raw, StatePaths(tmp_path))
    assert f"channels.{platform}.accounts.a.{key}: entry 1: " in info.value.message
    assert error in info.value.message
    assert hint in info.value.hint


def test_star_is_never_an_owner(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="every sender the owner") as info:
        build_config({"channels": {"telegram": {"accounts": {"a": {"dm_policy": "open", "owners": ["*"]}}}}},
                     StatePaths(tmp_path))
    assert "list your own sender ids under owners" in info.value.hint


# ---- owners -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["pairing", "allowlist", "open"])
def test_an_owner_is_always_let_in_and_known_as_owner(tmp_path: Path, policy: str) -> None:
    extra = {"allow_from": ["*"]} if policy == "open" else {}
    ac, store, _ = make(tmp_path, dm_policy=policy, owners=["tg:1000", "@Boss_Person"], **extra)
    d = dm(ac, "1000")
    assert d.allowed and "owner" in d.reason
    assert ac.is_owner("telegram", "bot", "1000")
    assert ac.is_owner("telegram", "bot", "2000", "boss_PERSON")  # usernames match case-insensitively
    assert dm(ac, "2000", sender_username="Boss_Person").allowed
    # @boss_person is pinned to 2000 now (channels/username_pins.py): the entry means that id, whatever name it
    # presents later (a renamed owner is still the owner); another id is not, with or without the name.
    assert ac.is_owner("telegram", "bot", "2000") and ac.is_owner("telegram", "bot", "2000", "other")
    assert not ac.is_owner("telegram", "bot", "3000") and not ac.is_owner("telegram", "bot", "3000", "Boss_Person")
    assert not ac.is_owner("telegram", "other-bot", "1000")  # owners are per account
    assert store.pending() == []


def test_disabled_ignores_the_owner_too_and_contacts_are_not_owners(tmp_path: Path) -> None:
    ac, _, _ = make(tmp_path, dm_policy="disabled", owners=["1000"])
    assert not dm(ac, "1000").allowed
    ac, store, _ = make(tmp_path, owners=["1000"], allow_from=["7"])
    friend = dm(ac, "7")
    assert friend.allowed and "a contact" in friend.reason and not ac.is_owner("telegram", "bot", "7")
    dm(ac, "100")
    store.approve("telegram", store.pending()[0].code)
    assert dm(ac, "100").allowed and not ac.is_owner("telegram", "bot", "100")
    assert ac.is_owner("webchat", "default", "browser")  # the gateway token holder
    disabled, _, _ = make(tmp_path / "x", enabled=False, owners=["1000"])
    assert not disabled.is_owner("telegram", "bot", "1000")


def test_usernames_and_phone_numbers_match_as_users_write_them(tmp_path: Path) -> None:
    ac, _, _ = make(tmp_path, dm_policy="allowlist", allow_from=["@Ann_Smith"])
    assert dm(ac, "55", sender_username="ann_smith").allowed
    assert dm(ac, "55", sender_username="@ANN_SMITH").allowed
    assert not dm(ac, "56").allowed and not dm(ac, "56", sender_username="ann_smith2").allowed
    assert dm(ac, "55", sender_username="ann_smith2").allowed  # pinned to 55: still Ann after renaming
    wa = AccessControl(ChannelsConfig.model_validate({"whatsapp": {"accounts": {"p": {
        "dm_policy": "allowlist", "allow_from": ["+1 555-000 1001"], "owners": ["whatsapp:+4930 1234"]}}}}),
        PairingStore(tmp_path), clock=Clock())
    assert wa.check("whatsapp", "p", "dm", "15550001001", "15550001001").allowed
    assert wa.is_owner("whatsapp", "p", "+49301234") and wa.is_owner("whatsapp", "p", "49301234")
    assert not wa.check("whatsapp", "p", "dm", "15550001002", "15550001002").allowed


def test_the_pairing_reply_names_each_platforms_id(tmp_path: Path) -> None:
    ac = AccessControl(ChannelsConfig.model_validate({"whatsapp": {"accounts": {"p": {}}},
                                                      "slack": {"accounts": {"w": {}}}}),
                       PairingStore(tmp_path), clock=Clock())
    wa = ac.check("whatsapp", "p", "dm", "15550001001", "15550001001").reply
    assert wa is not None and "Your WhatsApp number: +15550001001\n" in wa
    sl = ac.check("slack", "w", "dm", "U42", "U42").reply
    assert sl is not None and "Your Slack member id: U42\n" in sl


# ---- deny and revoke ----------------------------------------------------------------------------------------

def test_deny_drops_the_request_and_gives_no_new_code_within_the_hour(tmp_path: Path) -> None:
    ac, store, clock = make(tmp_path)
    for s in ("1", "2", "3"):
        dm(ac, s)
    code = next(r.code for r in store.pending() if r.sender_id == "1")
    denied = store.deny("telegram", code.lower())
    assert denied.sender_id == "1" and denied.denied
    assert sorted(r.sender_id for r in store.pending()) == ["2", "3"]
    assert dm(ac, "4").reply is not None  # a denied request frees its pending slot
    again = dm(ac, "1")
    assert (again.allowed, again.reply) == (False, None)  # no fresh code for the denied sender
    with pytest.raises(AccessDenied, match="was denied"):
        store.approve("telegram", code)
    with pytest.raises(AccessDenied, match="no pending pairing request with code ZZZZZZZZ"):
        store.deny("telegram", "ZZZZZZZZ")
    clock.advance(3600)
    assert dm(ac, "1").reply is not None  # after the hour, a new code as for any stranger


def test_revoke_removes_an_approved_sender_by_any_spelling(tmp_path: Path) -> None:
    ac, store, clock = make(tmp_path)
    dm(ac, "100", sender_name="Ann", sender_username="Ann_S")
    dm(ac, "200")
    for r in store.pending():
        store.approve("telegram", r.code)
    [ann, bob] = store.approved("telegram")
    assert (ann.sender_id, ann.sender_name, ann.sender_username, ann.approved_at) == ("100", "Ann", "Ann_S", clock.t)
    assert ann.label() == "100 (Ann, @Ann_S)" and bob.label() == "200"
    assert [a.sender_id for a in store.revoke("telegram", "TG:100")] == ["100"]
    assert store.approved_senders("telegram", "bot") == {"200"}
    fresh = dm(ac, "100")
    assert not fresh.allowed and fresh.reply is not None  # pairing: a stranger again, with a new code
    with pytest.raises(AccessDenied, match="100 is not an approved sender on telegram") as info:
        store.revoke("telegram", "100")
    assert "hermit pairing list telegram" in info.value.hint
    dm(ac, "300", sender_username="Cy")
    store.approve("telegram", next(r.code for r in store.pending() if r.sender_id == "300"))
    assert [a.sender_id for a in store.revoke("telegram", "@cy", account_id="bot")] == ["300"]
    with pytest.raises(AccessDenied, match="on telegram/other"):
        store.revoke("telegram", "200", account_id="other")
    assert store.approved_senders("telegram", "bot") == {"200"}


def test_revoke_without_an_account_removes_the_sender_from_every_account(tmp_path: Path) -> None:
    clock = Clock()
    store = PairingStore(tmp_path, clock=clock)
    ac = AccessControl(ChannelsConfig.model_validate({"telegram": {"accounts": {"a": {}, "b-2": {}}}}), store,
                       clock=clock)
    for acc in ("a", "b-2"):
        ac.check("telegram", acc, "dm", "5", "5")
    for r in store.pending():
        store.approve("telegram", r.code)
    assert sorted(a.account_id for a in store.approved()) == ["a", "b-2"]
    assert sorted(a.account_id for a in store.revoke("telegram", "5")) == ["a", "b-2"]
    assert store.approved() == []


def test_allow_files_of_older_versions_still_let_senders_in(tmp_path: Path) -> None:
    cred = tmp_path / "credentials"
    cred.mkdir(mode=0o700)
    (cred / "allow-telegram-bot.json").write_text('{"version": 1, "allow_from": ["77"]}')
    ac, store, _ = make(tmp_path)
    assert dm(ac, "77").allowed
    [old] = store.approved()
    assert (old.sender_id, old.sender_name, old.approved_at) == ("77", None, None)


def test_a_misspelt_owners_key_gets_a_close_match(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown key 'channels.telegram.accounts.bot.owner' — did you mean "
                                          "'owners'") as info:
        build_config({"channels": {"telegram": {"accounts": {"bot": {"owner": ["1"]}}}}}, StatePaths(tmp_path))
    assert "rename 'owner' to 'owners'" in info.value.hint
