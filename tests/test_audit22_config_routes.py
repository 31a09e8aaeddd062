"""Audit s22 (t4) of the owner-move refusal (gateway/owner_routes.py, live_config.owners_moved) left by s21.

- Harmless moves were refused like the rest: the owner who owns both bots (their family bot's agent removed, its DMs
  now in the main agent they already own through the default bot), and a relative moved with their bot to a brand-new
  agent nobody reached, with nothing in its memory. Now both start and reload (gateway/owner_moves.py); everything
  else stays refused: the default agent, an agent with memory or other owners, a sandboxed main moved to an
  unsandboxed one.
- The way out was "remove the file": `hermit channels accept-routes` shows the moves and rewrites the record after a
  "y" (nothing changes on anything else).
- One function for every entry point: `hermit service start` and `install` refused to start the service only after
  systemd had started a gateway that refused (a restart loop); now they refuse first, in the words of the gateway's
  start check and `hermit doctor`'s.
Real configs on a real state dir, the real loader and router, real `hermit` processes for the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths, load_config
from hermit.errors import ConfigError
from hermit.gateway import owner_routes
from hermit.gateway.live_config import LiveAccess, LiveConfig
from prochelpers import PROC_TIMEOUT
from test_audit21_reaudit_config_routes import config, home_fixture, save, started
from test_s20_cli_service import calls, installed, machine
from test_service import hermit

__all__ = ["home_fixture"]


def with_kids(home: Path, *, memory: str | None = None, kids_sandbox: str = "all",
              kids_owner: str | None = None, default_kids: bool = False) -> dict[str, Any]:
    """The family bot bound to a new agent `kids` instead of `family` (which stays)."""
    cfg = config(home)
    kids: dict[str, Any] = {"id": "kids", "workspace": str(home / "kids-ws"), "sandbox": {"mode": kids_sandbox}}
    if default_kids:
        kids["default"] = True
        cfg["agents"]["list"][0].pop("default")
    cfg["agents"]["list"].append(kids)
    cfg["bindings"] = [{"match": {"channel": "telegram", "account_id": "family"}, "agent_id": "kids"}]
    if kids_owner is not None:
        cfg["channels"]["telegram"]["accounts"]["kids"] = {"owners": [kids_owner]}
        cfg["bindings"].append({"match": {"channel": "telegram", "account_id": "kids"}, "agent_id": "kids"})
    ws = home / "kids-ws"
    ws.mkdir(exist_ok=True)
    if memory is not None:
        (ws / "MEMORY.md").write_text(memory)
    return cfg


def live_reload(home: Path, before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """A running gateway on `before`, `after` saved: the reload's error, None when applied."""
    live = LiveConfig(save(home, before))
    access = LiveAccess(live, PairingStore(home / "pairing"), lambda: 0.0)
    save(home, after)
    try:
        access.view()
    except ConfigError as e:
        return e.message
    return None


# ---- harmless moves let through ---------------------------------------------------------------------------

def test_the_owner_of_both_bots_is_let_through_when_the_family_agent_is_removed_but_not_its_contacts(home: Path) -> None:
    both = config(home, family_owners=("1001",))  # the owner (1001) owns the default bot and the family bot
    started(home, both)
    removed = save(home, config(home, family=False, family_owners=("1001",)))
    judged = {m.key: m.harmless for m in owner_routes.all_moves(home, removed)}
    assert judged["telegram/family/1001"] is not None  # refused before: "telegram/family/1001 (agent family -> ...)"
    # The family bot's contacts, though, would read main's shared notes as the owner writes them (t11): refused even
    # while main is still empty.
    assert judged["telegram/family/*"] is None
    refused = live_reload(home, both, config(home, family=False, family_owners=("1001",)))
    assert refused is not None and "its contacts" in refused and "owner 1001" not in refused


