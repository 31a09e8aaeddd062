"""A config's life, reloads that cannot be applied (audit s21 t3): hermit.yaml edited while the gateway runs into a
config that would merge two agents' notes or route a chat to an agent that is gone. Guards for what held: the
reload is refused (LiveConfig.current raises, so no channel sender is let in and nothing scheduled is delivered),
the old config is never handed to a sender meanwhile, the web chat (the token holder) keeps the last good one, and
the next good save is applied. The real loader on a real state dir; hermit.yaml replaced by rename."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths, load_config
from hermit.errors import ConfigError
from hermit.gateway.live_config import LiveAccess, LiveConfig


def save(home: Path, config: dict[str, Any]) -> None:
    """hermit.yaml replaced by rename (JSON is YAML)."""
    tmp = home / "hermit.yaml.tmp"
    tmp.write_text(json.dumps(config), encoding="utf-8")
    os.replace(tmp, home / "hermit.yaml")


def two_agents(home: Path, family_workspace: str, bindings: list[dict[str, Any]] | None = None,
               agents: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"agents": {"defaults": {"memory_search": {"provider": "none"}},
                       "list": agents or [{"id": "main", "default": True},
                                          {"id": "family", "workspace": family_workspace,
                                           "sandbox": {"mode": "all"}}]},
            "channels": {"telegram": {"accounts": {
                "default": {"owners": ["1001"], "dm_policy": "allowlist", "allow_from": ["2002"]},
                "family": {"owners": ["3003"], "dm_policy": "allowlist"}}}},
            "bindings": bindings if bindings is not None else [
                {"match": {"channel": "telegram", "account_id": "family"}, "agent_id": "family"}]}


def live(tmp: Path) -> tuple[Path, LiveConfig, LiveAccess]:
    home = tmp / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "family-ws").mkdir()
    save(home, two_agents(home, str(home / "family-ws")))
    cfg = LiveConfig(load_config(StatePaths(home)))
    access = LiveAccess(cfg, PairingStore(home), lambda: 0.0)
    assert access.is_owner("telegram", "family", "3003", None)
    return home, cfg, access


@pytest.mark.parametrize("change", ["same workspace", "agent removed, bindings kept", "workspace inside another"])
def test_a_reload_that_cannot_be_applied_lets_no_sender_in_until_fixed(tmp_path: Path, change: str) -> None:
    home, cfg, access = live(tmp_path)
    good = (home / "hermit.yaml").read_text()
    if change == "same workspace":
        save(home, two_agents(home, str(home / "workspace")))  # family pointed at main's notes
    elif change == "workspace inside another":
        save(home, two_agents(home, str(home / "workspace" / "family")))
    else:
        save(home, two_agents(home, "", agents=[{"id": "main", "default": True}]))
    with pytest.raises(ConfigError):
        cfg.current()
    with pytest.raises(ConfigError):
        access.view()
    # Nobody is an owner or a contact by the old rules meanwhile; the web chat keeps the last good config.
    assert not access.is_owner("telegram", "family", "3003", None)
    assert not access.is_owner("telegram", "default", "1001", None)
    assert access.owner_view().loaded is cfg.last_good()
    assert {a.id for a in cfg.last_good().agents} == {"main", "family"}
    (home / "hermit.yaml.tmp").write_text(good, encoding="utf-8")
    os.replace(home / "hermit.yaml.tmp", home / "hermit.yaml")
    assert cfg.current() is cfg.last_good() and access.is_owner("telegram", "family", "3003", None)


def test_an_agent_removed_with_its_bindings_does_not_hand_its_owner_the_default_agents_main_session(
        tmp_path: Path) -> None:
    """HIGH before: with family and its binding taken out (the config stays valid), the family account's DMs go to
    the default agent, and the account's owner — the relative — was at once the owner of main's main session
    (MEMORY.md, unsandboxed tools). Now the live reload is refused, naming the account, until the account is bound
    again, turned off or its owners changed."""
    home, cfg, access = live(tmp_path)
    save(home, two_agents(home, "", bindings=[], agents=[{"id": "main", "default": True}]))
    with pytest.raises(ConfigError) as refused:
        cfg.current()
    assert "channels.telegram.accounts.family (owner 3003: agent family -> agent main)" in refused.value.message
    assert "enabled: false" in (refused.value.hint or "")
    assert not access.is_owner("telegram", "family", "3003", None)  # nobody, while refused
    # Turned off: applied; main's own owner is main's again, the relative reaches nothing.
    config = two_agents(home, "", bindings=[], agents=[{"id": "main", "default": True}])
    config["channels"]["telegram"]["accounts"]["family"]["enabled"] = False
    save(home, config)
    view = access.view()
    assert {a.id for a in view.loaded.agents} == {"main"}
    assert access.is_owner("telegram", "default", "1001", None)
    assert not access.is_owner("telegram", "family", "3003", None)


def test_an_owner_added_in_the_same_edit_is_a_promotion_and_is_applied(tmp_path: Path) -> None:
    home, cfg, access = live(tmp_path)
    config = two_agents(home, str(home / "family-ws"))
    config["channels"]["telegram"]["accounts"]["default"]["owners"] = ["1001", "2002"]
    save(home, config)
    assert access.is_owner("telegram", "default", "2002", None)


def test_a_restart_applies_the_move_the_live_reload_refused(tmp_path: Path) -> None:
    """LiveConfig alone, built afresh, applies the file as it is: the start's own check is `hermit gateway run`'s
    (gateway/owner_routes.py, the next test)."""
    home, cfg, _ = live(tmp_path)
    save(home, two_agents(home, "", bindings=[], agents=[{"id": "main", "default": True}]))
    with pytest.raises(ConfigError):
        cfg.current()
    restarted = LiveAccess(LiveConfig(load_config(StatePaths(home))), PairingStore(home), lambda: 0.0)
    from hermit.agent.routing import RouteInput

    route = restarted.view().router.resolve(RouteInput("telegram", "family", "dm", "3003", sender_is_owner=True))
    assert (route.agent_id, route.session_key) == ("main", "agent:main:main")


def test_a_guild_binding_dropped_moves_no_owner_but_a_slack_team_binding_does(tmp_path: Path) -> None:
    """Discord DMs carry no guild, so dropping a guild binding moves no owner's DMs (no refusal); a Slack DM carries
    its workspace, so dropping a team binding moves the owner's DMs in that workspace to another agent (refused)."""
    from hermit.config.load import build_config
    from hermit.gateway.live_config import owners_moved

    def cfg(bindings: list[dict[str, Any]]) -> Any:
        return build_config({"agents": {"defaults": {"memory_search": {"provider": "none"}},
                                        "list": [{"id": "main", "default": True}, {"id": "fam"}]},
                             "channels": {"slack": {"accounts": {"default": {"owners": ["U0OWNER1"]}}},
                                          "discord": {"accounts": {"default": {"owners": ["123456789012345678"]}}}},
                             "bindings": bindings}, StatePaths(tmp_path))

    guild = {"match": {"channel": "discord", "guild_id": "999"}, "agent_id": "fam"}
    team = {"match": {"channel": "slack", "team_id": "T0001"}, "agent_id": "fam"}
    assert owners_moved(cfg([guild]), cfg([])) is None
    refused = owners_moved(cfg([team]), cfg([]))
    assert refused is not None and "channels.slack.accounts.default (owner U0OWNER1: agent fam -> agent main)" in \
        refused.message


