"""The gateway's Host check (gateway/app.py HostCheck), against a real `hermit gateway run`: a DNS-rebinding
page (its name re-pointed at this machine, so Origin and Host are both the attacker's name) gets 421 on the
page, the static files, /status and the WebSocket handshake; loopback names and addresses, other IP
addresses and the hosts of `gateway.allowed_origins` are served; webhook routes are left to their
signature checks, since platforms reach them through a tunnel under its public name."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from fakes.fake_whatsapp import sign, text_message, webhook_body
from gatewayhelpers import GatewayProcess, unused_model_gateway

EVIL = "rebind.evil.test"
WA = ("channels:\n  whatsapp:\n    accounts:\n      biz:\n        phone_number_id: '1065550100'\n"
      "        base_url: http://127.0.0.1:9\n        dm_policy: allowlist\n        allow_from: ['15550001001']\n")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home = tmp_path_factory.mktemp("host")
    mp = pytest.MonkeyPatch()
    mp.setenv("WHATSAPP_ACCESS_TOKEN", "EAAG-host-test")
    mp.setenv("WHATSAPP_APP_SECRET", "app-secret-host")
    mp.setenv("WHATSAPP_VERIFY_TOKEN", "verify-host")
    try:  # no message reaches an agent
        yield from unused_model_gateway(home, "  allowed_origins: ['https://hermit.example']\n" + WA)
    finally:
        mp.undo()


def get(gw: GatewayProcess, path: str, host: str, **headers: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{gw.port}{path}", headers={"Host": host, **headers}, timeout=10)


def ws_open(gw: GatewayProcess, host: str, origin: str) -> dict[str, Any]:
    """Open /ws on the gateway's loopback socket with `host` in the handshake; connect with the token."""
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    with connect(f"ws://{host}/ws", sock=sock, origin=Origin(origin), open_timeout=10) as ws:
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": gw.token}}))
        hello: dict[str, Any] = json.loads(ws.recv(10))
        return hello


def test_a_rebinding_host_gets_421_on_the_page_files_status_and_websocket(gateway: GatewayProcess) -> None:
    evil = f"{EVIL}:{gateway.port}"
    for path, headers in (("/", {}), ("/static/app.js", {}), ("/favicon.ico", {}),
                          ("/status", {"Authorization": f"Bearer {gateway.token}"})):
        r = get(gateway, path, evil, **headers)
        print(path, "with Host", evil, "->", r.status_code, r.text[:60])
        assert r.status_code == 421, (path, r.status_code)
        assert r.json()["error"] == "host_refused" and "allowed_origins" in r.json()["hint"]
    # Origin and Host both the attacker's name: the Origin check alone let this through (token aside).
    with pytest.raises(InvalidStatus) as refused:
        ws_open(gateway, evil, f"http://{evil}")
    print("WebSocket with Host and Origin", evil, "->", refused.value.response.status_code)
    assert refused.value.response.status_code == 421
    assert b"host_refused" in refused.value.response.body
    assert "refused (not this gateway's name)" in gateway.stderr()


def test_loopback_addresses_and_configured_names_are_served(gateway: GatewayProcess) -> None:
    p = gateway.port
    for host in (f"127.0.0.1:{p}", f"localhost:{p}", "LOCALHOST", f"[::1]:{p}", f"127.5.6.7:{p}",
                 f"192.168.1.20:{p}", "hermit.example"):  # an address (a LAN bind), an allowed origin's host
        assert get(gateway, "/", host).status_code == 200, host
    assert get(gateway, "/status", f"localhost:{p}",
               Authorization=f"Bearer {gateway.token}").json()["port"] == p
    hello = ws_open(gateway, f"localhost:{p}", f"http://localhost:{p}")
    assert hello["ok"] and hello["payload"]["type"] == "hello-ok"
    hello = ws_open(gateway, "hermit.example", "https://hermit.example")
    assert hello["ok"]


def test_webhooks_arrive_under_a_tunnels_name_and_keep_their_signature_check(gateway: GatewayProcess) -> None:
    tunnel = "abc123.tunnel.example"
    r = get(gateway, "/hooks/whatsapp/biz/?hub.mode=subscribe&hub.verify_token=verify-host&hub.challenge=4242",
            tunnel)
    assert (r.status_code, r.text) == (200, "4242")
    body = json.dumps(webhook_body(text_message("15550001001", "hi", "wamid.host.1"))).encode()
    forged = httpx.post(f"http://127.0.0.1:{gateway.port}/hooks/whatsapp/biz/", content=body, timeout=10,
                        headers={"Host": tunnel, **sign("not-the-secret", body)})
    assert forged.status_code == 401  # the signature check answers, not the Host check


def test_the_app_under_static_has_the_pages_headers(gateway: GatewayProcess) -> None:
    """/static/index.html is the app itself: it gets the page's CSP (frame-ancestors 'none': it cannot be
    framed), as does every static file, and they stay behind the Host check."""
    p = gateway.port
    page = get(gateway, "/", f"127.0.0.1:{p}").headers["content-security-policy"]
    for path in ("/static/index.html", "/static/app.js", "/static/style.css"):
        r = get(gateway, path, f"127.0.0.1:{p}")
        assert r.status_code == 200, path
        assert r.headers["content-security-policy"] == page and "frame-ancestors 'none'" in page, (path, r.headers)
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"
    assert get(gateway, "/static/index.html", f"{EVIL}:{p}").status_code == 421
