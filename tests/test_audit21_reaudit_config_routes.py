"""Re-audit s21 (t12) of the owner-move refusal (live_config.owners_moved, gateway/owner_routes.py) as an attacker.

- An account renamed while the gateway is stopped (`family` → `family2`, the same bot and owners) with the family
  agent removed: the start check keyed the record by account, so the renamed account was "new" and its owner — the
  relative — started as the owner of the default agent's main session.
- An account's contacts: with the default agent sharing its main session with contacts, removing the family agent
  sent the family bot's contacts into the default agent's main session, live and at start.
- The record itself: damaged, a symlink, another user's — each turned the check off (fail open).
Real configs on a real state dir, the real loader and router; the record written by `record` as the gateway does.
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
from hermit.errors import ConfigError
from hermit.gateway import owner_routes
from hermit.gateway.live_config import LiveAccess, LiveConfig


def save(home: Path, config: dict[str, Any]) -> LoadedConfig:
    tmp = home / "hermit.yaml.tmp"
    tmp.write_text(json.dumps(config), encoding="utf-8")
    os.replace(tmp, home / "hermit.yaml")
    return load_config(StatePaths(home))


def config(home: Path, *, family: bool = True, family_account: str = "family", share: bool = False,
           family_owners: tuple[str, ...] = ("3003",), extra: dict[str, Any] | None = None) -> dict[str, Any]:
    main: dict[str, Any] = {"id": "main", "default": True}
    if share:
        main["session"] = {"dangerously_share_main_session_with_contacts": True}
    agents = [main] + ([{"id": "family", "workspace": str(home / "family-ws"), "sandbox": {"mode": "all"}}]
                       if family else [])
    accounts: dict[str, Any] = {
        "default": {"owners": ["1001"], "dm_policy": "allowlist", "allow_from": ["2002"]},
        family_account: {"owners": list(family_owners), "dm_policy": "allowlist", "allow_from": ["4004"]},
        **(extra or {})}
    return {"agents": {"defaults": {"memory_search": {"provider": "none"}}, "list": agents},
            "channels": {"telegram": {"accounts": accounts}},
            "bindings": [{"match": {"channel": "telegram", "account_id": family_account}, "agent_id": "family"}]
            if family else []}


@pytest.fixture(name="home")
def home_fixture(tmp_path: Path) -> Path:
    """A state dir (0700) with the family agent's workspace; test_audit21_reaudit_config_*.py import it."""
    home = tmp_path / "home"
    (home / "family-ws").mkdir(parents=True)
    os.chmod(home, 0o700)
    return home


def started(home: Path, cfg: dict[str, Any]) -> LoadedConfig:
    """A gateway started on `cfg` (its start check passed, its record written)."""
    loaded = save(home, cfg)
    owner_routes.check_start(home, loaded)
    owner_routes.record(home, loaded)
    return loaded


def test_an_account_renamed_while_stopped_does_not_hand_its_owner_the_default_agents_main_session(home: Path) -> None:
    started(home, config(home))
    renamed = save(home, config(home, family=False, family_account="family2"))
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, renamed)
    assert "telegram/family2/3003 (agent family -> agent main; a new or renamed account)" in refused.value.message
    assert "remove" in (refused.value.hint or "") and "owner-routes.json" in (refused.value.hint or "")


def test_a_new_agent_with_its_own_bot_owned_by_the_owner_still_starts(home: Path) -> None:
    """The guard of the rule above: a new agent nobody reached before, on a new account the owner owns."""
    started(home, config(home))
    cfg = config(home, extra={"work": {"owners": ["1001"], "dm_policy": "allowlist"}})
    cfg["agents"]["list"].append({"id": "work", "workspace": str(home / "work-ws")})
    (home / "work-ws").mkdir()
    cfg["bindings"].append({"match": {"channel": "telegram", "account_id": "work"}, "agent_id": "work"})
    owner_routes.check_start(home, save(home, cfg))
    # And an id new to owners of a new account bound to main (a second bot of the owner's): a promotion.
    cfg2 = config(home, extra={"second": {"owners": ["1001", "5005"], "dm_policy": "allowlist"}})
    owner_routes.check_start(home, save(home, cfg2))


