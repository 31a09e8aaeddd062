"""Connections not signed in, shared fairly (s21 t5), against a real `hermit gateway run` over real sockets.

s20 counted them in three pools (the gateway's own user by address, other local users by uid, the network by
address or IPv6 /64), each with a total. Left: a LAN host with 8 addresses filled the network pool (8 × 32 = 256),
so the owner's phone could not open a connection; a user with several uids (a rootless container's subordinate
ones) filled the other users' pool (2 × 32 = 64); and where the uid cannot be read (not Linux, no sock_diag) a local
user connecting from the machine's LAN address counted as a network client, outside the cap on local users.

Now a full pool is shared: a newcomer whose source holds fewer than the largest holder takes the place of that
holder's oldest connection (in the network pool by network first — an IPv4 /24, an IPv6 /48 — then by address); a
uid in a range of /etc/subuid counts as the user owning the range; and a client at any address of this machine
whose uid cannot be read counts as another local user.

The LAN is real: the gateway runs in a network namespace of its own, joined by a veth pair to a second one where the
"LAN host" holds many addresses and the owner's phone one (nothing is added to this machine's own network). The
subordinate uids are real (100000, 100001 through setpriv), /etc/subuid is bind-mounted over in the gateway's own
mount namespace only, and the no-sock_diag branch is taken in a gateway process whose socket module has no
AF_NETLINK (as on macOS).
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ciguard import need
from connscripts import CLOSED_WITHIN, ONE_MORE, STILL_OPEN
from gatewayhelpers import GatewayProcess, write_config
from prochelpers import PROC_TIMEOUT, python_as
from test_s19_web_idle import PER_SOURCE, TOTAL, WAIT
from test_s20_gateway_unsigned import EXTRA, FLOOD, NOBODY, lan_address, page_answers

GATEWAY_NET, LAN = "10.77.0.1", "10.77.1"  # the gateway's address; the LAN host's and the phone's /24
GATEWAY_NET6 = "fd77::1"  # over IPv6: the LAN host's /64s are fd77:0:1:N::/64 (one /48), the phone's fd77:0:2::/64


class Gateway(GatewayProcess):
    """`hermit gateway run` started through `prefix` (nsenter, unshare…), with `env` over this process's."""

    def __init__(self, home: Path, prefix: list[str], *args: str, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.stderr_path = home / "gateway.stderr"
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "hermit.cli.main", "--home", str(home), "gateway", "run", "--port", "0",
             *args], stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **(env or {})})
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = ""

    @property
    def port(self) -> int:
        """The port, from the URL the gateway prints (http://[fd77::1]:PORT/ over IPv6)."""
        return int(self.url.split("/?", 1)[0].rstrip("/").rsplit(":", 1)[1])


@contextmanager
def running(gw: Gateway) -> Iterator[Gateway]:
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


def log_of(gw: GatewayProcess) -> str:
    return (gw.home / "logs" / "gateway.log").read_text(encoding="utf-8")


# -- a LAN host with many addresses ----------------------------------------------------------------------------

