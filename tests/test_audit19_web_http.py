"""Audit 19 (t1): the gateway's HTTP and WebSocket surface as attackers who hold no token really reach it, against a
real `hermit gateway run --host 0.0.0.0` (a user who binds it to the LAN to use it from a phone):

- a client on the LAN: every route, static file and error page it can ask for; what the WebSocket answers before
  `connect`, to a wrong token, and to the handshake played back at the gateway (its own proof never passes for a
  client's);
- any page or tool that reads a reply of the gateway's: every reply carries `nosniff`, a CSP that runs no script
  and forbids framing (error pages, /status, the favicon, webhook replies included, not only the app's page), and a
  cache rule (`no-store` for everything but the app's own public files);
- another local user (uid 65534) on this machine: the token file, the gateway's environment and argv, /status and
  the WebSocket, over loopback and over the machine's own LAN address.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from ciguard import need
from fakes.fake_whatsapp import sign, text_message, webhook_body
from gatewayhelpers import GatewayProcess, write_config
from hermit.gateway.phone import lan_addresses
from prochelpers import python_as

WA = ("channels:\n  whatsapp:\n    accounts:\n      biz:\n        phone_number_id: '1065550100'\n"
      "        base_url: http://127.0.0.1:9\n        dm_policy: allowlist\n        allow_from: ['15550001001']\n")
VERIFY = "verify-audit19-" + "v" * 24
# What no reply of the gateway's may lack (the app's page and files have the page's own CSP: script-src 'self').
NO_SCRIPT = "default-src 'none'"
NO_FRAMING = "frame-ancestors 'none'"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home = tmp_path_factory.mktemp("audit19http")
    mp = pytest.MonkeyPatch()
    mp.setenv("WHATSAPP_ACCESS_TOKEN", "EAAG-audit19")
    mp.setenv("WHATSAPP_APP_SECRET", "app-secret-audit19")
    mp.setenv("WHATSAPP_VERIFY_TOKEN", VERIFY)
    write_config(home, "http://127.0.0.1:9/v1", extra=WA)  # the provider is never called: no message gets in
    gw = GatewayProcess(home, "--host", "0.0.0.0")
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()
        mp.undo()


def lan(gw: GatewayProcess) -> str:
    """host:port of the gateway as a client on the LAN reaches it: this machine's network address (loopback on a
    machine that has none, which the gateway on 0.0.0.0 answers the same)."""
    addresses = lan_addresses()
    return f"{addresses[0] if addresses else '127.0.0.1'}:{gw.port}"


def frame(method: str, params: dict[str, Any], rid: str = "r") -> str:
    return json.dumps({"type": "req", "id": rid, "method": method, "params": params})


def answer(ws: ClientConnection) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(ws.recv(10))
    return got


def closed_with(ws: ClientConnection) -> int | None:
    with pytest.raises(Exception):  # noqa: B017,PT011 - the socket's close is what is asked about
        ws.recv(10)
    return ws.close_code


def test_a_lan_client_without_the_token_gets_the_public_files_and_nothing_else(gateway: GatewayProcess) -> None:
    base = f"http://{lan(gateway)}"
    token = gateway.token
    page = httpx.get(base + "/", timeout=10)
    assert page.status_code == 200 and token not in page.text
    for path in ("/static/app.js", "/static/index.html", "/favicon.ico"):
        r = httpx.get(base + path, timeout=10)
        assert r.status_code == 200 and token.encode() not in r.content, path
    asked = {
        "/status": {}, "/status?token=" + token: {}, "/status ": {"Authorization": "Bearer " + token[:-1] + "x"},
        "/status  ": {"Authorization": "Basic " + token}, "/static/": {}, "/static/../gateway/token": {},
        "/static/%2e%2e/%2e%2e/gateway/token": {}, "/static/..%2f..%2fgateway%2ftoken": {}, "/gateway/token": {},
        "/ws": {}, "/hooks/": {}, "/hooks/whatsapp/": {}, "/hooks/whatsapp/other/": {},
        "/%3Cscript%3Ealert(1)%3C/script%3E": {}, "/.git/config": {}, "/hermit.yaml": {},
    }
    for path, headers in asked.items():
        r = httpx.get(base + path.rstrip(" "), headers={"Origin": "http://evil.example", **headers}, timeout=10)
        print(path, "->", r.status_code, r.text[:60])
        assert r.status_code in (401, 403, 404), (path, r.status_code)
        assert token not in r.text and "<script>" not in r.text and "gateway/token" not in r.text, (path, r.text)
        assert not any(k.lower().startswith("access-control-") for k in r.headers), (path, r.headers)
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        r = httpx.request(method, base + "/", headers={"Origin": "http://evil.example", "Content-Type": "text/plain",
                                                        "Access-Control-Request-Method": "POST"},
                          content=json.dumps({"method": "memory.get", "params": {"path": "MEMORY.md"}}), timeout=10)
        assert r.status_code == 405 and not any(k.lower().startswith("access-control-") for k in r.headers), method
    # The WebSocket: nothing before `connect`, and `connect` wants the token (or a proof made with it).
    url = f"ws://{lan(gateway)}/ws"
    with connect(url, open_timeout=10) as ws:
        ws.send(frame("memory.get", {"path": "MEMORY.md"}))
        assert answer(ws)["error"]["code"] == "not_connected"
        assert closed_with(ws) == 4400
    for params in ({"token": token[:-1] + ("A" if token[-1] != "A" else "B")}, {"token": ""}, {},
                   {"proof": "0" * 64}, {"ticket": "x" * 43}):
        with connect(url, open_timeout=10) as ws:
            ws.send(frame("connect", params))
            refused = answer(ws)
            assert not refused["ok"] and "payload" not in refused, params
            assert refused["error"]["code"] in ("unauthorized", "ticket_expired", "bad_params"), (params, refused)
            assert closed_with(ws) in (4400, 4401), params
    assert "wrong gateway token" in gateway.stderr() or "wrong token refused" in gateway.stderr()


def test_the_gateways_own_proof_never_signs_a_client_in(gateway: GatewayProcess) -> None:
    """`connect.challenge` answers anyone with an HMAC keyed by the token over a nonce they choose. Played back —
    the gateway's nonce of one connection sent as the client's nonce of another, and each proof offered as the
    client's — it signs no one in: the two sides' proofs are over different words (hermit-gateway|… and
    hermit-client|…)."""
    host = lan(gateway)
    url = f"ws://{host}/ws"
    with connect(url, open_timeout=10) as a, connect(url, open_timeout=10) as b:
        a.send(frame("connect.challenge", {"nonce": "A" * 32, "host": host}, "c"))
        first = answer(a)["payload"]
        b.send(frame("connect.challenge", {"nonce": first["nonce"], "host": host}, "c"))
        second = answer(b)["payload"]
        assert second["proof"] != first["proof"]
        a.send(frame("connect", {"proof": second["proof"]}, "x"))
        assert answer(a)["error"]["code"] == "unauthorized"
        b.send(frame("connect", {"proof": first["proof"]}, "x"))
        assert answer(b)["error"]["code"] == "unauthorized"
    # A handshake for another address (a rebinding name, another port) is refused before any proof is made.
    with connect(url, open_timeout=10) as c:
        c.send(frame("connect.challenge", {"nonce": "B" * 32, "host": "rebind.evil.test:1"}, "c"))
        refused = answer(c)
        assert refused["error"]["code"] == "wrong_address" and "proof" not in json.dumps(refused)


def headers_of(gw: GatewayProcess) -> dict[str, httpx.Headers]:
    """Every kind of reply the gateway writes, as a browser or a tool would get it."""
    base = f"http://127.0.0.1:{gw.port}"
    body = json.dumps(webhook_body(text_message("15550001001", "hi", "wamid.audit19.1"))).encode()
    challenge = "<html><script>alert(document.domain)</script>"
    got = {
        "page": httpx.get(base + "/", timeout=10),
        "app file": httpx.get(base + "/static/app.js", timeout=10),
        "favicon": httpx.get(base + "/favicon.ico", timeout=10),
        "status": httpx.get(base + "/status", headers={"Authorization": "Bearer " + gw.token}, timeout=10),
        "status 401": httpx.get(base + "/status", timeout=10),
        "404": httpx.get(base + "/nope", timeout=10),
        "static 404": httpx.get(base + "/static/nope.html", timeout=10),
        "405": httpx.post(base + "/", content=b"x", timeout=10),
        "421": httpx.get(base + "/", headers={"Host": "rebind.evil.test"}, timeout=10),
        "hook echo": httpx.get(base + "/hooks/whatsapp/biz/", params={
            "hub.mode": "subscribe", "hub.verify_token": VERIFY, "hub.challenge": challenge}, timeout=10),
        "hook 403": httpx.get(base + "/hooks/whatsapp/biz/", params={"hub.mode": "subscribe"}, timeout=10),
        "hook 401": httpx.post(base + "/hooks/whatsapp/biz/", content=body, headers=sign("wrong", body), timeout=10),
    }
    assert got["status"].status_code == 200 and got["hook echo"].text == challenge
    return {name: r.headers for name, r in got.items()}


def test_every_reply_carries_nosniff_a_csp_without_script_or_framing_and_a_cache_rule(gateway: GatewayProcess) -> None:
    """Before: only the app's page and static files had them. /status (the gateway's pid, channels and their errors,
    connected clients) went without `Cache-Control`; error pages, the favicon and webhook replies — a reply of the
    WhatsApp verification echoes `hub.challenge` — were documents of the gateway's own origin with no CSP and no
    `nosniff`, which any future HTML-looking reply would have run as the web app's origin."""
    wrong = []
    for name, h in headers_of(gateway).items():
        csp = h.get("content-security-policy", "")
        cache = {"app file": "no-cache", "favicon": "max-age=86400"}.get(name, "no-store")
        script = "script-src 'self'" in csp if name in ("page", "app file") else "script-src" not in csp
        if not (h.get("x-content-type-options") == "nosniff" and NO_FRAMING in csp and NO_SCRIPT in csp
                and "unsafe" not in csp and script and h.get("referrer-policy") == "no-referrer"
                and h.get("cache-control") == cache):
            wrong.append(f"{name}: csp={csp!r} nosniff={h.get('x-content-type-options')!r} "
                         f"referrer={h.get('referrer-policy')!r} cache={h.get('cache-control')!r} (wanted {cache})")
    assert not wrong, "\n".join(wrong)