def test_contacts_moved_into_a_shared_main_session_are_refused_live(home: Path) -> None:
    loaded = save(home, config(home, share=True, family_owners=()))
    live = LiveConfig(loaded)
    access = LiveAccess(live, PairingStore(home), lambda: 0.0)
    assert access.view().router.resolve(_contact_dm("family")).agent_id == "family"
    save(home, config(home, family=False, share=True, family_owners=()))
    with pytest.raises(ConfigError) as refused:
        live.current()
    assert "channels.telegram.accounts.family (its contacts: agent family -> agent main)" in refused.value.message


def test_contacts_moved_into_a_shared_main_session_are_refused_at_start(home: Path) -> None:
    started(home, config(home, share=True, family_owners=()))
    moved = save(home, config(home, family=False, share=True, family_owners=()))
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, moved)
    assert "telegram/family/* (agent family -> agent main)" in refused.value.message


def _contact_dm(account: str) -> Any:
    from hermit.agent.routing import RouteInput
    return RouteInput("telegram", account, "dm", "4004")


def _moved_config(home: Path) -> LoadedConfig:
    started(home, config(home))
    return save(home, config(home, family=False))


@pytest.mark.parametrize("damage", ["truncated by a kill -9", "not an object", "a symlink", "another user's",
                                    "a folder"])
def test_a_record_that_cannot_be_trusted_refuses_the_start(home: Path, damage: str) -> None:
    moved = _moved_config(home)
    path = owner_routes.path_of(home)
    with pytest.raises(ConfigError):
        owner_routes.check_start(home, moved)  # the control: the record refuses the move
    text = path.read_text()
    if damage == "truncated by a kill -9":
        path.write_text(text[: len(text) // 2])
    elif damage == "not an object":
        path.write_text("[]")
    elif damage == "a symlink":
        elsewhere = home / "elsewhere.json"
        elsewhere.write_text("{}")
        path.unlink()
        path.symlink_to(elsewhere)
    elif damage == "another user's":
        if os.geteuid() == 0:
            os.chown(path, 65534, 65534)
        else:  # as a normal user: a file planted by someone else is what a link to theirs reads as
            path.unlink()
            path.symlink_to("/etc/hostname")
    else:
        path.unlink()
        path.mkdir()
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, moved)
    assert str(path) in refused.value.message and "remove" in (refused.value.hint or "")


def test_a_removed_record_is_the_owners_reset(home: Path) -> None:
    moved = _moved_config(home)
    owner_routes.path_of(home).unlink()
    owner_routes.check_start(home, moved)  # the documented way to move someone on purpose


def _off(cfg: dict[str, Any], account: str = "family") -> dict[str, Any]:
    cfg["channels"]["telegram"]["accounts"][account]["enabled"] = False
    return cfg


def test_an_account_turned_off_then_on_without_its_agent_is_refused_live(home: Path) -> None:
    """Two edits each let through: the family bot turned off (applied), then its agent and binding removed and the
    bot turned on again — owners_moved compared with the config in force only, where the account was off."""
    live = LiveConfig(save(home, config(home)))
    access = LiveAccess(live, PairingStore(home), lambda: 0.0)
    save(home, _off(config(home)))
    assert not access.view().access.is_owner("telegram", "family", "3003", None)
    save(home, _off(config(home, family=False)))  # the agent removed while its bot is off: nobody is moved
    access.view()
    save(home, config(home, family=False))  # on again
    with pytest.raises(ConfigError) as refused:
        live.current()
    assert "channels.telegram.accounts.family (owner 3003: agent family -> agent main)" in refused.value.message
    assert not access.is_owner("telegram", "family", "3003", None)


def test_an_account_turned_off_then_on_without_its_agent_is_refused_at_start(home: Path) -> None:
    """The same across restarts: the record written at the reload that turned the bot off kept its owner's route."""
    started(home, config(home))
    first = load_config(StatePaths(home))
    owner_routes.record(home, save(home, _off(config(home))), first)  # a reload applied by the running gateway
    started(home, _off(config(home, family=False)))  # a restart while it is off: nothing moves
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, save(home, config(home, family=False)))
    assert "telegram/family/3003 (agent family -> agent main)" in refused.value.message


