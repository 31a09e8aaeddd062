"""The scheduler's "no account" hint names the gateway's restart in words for how it runs. `hermit cron add
--announce discord:42` with no Discord account, and doctor's delivery targets for a heartbeat aimed there, said
"…then restart the gateway as setup says (its service's restart when it runs as one; `hermit doctor` says it too)":
the scheduler imports no gateway, so it sent the owner to two other commands for the words. The CLI, which can tell
how the gateway runs (gateway/state.HowRun), now gives them: `systemctl --user restart UNIT` under a systemd user
unit, Ctrl-C / `kill PID` and `hermit gateway run` by hand, the installed service's start (or `hermit gateway run`)
when none runs.

Real `hermit` processes and a real `hermit gateway run`; a systemd user unit is the process's cgroup (root and a
writable cgroup hierarchy, as test_s19_restart_hints); the service's unit file is written by `hermit service install
--no-start`."""

from __future__ import annotations

import os
from pathlib import Path

from gatewayhelpers import GatewayProcess, write_config
from hermit.cli.service import unit_name_for
from test_s19_restart_hints import UNIT, in_user_unit
from test_service import env_for, hermit

NO_ACCOUNT = "hint: add one under channels.discord.accounts with `hermit setup --channel discord`, then "
HEARTBEAT = "    heartbeat: {every_minutes: 30, target: {channel: discord, to: '42'}}\n"


def setup(tmp_path: Path, heartbeat: bool = False) -> dict[str, str]:
    home = tmp_path / "state"
    write_config(home, "http://127.0.0.1:9/v1")
    if heartbeat:
        text = (home / "hermit.yaml").read_text().replace("    timezone: Europe/Paris\n",
                                                          "    timezone: Europe/Paris\n" + HEARTBEAT)
        (home / "hermit.yaml").write_text(text)
    return env_for(home, tmp_path / "user", XDG_CONFIG_HOME=str(tmp_path / "xdg"),
                   PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")


def cron_hint(env: dict[str, str]) -> str:
    r = hermit(env, "cron", "add", "-m", "the weekly summary", "--every", "7d", "--announce", "discord:42")
    assert r.returncode == 1, r.stdout
    assert "no discord account is configured, so nothing could be delivered" in r.stderr, r.stderr
    return r.stderr


def doctor_targets(env: dict[str, str]) -> str:
    r = hermit(env, "doctor")
    line = next((x for x in r.stdout.splitlines() if "delivery targets" in x), "")
    assert "heartbeat target of main: no discord account is configured" in line, r.stdout
    return line


def test_no_gateway_running_names_its_start(tmp_path: Path) -> None:
    env = setup(tmp_path, heartbeat=True)
    then = "start the gateway: `hermit gateway run`"
    assert f"{NO_ACCOUNT}{then}\n" in cron_hint(env)
    assert f"`hermit setup --channel discord`, then {then}" in doctor_targets(env)
    # Installed as a service (not running): its start, not a second gateway beside it.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "systemctl").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "bin" / "systemctl").chmod(0o755)
    assert hermit(env, "service", "install", "--no-start").returncode == 0
    name = unit_name_for(tmp_path / "state", tmp_path / "user")
    then = f"start the gateway: `systemctl --user start {name}.service`"
    assert f"{NO_ACCOUNT}{then}\n" in cron_hint(env)
    assert f"`hermit setup --channel discord`, then {then}" in doctor_targets(env)


def test_a_gateway_run_by_hand_then_under_a_unit_names_its_restart(tmp_path: Path) -> None:
    env = setup(tmp_path)
    gw = GatewayProcess(tmp_path / "state")
    try:
        gw.wait_ready()
        pid = gw.proc.pid
        by_hand = f"restart the gateway: stop it (Ctrl-C where it runs, or `kill {pid}`) and start it again with " \
                  "`hermit gateway run`"
        err = cron_hint(env)
        assert f"{NO_ACCOUNT}{by_hand}\n" in err, err
        assert "as setup says" not in err
        with in_user_unit(pid):
            err = cron_hint(env)
            assert f"{NO_ACCOUNT}restart the gateway: `systemctl --user restart {UNIT}`\n" in err, err
        (tmp_path / "state" / "hermit.yaml").write_text((tmp_path / "state" / "hermit.yaml").read_text().replace(
            "    timezone: Europe/Paris\n", "    timezone: Europe/Paris\n" + HEARTBEAT))
        assert f"`hermit setup --channel discord`, then {by_hand}" in doctor_targets(env)
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=60)


def test_hermit_agent_cron_tool_names_the_gateways_start(tmp_path: Path) -> None:
    """`hermit agent`/`hermit chat` build their own cron tool (cli/assistant): its answer to a job aimed at a channel
    with no account ended "…restart the gateway as setup says"; it now gives the CLI's words, read when the tool
    answers (a gateway may start or stop while a chat runs)."""
    from hermit.testing.fake_provider import FakeProvider

    job = {"name": "weekly", "message": "the weekly summary", "schedule": {"kind": "every", "every_ms": 604_800_000},
           "delivery": {"mode": "announce", "channel": "discord", "to": "42"}}
    with FakeProvider([{"tool_calls": [{"name": "cron", "arguments": {"action": "add", "job": job}}]},
                       {"text": "done"}]) as fake:
        env = setup(tmp_path)
        write_config(Path(env["HERMIT_HOME"]), fake.openai_base_url)
        (Path(env["HERMIT_HOME"]) / "workspace").mkdir(exist_ok=True)
        r = hermit(env, "agent", "-m", "remind me weekly on discord")
        assert r.returncode == 0, r.stderr
        told = [str(m["content"]) for q in fake.requests for m in q.body.get("messages", []) if m.get("role") == "tool"]
    assert any("no discord account is configured" in t and
               "`hermit setup --channel discord`, then start the gateway: `hermit gateway run`" in t for t in told), told
    assert "as setup says" not in "".join(told)
