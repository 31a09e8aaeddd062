"""`hermit gateway install|uninstall` (the unit file, and its command line run for real) and `hermit logs`."""

from __future__ import annotations

import json
import os
import plistlib
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import yaml

from hermit.config.envfile import parse_env_text
from prochelpers import PROC_TIMEOUT


def env_for(home: Path, user: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HERMIT_HOME", "XDG_CONFIG_HOME")}
    env.update(HERMIT_HOME=str(home), HOME=str(user), OMP_WAIT_POLICY="PASSIVE", **extra)
    return env


def hermit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def unit_values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_install_writes_a_unit_whose_command_line_runs_this_gateway(tmp_path: Path) -> None:
    from hermit.cli.service import unit_name_for

    home, user = tmp_path / "state dir", tmp_path / "user"
    env = env_for(home, user, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    assert hermit(env, "setup", "--provider", "fake", "--no-check", "--base-url", "http://127.0.0.1:9/v1").returncode == 0
    cfg = yaml.safe_load((home / "hermit.yaml").read_text())
    cfg["agents"]["defaults"]["memory_search"] = {"provider": "none"}
    with socket.socket() as s:  # a free port: the unit runs the gateway on the configured one
        s.bind(("127.0.0.1", 0))
        cfg["gateway"] = {"port": s.getsockname()[1]}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
    (home / "hermit.env").write_text("HERMIT_TEST_MARK=from-the-env-file\n")

    r = hermit(env, "gateway", "install", "--no-start")
    assert r.returncode == 0, r.stderr
    name = unit_name_for(home, user)  # a state dir of its own (not ~/.hermit): a unit name of its own
    assert name.startswith("hermit-gateway-state-dir-")
    unit = tmp_path / "xdg" / "systemd" / "user" / f"{name}.service"
    assert f"wrote {unit}" in r.stdout and f"systemctl --user enable --now {name}.service" in r.stdout
    text = unit.read_text()
    values = unit_values(text)
    argv = shlex.split(values["ExecStart"])
    assert argv == [sys.executable, "-P", "-m", "hermit", "--home", str(home), "gateway", "run"]
    assert values["EnvironmentFile"] == f'-{home / "hermit.env"}'  # taken whole by systemd: never quoted
    assert values["Restart"] == "on-failure" and values["UMask"] == "0077"
    assert values["WantedBy"] == "default.target"

    # Start the gateway as systemd would: that command line, with the env file's variables.
    env_file = parse_env_text((home / "hermit.env").read_text()).values
    service_env = {**{k: v for k, v in env.items() if k != "HERMIT_HOME"}, **env_file, "PYTHONUNBUFFERED": "1"}
    # ...from a folder where someone planted a `hermit` package: the service still runs this install's.
    planted = tmp_path / "cwd" / "hermit"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text(f"open({str(tmp_path / 'planted-ran')!r}, 'w').close()\n")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=service_env,
                            cwd=planted.parent)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or []], daemon=True).start()
    try:
        url = ""
        deadline = time.monotonic() + 90
        while not url and time.monotonic() < deadline and proc.poll() is None:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line.startswith("web chat: "):
                url = line.split()[2]
        assert url, f"the gateway did not start (exit {proc.poll()})"
        assert not (tmp_path / "planted-ran").exists()
        assert url.endswith("/") and "token" not in url  # stdout goes to the journal: no token there
        base, token = url.rstrip("/"), (home / "gateway" / "token").read_text(encoding="utf-8").strip()
        status = httpx.get(f"{base}/status", headers={"Authorization": f"Bearer {token}"}, timeout=10).json()
        assert status["pid"] == proc.pid and status["bus"]["waiting"] == 0
        shown = hermit(env, "gateway", "status")
        assert shown.returncode == 0 and "waiting 0" in shown.stdout and "since start: 0 messages" in shown.stdout
        logs = hermit(env, "logs", "-n", "20")
        assert logs.returncode == 0 and "hermit" in logs.stdout
        entries = [json.loads(x) for x in hermit(env, "logs", "--json").stdout.splitlines()]
        assert entries and all({"ts", "level", "logger", "msg"} <= set(e) for e in entries)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(PROC_TIMEOUT) == 0

    gone = hermit(env, "gateway", "uninstall")
    from hermit.cli.service import systemd_offline

    # Where no systemd runs (a container), that service never ran: nothing to disable (test_firstday2_service).
    said = "nothing to disable" if systemd_offline(env) else f"disable --now {name}.service"
    assert gone.returncode == 0 and not unit.exists() and said in gone.stdout, gone.stdout
    again = hermit(env, "gateway", "uninstall")
    assert again.returncode == 1 and "no service file" in again.stderr


