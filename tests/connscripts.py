"""Pieces of the small programs the gateway connection tests run in other processes (as another uid, in another
network namespace): Python source, joined into a script's text before `python -c`. One copy of each, not one per
script (tests/test_s20_gateway_unsigned.py, tests/test_s21_gateway_pools.py)."""

from __future__ import annotations

# closed_within(sockets, seconds): how many of `sockets` the gateway ends within `seconds`, waited on together.
CLOSED_WITHIN = r"""
def closed_within(sockets, seconds):
    left, done, until = list(sockets), 0, time.monotonic() + seconds
    while left and time.monotonic() < until:
        ready, _, _ = select.select(left, [], [], until - time.monotonic())
        for s in ready:
            try:
                if s.recv(4096):
                    continue
            except OSError:
                pass
            left.remove(s)
            done += 1
    return done
"""

# still_open(s): whether the gateway has not closed `s` (a peek that would block, or that finds data).
STILL_OPEN = r"""
def still_open(s):
    s.setblocking(False)
    try:
        return bool(s.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return True
    except OSError:
        return False
"""

# one_more(gateway, port, src): one more connection from `src`, waited on until the gateway closes it (or 30 s) —
# since the gateway takes connections in order, its close says all before it were counted; returned, so that the
# caller holds it as it holds the others.
ONE_MORE = r"""
def one_more(gateway, port, src):
    probe = socket.create_connection((gateway, port), source_address=(src, 0))
    probe.settimeout(30)
    try:
        probe.recv(1)
    except OSError:
        pass
    return probe
"""