def test_the_owner_of_both_bots_does_not_carry_a_relative_along(home: Path) -> None:
    both = config(home, family_owners=("1001", "3003"))
    started(home, both)
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, save(home, config(home, family=False, family_owners=("1001", "3003"))))
    assert "telegram/family/3003 (agent family -> agent main)" in refused.value.message
    assert "1001" not in refused.value.message
    assert "hermit channels accept-routes" in (refused.value.hint or "")


def test_a_relative_moved_with_their_bot_to_a_brand_new_agent_starts(home: Path) -> None:
    started(home, config(home))
    owner_routes.check_start(home, save(home, with_kids(home)))  # refused before: family -> kids
    assert live_reload(home, config(home), with_kids(home)) is None


@pytest.mark.parametrize(("why", "kwargs"), [
    ("kids already has private memory", {"memory": "the owner's notes about the kids\n"}),
    ("kids runs owner commands unsandboxed where family's were sandboxed", {"kids_sandbox": "non-main"}),
    ("kids has an owner of its own", {"kids_owner": "5005"}),
    ("kids is the default agent (the token holder's)", {"default_kids": True}),
])
def test_a_move_to_an_agent_that_is_not_fresh_or_is_less_confined_stays_refused(
        home: Path, why: str, kwargs: dict[str, Any]) -> None:
    first = config(home)
    if kwargs.get("kids_owner"):  # kids and its own bot were there before, with their owner
        first = with_kids(home, kids_owner=kwargs["kids_owner"])
        first["bindings"] = [b for b in first["bindings"] if b["match"]["account_id"] != "family"]
        first["bindings"].append({"match": {"channel": "telegram", "account_id": "family"}, "agent_id": "family"})
    started(home, first)
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, save(home, with_kids(home, **kwargs)))
    assert "telegram/family/3003 (agent family -> agent " in refused.value.message, why
    assert live_reload(home, first, with_kids(home, **kwargs)) is not None, why


# ---- the way out: hermit channels accept-routes -------------------------------------------------------------

def accept(tmp_path: Path, home: Path, answer: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HERMIT_HOME=str(home), HOME=str(tmp_path / "user"), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "channels", "accept-routes", *extra],
                          capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT, input=answer)


def test_accept_routes_shows_the_moves_and_rewrites_the_record_only_after_yes(tmp_path: Path, home: Path) -> None:
    started(home, config(home))
    record = owner_routes.path_of(home).read_bytes()
    removed = save(home, config(home, family=False))
    no = accept(tmp_path, home, "n\n")
    assert no.returncode == 1, no.stderr
    assert "telegram account family, owner 3003: agent family -> agent main" in no.stdout
    assert "nothing changed" in no.stdout and owner_routes.path_of(home).read_bytes() == record
    with pytest.raises(ConfigError):
        owner_routes.check_start(home, removed)
    yes = accept(tmp_path, home, "y\n")
    assert yes.returncode == 0, yes.stderr
    assert "accepted" in yes.stdout and "start the gateway" in yes.stdout
    owner_routes.check_start(home, removed)  # the move is the record now
    assert json.loads(owner_routes.path_of(home).read_text())["telegram/family/3003"] == "main"
    assert (owner_routes.path_of(home).stat().st_mode & 0o777) == 0o600
    again = accept(tmp_path, home, "")
    assert again.returncode == 0 and "nothing to accept" in again.stdout


def test_accept_routes_replaces_a_damaged_record_after_yes(tmp_path: Path, home: Path) -> None:
    started(home, config(home))
    owner_routes.path_of(home).write_text("{\"telegram/family/3003\": ")
    loaded = load_config(StatePaths(home))
    with pytest.raises(ConfigError):
        owner_routes.check_start(home, loaded)
    r = accept(tmp_path, home, "", "--yes")
    assert r.returncode == 0, r.stderr
    assert "is not valid JSON" in r.stdout
    owner_routes.check_start(home, loaded)


# ---- one function for every entry point --------------------------------------------------------------------