def test_a_state_dir_with_dollars_percents_or_a_newline_in_its_path(tmp_path: Path) -> None:
    """systemd expands $VAR in ExecStart's words and %x specifiers everywhere, takes EnvironmentFile= whole
    (quotes would be part of the path: the line was ignored), and a newline starts a setting of its own."""
    from hermit.cli.service import unit_name_for

    odd, user = tmp_path / "a $HOME 100%h", tmp_path / "user"
    env = env_for(odd, user, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    assert hermit(env, "init").returncode == 0
    r = hermit(env, "gateway", "install", "--no-start")
    assert r.returncode == 0, r.stderr
    values = unit_values((tmp_path / "xdg" / "systemd" / "user" / f"{unit_name_for(odd, user)}.service").read_text())
    # as systemd reads them: words unquoted, then $$ -> $ and %% -> %
    argv = [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(values["ExecStart"])]
    assert argv[4:6] == ["--home", str(odd)]
    assert "$HOME" not in values["ExecStart"].replace("$$HOME", "") and "%h" not in values["ExecStart"].replace("%%h", "")
    assert values["EnvironmentFile"] == f"-{tmp_path}/a $HOME 100%%h/hermit.env"
    assert values["Description"].endswith(" 100%%h")

    newline = tmp_path / "x\nExecStartPre=/bin/touch /tmp/pwned"
    env = env_for(newline, user, XDG_CONFIG_HOME=str(tmp_path / "xdg2"))
    assert hermit(env, "init").returncode == 0
    r = hermit(env, "gateway", "install", "--no-start")
    assert r.returncode != 0 and "control character" in r.stderr
    assert not list((tmp_path / "xdg2").rglob("*.service"))


def test_without_xdg_config_home_the_unit_goes_to_dot_config_and_macos_gets_a_launchd_agent(tmp_path: Path) -> None:
    from hermit.cli.service import unit_name_for

    home, user = tmp_path / "home", tmp_path / "user"
    env = env_for(home, user)
    assert hermit(env, "init").returncode == 0
    assert hermit(env, "gateway", "install", "--no-start").returncode == 0
    assert (user / ".config" / "systemd" / "user" / f"{unit_name_for(home, user)}.service").is_file()
    r = hermit(env, "gateway", "install", "--kind", "launchd", "--no-start")
    assert r.returncode == 0, r.stderr
    plist = plistlib.loads((user / "Library" / "LaunchAgents" / f"com.hermit.{unit_name_for(home, user)}.plist")
                           .read_bytes())
    assert plist["ProgramArguments"] == [sys.executable, "-P", "-m", "hermit", "--home", str(home), "gateway", "run"]
    assert plist["KeepAlive"] == {"SuccessfulExit": False} and plist["RunAtLoad"] is True
    assert "launchctl bootstrap" in r.stdout
    missing = hermit(env_for(tmp_path / "fresh", user), "gateway", "install", "--no-start")
    assert missing.returncode == 1 and "hermit setup" in missing.stderr


def test_logs_prints_the_last_lines_as_text_or_json_and_follows_across_a_rotation(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = env_for(home, tmp_path / "user")
    none = hermit(env, "logs")
    assert none.returncode == 1 and "no gateway log" in none.stderr and "gateway run" in none.stderr
    log = home / "logs" / "gateway.log"
    log.parent.mkdir(parents=True)
    log.write_text("2026-12-01 10:00:00,001 INFO hermit.gateway: started\n"
                   "2026-12-01 10:00:01,002 ERROR hermit.gateway: a turn failed\n"
                   "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n"
                   '{"ts": "2026-12-01T10:00:02.000Z", "level": "info", "logger": "hermit", "msg": "json line"}\n')
    assert hermit(env, "logs", "-n", "1").stdout.strip().endswith('"msg": "json line"}')
    entries = [json.loads(x) for x in hermit(env, "logs", "--json").stdout.splitlines()]
    assert [e["msg"] for e in entries] == ["started", "a turn failed", "json line"]
    assert entries[1]["level"] == "error" and entries[1]["exc"].endswith("ValueError: boom")

    follow = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "logs", "-f", "-n", "0", "--json"],
                              stdout=subprocess.PIPE, text=True, env=env)
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [got.put(x) for x in follow.stdout or []], daemon=True).start()
    try:
        # Append until the follower shows a line: it starts at the end of the file whenever it gets there
        # (-n 0), so the first line it prints is one appended after it opened the file, however slow the
        # machine is. Then a marker line, so that every appended line is read before the rotation.
        deadline = time.monotonic() + PROC_TIMEOUT
        first = None
        while first is None:
            with log.open("a") as f:
                f.write("2026-12-01 10:01:00,000 INFO hermit.gateway: appended\n")
            try:
                first = got.get(timeout=0.2)
            except queue.Empty:
                assert follow.poll() is None and time.monotonic() < deadline, "logs -f showed nothing"
        assert json.loads(first)["msg"] == "appended"
        with log.open("a") as f:
            f.write("2026-12-01 10:01:30,000 INFO hermit.gateway: marker\n")
        while json.loads(got.get(timeout=PROC_TIMEOUT))["msg"] != "marker":
            pass
        log.rename(log.with_name("gateway.log.1"))  # what the rotating handler does
        log.write_text("2026-12-01 10:02:00,000 WARNING hermit.scheduler: after the rotation\n")
        after = json.loads(got.get(timeout=PROC_TIMEOUT))
        assert after["msg"] == "after the rotation" and after["level"] == "warning"
    finally:
        follow.send_signal(signal.SIGINT)
        assert follow.wait(PROC_TIMEOUT) == 0
