"""While the gateway restarts, another local user's program may bind its port; the web app's open tab keeps
reconnecting to whatever answers there. It used to send the token as its first frame, so the squatter took
the token and then drove the restarted gateway as the owner (audit Y, F1). Now the gateway proves it holds
the token first (connect.challenge), for the page's own address, and the page answers with an HMAC: real
`hermit gateway run`, Debian's Chromium, and a squatting WebSocket server on the same port."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ciguard import need
from gatewayhelpers import CHROMIUM_FLAGS, GatewayProcess, free_port, need_chromium, write_config
from hermit.gateway.protocol import handshake_proof
from hermit.testing import FakeProvider
from prochelpers import python_as

T = 30_000  # ms


@contextmanager
def squatter(port: int) -> Iterator[tuple[list[str], threading.Event]]:
    """A WebSocket server on the gateway's port that records every frame and plays along as well as it can
    without the token: a made-up proof, then a made-up `connect` success and an event."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.server import serve

    frames: list[str] = []
    heard = threading.Event()

    def handler(ws: Any) -> None:
        with contextlib.suppress(ConnectionClosed):
            serve_one(ws)

    def serve_one(ws: Any) -> None:
        for raw in ws:
            frames.append(raw if isinstance(raw, str) else raw.decode("utf-8", "replace"))
            heard.set()
            frame = json.loads(frames[-1])
            ws.send(json.dumps({"type": "res", "id": frame.get("id"), "ok": True,
                                "payload": {"nonce": "n" * 43, "proof": "0" * 64}}))
            ws.send(json.dumps({"type": "res", "id": "connect", "ok": True, "payload": {"type": "hello-ok"}}))
            ws.send(json.dumps({"type": "event", "event": "chat", "payload": {"state": "final", "text": "phish"}}))

    with serve(handler, "127.0.0.1", port) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield frames, heard
        finally:
            server.shutdown()
            thread.join(10)


def test_a_program_on_the_gateways_port_never_gets_the_token(tmp_path: Path) -> None:
    chromium = need_chromium()
    from playwright.sync_api import sync_playwright

    home, port = tmp_path / "home", free_port()
    with FakeProvider(["hi"]) as fake, sync_playwright() as p:
        write_config(home, fake.openai_base_url)
        gw = GatewayProcess(home, "--port", str(port))
        url, token = gw.wait_ready(), gw.token
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = b.new_page()
            page.goto(url)
            page.wait_for_selector("#status.ok", timeout=T)
            gw.stop()
            with squatter(port) as (frames, heard):
                assert heard.wait(T / 1000)  # the tab reconnected to it
                assert not any(token in f for f in frames)
                page.wait_for_selector("#status.bad", timeout=T)
                assert "could not prove" in page.inner_text("#signin")
                assert all(json.loads(f)["method"] == "connect.challenge" for f in frames), frames
                assert not any(token in f for f in frames)
                assert page.locator(".msg >> text=phish").count() == 0  # nothing it sent was taken in
            gw = GatewayProcess(home, "--port", str(port))  # the real one is back on its port: the tab reconnects
            gw.wait_ready()
            page.wait_for_selector("#status.ok", timeout=T)
        finally:
            b.close()
            gw.stop()


def test_the_handshake_is_for_the_gateways_own_address(tmp_path: Path) -> None:
    """A squatter that relays a page's handshake to the gateway started on another port gets nothing: the
    gateway refuses a challenge for an address that is not its own, and the page's proof names its address."""
    from websockets.sync.client import connect

    home, port = tmp_path / "home", free_port()
    with FakeProvider(["hi"]) as fake:
        write_config(home, fake.openai_base_url)
        gw = GatewayProcess(home, "--port", str(port))
        gw.wait_ready()
        token = gw.token.encode()
        try:
            def challenge(host: str) -> dict[str, Any]:
                with connect(gw.ws_url, origin=None) as ws:  # type: ignore[arg-type]
                    ws.send(json.dumps({"type": "req", "id": "c", "method": "connect.challenge",
                                        "params": {"nonce": "a" * 32, "host": host}}))
                    reply = json.loads(ws.recv(10))
                    if reply["ok"]:
                        proof = handshake_proof(token, "client", host, reply["payload"]["nonce"], "a" * 32)
                        ws.send(json.dumps({"type": "req", "id": "connect", "method": "connect",
                                            "params": {"proof": proof}}))
                        reply["connect"] = json.loads(ws.recv(10))
                    return reply

            other = challenge(f"127.0.0.1:{free_port()}")
            assert not other["ok"] and other["error"]["code"] == "wrong_address"
            own = challenge(f"127.0.0.1:{port}")
            assert own["ok"] and own["payload"]["proof"] == handshake_proof(
                token, "gateway", f"127.0.0.1:{port}", "a" * 32, own["payload"]["nonce"])
            assert own["connect"]["ok"] and own["connect"]["payload"]["type"] == "hello-ok"
        finally:
            gw.stop()


