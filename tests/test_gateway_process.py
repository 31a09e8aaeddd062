"""`hermit gateway run` as a real process: graceful SIGTERM, interrupted turns, the one-gateway lock,
the token file's permissions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from gatewayhelpers import GatewayProcess, transcript_lines, write_config
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT


def hello(ws: Any, gw: GatewayProcess) -> None:
    ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": gw.token}}))
    assert json.loads(ws.recv(10))["ok"]


def events_until(ws: Any, name: str, timeout: float = 30) -> list[dict[str, Any]]:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        f = json.loads(ws.recv(timeout))
        seen.append(f)
        if f.get("event") == name:
            return seen
    raise AssertionError(f"no {name} event: {seen}")


def sigterm_mid_turn(gw: GatewayProcess, ws: Any, text: str) -> float:
    """Send a message, wait until its turn runs, SIGTERM the gateway; returns when the signal was sent."""
    hello(ws, gw)
    ws.send(json.dumps({"type": "req", "id": "m1", "method": "chat.send", "params": {"text": text}}))
    events_until(ws, "chat.typing")  # the turn is running
    gw.proc.send_signal(signal.SIGTERM)
    return time.monotonic()


def test_sigterm_during_a_turn_lets_it_finish_within_the_grace_period(tmp_path: Path) -> None:
    with FakeProvider([{"text": "A considered answer, streamed after some thought.", "delay": 1.5}]) as fake:
        write_config(tmp_path, fake.openai_base_url, grace=20)
        gw = GatewayProcess(tmp_path)
        try:
            gw.wait_ready()
            with connect(gw.ws_url, open_timeout=10) as ws:
                t0 = sigterm_mid_turn(gw, ws, "think")
                frames = events_until(ws, "chat.done")
            assert frames[-1]["payload"]["status"] == "done"
            assert "".join(f["payload"]["text"] for f in frames if f.get("event") == "chat.delta").startswith("A considered")
            assert gw.proc.wait(PROC_TIMEOUT) == 0
            assert time.monotonic() - t0 < 20
        finally:
            gw.stop()
    lines = transcript_lines(tmp_path)
    assert [m["message"]["role"] for m in lines if m.get("type") == "message"] == ["user", "assistant"]
    assert not any(m.get("customType") == "interrupted" for m in lines)
    assert "gateway stopped" in gw.stderr()


def test_sigterm_past_the_grace_period_marks_the_turn_interrupted_and_exits_0(tmp_path: Path) -> None:
    with FakeProvider([{"text": "too late", "delay": 12}]) as fake:
        write_config(tmp_path, fake.openai_base_url, grace=0.5)
        gw = GatewayProcess(tmp_path)
        try:
            gw.wait_ready()
            with connect(gw.ws_url, open_timeout=10) as ws:
                t0 = sigterm_mid_turn(gw, ws, "think hard")
                assert gw.proc.wait(15) == 0
            elapsed = time.monotonic() - t0
        finally:
            gw.stop()
    assert elapsed < 10  # grace 0.5 s + 3 s for cancelled turns, well before the model would answer (12 s)
    lines = transcript_lines(tmp_path)
    assert lines[0]["type"] == "session"
    assert [m["message"]["role"] for m in lines if m.get("type") == "message"][:1] == ["user"]
    assert any(m.get("type") == "custom" and m.get("customType") == "interrupted" for m in lines)


def test_a_second_gateway_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    with FakeProvider([]) as fake:
        write_config(tmp_path, fake.openai_base_url)
        gw = GatewayProcess(tmp_path)
        try:
            gw.wait_ready()
            second = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(tmp_path), "gateway",
                                     "run", "--port", "0"], capture_output=True, text=True, timeout=PROC_TIMEOUT)
            assert second.returncode == 1
            assert "another gateway is already running" in second.stderr
            assert f"pid {gw.proc.pid}" in second.stderr and "hint:" in second.stderr
            status = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(tmp_path), "gateway",
                                     "status", "--json"], capture_output=True, text=True, timeout=PROC_TIMEOUT)
            assert status.returncode == 0, status.stderr
            st = json.loads(status.stdout)
            assert st["pid"] == gw.proc.pid and st["channels"][0]["channel"] == "webchat"
            assert "memory-watch:main" in st["services"]
        finally:
            gw.stop()
        assert gw.proc.returncode == 0
        assert gw.token not in gw.stderr()  # the token is printed to stdout once, never logged
        assert gw.token not in (tmp_path / "logs" / "gateway.log").read_text(encoding="utf-8")


def test_a_token_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    with FakeProvider([]) as fake:
        write_config(tmp_path, fake.openai_base_url)
        gw = GatewayProcess(tmp_path)
        gw.wait_ready()
        gw.stop()
        token = tmp_path / "gateway" / "token"
        assert oct(token.stat().st_mode & 0o777) == "0o600"
        os.chmod(token, 0o644)
        run = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(tmp_path), "gateway", "run",
                              "--port", "0"], capture_output=True, text=True, timeout=PROC_TIMEOUT)
        assert run.returncode == 1
        assert "readable by other users" in run.stderr and "chmod 600" in run.stderr
        doctor = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(tmp_path), "doctor"],
                                capture_output=True, text=True, timeout=PROC_TIMEOUT)
        assert "[FAIL] gateway" in doctor.stdout and "chmod 600" in doctor.stdout
