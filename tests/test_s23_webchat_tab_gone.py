"""A tab that goes away while the gateway answers it (a phone locked, the tab closed, the browser quit) is an
ordinary end of a connection, not an error: the gateway logged it as two ERROR tracebacks (`web chat memory.get
failed` and `web chat connection of … failed`, about 70 lines), found closing Chromium just after tapping a note
in the memory view (t9's walk, session 23). It now ends the connection without a word.

Real `hermit gateway run`; a WebSocket client signs in as the page does, asks for a large MEMORY.md and closes at
once, as a closed tab does; the gateway is then stopped (which waits for the request) and its log read."""

from __future__ import annotations

import json
from pathlib import Path

from gatewayhelpers import running_gateway, ws_calls


def test_a_tab_closed_while_its_answer_is_on_the_way_logs_no_error(tmp_path: Path) -> None:
    from websockets.sync.client import connect

    home = tmp_path / "home"
    with running_gateway(home) as gw:
        line = "- a line of a long MEMORY.md, so that reading and sending it outlasts the tab's close\n"
        (home / "workspace" / "MEMORY.md").write_text("# MEMORY.md\n" + line * 40_000, encoding="utf-8")
        for n in range(3):
            with connect(gw.ws_url, origin=None) as ws:
                ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": gw.token}}))
                assert json.loads(ws.recv(30))["ok"]
                ws.send(json.dumps({"type": "req", "id": f"g{n}", "method": "memory.get",
                                    "params": {"path": "MEMORY.md"}}))
            # the `with` closed the socket before the answer came: the gateway answers a closed tab
        assert ws_calls(gw.ws_url, gw.token, [("memory.files", {})])[0]["ok"]  # and goes on serving the next
    log = gw.stderr()
    assert "memory.get failed" not in log and "Traceback" not in log, log[-3000:]
