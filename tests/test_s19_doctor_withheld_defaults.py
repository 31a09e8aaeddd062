"""`hermit doctor` says when a loosening setting under agents.defaults is not applied to an agent.

Since s18 (config/load._own_opt_ins) heartbeat.share_alerts_with_target, session.dangerously_share_main_session_
with_contacts and sandbox.mode: off under agents.defaults are the default agent's alone: another agent falls back to
the built-in. A user who wrote them there for everyone saw nothing say so (doctor simply stopped listing them). Now
doctor warns, per other agent, which default it does not get, what it runs with, and the exact lines for its own
agents.list entry — which, pasted there, give it the setting and end the warning.

The gateway's log says it at start too (the config load has no warnings channel of its own).

Real `hermit doctor` and `hermit gateway run` processes on a real hermit.yaml (and hermit.json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from gatewayhelpers import GatewayProcess, write_config
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_setup import KEY, env_for, here

NAME = "agent defaults"
LOOSE = ("    heartbeat: {share_alerts_with_target: true}\n"
         "    session: {dangerously_share_main_session_with_contacts: true}\n"
         "    sandbox: {mode: 'off'}\n")
FAMILY_LINES = ["- id: family", "  heartbeat:", "    share_alerts_with_target: true", "  session:",
                "    dangerously_share_main_session_with_contacts: true", "  sandbox:", '    mode: "off"']


def write(home: Path, defaults: str, entries: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    memory_search: {provider: none}\n" + defaults + "  list:\n" + entries)
    return home


def doctor(home: Path) -> tuple[dict[str, object], str]:
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor", "--json"], capture_output=True, text=True,
                       env=env_for(home), timeout=PROC_TIMEOUT)
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    text = subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor"], capture_output=True, text=True,
                          env=env_for(home), timeout=PROC_TIMEOUT).stdout
    return checks[NAME], text


def test_doctor_names_each_default_another_agent_does_not_get_and_the_lines_that_give_it(tmp_path: Path) -> None:
    home = write(tmp_path / "home", LOOSE, "    - {id: main, default: true}\n    - {id: family}\n"
                                           "    - {id: work, heartbeat: {share_alerts_with_target: true}}\n")
    check, text = doctor(home)
    assert check["status"] == "warn" and check["ok"] is True, check
    detail, fix = str(check["detail"]), str(check["fix"])
    assert detail.startswith("agents.defaults loosens settings for the default agent (main) only: "), detail
    assert ("agent 'family' does not get heartbeat.share_alerts_with_target: true, "
            "session.dangerously_share_main_session_with_contacts: true, sandbox.mode: off (it runs with "
            "heartbeat.share_alerts_with_target: false, session.dangerously_share_main_session_with_contacts: false, "
            "sandbox.mode: non-main)") in detail, detail
    # work set the alert sharing itself: only the two it did not set are named for it
    assert ("agent 'work' does not get session.dangerously_share_main_session_with_contacts: true, sandbox.mode: off "
            "(it runs with") in detail
    assert "agent 'main'" not in detail
    assert "each one's entry under agents.list of hermit.yaml" in fix
    shown = [line.strip("\n")[9:] for line in fix.split("\n")[1:]]
    assert shown[:len(FAMILY_LINES)] == FAMILY_LINES, shown
    assert shown[len(FAMILY_LINES):] == ["- id: work", "  session:",
                                         "    dangerously_share_main_session_with_contacts: true", "  sandbox:",
                                         '    mode: "off"']
    assert f"[warn] {NAME}" in text and "fix: nothing to do if that is what you want" in text

    # The lines, pasted into family's and work's entries as printed, give them the settings: no warning.
    entries = "    - {id: main, default: true}\n" + "".join("    " + line + "\n" for line in shown)
    write(home, LOOSE, entries.replace("    - id: work\n", "    - id: work\n      heartbeat: "
                                                          "{share_alerts_with_target: true}\n"))
    loaded = load_config(StatePaths(home))
    for agent in ("family", "work"):
        s = loaded.agent(agent).settings
        assert (s.heartbeat.share_alerts_with_target, s.session.dangerously_share_main_session_with_contacts,
                s.sandbox.mode) == (True, True, "off"), agent
    check, _ = doctor(home)
    assert check["status"] == "ok", check


def test_no_warning_when_nothing_is_withheld(tmp_path: Path) -> None:
    home = write(tmp_path / "one", LOOSE, "    - {id: main, default: true}\n")  # one agent: all its own
    check, _ = doctor(home)
    assert (check["status"], check["detail"]) == ("ok", "one agent: agents.defaults are all its own")
    # a stricter default (sandbox.mode: all) is every agent's: nothing is left out
    home = write(tmp_path / "strict", "    sandbox: {mode: all}\n", "    - {id: main, default: true}\n    - {id: family}\n")
    check, _ = doctor(home)
    assert check["status"] == "ok" and "none of its loosening settings is left out" in str(check["detail"]), check


def test_a_json_config_gets_json_lines(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermit.json").write_text(json.dumps({"agents": {
        "defaults": {"memory_search": {"provider": "none"}, "sandbox": {"mode": "off"}},
        "list": [{"id": "main", "default": True}, {"id": "family"}]}}))
    check, _ = doctor(home)
    assert check["status"] == "warn", check
    line = str(check["fix"]).split("\n")[1].strip()
    assert json.loads(line) == {"id": "family", "sandbox": {"mode": "off"}}, line
    assert "entry under agents.list of hermit.json" in str(check["fix"])


def test_the_gateway_says_it_at_start_too(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        write_config(home, fake.openai_base_url)
        cfg = yaml.safe_load((home / "hermit.yaml").read_text())
        cfg["agents"]["defaults"]["sandbox"] = {"mode": "off"}
        cfg["agents"]["list"] = [{"id": "main", "default": True}, {"id": "family"}]
        (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
        assert here(home, "init").returncode == 0
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()
            err = gw.stderr()
        finally:
            gw.stop()
    assert ("agent family does not get sandbox.mode from agents.defaults (a loosening default is the default "
            "agent's only); if you mean it for family too, `hermit doctor` gives the lines") in err, err
    assert "agent main does not get" not in err
