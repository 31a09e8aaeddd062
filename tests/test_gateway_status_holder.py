"""`hermit gateway status` sends the gateway token (Authorization: Bearer) to the port the running gateway
published in its lock file. Between that read and the connect the gateway may stop, and another local user's
program take the port: it got the token. The connection is now checked before the request's first byte
(hermit.loopback): the port must be held by the user's own uid or root, not another user's, nor a system
account (trusted with prompts for a model server, not with the gateway's token). No proxy from the
environment is used for it either."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ciguard import need
from hermit.gateway.state import GatewayLock, ensure_token
from prochelpers import PROC_TIMEOUT
from test_models_loopback import NOBODY, SYSTEM_USER, Squatter


def status(home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
    env.update(HERMIT_HOME=str(home), OMP_WAIT_POLICY="PASSIVE", **extra)
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "gateway", "status"], capture_output=True,
                          text=True, env=env, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def state(tmp_path: Path) -> tuple[Path, str]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_search: {provider: none}\n")
    return home, ensure_token(home)


@pytest.mark.parametrize("uid", [NOBODY, SYSTEM_USER])
def test_status_sends_nothing_to_a_port_another_uid_took(tmp_path: Path, uid: int) -> None:
    need(os.geteuid() == 0, "root (to listen as another uid)")
    home, token = state(tmp_path)
    with Squatter(uid) as squatter:
        lock = GatewayLock.acquire(home)  # the gateway's lock, naming the port the squatter now holds
        try:
            lock.publish({"pid": os.getpid(), "host": "127.0.0.1", "port": squatter.port})
            r = status(home)
        finally:
            lock.release()
        got = squatter.finish()
    assert token not in got["received"] and "Bearer" not in got["received"], got
    assert r.returncode == 1, r.stdout
    assert f"is held by another user's program (uid {uid}" in r.stderr and "Hermit sent it nothing" in r.stderr


def test_status_ignores_a_proxy_from_the_environment(tmp_path: Path) -> None:
    """HTTP_PROXY set (a proxy another user runs): the token is not sent through it, nor to it."""
    need(os.geteuid() == 0, "root (to listen as another uid)")
    home, token = state(tmp_path)
    proxy = Squatter(NOBODY)
    with proxy:
        lock = GatewayLock.acquire(home)
        try:
            lock.publish({"pid": os.getpid(), "host": "127.0.0.1", "port": 9})  # nothing listens there
            r = status(home, HTTP_PROXY=proxy.url, http_proxy=proxy.url, ALL_PROXY=proxy.url)
        finally:
            lock.release()
        got = proxy.finish()
    assert token not in got["received"] and got["accepted"] == 0, got
    assert r.returncode == 1 and "does not answer" in r.stderr, r.stderr
