"""s22 re-audit of the one proxy rule (hermit.direct_http): names of this machine, and a websocket's host read as the
websocket library reads it.

- A local model or embeddings server written by this machine's own name — its hostname (`http://vm:11434/v1`), or a
  name /etc/hosts gives one of its addresses — was sent through HTTP_PROXY: `is_here` resolves no name, so the proxy
  got every prompt (MEMORY.md, the main session) and the key in plain text, though the resolver reads /etc/hosts
  before DNS and the name is this machine as surely as 127.1 is (t5's fix, test_s22_one_proxy_rule.py).
- `websocket_proxy` read the host with urllib while `websockets` connects to it IDNA-encoded: a relay's URL spelled
  `ws://localhost。:port` (an ideographic full stop, which IDNA reads as a dot) was judged another host (the
  environment's proxy), and its frames would have crossed the proxy in plain text; httpx clients already judge the
  encoded host.
Real DirectHereClient, a recording "proxy" and a recording server on the address the hostname resolves to."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from pathlib import Path

import pytest
from websockets.uri import parse_uri

from hermit.direct_http import DirectHereClient, goes_direct, websocket_proxy
from hermit.loopback import is_here
from test_audit20_errors_proxy import KEY, RecordingProxy, proxy  # noqa: F401 (a fixture)


class Server(RecordingProxy):
    """A recording HTTP server on `address` (what a local model server is here), answering 200."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.sock.close()
        self.sock = socket.create_server((address, 0))
        self.port = self.sock.getsockname()[1]

    def answer(self) -> bytes:
        return b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"


def names_here_in_hosts() -> list[str]:
    """The names /etc/hosts gives an address of this machine, other than those `is_here` knows by their spelling."""
    names = []
    for line in Path("/etc/hosts").read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and is_here(fields[0]):
            names += [n for n in fields[1:] if not is_here(n)]
    return names


def test_this_machines_hostname_goes_direct(proxy: RecordingProxy) -> None:  # noqa: F811
    name = socket.gethostname()
    address = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    assert is_here(address), f"{name} resolves to {address}, not an address of this machine"
    with Server(address) as server, DirectHereClient(timeout=10) as client:
        answer = client.post(f"http://{name}:{server.port}/v1/chat/completions",
                             headers={"Authorization": f"Bearer {KEY}"}, content=b'{"messages": []}')
        assert proxy.seen == [], proxy.seen[:1]  # before: the proxy got the request, the key in it
        assert answer.status_code == 200 and answer.text == "ok"
        assert server.seen and KEY.encode() in server.seen[0]
        for spelled in (name, name.upper(), f"{name}."):
            assert goes_direct(client, f"http://{spelled}:11434/v1"), spelled
            assert websocket_proxy(f"ws://{spelled}:8443/link") is None, spelled


def test_names_etc_hosts_gives_this_machine_go_direct(proxy: RecordingProxy) -> None:  # noqa: F811
    with DirectHereClient() as client:
        for name in names_here_in_hosts():
            assert goes_direct(client, f"http://{name}:11434/v1"), name
            assert websocket_proxy(f"wss://{name}:8443/link") is None, name
        for host in ("api.openai.com", "192.0.2.254", "localhost.example", "vm.example"):
            assert not goes_direct(client, f"https://{host}/v1"), host
            assert websocket_proxy(f"wss://{host}/link") is True, host


@pytest.mark.parametrize("url", ["ws://localhost\u3002:8443/link", "ws://127\u30020\u30020\u30021:8443/link",
                                 "wss://LOCALHOST\uff0e:8443/link", "ws://[::ffff:7f00:1]:8443/link",
                                 "ws://api.openai.com\u3002:443/link", "wss://example.org/link"])
def test_a_websockets_host_is_judged_as_websockets_connects_to_it(url: str) -> None:
    connects_to = parse_uri(url).host
    assert (websocket_proxy(url) is None) == is_here(connects_to), (url, connects_to)


def own_link_local() -> list[str]:
    """This machine's link-local IPv6 addresses with their zone (/proc/net/if_inet6: address, …, scope 20, name)."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text(encoding="ascii").splitlines():
            raw, *_, scope, _flags, name = line.split()
            if scope == "20":
                out.append(f"{ipaddress.IPv6Address(bytes.fromhex(raw))}%25{name}")
    return out


def test_mapped_addresses_and_zone_ids_of_this_machine_go_direct(proxy: RecordingProxy) -> None:  # noqa: F811
    """Held: an IPv4-mapped loopback in either spelling, a zone id, and this machine's own link-local address."""
    here = ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.2]", "[::1%25lo]",
            *(f"[{a}]" for a in own_link_local())]
    with DirectHereClient() as client:
        for host in here:
            assert goes_direct(client, f"http://{host}:11434/v1"), host
            assert websocket_proxy(f"ws://{host}:8443/link") is None, host
        for host in ("[::ffff:192.0.2.1]", "[fe80::dead:beef%25lo]", "[64:ff9b::7f00:1]"):
            assert not goes_direct(client, f"http://{host}:11434/v1"), host