def test_an_account_renamed_while_running_is_refused_at_the_next_start(home: Path) -> None:
    """Renamed live (a renamed account waits for a restart, so the reload is applied and recorded), then restarted."""
    live = LiveConfig(started(home, config(home)))
    live.listen(lambda new: owner_routes.record(home, new, live.started))  # as cli/gateway.py cmd_run does
    save(home, config(home, family=False, family_account="family2"))
    live.current()
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, load_config(StatePaths(home)))
    assert "telegram/family2/3003 (agent family -> agent main; a new or renamed account)" in refused.value.message


def test_a_real_gateway_renamed_live_refuses_the_next_start(tmp_path: Path) -> None:
    """Through the real `hermit gateway run` and the fake Telegram: the family bot renamed (family → family2, the same
    token) and the family agent removed while the gateway runs. The renamed account waits for a restart, so the reload
    is applied; the record written at it named family2/3003 → main, and the restart gave the relative main's main
    session. Now the reload's record leaves out accounts the gateway did not start with, and the restart is refused."""
    import asyncio
    import time

    from fakes.fake_telegram import FakeTelegram
    from hermit.testing.fake_provider import FakeProvider
    from test_channel_gateway import Gateway

    home = tmp_path / "home"
    (home / "family-ws").mkdir(parents=True)
    os.chmod(home, 0o700)
    record = owner_routes.path_of(home)

    def write(fake: FakeTelegram, provider: FakeProvider, account: str, family: bool) -> None:
        cfg = config(home, family=family, family_account=account)
        cfg["agents"]["defaults"]["model"] = "fake/test-model"
        cfg["models"] = {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}}
        cfg["gateway"] = {"shutdown_grace_seconds": 2}
        cfg["channels"]["telegram"]["accounts"] = {account: {
            "token_env": "TG_FAMILY", "api_base": fake.base_url, "owners": ["3003"], "dm_policy": "allowlist",
            "poll_timeout_seconds": 1}}
        save(home, cfg)
        (home / "hermit.yaml").chmod(0o600)

    async def main() -> str:
        fake = await FakeTelegram("777:FAMILY").start()
        provider = FakeProvider([{"text": "noted", "repeat": True}]).start()
        env = {**os.environ, "HERMIT_HOME": str(home), "TG_FAMILY": "777:FAMILY", "OMP_WAIT_POLICY": "PASSIVE"}
        try:
            write(fake, provider, "family", True)
            gw = await Gateway(home, env).start()
            written = time.time_ns()
            write(fake, provider, "family2", False)  # renamed, family removed: applied live, recorded
            deadline = time.monotonic() + 60
            while os.stat(record).st_mtime_ns < written:  # the reload's record (written after the edit)
                assert time.monotonic() < deadline, "the running gateway never recorded the reload"
                await asyncio.sleep(0.05)
            assert await gw.stop() == 0
            try:
                gw2 = await Gateway(home, env).start()
            except AssertionError as e:
                return str(e)
            await gw2.stop()
            raise AssertionError(f"the gateway started and gave 3003 the main agent's main session: "
                                 f"{record.read_text()}")
        finally:
            provider.stop()
            await fake.stop()

    refused = asyncio.run(main())
    assert "telegram/family2/3003 (agent family -> agent main; a new or renamed account)" in refused, refused


def test_an_account_id_holding_a_slash_is_remembered_too(home: Path) -> None:
    """Account ids may hold "/" (the schema takes any name), and the record's keys join their parts with "/": the
    off-then-on check read `fam/ily`'s key as account `fam`, owner `ily`, and let the move through."""
    acc = "fam/ily"
    live = LiveConfig(save(home, config(home, family_account=acc)))
    save(home, _off(config(home, family_account=acc), acc))
    live.current()
    save(home, _off(config(home, family=False, family_account=acc), acc))
    live.current()
    save(home, config(home, family=False, family_account=acc))
    with pytest.raises(ConfigError) as refused:
        live.current()
    assert "channels.telegram.accounts.fam/ily (owner 3003: agent family -> agent main)" in refused.value.message