def test_a_program_relaying_the_tab_to_the_restarted_gateway_is_refused(tmp_path: Path) -> None:
    """The squatter keeps the tab's connection, lets the real gateway come back on the same port beside it and
    relays the handshake byte for byte: the proofs were the page's and the gateway's own, so the squatter sat
    in an authenticated owner connection and read MEMORY.md (audit R3). The gateway now refuses a connection
    from a program of another user (the uid of the client socket, from the kernel's socket table)."""
    chromium = need_chromium()
    from playwright.sync_api import sync_playwright

    nobody = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(nobody)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    shared = Path(tempfile.mkdtemp(prefix="hermit-relay-"))
    try:
        shared.chmod(0o755)
        script, log = shared / "relay_squatter.py", shared / "relay.log"
        shutil.copy(Path(__file__).with_name("relay_squatter.py"), script)
        log.write_text("")
        log.chmod(0o666)
        home, port = tmp_path / "home", free_port()
        with FakeProvider(["hi"]) as fake, sync_playwright() as p:
            write_config(home, fake.openai_base_url)
            (home / "workspace").mkdir(parents=True, exist_ok=True)
            (home / "workspace" / "MEMORY.md").write_text("# Memory\n- bank PIN 4711, SECRET-OWNER-NOTE\n")
            gw = GatewayProcess(home, "--port", str(port))
            url = gw.wait_ready()
            b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
            relay = None
            try:
                page = b.new_page()
                page.goto(url)
                page.wait_for_selector("#status.ok", timeout=T)
                gw.stop()
                relay = subprocess.Popen([python, str(script), str(port), str(log)], cwd="/", **nobody)
                until_logged(log, "accepted the tab", relay)
                gw = GatewayProcess(home, "--port", str(port))
                gw.wait_ready()
                until_logged(log, "gateway answered", relay)
                assert "101" not in log.read_text() and "STOLEN" not in log.read_text(), log.read_text()
                page.wait_for_selector("#status.ok", timeout=T)  # the tab reaches the gateway itself
                assert "refused" in gw.stderr() and "uid 65534" in gw.stderr()
            finally:
                if relay is not None:
                    relay.kill()
                    relay.wait()
                b.close()
                gw.stop()
    finally:
        shutil.rmtree(shared)



UPGRADE = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(("GET /ws HTTP/1.1\\r\\nHost: 127.0.0.1:%s\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\nSec-WebSocket-Version: 13\\r\\n%s\\r\\n"
           % (sys.argv[1], sys.argv[2])).encode())
print(s.recv(200).split(b"\\r\\n")[0].decode())
"""


def test_another_users_program_is_refused_whatever_it_says_it_forwards(tmp_path: Path) -> None:
    """uvicorn took a loopback client's X-Forwarded-For as its address, so one header line made another
    user's relay look like a remote client, which the uid check does not look up (audit R4)."""
    nobody = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(nobody)
    need(python is not None, "a Python that uid 65534 can run")
    assert python is not None
    home, port = tmp_path / "home", free_port()
    with FakeProvider(["hi"]) as fake:
        write_config(home, fake.openai_base_url)
        gw = GatewayProcess(home, "--port", str(port))
        gw.wait_ready()
        try:
            for header in ("X-Forwarded-For: 192.0.2.7\r\n", "Forwarded: for=192.0.2.7\r\n", ""):
                done = subprocess.run([python, "-c", UPGRADE, str(port), header], capture_output=True, text=True,
                                      timeout=60, cwd="/", **nobody)
                assert done.stdout.startswith("HTTP/1.1 403"), (header, done.stdout, done.stderr)
            mine = subprocess.run([sys.executable, "-c", UPGRADE, str(port), "X-Forwarded-For: 192.0.2.7\r\n"],
                                  capture_output=True, text=True, timeout=60)
            assert mine.stdout.startswith("HTTP/1.1 101"), mine.stdout + mine.stderr  # the owner's own client
        finally:
            gw.stop()

def until_logged(log: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    """Wait for the relay to log `text` (it logs each step as it happens), or fail if it exited first."""
    deadline = time.monotonic() + T / 1000
    while text not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
