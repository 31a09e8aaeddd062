"""Access control and pairing with an injected clock: codes, expiry, the cap of 3, one code an hour,
approval, every DM and group policy, mention gating, and owner-only files on disk."""

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
        ({"group_policy": "open", "group_allow_from": ["u1"]}, {"mentioned": True}, True),
        ({"group_policy": "open", "group_allow_from": ["u2"]}, {"mentioned": True}, False),
        ({"group_policy": "open", "group_allow_from": ["*"]}, {"mentioned": True}, True),
    ],
)
def test_group_gating(tmp_path: Path, account: dict[str, Any], kw: dict[str, Any], allowed: bool) -> None:
    ac, store, _ = make(tmp_path, **account)
    decision = ac.check("telegram", "bot", "group", "G1", "u1", **kw)
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
