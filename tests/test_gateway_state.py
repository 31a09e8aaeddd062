"""The gateway's token file, its lock file, and its logs (secrets masked, JSON lines)."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from hermit.errors import ConfigError
from hermit.gateway.logs import JsonFormatter, SecretMask, setup_logging
from hermit.gateway.state import GatewayLock, GatewayLocked, ensure_token, read_lock_info, token_path


def test_token_is_created_once_owner_only_and_refused_when_others_can_read_it(tmp_path: Path) -> None:
    token = ensure_token(tmp_path)
    path = token_path(tmp_path)
    assert len(token) >= 40 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert ensure_token(tmp_path) == token  # stable across restarts
    os.chmod(path, 0o640)
    with pytest.raises(ConfigError) as e:
        ensure_token(tmp_path)
    assert "readable by other users" in e.value.message and "chmod 600" in e.value.hint


def test_one_gateway_per_state_dir(tmp_path: Path) -> None:
    assert read_lock_info(tmp_path) is None
    lock = GatewayLock.acquire(tmp_path)
    lock.publish({"pid": 4242, "host": "127.0.0.1", "port": 18789})
    with pytest.raises(GatewayLocked) as e:
        GatewayLock.acquire(tmp_path)
    assert "pid 4242" in e.value.message and e.value.hint
    assert read_lock_info(tmp_path) == {"pid": 4242, "host": "127.0.0.1", "port": 18789}
    lock.release()
    assert read_lock_info(tmp_path) is None
    GatewayLock.acquire(tmp_path).release()  # free again once released



def test_a_killed_gateways_port_is_not_read_as_the_next_ones(tmp_path: Path) -> None:
    """A gateway killed by SIGKILL leaves its port in the lock file; the next one took the lock without
    clearing it, so until it listened `hermit dashboard` sent the URL with the token to the old port, which
    another user may hold by then (audit R3). Taking the lock now publishes only the pid."""
    import subprocess
    import sys

    killed = subprocess.Popen([sys.executable, "-c", (
        "import sys, os\nfrom pathlib import Path\nfrom hermit.gateway.state import GatewayLock\n"
        "lock = GatewayLock.acquire(Path(sys.argv[1]))\n"
        "lock.publish({'pid': os.getpid(), 'host': '127.0.0.1', 'port': 18999})\nprint('up', flush=True)\n"
        "sys.stdin.read()\n"), str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert killed.stdout is not None and killed.stdout.readline() == "up\n"
    assert (read_lock_info(tmp_path) or {}).get("port") == 18999
    killed.kill()
    killed.wait()
    lock = GatewayLock.acquire(tmp_path)
    try:
        assert read_lock_info(tmp_path) == {"pid": os.getpid()}  # no port until this one listens
    finally:
        lock.release()

def test_logs_mask_secrets_and_json_lines_parse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "tok_" + "x" * 40
    path = setup_logging(tmp_path / "logs", "json", [secret, "sk-ant-abcdefgh123"])
    log = logging.getLogger("hermit.gateway.test")
    log.info("client sent %s", secret)
    log.warning("key sk-ant-abcdefgh123 rejected")
    try:
        raise RuntimeError(f"boom {secret}")
    except RuntimeError:
        log.exception("failed")
    for h in logging.getLogger("hermit").handlers:
        h.flush()
    text = path.read_text(encoding="utf-8")
    assert secret not in text and "sk-ant-abcdefgh123" not in text and secret not in capsys.readouterr().err
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["msg"] == "client sent ***" and lines[0]["level"] == "info"
    assert "boom ***" in lines[2]["exc"]
    for name in ("hermit", "uvicorn", "uvicorn.error"):  # leave the other tests' logging as it was
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True


def test_mask_ignores_short_or_empty_secrets() -> None:
    mask = SecretMask(["", "abc", "a-long-enough-secret"])
    rec = logging.LogRecord("x", logging.INFO, __file__, 1, "abc and a-long-enough-secret", None, None)
    mask.filter(rec)
    assert rec.getMessage() == "abc and ***"
    assert json.loads(JsonFormatter().format(rec))["msg"] == "abc and ***"
