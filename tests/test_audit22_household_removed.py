"""Audit 22, a household's week: a chat account removed from hermit.yaml, and later one added under its id.

The household's `shop` Telegram bot let strangers pair (dm_policy pairing): Dan was approved, Eve's code was still
pending. The owner removed `shop` from hermit.yaml; weeks later added a new bot under the same id `shop` (another
bot, another purpose). The pairing files are named by account id only, so the new `shop` let Dan in at once, and
`hermit pairing approve telegram <Eve's old code>` let in a stranger who had written to the old bot.

Held before: a removed account refuses everyone at once (unknown account), live. Now, too: the gateway retires the
pairing state of an account gone from the config as it reads it (at start and at each live reload): its pending
codes are dropped and its approved senders moved aside (credentials/retired/), so the account added again starts
with nobody approved. An account turned off (`enabled: false`) keeps them. Slack's approvals are also bound to the
workspace the account first ran in (channels/slack.py `_same_workspace`): a token of another workspace is refused.

Real configs in a real state dir, the real loader, LiveConfig/LiveAccess (the gateway's access and routing), the real
pairing store.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths, load_config
from hermit.config.load import LoadedConfig
from hermit.errors import AccessDenied
from hermit.gateway.live_config import LiveAccess, LiveConfig

OWNER, DAN, EVE = "1001", "7007", "8008"


def save(home: Path, *, shop: bool = True, shop_enabled: bool = True) -> LoadedConfig:
    accounts: dict[str, Any] = {"default": {"owners": [OWNER], "dm_policy": "allowlist"}}
    if shop:
        accounts["shop"] = {"dm_policy": "pairing", "enabled": shop_enabled}
    cfg = {"agents": {"defaults": {"memory_search": {"provider": "none"}}, "list": [{"id": "main", "default": True}]},
           "channels": {"telegram": {"accounts": accounts}}}
    tmp = home / "hermit.yaml.tmp"
    tmp.write_text(json.dumps(cfg), encoding="utf-8")
    os.replace(tmp, home / "hermit.yaml")
    return load_config(StatePaths(home))


def dm(access: LiveAccess, sender: str) -> tuple[bool, str | None]:
    """A DM to the `shop` bot: (let in, the reply a stranger gets — a pairing code)."""
    d = access.view().access.check("telegram", "shop", "dm", sender, sender, text="hi")
    return d.allowed, d.reply


@pytest.fixture(name="home")
def home_fixture(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    return home


def shop_with_dan_approved_and_eves_code(home: Path) -> tuple[LiveAccess, PairingStore, str]:
    store = PairingStore(home)
    access = LiveAccess(LiveConfig(save(home)), store, lambda: 0.0)
    assert dm(access, DAN)[0] is False
    store.approve("telegram", store.pending("telegram")[0].code)
    assert dm(access, DAN) == (True, None)
    assert dm(access, EVE)[0] is False
    (eve,) = store.pending("telegram")
    return access, store, eve.code


@pytest.mark.parametrize("when", ["live", "at start"])
def test_an_account_added_again_under_a_removed_ones_id_inherits_no_pairing(home: Path, when: str) -> None:
    access, store, eves_code = shop_with_dan_approved_and_eves_code(home)
    removed = save(home, shop=False)
    if when == "live":
        assert dm(access, DAN)[0] is False  # held before: a removed account lets nobody in, at once
    else:  # the gateway stopped, the account removed, the gateway started again
        access = LiveAccess(LiveConfig(removed), store, lambda: 0.0)
    with pytest.raises(AccessDenied):
        store.approve("telegram", eves_code)  # the old bot's stranger's code no longer lets anyone in
    assert store.approved("telegram") == []
    retired = list((home / "credentials" / "retired").iterdir())
    assert [p.name.split(".")[0] for p in retired] == ["allow-telegram-shop"]
    assert DAN in retired[0].read_text()  # kept aside for the owner to read
    save(home)  # a new bot added under the id `shop`
    allowed, reply = dm(access, DAN)
    assert not allowed and reply is not None and "code" in reply.lower()  # a stranger to it: pairs anew
    assert dm(access, EVE)[0] is False


def test_an_account_turned_off_keeps_its_contacts(home: Path) -> None:
    access, store, eves_code = shop_with_dan_approved_and_eves_code(home)
    save(home, shop_enabled=False)
    assert dm(access, DAN)[0] is False  # off: nobody, at once
    save(home)
    assert dm(access, DAN) == (True, None)  # on again: Dan is still the owner's approved contact
    store.approve("telegram", eves_code)
    assert dm(access, EVE) == (True, None)
    assert not (home / "credentials" / "retired").exists()