def netns_holder() -> subprocess.Popen[str]:
    """A process in a new network namespace of its own (it says "in" once there); its pid names the namespace."""
    p = subprocess.Popen(["unshare", "--net", "sh", "-c", "echo in; exec cat"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "in"
    return p


def in_ns(pid: int, *command: str) -> None:
    subprocess.run(["nsenter", "-t", str(pid), "-n", *command], check=True, timeout=PROC_TIMEOUT,
                   capture_output=True)


@contextmanager
def joined_namespaces() -> Iterator[tuple[int, int]]:
    """Two new network namespaces (the gateway's, the LAN's; named by the pids yielded) joined by a veth pair, `va`
    in the first and `vb` in the second (no address, down), loopback up in both; ended on leaving."""
    need(os.geteuid() == 0, "root, to make network namespaces")
    there, lan_side = netns_holder(), netns_holder()
    try:
        a, b = there.pid, lan_side.pid
        in_ns(a, "ip", "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", str(b))
        in_ns(a, "ip", "link", "set", "lo", "up")
        in_ns(b, "ip", "link", "set", "lo", "up")
        yield a, b
    finally:
        for p in (there, lan_side):
            assert p.stdin is not None
            p.stdin.close()
            p.wait(PROC_TIMEOUT)


@pytest.fixture(scope="module")
def lan() -> Iterator[tuple[int, int]]:
    """(the gateway's namespace, the LAN's): a veth pair between them, 10.77.0.1/16 on the gateway's side, the LAN
    side with 10.77.1.1-64 (the host with many addresses), 10.77.1.50 and 10.77.2.50 (the owner's phone on the same
    /24, or on another)."""
    with joined_namespaces() as (a, b):
        for cmd in (["ip", "addr", "add", f"{GATEWAY_NET}/16", "dev", "va"], ["ip", "link", "set", "va", "up"]):
            in_ns(a, *cmd)
        for n in range(1, 65):
            in_ns(b, "ip", "addr", "add", f"{LAN}.{n}/16", "dev", "vb")
        in_ns(b, "ip", "addr", "add", "10.77.2.50/16", "dev", "vb")
        # IPv6 without duplicate address detection (an address is usable at once): the gateway's, 8 /64s of one
        # /48 with 4 addresses each for the LAN host, the phone's in another /48
        in_ns(a, "ip", "-6", "addr", "add", f"{GATEWAY_NET6}/16", "dev", "va", "nodad")
        for n in range(1, 9):
            for h in range(1, 5):
                in_ns(b, "ip", "-6", "addr", "add", f"fd77:0:1:{n}::{h}/16", "dev", "vb", "nodad")
        in_ns(b, "ip", "-6", "addr", "add", "fd77:0:2::50/16", "dev", "vb", "nodad")
        in_ns(b, "ip", "link", "set", "vb", "up")
        yield a, b


# The LAN host: `per` silent connections from each of `sources`, then one more from the first (at its cap, or no
# fewer than anyone's: refused at once — and since the gateway takes connections in order, its close says all before
# it were counted); says how many of the first are open now, holds them until its stdin ends.
HOST = r"""
import json, select, socket, sys
gateway, port, per, sources = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
""" + STILL_OPEN + ONE_MORE + r"""
held = []
for src in sources:
    for _ in range(per):
        held.append(socket.create_connection((gateway, port), source_address=(src, 0)))
probe = one_more(gateway, port, sources[0])
print(json.dumps({"held": sum(still_open(s) for s in held)}), flush=True)
sys.stdin.readline()
print(json.dumps({"held": sum(still_open(s) for s in held)}), flush=True)
sys.stdin.read()
"""

# The owner's phone: `n` connections opened together (a page, its scripts and its socket), then a GET on each;
# says the status line each got ("" for one the gateway closed).
PHONE = r"""
import json, socket, sys
gateway, port, src, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
conns = [socket.create_connection((gateway, port), source_address=(src, 0)) for _ in range(n)]
got = []
for s in conns:
    s.settimeout(30)
    try:
        host = f"[{gateway}]" if ":" in gateway else gateway
        s.sendall(b"GET / HTTP/1.1\r\nHost: " + host.encode() + b"\r\nConnection: close\r\n\r\n")
        got.append(s.recv(100).split(b"\r\n")[0].decode())
    except OSError:
        got.append("")
print(json.dumps(got), flush=True)
"""


IPV6_HOST = [f"fd77:0:1:{n}::{h}" for n in range(1, 9) for h in range(1, 5)]  # 8 /64s, 4 addresses in each


@pytest.mark.parametrize(("sources", "per", "phone"), [
    ([f"{LAN}.{n}" for n in range(1, 9)], PER_SOURCE, f"{LAN}.50"),
    ([f"{LAN}.{n}" for n in range(1, 65)], 4, "10.77.2.50"),
    (IPV6_HOST, PER_SOURCE // 4, "fd77:0:2::50")],
    ids=["8-addresses-phone-on-the-same-24", "64-addresses-phone-on-another-24", "ipv6-8-64s-phone-on-another-48"])
def test_a_lan_host_with_many_addresses_cannot_keep_the_phone_out(tmp_path: Path, lan: tuple[int, int],
                                                                  sources: list[str], per: int, phone: str) -> None:
    gateway_ns, lan_ns = lan
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", extra="  sign_in_seconds: 600\n")
    prefix = ["nsenter", "-t", str(gateway_ns), "-n"]
    where = GATEWAY_NET6 if ":" in phone else GATEWAY_NET
    with running(Gateway(home, prefix, "--host", where)) as gw:
        host = subprocess.Popen(["nsenter", "-t", str(lan_ns), "-n", sys.executable, "-c", HOST, where,
                                 str(gw.port), str(per), ",".join(sources)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert host.stdout is not None and host.stdin is not None
            first = json.loads(host.stdout.readline())
            assert first["held"] == len(sources) * per == TOTAL, first  # the network pool is full
            answers = subprocess.run(["nsenter", "-t", str(lan_ns), "-n", sys.executable, "-c", PHONE,
                                      where, str(gw.port), phone, "6"], capture_output=True, text=True,
                                     timeout=PROC_TIMEOUT)
            got = json.loads(answers.stdout)
            assert got == ["HTTP/1.1 200 OK"] * 6, f"the phone's connections while the LAN host held 256: {got}"
            host.stdin.write("again\n")
            host.stdin.flush()
            after = json.loads(host.stdout.readline())
            assert after["held"] == TOTAL - 6, after  # each of the phone's took one of the host's places
        finally:
            if host.stdin is not None:
                host.stdin.close()
            host.wait(PROC_TIMEOUT)
    log = log_of(gw)
    assert f"closed to make room for {phone}" in log, log[-2000:]


# -- a user with many uids ------------------------------------------------------------------------------------

# One uid's program: `n` silent connections to 127.0.0.1; says how many the gateway closed within `wait` (waited on
# together), then holds the rest until its stdin ends.
UID_FLOOD = r"""
import json, select, socket, sys, time
port, n, wait = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
""" + CLOSED_WITHIN + r"""
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
print(json.dumps({"closed": closed_within(held, wait)}), flush=True)
sys.stdin.read()
"""


def as_uid(uid: int) -> dict[str, object]:
    return {"user": uid, "group": 65534, "extra_groups": []}


@contextmanager
def flood(python: str, uid: int, port: int, n: int, wait: float) -> Iterator[dict[str, int]]:
    p = subprocess.Popen([python, "-c", UID_FLOOD, str(port), str(n), str(wait)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd="/", **as_uid(uid))  # type: ignore[call-overload]
    try:
        assert p.stdout is not None
        yield json.loads(p.stdout.readline())
    finally:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(PROC_TIMEOUT)


def test_a_users_subordinate_uids_count_as_that_user(tmp_path: Path) -> None:
    """nobody (65534) owns 100000-165535 in /etc/subuid (as `usermod --add-subuids` writes for a rootless
    container): its uids 100000 and 100001 are one source, so they cannot fill the other users' pool (64) and a
    reverse proxy run as www-data (uid 33) still gets in."""
    need(os.geteuid() == 0, "root, to run programs as other uids and to bind-mount /etc/subuid in a namespace")
    python = python_as(as_uid(100000))
    need(python is not None, "a Python that uid 100000 can run")
    assert python is not None
    subuid = tmp_path / "subuid"
    subuid.write_text("# a comment, and a line for a user this machine does not know\nno-such-user:300000:65536\n"
                      "nobody:100000:65536\n", encoding="utf-8")
    subuid.chmod(0o644)
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", extra="  sign_in_seconds: 600\n")
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              'mount --bind "$0" /etc/subuid && exec "$@"', str(subuid)]
    with running(Gateway(home, prefix)) as gw, flood(python, 100000, gw.port, PER_SOURCE, 1.0) as first:
        assert first["closed"] == 0, first
        with flood(python, 100001, gw.port, PER_SOURCE, WAIT) as second:
            # the same user: each over the cap is closed at once (before: all 32 held, the pool then full)
            assert second["closed"] == PER_SOURCE, second
            with flood(python, 33, gw.port, 1, 1.0) as proxy:
                assert proxy["closed"] == 0, proxy  # another user still has room
            assert page_answers(gw)  # and the owner's page
    log = log_of(gw)
    assert "(uid 65534) closed" in log and "uid 100001" not in log, log[-2000:]


def test_two_users_filling_the_other_users_pool_make_room_for_a_third(tmp_path: Path) -> None:
    """Two real users (uids 65533 and 65534: two accounts of one person, or two people) hold 32 each, the other
    users' whole pool: a reverse proxy run as www-data (uid 33) still gets in, in the place of one of theirs."""
    need(os.geteuid() == 0, "root, to run programs as other uids")
    python = python_as(as_uid(65533))
    need(python is not None, "a Python that uid 65533 can run")
    assert python is not None
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", extra="  sign_in_seconds: 600\n")
    with running(Gateway(home, [])) as gw, flood(python, 65533, gw.port, PER_SOURCE, 1.0) as first, \
            flood(python, 65534, gw.port, PER_SOURCE, 1.0) as second:
        assert first["closed"] == second["closed"] == 0, (first, second)  # the pool is full (64)
        with flood(python, 33, gw.port, 1, 1.0) as proxy:
            assert proxy["closed"] == 0, proxy
    log = log_of(gw)
    assert "closed to make room for 127.0.0.1 (uid 33)" in log, log[-2000:]


# -- no uid to read (not Linux, no sock_diag) -------------------------------------------------------------------

def test_without_sock_diag_a_local_user_is_never_a_network_client(tmp_path: Path) -> None:
    """The gateway's socket module has no AF_NETLINK (as on macOS): no uid can be read. uid 65534 holds 32 from
    127.0.0.1 and then tries 127.0.0.2, 127.0.0.3 and this machine's LAN address: all one source ("uid unknown", in
    the other users' pool), so each extra one is closed — before, the LAN address's counted as a network client's
    (32 more, in the pool of the owner's phone)."""
    need(os.geteuid() == 0, "root, to run a program as uid 65534")
    python = python_as(NOBODY)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import socket\ndel socket.AF_NETLINK  # as on a system without netlink\n",
                                           encoding="utf-8")
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", extra="  sign_in_seconds: 600\n")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    with running(Gateway(home, [], env={"PYTHONPATH": path})) as gw:
        p = subprocess.Popen([python, "-c", FLOOD, str(gw.port), str(PER_SOURCE), str(EXTRA), str(WAIT),
                              lan_address()], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/",
                             **NOBODY)  # type: ignore[call-overload]
        try:
            assert p.stdout is not None and p.stdin is not None
            said = json.loads(p.stdout.readline())
            assert said["more_closed"] == EXTRA, said
            p.stdin.write("count\n")
            p.stdin.flush()
            assert json.loads(p.stdout.readline())["first_open"] == PER_SOURCE
        finally:
            if p.stdin is not None:
                p.stdin.close()
            p.wait(PROC_TIMEOUT)
    log = log_of(gw)
    assert "(uid unknown) closed" in log and "(local;" in log, log[-2000:]
    assert "(network;" not in log and "(yours;" not in log


# -- a network client that borrows a listener's port ----------------------------------------------------------

# Listeners of this uid on 0.0.0.0 (as sshd's 22 or any service of the gateway's user), in the gateway's namespace.
LISTENERS = r"""
import socket, sys
held = [socket.create_server(("0.0.0.0", 0)) for _ in range(int(sys.argv[1]))]
print(",".join(str(s.getsockname()[1]) for s in held), flush=True)
sys.stdin.read()
"""

# The LAN host: from each of its addresses, one connection from each of `ports` as its source port; then one probe
# as HOST's; says how many are open, holds them until its stdin ends.
BORROWER = r"""
import json, socket, sys
gateway, port, ports, sources = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4].split(",")
""" + ONE_MORE + r"""
held = []
for src in sources:
    for p in ports:
        try:
            held.append(socket.create_connection((gateway, port), source_address=(src, int(p))))
        except OSError:
            pass
probe = one_more(gateway, port, sources[0])
print(json.dumps({"made": len(held)}), flush=True)
sys.stdin.read()
"""


def test_a_network_client_on_a_listeners_port_is_not_that_listeners_user(tmp_path: Path, lan: tuple[int, int],
                                                                         ) -> None:
    """The kernel's lookup of one socket falls back to a listener on the client's port: a LAN client that chose
    as its source port one the gateway's user listens on at 0.0.0.0 (the gateway's own port, here, and 4 more) was
    counted as the owner's own program, in the owner's pool — 64 addresses × 5 ports filled it (256), and the
    owner's new tab on 127.0.0.1 was refused. Now only the client's very socket answers for it."""
    gateway_ns, lan_ns = lan
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", extra="  sign_in_seconds: 600\n")
    listeners = subprocess.Popen(["nsenter", "-t", str(gateway_ns), "-n", sys.executable, "-c", LISTENERS, "4"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert listeners.stdout is not None
        ports = listeners.stdout.readline().strip().split(",")
        with running(Gateway(home, ["nsenter", "-t", str(gateway_ns), "-n"], "--host", "0.0.0.0")) as gw:
            sources = ",".join(f"{LAN}.{n}" for n in range(1, 65))
            host = subprocess.Popen(["nsenter", "-t", str(lan_ns), "-n", sys.executable, "-c", BORROWER,
                                     GATEWAY_NET, str(gw.port), ",".join([str(gw.port), *ports]), sources],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                assert host.stdout is not None
                # 320 tried; more than the owner's pool holds (a connect may fail on a machine under load)
                assert json.loads(host.stdout.readline())["made"] > TOTAL + 32
                # the owner's own new connection, from this machine (in the gateway's namespace)
                owner = subprocess.run(["nsenter", "-t", str(gateway_ns), "-n", sys.executable, "-c", PHONE,
                                        "127.0.0.1", str(gw.port), "127.0.0.1", "1"], capture_output=True,
                                       text=True, timeout=PROC_TIMEOUT)
                assert json.loads(owner.stdout) == ["HTTP/1.1 200 OK"], owner.stdout
            finally:
                if host.stdin is not None:
                    host.stdin.close()
                host.wait(PROC_TIMEOUT)
    finally:
        if listeners.stdin is not None:
            listeners.stdin.close()
        listeners.wait(PROC_TIMEOUT)
    log = log_of(gw)
    assert "(yours;" not in log, log[-2000:]
    # the LAN clients were network clients, at an address's cap or its share: which address the pool's first
    # eviction (the one logged) took depends on which connects got through first on a loaded machine
    assert re.search(rf"{re.escape(LAN)}\.(\d+) \({re.escape(LAN)}\.\1\) closed", log), log[-2000:]


def test_the_lookup_answers_for_the_client_socket_only() -> None:
    """The same on this machine's own sockets: a listener of this uid on 0.0.0.0:P gives no uid to a client of
    another machine whose source port is P."""
    import socket

    from hermit.gateway.unsigned import classify

    with socket.create_server(("0.0.0.0", 0)) as listener:
        port = listener.getsockname()[1]
        assert classify(("198.51.100.7", port), ("192.0.2.2", 8080), os.geteuid()) == ("network", "198.51.100.7")
