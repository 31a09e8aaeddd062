"""The owner's phone keeps its reserved places across a gateway restart (gateway/reserved_file.py, gateway/unsigned.py
`Reserved`): they were in memory only, so after any restart — a service restart, an upgrade — the phone competed as a
stranger until it signed in again, and on IPv6 a LAN guest in its /64 holding 32 silent connections kept every one of
its connections out. Now they are kept in a 0600 file, each entry bound to the gateway token: a new token (what the
docs say to do after a lost phone) leaves none. A real gateway in a network namespace and a real LAN (the fixtures of
test_s21_gateway_reserved_phone.py)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from gatewayhelpers import write_config
from test_s19_web_idle import PER_SOURCE
from test_s21_gateway_pools import GATEWAY_NET6, Gateway, running
from test_s21_gateway_reserved_phone import GUEST6, PHONE6, Flood, lan, lan6, phone_gets, visit

__all__ = ["lan", "lan6"]  # the LAN fixtures, used here as there


def start(home: Path, lan_pair: tuple[int, int]) -> Gateway:
    return Gateway(home, ["nsenter", "-t", str(lan_pair[0]), "-n"], "--host", GATEWAY_NET6)


def test_a_phone_that_signed_in_before_a_restart_still_has_its_places_after_it(tmp_path: Path,
                                                                                 lan6: tuple[int, int]) -> None:
    home, lan_ns = tmp_path / "home", lan6[1]
    write_config(home, "http://127.0.0.1:9/v1", extra="  sign_in_seconds: 600\n")
    with running(start(home, lan6)) as gw:
        assert visit(lan_ns, gw, PHONE6, "token") == "hello-ok"
    with running(start(home, lan6)) as gw:  # a new process: nothing of the last one's memory
        with Flood(lan_ns, gw, GUEST6, PER_SOURCE) as flood:
            assert flood.first == PER_SOURCE  # the guest holds the /64's whole share
            got = phone_gets(lan_ns, gw, PHONE6)
            assert got == ["HTTP/1.1 200 OK"] * 6, f"the phone's connections after the restart: {got}"
        gw.proc.send_signal(signal.SIGUSR1)  # a restart in place (a new image) keeps them as well
        gw.wait_ready()
        with Flood(lan_ns, gw, GUEST6, PER_SOURCE) as flood:
            assert phone_gets(lan_ns, gw, PHONE6) == ["HTTP/1.1 200 OK"] * 6
    kept = home / "gateway" / "reserved.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    entries = json.loads(kept.read_text())["entries"]
    assert [e["ip"] for e in entries] == [PHONE6], entries
    assert gw.token not in kept.read_text()


def test_a_new_gateway_token_leaves_no_reserved_place(tmp_path: Path, lan6: tuple[int, int]) -> None:
    """Held: entries bound to the old token are not reserved under a new one; nor is a file another user could
    have written (not 0600) read at all."""
    home, lan_ns = tmp_path / "home", lan6[1]
    write_config(home, "http://127.0.0.1:9/v1", extra="  sign_in_seconds: 600\n")
    with running(start(home, lan6)) as gw:
        assert visit(lan_ns, gw, PHONE6, "token") == "hello-ok"
    (home / "gateway" / "token").unlink()
    with running(start(home, lan6)) as gw:
        with Flood(lan_ns, gw, GUEST6, PER_SOURCE):
            assert phone_gets(lan_ns, gw, PHONE6) == [""] * 6  # a stranger again, as in-memory places were
        assert visit(lan_ns, gw, PHONE6, "token") == "hello-ok"  # a sign-in under the new token earns them again
    kept = home / "gateway" / "reserved.json"
    os.chmod(kept, 0o644)
    with running(start(home, lan6)) as gw:
        with Flood(lan_ns, gw, GUEST6, PER_SOURCE):
            assert phone_gets(lan_ns, gw, PHONE6) == [""] * 6
        log = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
        assert "reserved places not restored" in log and "not a private file of yours" in log, log[-2000:]