def test_service_start_refuses_an_owner_move_before_systemd_starts_a_gateway(tmp_path: Path, home: Path) -> None:
    started(home, config(home))
    env = machine(tmp_path, home)
    installed(tmp_path, home, env)
    save(home, config(home, family=False))
    for verb in ("start", "restart"):
        r = hermit(env, "service", verb)
        assert r.returncode != 0, r.stdout
        assert "telegram/family/3003 (agent family -> agent main)" in r.stderr, r.stderr
        assert not [c for c in calls(tmp_path) if c.startswith(f"--user {verb}")], verb  # systemd never asked
    r = hermit(env, "service", "install")
    assert r.returncode != 0 and "telegram/family/3003" in r.stderr, r.stderr
    doctor = hermit(env, "doctor")
    assert "telegram/family/3003 (agent family -> agent main)" in doctor.stdout + doctor.stderr
    save(home, config(home))
    r = hermit(env, "service", "start")
    assert r.returncode == 0, r.stderr
    assert "--user start" in " ".join(calls(tmp_path))


# ---- contacts moved to another agent read its shared notes ------------------------------------------------------

NOTE = "Tuesday: the biopsy results come Friday; tell no one at work yet.\n"


def test_contacts_moved_to_the_default_agent_by_a_routing_change_are_refused(tmp_path: Path, home: Path) -> None:
    """The family bot's contact (4004) talked to the family agent. The family agent and its binding removed, the bot
    kept: 4004's DMs went to a session of its own under agent main — not main's main session, so nothing refused it —
    where main's hand-written daily log is shared text that session reads (audience `shared`)."""
    from hermit.agent.routing import RouteInput, Router
    from hermit.memory.policy.audience import reader_for_session, visible_text

    ws = home / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-12-05.md").write_text(NOTE)
    started(home, config(home))
    removed = save(home, config(home, family=False))
    route = Router.from_config(removed).resolve(RouteInput("telegram", "family", "dm", "4004"))
    assert (route.agent_id, route.main) == ("main", False)
    assert visible_text(NOTE, "memory/2026-12-05.md", reader_for_session(route.session_key)) == NOTE  # what it reads
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, removed)
    assert "telegram/family/* (agent family -> agent main)" in refused.value.message
    assert live_reload(home, config(home), config(home, family=False)) is not None
    # Main with nothing in its memory yet is still the owner's: they would read its daily logs from the next one
    # on (t11; a brand-new agent that only they and their owner reach is let through, test_s22_reaudit_config_moves).
    for path in (ws / "memory" / "2026-12-05.md",):
        path.unlink()
    assert live_reload(home, config(home), config(home, family=False, family_owners=("1001",))) is not None


def with_group(cfg: dict[str, Any], *, bound: bool = True) -> dict[str, Any]:
    """The default bot lets the family group in; bound to the family agent (`bound`), else it goes to main."""
    cfg["channels"]["telegram"]["accounts"]["default"].update(group_policy="allowlist", groups=["-100500"],
                                                               group_allow_from=["2002"])
    if bound:
        cfg["bindings"].append({"match": {"channel": "telegram", "peer": {"kind": "group", "id": "-100500"}},
                                "agent_id": "family"})
    return cfg


def test_a_group_moved_to_another_agent_by_a_dropped_binding_is_refused(tmp_path: Path, home: Path) -> None:
    """The family group, bound to the family agent, on the default bot: its binding dropped (the family agent and bot
    kept), the group went to agent main's group session, which reads main's shared daily log."""
    from hermit.agent.routing import RouteInput, Router
    from hermit.memory.policy.audience import reader_for_session, visible_text

    ws = home / "workspace"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-12-05.md").write_text(NOTE)
    started(home, with_group(config(home)))
    dropped = save(home, with_group(config(home), bound=False))
    route = Router.from_config(dropped).resolve(RouteInput("telegram", "default", "group", "-100500"))
    assert route.agent_id == "main"
    assert visible_text(NOTE, "memory/2026-12-05.md", reader_for_session(route.session_key)) == NOTE
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, dropped)
    assert "telegram/default/group:-100500 (agent family -> agent main)" in refused.value.message
    refused_live = live_reload(home, with_group(config(home)), with_group(config(home), bound=False))
    assert refused_live is not None and "group -100500" in refused_live
    # A group the edit lets in for the first time is a promotion it states.
    started(home, config(home))
    owner_routes.check_start(home, save(home, with_group(config(home), bound=False)))
    assert live_reload(home, config(home), with_group(config(home), bound=False)) is None


