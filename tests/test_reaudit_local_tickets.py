"""Re-audit of one-time sign-in tickets (gateway/tickets.py): how many a signed-in page may leave pending.

The web app's "Sign in a phone" (`tickets.create`) makes a ticket file in <state>/gateway/ each time it is asked;
only expired ones and those of a stopped gateway were removed. A tab left open on a shared or stolen device (or a
page script looping on the request) made one file per request for as long as it liked — thousands a minute, each
creation listing and reading every pending one — and every one of them a live key to the gateway token for ten
minutes. Pending tickets of a gateway are now at most MAX_PENDING: a new one takes the place of the oldest.
"""

from __future__ import annotations

from pathlib import Path

from hermit.gateway.state import gateway_dir
from hermit.gateway.tickets import MAX_PENDING, PREFIX, Tickets, ticket_id


def test_a_page_asking_for_ticket_after_ticket_keeps_only_the_newest_pending(tmp_path: Path) -> None:
    gateway_dir(tmp_path).mkdir(mode=0o700)
    now = [1_000_000.0]
    tickets = Tickets(tmp_path, clock=lambda: now[0], pid=4242)
    made = []
    for _ in range(MAX_PENDING * 8):
        made.append(tickets.issue())
        now[0] += 0.5
    pending = sorted(p.name for p in gateway_dir(tmp_path).iterdir() if p.name.startswith(PREFIX))
    assert pending == sorted(PREFIX + ticket_id(t) for t in made[-MAX_PENDING:])
    assert tickets.find(ticket_id(made[0])) is None  # the oldest went
    assert tickets.redeem(ticket_id(made[-1]))  # the newest works, once
    assert not tickets.redeem(ticket_id(made[-1]))
    assert MAX_PENDING >= 4  # a few phones and `hermit dashboard` at once still work


def test_a_ticket_made_for_an_earlier_gateway_under_the_same_pid_is_refused(tmp_path: Path) -> None:
    """A gateway in a container is pid 1 (or the same small pid) every run: a ticket made for the gateway before a
    restart — a link a program that took the port meanwhile read off the page — was the next gateway's too."""
    import json
    import os

    gateway_dir(tmp_path).mkdir(mode=0o700)
    tickets = Tickets(tmp_path)  # this process plays the gateway now running
    assert tickets.started is not None  # Linux: the start of this process
    earlier = {"gateway": os.getpid(), "started": tickets.started - 1}  # the process that had this pid before
    for left in (earlier, {"gateway": os.getpid()}):  # ...as this version, and an earlier one, wrote it
        ticket = tickets.issue()
        path = gateway_dir(tmp_path) / (PREFIX + ticket_id(ticket))
        path.write_text(json.dumps({**json.loads(path.read_text()), **left}) if "started" in left else
                        json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "started"}))
        assert tickets.find(ticket_id(ticket)) is None
        assert not tickets.redeem(ticket_id(ticket))
    mine = tickets.issue()
    assert tickets.redeem(ticket_id(mine))  # one made for this gateway works
