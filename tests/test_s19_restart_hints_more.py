"""The rest of the stop/restart hints name the command for how the gateway runs (gateway/state.HowRun): a systemd
user unit, a launchd agent, or by hand.

`hermit restore --force` over a running gateway said "Ctrl-C where it runs, or kill its pid", `hermit gateway
status` on a changed token, `hermit dashboard --phone` on a loopback gateway (`hermit gateway run --host …`), the
gateway's own "no agent … restart the gateway" and phone sign-in errors, and a Telegram poller stopped by another
poller (its channel status and doctor's fix) said "restart the gateway" with no command, or a by-hand one. Under a
service manager a kill stops the service until the next login and `hermit gateway run` starts a second gateway
beside it.

Real `hermit gateway run` processes as in test_s19_restart_hints: a systemd user unit is the process's cgroup (root,
a writable cgroup hierarchy; removed after), launchd is XPC_SERVICE_NAME. A few representative sites per way it
runs, one gateway per test."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import yaml

from gatewayhelpers import GatewayProcess, write_config
from hermit.cli.service import LAUNCHD_LABEL
from hermit.config.envfile import set_env_values
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_own_photo_in_a_room import TOKEN, fake_telegram
from test_restart_hint_under_launchd import run_gateway
from test_s19_restart_hints import UNIT, child_output, in_user_unit, started
from test_setup import KEY, hermit

LAUNCHD = f"gui/{os.getuid()}/{LAUNCHD_LABEL}"


def archive_of(home: Path, tmp_path: Path) -> Path:
    archive = tmp_path / "state.tar.gz"
    r = hermit(home, "backup", str(archive))
    assert r.returncode == 0, r.stderr
    return archive


def restore_refused(home: Path, archive: Path) -> str:
    r = hermit(home, "restore", str(archive), "--force")
    assert r.returncode != 0, r.stdout
    assert "nothing was restored" in r.stderr, r.stderr
    return r.stderr


def phone_refused(home: Path) -> str:
    r = hermit(home, "dashboard", "--phone")
    assert r.returncode != 0, r.stdout
    assert "a phone cannot reach it" in r.stderr, r.stderr
    return r.stderr


# The gateway's own hints, from a process that is in the unit: an agent it did not start (gateway/agents.py) and a
# phone sign-in that cannot find its address (gateway/phone.py). The child waits on stdin so the test can move it.
INSIDE = """
import sys
from pathlib import Path
from hermit.errors import HermitError
from hermit.gateway.agents import AgentHost
from hermit.gateway.phone import phone_sign_in
from hermit.gateway.tickets import Tickets
print("ready", flush=True)
sys.stdin.readline()
try:
    AgentHost({}).runtime("helper")
except HermitError as e:
    print(e.hint, flush=True)
try:
    phone_sign_in(Tickets(Path(sys.argv[1])), [], None)
except HermitError as e:
    print(e.hint, flush=True)
