"""`hermit gateway install` as a new user runs it to use the web app from a phone (s19 t8): the state dir made by
`hermit setup` only, the unit's own command line run as systemd would, and the web app fetched from it.

Installed as it comes, the gateway listens on loopback: the phone finds nothing, and install said nothing about
where the web app is or how a phone reaches it. It now says both.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx

from gatewayhelpers import free_port
from prochelpers import PROC_TIMEOUT


def env_for(home: Path, user: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HERMIT_HOME", "XDG_CONFIG_HOME")}
    env.update(HERMIT_HOME=str(home), HOME=str(user), OMP_WAIT_POLICY="PASSIVE")
    return env


def hermit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def test_install_says_where_the_web_app_is_and_how_a_phone_reaches_it(tmp_path: Path) -> None:
    home, user = tmp_path / "home", tmp_path / "user"
    env = env_for(home, user)
    assert hermit(env, "setup", "--provider", "fake", "--no-check", "--base-url", "http://127.0.0.1:9/v1").returncode == 0

    plain = hermit(env, "gateway", "install", "--no-start")
    assert plain.returncode == 0, plain.stderr
    assert "web app: http://127.0.0.1:18789/, on this computer only" in plain.stdout, plain.stdout
    assert "install with --host 0.0.0.0" in plain.stdout and "hermit dashboard --phone" in plain.stdout

    port = free_port()
    lan = hermit(env, "gateway", "install", "--no-start", "--host", "0.0.0.0", "--port", str(port))
    assert lan.returncode == 0, lan.stderr
    assert f"web app: http://0.0.0.0:{port}/ — sign in with `hermit dashboard`; a phone: `hermit dashboard --phone`" \
        in lan.stdout, lan.stdout

    # The unit's command line, run as systemd runs it: the web app answers on the network address it named.
    unit = next((user / ".config" / "systemd" / "user").glob("hermit-gateway-*.service"))
    command = next(line.split("=", 1)[1] for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
    gateway = subprocess.Popen(shlex.split(command), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env={k: v for k, v in env.items() if k != "HERMIT_HOME"})
    try:
        assert gateway.stdout is not None
        for line in gateway.stdout:  # it says where it listens once it does
            if line.startswith("web chat: "):
                break
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=30)
        assert page.status_code == 200 and "<title>Hermit</title>" in page.text
    finally:
        gateway.terminate()
        gateway.wait(PROC_TIMEOUT)
    assert hermit(env, "gateway", "uninstall").returncode == 0
    assert not unit.exists()