def test_gateway_restart_refuses_an_owner_move_instead_of_restarting_into_a_refusal(tmp_path: Path) -> None:
    """`hermit gateway restart` (new this session) signals the running gateway to exec itself again, and the new
    start refuses an owner move the live reload already refused: the gateway was gone. Now the command asks the same
    start check first and signals nothing; the gateway keeps running (the same process, answering)."""
    import asyncio
    import signal
    import time

    from fakes.fake_telegram import FakeTelegram
    from hermit.testing.fake_provider import FakeProvider
    from test_channel_gateway import Gateway

    home = tmp_path / "home"
    (home / "family-ws").mkdir(parents=True)
    os.chmod(home, 0o700)

    def write(fake: FakeTelegram, provider: FakeProvider, family: bool) -> None:
        cfg = config(home, family=family)
        cfg["agents"]["defaults"]["model"] = "fake/test-model"
        cfg["models"] = {"providers": {"fake": {"type": "openai-compatible", "base_url": provider.openai_base_url}}}
        cfg["gateway"] = {"shutdown_grace_seconds": 2}
        cfg["channels"]["telegram"]["accounts"] = {"family": {
            "token_env": "TG_FAMILY", "api_base": fake.base_url, "owners": ["3003"], "dm_policy": "allowlist",
            "poll_timeout_seconds": 1}}
        save(home, cfg)
        (home / "hermit.yaml").chmod(0o600)

    async def main() -> tuple[subprocess.CompletedProcess[str], int | None, str]:
        fake = await FakeTelegram("777:FAMILY").start()
        provider = FakeProvider([{"text": "noted", "repeat": True}]).start()
        env = {**os.environ, "HERMIT_HOME": str(home), "TG_FAMILY": "777:FAMILY", "OMP_WAIT_POLICY": "PASSIVE"}
        try:
            write(fake, provider, True)
            gw = await Gateway(home, env).start()
            assert gw.proc is not None
            write(fake, provider, False)  # the family agent removed: the reload is refused, the gateway fails closed
            deadline = time.monotonic() + PROC_TIMEOUT
            r = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "hermit.cli.main", "gateway", "restart"],
                                        capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT)
            alive = gw.proc.returncode
            # The signal itself (`kill -USR1`, what the command sends): the gateway asks the same check, and stays.
            gw.proc.send_signal(signal.SIGUSR1)
            said = ""
            while gw.proc.returncode is None and "not restarting" not in said:
                await asyncio.sleep(0.05)  # polling the gateway's log for its answer, bounded below
                said = "".join(p.read_text(errors="replace") for p in [gw.stderr, *(home / "logs").glob("*.log")]
                               if p.exists())
                assert time.monotonic() < deadline, "the gateway neither answered the signal nor exited"
            alive = alive if gw.proc.returncode is None else gw.proc.returncode
            await gw.stop()
            return r, alive, said
        finally:
            provider.stop()
            await fake.stop()

    r, exited, said = asyncio.run(main())
    assert r.returncode != 0, r.stdout
    assert "telegram/family/3003 (agent family -> agent main)" in r.stderr, r.stderr
    assert "restarting" not in r.stdout
    assert exited is None, "the gateway was signalled and did not come back"
    assert "not restarting: the gateway would not start again" in said and "owner 3003: agent family -> agent main" in said