NOBODY = {"user": 65534, "group": 65534, "extra_groups": []}
AS_NOBODY = r"""
import json, socket, sys
port, token_path, environ, lan = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
out = {}
for name, path in (("token", token_path), ("environ", environ)):
    try:
        open(path, "rb").read()
        out[name] = "read"
    except OSError as e:
        out[name] = type(e).__name__
def ask(host, request):
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(request.encode())
    got = b""
    while b"\r\n\r\n" not in got:
        piece = s.recv(4096)
        if not piece:
            break
        got += piece
    s.close()
    return got.split(b"\r\n")[0].decode()
for host in ("127.0.0.1", lan):
    out["status " + host] = ask(host, "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer x\r\n"
                                      "Connection: close\r\n\r\n")
    out["ws " + host] = ask(host, "GET /ws HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                                  "Origin: http://%s:%d\r\n\r\n" % (host, port, host, port))
print(json.dumps(out))
"""


def test_another_local_user_can_neither_read_the_token_nor_open_the_socket(gateway: GatewayProcess) -> None:
    python = python_as(NOBODY)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    token = gateway.token
    home = gateway.home
    assert os.stat(home / "gateway" / "token").st_mode & 0o777 == 0o600
    assert os.stat(home / "gateway").st_mode & 0o777 == 0o700
    with open(f"/proc/{gateway.proc.pid}/cmdline", "rb") as f:
        assert token.encode() not in f.read()
    with open(f"/proc/{gateway.proc.pid}/environ", "rb") as f:
        assert token.encode() not in f.read()
    address = lan(gateway).rsplit(":", 1)[0]
    done = subprocess.run([python, "-c", AS_NOBODY, str(gateway.port), str(home / "gateway" / "token"),
                           f"/proc/{gateway.proc.pid}/environ", address], capture_output=True, text=True, timeout=60,
                          cwd="/", **NOBODY)  # type: ignore[call-overload]
    got = json.loads(done.stdout)
    print(got)
    assert got["token"] == "PermissionError" and got["environ"] == "PermissionError"
    for host in ("127.0.0.1", address):
        assert got["status " + host].startswith("HTTP/1.1 401"), got
        assert got["ws " + host].startswith("HTTP/1.1 403"), got  # refused before the handshake: another user's
    assert "uid 65534" in gateway.stderr()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:  # the owner's own client is served
        s.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token.encode()
                  + b"\r\nConnection: close\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200")


def test_an_origin_the_gateway_does_not_serve_is_refused_on_the_lan_address_too(gateway: GatewayProcess) -> None:
    host = lan(gateway)
    for origin in ("http://evil.example", "null", f"http://{host.rsplit(':', 1)[0]}:1", f"https://{host}x"):
        with connect(f"ws://{host}/ws", origin=Origin(origin), open_timeout=10) as ws:
            refused = answer(ws)
            assert refused["error"]["code"] == "origin_refused", origin
            assert closed_with(ws) == 1008, origin
    with connect(f"ws://{host}/ws", origin=Origin(f"http://{host}"), open_timeout=10) as ws:
        ws.send(frame("connect", {"token": gateway.token}))
        assert answer(ws)["payload"]["type"] == "hello-ok"