"""


def inside_hints(home: Path) -> list[str]:
    return child_output(INSIDE, home, in_unit=True)[0].splitlines()


def test_under_a_systemd_user_unit(tmp_path: Path) -> None:
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        home = started(tmp_path, fake)
        archive = archive_of(home, tmp_path)
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()
            with in_user_unit(gw.proc.pid):
                err = restore_refused(home, archive)
                assert f"stop the gateway first (`systemctl --user stop {UNIT}`), then run `hermit restore` again, " \
                       f"and start it again after: `systemctl --user start {UNIT}`" in err, err
                assert "kill" not in err and "Ctrl-C" not in err
                err = phone_refused(home)
                assert f"or 0.0.0.0 in hermit.yaml and restart the gateway: `systemctl --user restart {UNIT}`" in err, err
                assert "gateway run" not in err
                token = home / "gateway" / "token"
                token.write_text("f" * 64 + "\n", encoding="utf-8")  # not the one the gateway holds: a 401
                r = hermit(home, "gateway", "status")
                assert r.returncode != 0
                assert f"the token file may have changed; restart the gateway: `systemctl --user restart {UNIT}`" \
                    in r.stderr, r.stderr
        finally:
            gw.stop()
    agent, phone = inside_hints(home)
    assert agent == f"add it under agents.list and restart the gateway: `systemctl --user restart {UNIT}`", agent
    assert phone == f"restart it: `systemctl --user restart {UNIT}`", phone


def losing_poller(home: Path, tg_base: str) -> None:
    """The gateway's Telegram poller loses to another program polling the same bot: Telegram ends its long poll
    with 409. Asked again until the gateway has said so in its channel status (bounded)."""
    deadline = time.monotonic() + PROC_TIMEOUT
    status = home / "channels"
    with httpx.Client(timeout=10, trust_env=False) as client:
        while time.monotonic() < deadline:
            client.post(f"{tg_base}/bot{TOKEN}/getUpdates", json={"timeout": 0})
            text = "".join(p.read_text(encoding="utf-8") for p in status.rglob("*.json")) if status.exists() else ""
            if "another poller" in text:
                return
    raise AssertionError("the gateway's poller never reported the other poller")


def test_as_a_launchd_agent(tmp_path: Path) -> None:
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake, fake_telegram() as (tg, _loop):
        home = started(tmp_path, fake)
        cfg = yaml.safe_load((home / "hermit.yaml").read_text())
        cfg["channels"] = {"telegram": {"accounts": {"default": {"api_base": tg.base_url, "poll_timeout_seconds": 1,
                                                                 "owners": ["42"]}}}}
        (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
        set_env_values(home / "hermit.env", {"TELEGRAM_BOT_TOKEN": TOKEN})
        archive = archive_of(home, tmp_path)
        gw = run_gateway(home, LAUNCHD_LABEL)
        try:
            losing_poller(home, tg.base_url)
            r = hermit(home, "channels", "status", "--json")
            assert r.returncode == 0, r.stderr
            assert "stop the other program polling this bot (or remove its webhook), then restart the gateway: " \
                   f"`launchctl kickstart -k {LAUNCHD}`" in r.stdout, r.stdout
            doctor = hermit(home, "doctor").stdout
            assert "stop the other program that uses this bot's token (or its webhook), then restart the gateway: " \
                   f"`launchctl kickstart -k {LAUNCHD}`" in doctor, doctor
            err = restore_refused(home, archive)
            assert f"stop the gateway first (`launchctl kill TERM {LAUNCHD}`), then run `hermit restore` again, " \
                   f"and start it again after: `launchctl kickstart {LAUNCHD}`" in err, err
            err = phone_refused(home)
            assert f"in hermit.yaml and restart the gateway: `launchctl kickstart -k {LAUNCHD}`" in err, err
            assert "systemctl" not in err and "gateway run" not in err
        finally:
            gw.stop()


def test_run_by_hand(tmp_path: Path) -> None:
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        home = started(tmp_path, fake)
        archive = archive_of(home, tmp_path)
        r = hermit(home, "gateway", "status")  # none runs and no service is installed: `hermit gateway run`
        assert "start it: `hermit gateway run`" in r.stderr, r.stderr
        gw = run_gateway(home, None)
        try:
            err = restore_refused(home, archive)
            assert f"stop the gateway first (Ctrl-C where it runs, or `kill {gw.proc.pid}`), then run `hermit " \
                   "restore` again" in err, err
            assert "systemctl" not in err and "launchctl" not in err and "start it again after" not in err
            err = phone_refused(home)
            assert f"and restart the gateway: stop it (Ctrl-C where it runs, or `kill {gw.proc.pid}`) and start it " \
                   "again with `hermit gateway run --host " in err, err
            assert "in hermit.yaml" not in err and "systemctl" not in err
        finally:
            gw.stop()


def test_the_scheduler_names_where_the_restart_is_said(tmp_path: Path) -> None:
    """The scheduler imports no gateway: its hint sends the owner to setup, which names the restart."""
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1")
    from hermit.config.load import load_config
    from hermit.config.paths import StatePaths
    from hermit.errors import JobError
    from hermit.scheduler.targets import resolve_target

    loaded = load_config(StatePaths(home))
    try:
        resolve_target(loaded.config.channels, "discord", None)
    except JobError as e:
        assert e.hint.startswith("add one under channels.discord.accounts with `hermit setup --channel discord`, "
                                 "then restart the gateway as setup says"), e.hint
    else:
        raise AssertionError("no JobError")
