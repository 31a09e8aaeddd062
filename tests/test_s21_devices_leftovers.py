"""Devices' leftovers (gateway/devices.py, gateway/phone.py): a new gateway token signs every device out at once —
devices.json records which token its devices signed in under, so Operations → Devices and `hermit devices list` stop
listing them with the gateway's restart, not after 30 days, and the next write empties the file; and `hermit
dashboard --phone`'s link at an https address is device-only while the gateway keeps devices, as the web app's phone
links are (never the token for a client that keeps no key), and as before while it does not. Real gateway processes
on 127.0.0.1, real WebSockets, `hermit` subprocesses."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
from pathlib import Path

from gatewayhelpers import GatewayProcess, free_port, write_config
from hermit.gateway.protocol import handshake_proof
from hermit.gateway.tickets import Tickets, ticket_id
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_gateway_tickets import closed_with
from test_s20_devices_protocol import Conn, Key, cli, device_conn, sign_in

REMEMBER = "  remember_devices: true\n"
HTTPS = '  allowed_origins: ["https://hermit.example"]\n'


def listed_over_the_socket(gw: GatewayProcess) -> list[object]:
    from websockets.sync.client import connect

    with connect(gw.ws_url, origin=None) as ws:  # type: ignore[arg-type]
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": gw.token}}))
        assert json.loads(ws.recv(10))["ok"]
        ws.send(json.dumps({"type": "req", "id": "l", "method": "devices.list", "params": {}}))
        while True:
            got = json.loads(ws.recv(10))
            if got.get("id") == "l":
                assert got["ok"], got
                return list(got["payload"]["devices"])


def test_a_new_gateway_token_signs_every_device_out_at_the_restart(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    with FakeProvider(["hi"]) as fake:
        write_config(home, fake.openai_base_url, extra=REMEMBER)

        def start() -> GatewayProcess:
            gw = GatewayProcess(home, "--port", str(port))
            gw.wait_ready()
            return gw

        gw = start()
        try:
            old = Key()
            old_id = sign_in(gw, old)["device"]["id"]
            assert [d["id"] for d in listed_over_the_socket(gw)] == [old_id]  # type: ignore[index]
        finally:
            gw.stop()
        (home / "gateway" / "token").unlink()  # a new token: what docs/security.md says to do after a lost device
        gw = start()
        try:
            assert listed_over_the_socket(gw) == []  # Operations → Devices: not listed as if signed in
            shown = cli(home, "list")
            assert shown.returncode == 0 and old_id[:12] not in shown.stdout, shown.stdout
            assert shown.stdout.startswith("no devices signed in"), shown.stdout
            with device_conn(gw, old, old_id) as (_, reply):  # and it cannot sign in
                assert not reply["ok"], reply
            new = Key()
            new_id = sign_in(gw, new)["device"]["id"]
            stored = json.loads((home / "gateway" / "devices.json").read_text())
            assert [d["id"] for d in stored["devices"]] == [new_id]  # the old record is gone from the file
            mark = hmac.new(gw.token.encode(), b"hermit-devices-file", hashlib.sha256).hexdigest()[:32]
            assert stored["token"] == mark and gw.token not in json.dumps(stored)  # a fingerprint, not the token
            with device_conn(gw, new, new_id) as (_, reply):
                assert reply["ok"] and reply["payload"]["deviceId"] == new_id, reply
        finally:
            gw.stop()


def dashboard_link(home: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "dashboard", "--phone"],
                       capture_output=True, text=True, timeout=PROC_TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r.stdout.rstrip("\n").split("\n")[-1]


def test_dashboard_phone_links_at_an_https_address_are_device_only_while_devices_are_on(tmp_path: Path) -> None:
    with FakeProvider(["hi"]) as fake:
        on = tmp_path / "on"
        write_config(on, fake.openai_base_url, extra=REMEMBER + HTTPS)
        gw = GatewayProcess(on)
        gw.wait_ready()
        try:
            link = dashboard_link(on)
            assert link.startswith("https://hermit.example/#ticket="), link
            ticket = link.split("#ticket=", 1)[1]
            assert Tickets(on).device_only(ticket_id(ticket))
            from websockets.sync.client import connect

            with connect(gw.ws_url) as ws:  # the ticket pasted into a client that keeps no key: refused, unspent
                ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"ticket": ticket}}))
                hello = json.loads(ws.recv(10))
                assert not hello["ok"] and hello["error"]["code"] == "device_link", hello
                assert gw.token not in json.dumps(hello) and closed_with(ws) == 4401
            phone = Key()
            with Conn(gw, ticket=ticket) as c:  # the phone's browser keeps a key: signed in as a device
                proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
                hello = c.connect(proof=proof, device={"key": phone.spki, "name": "phone"},
                                  signature=phone.sign(c.signed()))
                assert hello["ok"] and "device" in hello["payload"] and "token" not in hello["payload"], hello
        finally:
            gw.stop()

        off = tmp_path / "off"  # auto, run by hand: devices off, the link is as before (the tab gets the token)
        write_config(off, fake.openai_base_url, extra=HTTPS)
        gw = GatewayProcess(off)
        gw.wait_ready()
        try:
            ticket = dashboard_link(off).split("#ticket=", 1)[1]
            assert not Tickets(off).device_only(ticket_id(ticket))
        finally:
            gw.stop()
