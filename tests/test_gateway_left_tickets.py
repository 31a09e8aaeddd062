"""A used or expired one-time link says where to get a new one both ways (gateway/tickets.py): a link from
`hermit dashboard` (this computer) and one a phone scanned from the web app's "Sign in a phone" (or `hermit
dashboard --phone`), where no command can be run. In process, through the real gateway's WebSocket."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from hermit.gateway.tickets import Tickets, ticket_id
from hermit.models.base import ModelRequest
from hermit.testing.scripted import Reply
from webappclient import Clock, served

CONFIG = {"agents": {"defaults": {"timezone": "Europe/Paris", "memory_search": {"provider": "none"}}}}
HINT = ("get a new one — on a phone, from Operations → Sign in a phone in the web app on your computer (or "
        "`hermit dashboard --phone`); on the computer, run `hermit dashboard` again")


def answer(req: ModelRequest) -> Reply:
    return "ok"


def test_a_used_link_names_both_ways_to_a_new_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    with served(home, CONFIG, answer, Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))) as (client, _, _):
        ticket = Tickets(home).issue()  # as the web app's "Sign in a phone" makes one, for this gateway
        answers = []
        for _ in range(2):
            with client.websocket_connect("ws://localhost/ws") as ws:
                ws.send_text(json.dumps({"type": "req", "id": "c", "method": "connect",
                                         "params": {"ticket": ticket, "clientId": "phone"}}))
                answers.append(json.loads(ws.receive_text()))
        assert answers[0]["ok"], answers[0]
        assert answers[1]["error"] == {"code": "ticket_expired", "message": "this link was already used or expired",
                                       "hint": HINT}, answers[1]
        with client.websocket_connect("ws://localhost/ws") as ws:  # the handshake a secure page makes: the same
            ws.send_text(json.dumps({"type": "req", "id": "h", "method": "connect.challenge", "params": {
                "nonce": "n" * 32, "host": "localhost", "ticketId": ticket_id(ticket)}}))
            refused = json.loads(ws.receive_text())
        assert refused["error"]["code"] == "ticket_expired" and refused["error"]["hint"] == HINT, refused
