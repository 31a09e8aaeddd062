"""Re-audit 21 (t10) of this session's pools and per-request proxy choice (t5), as an attacker.

Found and fixed:
- **Where foreign addresses bind** (`net.ipv4.ip_nonlocal_bind=1`, as on a keepalived or HAProxy host), "an
  address of this machine" was "an address a socket can be bound to": every one. So every LAN client (whose socket
  is not in this machine's table: no uid) counted as *one* local user of unknown uid, and one LAN host holding 32
  connections not signed in shut out the owner's phone and every other client of the network; every numeric URL was
  "here" too and skipped the proxy. Binding also works for multicast and broadcast addresses. Now an address is
  this machine's when the kernel routes to it as local (a datagram to it leaves from it).
- **Numeric and fully qualified names of this machine**: `http://2130706433/`, `http://127.1/`, `http://0x7f.1/`
  (which the resolver reads as 127.0.0.1) and `localhost.` were not "here", so a media URL of this machine so written
  went to the proxy with the access token.
- **Partial key echoes** (`redaction.echoes`): the key characters before a mask run were looked for by a regex
  search from the text's start, tried at every position: a page with long words before "…" and a registered
  secret's last 4 characters (a placeholder key such as "sk-no-key-required" is public) cost seconds of CPU in
  every mask of it (quadratic).

What holds gets a guard here too (the owner's own loopback pool is never evicted from; a flood's share).
"""

from __future__ import annotations

import ipaddress
import json
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from channelhelpers import run
from gatewayhelpers import write_config
from prochelpers import PROC_TIMEOUT
from test_audit20_errors_proxy import RecordingProxy, proxy  # noqa: F401 (a fixture)
from test_s21_errors_media_proxy import media_server
from test_s21_gateway_pools import HOST, PHONE, Gateway, in_ns, joined_namespaces, log_of, running

GATEWAY_NET, LAN_HOST, PHONE_ADDR = "10.78.0.1", "10.78.1.1", "10.78.2.50"


@pytest.fixture(scope="module")
def nonlocal_lan() -> Iterator[tuple[int, int]]:
    """(the gateway's namespace, the LAN's), joined by a veth pair; in the gateway's, binding to a foreign address
    works (net.ipv4/ipv6.ip_nonlocal_bind=1, per network namespace: this machine's own is untouched)."""
    with joined_namespaces() as (a, b):
        for cmd in (["ip", "addr", "add", f"{GATEWAY_NET}/16", "dev", "va"],
                    ["ip", "-6", "addr", "add", "fd78::1/64", "dev", "va", "nodad"], ["ip", "link", "set", "va", "up"],
                    ["sysctl", "-qw", "net.ipv4.ip_nonlocal_bind=1"], ["sysctl", "-qw", "net.ipv6.ip_nonlocal_bind=1"]):
            in_ns(a, *cmd)
        for cmd in (["ip", "addr", "add", f"{LAN_HOST}/16", "dev", "vb"],
                    ["ip", "addr", "add", f"{PHONE_ADDR}/16", "dev", "vb"], ["ip", "link", "set", "vb", "up"]):
            in_ns(b, *cmd)
        yield a, b


