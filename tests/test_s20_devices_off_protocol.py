"""Signed-in devices are opt-in (gateway.remember_devices, off by default): off, the web app signs in as before
devices — a ticket sign-in that offers a key gets the token and nothing is recorded, a phone link at an https address
is not device-only, a device's signature is refused with the setting named (and the gateway's proof, so the page keeps
its key), and `hermit devices list` / `devices.list` / `hermit doctor` say so. Turned back on, a device recorded before
signs in again. Real gateway processes on 127.0.0.1, real WebSockets."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devicehelpers import running_gateway
from gatewayhelpers import GatewayProcess, free_port, write_config
from hermit.gateway.devices import device_secret
from hermit.gateway.protocol import handshake_proof
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_gateway_tickets import closed_with
from test_s20_devices_protocol import Conn, Key, cli, device_conn, new_ticket, sign_in

REMEMBER = "  remember_devices: true\n"
HTTPS = '  allowed_origins: ["https://hermit.example"]\n'


@pytest.fixture(scope="module")
def off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway with the default config (remember_devices not written: off), behind a TLS proxy's https origin."""
    with running_gateway(tmp_path_factory.mktemp("devices-off") / "home", extra=HTTPS) as (gateway, _):
        yield gateway


def hermit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=PROC_TIMEOUT)


def test_off_a_ticket_sign_in_with_a_key_gets_the_token_and_records_nothing(off: GatewayProcess) -> None:
    key = Key()
    ticket = new_ticket(off)
    with Conn(off, ticket=ticket) as c:
        assert c.challenge["ok"], c.challenge
        proof = handshake_proof(ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        hello = c.connect(proof=proof, device={"key": key.spki, "name": "Chrome on Android"},
                          signature=key.sign(c.signed()))
        assert hello["ok"], hello
        assert hello["payload"]["token"] == off.token  # as before devices: the tab keeps the token
        assert "device" not in hello["payload"] and "deviceId" not in hello["payload"]
        listed = c.call("l", "devices.list")
        assert listed["ok"] and listed["payload"]["remember"] is False and listed["payload"]["devices"] == [], listed
        assert listed["payload"]["why"].startswith("off (gateway.remember_devices: auto)")  # why, and how to turn it on
        assert "hermit service install" in listed["payload"]["hint"]
        made = c.call("t", "tickets.create")  # an https phone link: not device-only while no device exists
        assert made["ok"] and made["payload"]["link"].startswith("https://hermit.example/#ticket="), made
    assert not (off.home / "gateway" / "devices.json").exists()
    link_ticket = made["payload"]["link"].split("#ticket=", 1)[1]
    with Conn(off, ticket=link_ticket) as c:  # a browser with no key (no WebCrypto): the token, as before
        proof = handshake_proof(link_ticket.encode(), "client", c.host, c.gateway_nonce, c.nonce)
        hello = c.connect(proof=proof)
        assert hello["ok"] and hello["payload"]["token"] == off.token, hello
    shown = cli(off.home, "list")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("off — (gateway.remember_devices: auto)"), shown.stdout  # auto, by hand: off
    assert "gateway.remember_devices: true" in shown.stdout and "hermit service install" in shown.stdout
    as_json = cli(off.home, "list", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == [] and "remember_devices" in as_json.stderr
    doctor = hermit(off.home, "doctor", "--json")
    line = next(c for c in json.loads(doctor.stdout) if c["name"] == "web app devices")
    assert line["status"] == "ok" and line["detail"].startswith("off"), line


def test_a_device_is_refused_while_off_keeps_its_record_and_signs_in_again_when_on(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    with FakeProvider(["hi"]) as fake:
        def start(extra: str) -> GatewayProcess:
            write_config(home, fake.openai_base_url, extra=extra)
            gw = GatewayProcess(home, "--port", str(port))
            gw.wait_ready()
            return gw

        gw = start(REMEMBER)
        try:
            key = Key()
            did = sign_in(gw, key)["device"]["id"]
        finally:
            gw.stop()
        recorded = (home / "gateway" / "devices.json").read_bytes()

        gw = start("")  # turned off (the default)
        try:
            with Conn(gw, device=did) as c:
                refused: dict[str, Any] = c.challenge
                assert not refused["ok"] and refused["error"]["code"] == "devices_off", refused
                assert "gateway.remember_devices: true" in refused["error"]["hint"]
                assert "remember_devices is off" in refused["error"]["message"]
                # the gateway's own word (keyed by the device's secret): the page believes it, and keeps its key
                assert refused["error"]["proof"] == handshake_proof(device_secret(gw.token.encode(), did), "gateway",
                                                                    c.host, c.nonce, "devices-off")
                assert gw.token not in json.dumps(refused) and closed_with(c.ws) == 4401
            assert (home / "gateway" / "devices.json").read_bytes() == recorded  # nothing forgotten or touched
            doctor = hermit(home, "doctor", "--json")
            assert next(c for c in json.loads(doctor.stdout) if c["name"] == "web app devices")["detail"].startswith("off")
        finally:
            gw.stop()

        gw = start(REMEMBER)  # back on: the same device signs in again, with no new link
        try:
            with device_conn(gw, key, did) as (_, reply):
                assert reply["ok"] and reply["payload"]["deviceId"] == did, reply
            doctor = hermit(home, "doctor", "--json")
            line = next(c for c in json.loads(doctor.stdout) if c["name"] == "web app devices")
            assert line["detail"].startswith("browsers stay signed in") and "no one else logs in" in line["detail"]
        finally:
            gw.stop()
