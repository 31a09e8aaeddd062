"""The web app, with the fake provider `hermit setup --provider fake` configured but not running, says the exact
command that starts it — as `hermit chat` and the CLI do — not the generic hint for a local model server ("start it
(e.g. `ollama serve`), or fix models.providers.fake.base_url"), which sends a new user to install Ollama.

A real `hermit gateway run` whose fake provider's port nothing listens on; the web app's own protocol (WebSocket
`chat.send`, then the `chat.done` that carries the hint the page shows under the reason)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gatewayhelpers import GatewayProcess, free_port, write_config


def _failed_turn_end(ws_url: str, token: str) -> dict[str, Any]:
    from websockets.sync.client import connect

    with connect(ws_url, origin=None) as ws:
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": token}}))
        assert json.loads(ws.recv(30))["ok"]
        ws.send(json.dumps({"type": "req", "id": "r1", "method": "chat.send", "params": {"text": "hello"}}))
        while True:
            f = json.loads(ws.recv(120))
            if f.get("event") == "chat.done" and f["payload"].get("replyTo") == "r1":
                return dict(f["payload"])


def test_a_stopped_fake_provider_gets_its_start_command_in_the_web_app(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port = free_port()  # nothing listens there: the fake provider is not started
    write_config(home, f"http://127.0.0.1:{port}/v1")
    script = home / "fake-provider.json"
    script.write_text('[{"text": "Hello from the fake provider.", "repeat": true}]\n', encoding="utf-8")
    gw = GatewayProcess(home)
    try:
        gw.wait_ready()
        done = _failed_turn_end(gw.ws_url, gw.token)
    finally:
        gw.stop()
    assert done["status"] == "error", done
    hint = done.get("hint", "")
    assert f"-m hermit.testing.fake_provider --port {port} --script {script}" in hint, done
    assert "ollama serve" not in hint, done
    assert "hermit setup" in hint, done  # and how to set up a real model instead