def test_where_any_address_binds_a_lan_host_cannot_shut_the_phone_out(tmp_path: Path,
                                                                      nonlocal_lan: tuple[int, int]) -> None:
    """One LAN host holds 32 connections not signed in; the owner's phone, another address of the LAN, then opens
    6 (a page, its scripts, its socket). Before: both were "a local user of unknown uid" (one source at its cap of
    32), and the phone got nothing."""
    gateway_ns, lan_ns = nonlocal_lan
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", extra="  sign_in_seconds: 600\n")
    with running(Gateway(home, ["nsenter", "-t", str(gateway_ns), "-n"], "--host", GATEWAY_NET)) as gw:
        host = subprocess.Popen(["nsenter", "-t", str(lan_ns), "-n", sys.executable, "-c", HOST, GATEWAY_NET,
                                 str(gw.port), "32", LAN_HOST], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        try:
            assert host.stdout is not None and host.stdin is not None
            assert json.loads(host.stdout.readline())["held"] == 32  # its 33rd was closed: at its own cap
            answers = subprocess.run(["nsenter", "-t", str(lan_ns), "-n", sys.executable, "-c", PHONE, GATEWAY_NET,
                                      str(gw.port), PHONE_ADDR, "6"], capture_output=True, text=True,
                                     timeout=PROC_TIMEOUT)
            got = json.loads(answers.stdout)
            assert got == ["HTTP/1.1 200 OK"] * 6, f"the phone's connections while a LAN host held 32: {got}"
        finally:
            if host.stdin is not None:
                host.stdin.close()
            host.wait(PROC_TIMEOUT)
    assert "uid unknown" not in log_of(gw)  # neither was taken for a local user


WHICH = r"""
import ipaddress, json
from hermit.gateway.peer_uid import address, is_local
from hermit.gateway.unsigned import classify
from hermit.loopback import is_here
hosts = ["198.51.100.7", "2001:db8::7", "10.78.9.9", "224.0.0.1", "255.255.255.255", "10.78.255.255",
         "10.78.0.1", "fd78::1", "127.0.0.1", "0.0.0.0"]
print(json.dumps({"here": {h: is_here(h) for h in hosts},
                  "local": is_local(address("10.78.1.1"), address("10.78.0.1")),
                  "pool": classify(("10.78.1.1", 40000), ("10.78.0.1", 8080), 0)[0]}))
"""


def test_where_any_address_binds_only_this_machines_addresses_are_here(nonlocal_lan: tuple[int, int]) -> None:
    """In the same namespace: another machine's address (a LAN one, the internet's), a multicast and a broadcast
    address are not this machine, so a URL at one keeps the proxy and a client from one is the network's."""
    gateway_ns, _ = nonlocal_lan
    out = subprocess.run(["nsenter", "-t", str(gateway_ns), "-n", sys.executable, "-c", WHICH], capture_output=True,
                         text=True, timeout=PROC_TIMEOUT, check=True)
    seen = json.loads(out.stdout)
    assert seen["here"] == {"198.51.100.7": False, "2001:db8::7": False, "10.78.9.9": False, "224.0.0.1": False,
                            "255.255.255.255": False, "10.78.255.255": False, "10.78.0.1": True, "fd78::1": True,
                            "127.0.0.1": True, "0.0.0.0": True}, seen
    assert seen["local"] is False and seen["pool"] == "network", seen


def test_multicast_and_broadcast_addresses_are_not_this_machine() -> None:
    """Binding a TCP socket to them works on Linux (inet_bind lets RTN_MULTICAST/RTN_BROADCAST through), so they
    were "here"; no connection to them reaches this machine's services."""
    from hermit.loopback import is_here, is_own_address

    for host in ("224.0.0.1", "239.1.2.3", "255.255.255.255", "ff02::1"):
        assert not is_here(host), host
        assert not is_own_address(ipaddress.ip_address(host)), host


@pytest.mark.parametrize("written", ["2130706433", "127.1", "0x7f.1", "0x7f000001", "localhost."])
def test_a_numeric_or_fully_qualified_url_of_this_machine_goes_direct(proxy: RecordingProxy,  # noqa: F811
                                                                      written: str) -> None:
    """A platform's media URL at this machine written as the resolver also reads it (127.0.0.1 in decimal, short or
    hex form; `localhost.`) went to the proxy, its Authorization header with it."""
    from hermit.direct_http import DirectHereAsyncClient
    from hermit.loopback import is_here

    with media_server("127.0.0.1") as (url, got):
        port = url.rsplit(":", 1)[1].split("/")[0]
        target = f"http://{written}:{port}/m1"

        async def main() -> int:
            async with DirectHereAsyncClient(timeout=10) as client:
                try:
                    r = await client.get(target, headers={"Authorization": "Bearer EAAG-REAUDIT21-TOKEN"})
                except Exception:  # noqa: BLE001 - a name this resolver does not know (localhost.): failed here
                    return 0
                return r.status_code
        status = run(main)
    assert not any(b"REAUDIT21" in seen for seen in proxy.seen), proxy.seen  # the proxy saw no token
    assert proxy.seen == [], proxy.seen
    assert status in (200, 0) and (status == 0 or got == ["Bearer EAAG-REAUDIT21-TOKEN"]), (status, got)
    assert is_here(written)


def test_names_and_forms_that_are_not_this_machine_keep_the_proxy() -> None:
    """Guard: what only looks numeric, another machine's numeric forms, names that merely contain localhost."""
    from hermit.loopback import is_here

    for host in ("0xdead.beef", "1.2.3.4.5", "3232235777", "192.0.2.1.", "localhost.example.", "localhostx",
                 "127.0.0.1.example", "x.127.0.0.1"):
        assert not is_here(host), host


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def test_a_page_of_long_words_before_key_echoes_costs_no_quadratic_time() -> None:
    """A page (a tool result, a provider's error) holding 30 words of 3,000 characters, each followed by " …" and
    the last 4 characters of a registered placeholder key. Before: about 6 s of CPU per mask (0.25 s per
    10,000-character word, times the echoes before it); now milliseconds, and what is masked is the same."""
    from hermit.redaction import SecretMasker, echoes

    key = "sk-no-key-required"
    page = ("w" * 3000 + " …ired ") * 30
    started = cpu()
    spans = echoes(page, [key])
    spent = cpu() - started
    assert len(spans) == 30 and all(page[a:b] == "…ired" for a, b in spans), spans[:3]
    assert spent < 0.5, f"{spent:.2f} s CPU for one look"
    masker = SecretMasker()
    masker.add(key)
    started = cpu()
    masked = masker.mask(page)
    assert cpu() - started < 0.5
    assert masked.count("w" * 3000) == 30 and "…ired" not in masked  # the words stay readable, the echoes go


def test_echoes_mask_the_keys_own_start_and_nothing_before_it() -> None:
    """Guard (the bounded look back keeps the rule): the key's first characters before the run are masked, a word
    that is not the key's start is not, nor a run of key characters longer than the key."""
    from hermit.redaction import echoes

    key = "sk-proj-AUDITKEY0000002b4d"
    for text, shown in [("Incorrect API key provided: sk-proj-****2b4d.", "sk-proj-****2b4d"),
                        ("sk-…2b4d", "sk-…2b4d"), ("sk-proj-AUD...2b4d", "sk-proj-AUD...2b4d"),
                        ("loading...2b4d", "...2b4d"), ("x" * 40 + "...2b4d", "...2b4d"),
                        (key[:-4] + "x" + "…2b4d", "…2b4d")]:
        assert [text[a:b] for a, b in echoes(text, [key])] == [shown], text
    assert echoes("done. 2b4d and 2b4d alone", [key]) == []


def test_a_flood_of_network_sources_classifies_cheaply() -> None:
    """CPU of `classify` for a client of another machine (a netlink lookup that finds nothing, then the route probe
    for an own address), median of 3 rounds of 2,000: a flood of connects pays about this per connection."""
    from hermit.gateway.unsigned import classify

    rounds = []
    for _ in range(3):
        started = cpu()
        for i in range(2000):
            assert classify((f"198.51.100.{i % 250 + 1}", 40000 + i), ("127.0.0.1", 8080), os.geteuid())[0] == \
                "network"
        rounds.append((cpu() - started) / 2000)
    per = sorted(rounds)[1]
    print(f"classify: {per * 1e6:.0f} µs CPU per network client (load {os.getloadavg()[0]:.1f})")
    assert per < 0.002, per


def test_the_owners_loopback_pool_is_never_evicted_from() -> None:
    """Guard: the fair share never touches the owner's own pool (everything in it is the owner's), whatever fills
    the others; a newcomer of the network takes a network holder's place, never one of the owner's."""
    from hermit.gateway.unsigned import Unsigned

    class Held:
        closed = False

        def is_closing(self) -> bool:
            return self.closed

        def close(self) -> None:
            self.closed = True

        def get_write_buffer_size(self) -> int:
            return 0

    u = Unsigned(own_uid=os.geteuid())
    with socket.create_server(("127.0.0.1", 0)) as listener:
        server = listener.getsockname()[:2]
        clients = [socket.create_connection(server) for _ in range(32)]
        accepted = [listener.accept()[0] for _ in clients]
        try:
            mine = [Held() for _ in clients]
            for c, t in zip(clients, mine, strict=True):  # the owner's own program: its socket's uid is ours
                assert u.admit(c.getsockname()[:2], t, server)  # type: ignore[arg-type]
            for a in range(8):
                for n in range(32):
                    assert u.admit((f"198.51.100.{a + 1}", 40000 + n), Held(), server)  # type: ignore[arg-type]
            for n in range(20):  # other networks, one by one: each takes a LAN holder's place
                assert u.admit((f"203.0.{n}.9", 41000), Held(), server)  # type: ignore[arg-type]
            assert not any(t.closed for t in mine)
            assert u.holding() == 32 + 256
        finally:
            for s in (*clients, *accepted):
                s.close()


def test_a_here_url_redirecting_elsewhere_hands_the_proxy_no_token(proxy: RecordingProxy) -> None:  # noqa: F811
    """Guard: a media server of this machine (reached direct) answers with a redirect to another host; the next
    request goes through the proxy, as that host's must, and without the Authorization header (httpx drops it when
    the origin changes), so the proxy never sees the token."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    from hermit.direct_http import DirectHereAsyncClient

    got: list[str] = []

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            got.append(self.headers.get("Authorization", ""))
            self.send_response(302)
            self.send_header("Location", "http://media.example.test/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.2", 0), Redirect)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        async def main() -> int:
            async with DirectHereAsyncClient(timeout=10, follow_redirects=True) as client:
                r = await client.get(f"http://127.0.0.2:{server.server_address[1]}/m1",
                                     headers={"Authorization": "Bearer EAAG-REAUDIT21-TOKEN"})
                return r.status_code
        status = run(main)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert got == ["Bearer EAAG-REAUDIT21-TOKEN"]  # the first request went direct, with its token
    assert status == 502 and b"GET http://media.example.test/elsewhere" in b"".join(proxy.seen), proxy.seen
    assert not any(b"REAUDIT21" in seen for seen in proxy.seen), proxy.seen