def test_a_restart_refuses_what_the_live_reload_refused_until_the_record_is_removed(tmp_path: Path) -> None:
    """The HIGH of the live reload, across a restart (owner_routes): the real `hermit gateway run` against the fake
    Telegram records which agent the family bot's owner reaches; with the family agent and its binding taken out of
    hermit.yaml while it is stopped, the next start is refused naming the account, until the record is removed (the
    owner's explicit act) or the account is bound again, turned off or its owners changed."""
    import asyncio

    from fakes.fake_telegram import FakeTelegram
    from hermit.gateway.owner_routes import path_of
    from hermit.testing.fake_provider import FakeProvider
    from test_channel_gateway import Gateway

    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "family-ws").mkdir()

    def config(fake: FakeTelegram, provider: FakeProvider, family: bool, enabled: bool = True) -> None:
        agents: list[dict[str, Any]] = [{"id": "main", "default": True}]
        if family:
            agents.append({"id": "family", "workspace": str(home / "family-ws")})
        save(home, {"agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}},
                               "list": agents},
                    "models": {"providers": {"fake": {"type": "openai-compatible",
                                                      "base_url": provider.openai_base_url}}},
                    "gateway": {"shutdown_grace_seconds": 2},
                    "channels": {"telegram": {"accounts": {"family": {
                        "token_env": "TG_FAMILY", "api_base": fake.base_url, "owners": ["3003"],
                        "dm_policy": "allowlist", "enabled": enabled, "poll_timeout_seconds": 1}}}},
                    "bindings": [{"match": {"channel": "telegram", "account_id": "family"}, "agent_id": "family"}]
                    if family else []})
        (home / "hermit.yaml").chmod(0o600)

    async def main() -> tuple[str, list[str]]:
        fake = await FakeTelegram("777:FAMILY").start()
        provider = FakeProvider([{"text": "noted", "repeat": True}]).start()
        env = {**os.environ, "HERMIT_HOME": str(home), "TG_FAMILY": "777:FAMILY", "OMP_WAIT_POLICY": "PASSIVE"}
        try:
            config(fake, provider, family=True)
            gw = await Gateway(home, env).start()
            assert await gw.stop() == 0
            recorded = json.loads(path_of(home).read_text())
            # 3003 reaches family's main session; the account's contacts (*) their own sessions of family.
            assert recorded == {"telegram/family/3003": "family", "telegram/family/*": "family"}
            config(fake, provider, family=False)  # family taken out while the gateway is stopped
            try:
                await Gateway(home, env).start()
            except AssertionError as e:
                refused = str(e)
            else:
                raise AssertionError("the gateway started and gave 3003 the main agent's main session")
            path_of(home).unlink()  # the owner's explicit act: move them on purpose
            gw = await Gateway(home, env).start()
            assert await gw.stop() == 0
            return refused, [str(json.loads(path_of(home).read_text()))]
        finally:
            provider.stop()
            await fake.stop()

    refused, after = asyncio.run(main())
    assert "telegram/family/3003 (agent family -> agent main)" in refused, refused
    assert "remove" in refused and "owner-routes.json" in refused
    assert after == [str({"telegram/family/*": "main", "telegram/family/3003": "main"})]
