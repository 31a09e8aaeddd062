"""A phone's web app through a gateway restart under socket activation, in Debian's Chromium at a phone's size: this
test holds the listening sockets (as a .socket unit does) and starts `hermit gateway run` with them (LISTEN_FDS), with
the default config — `gateway.remember_devices: auto` is on because the port is held. The phone signs in once and
keeps a device; the gateway stops; uid 65534 cannot take the port; a page the phone opens meanwhile waits in the
kernel's queue, reaches the next gateway on the same port — never another program's page — and signs in as the same
device, as does the tab that stayed open."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import T
from gatewayhelpers import free_port, need_chromium, write_config
from hermit.gateway.devices import Devices
from hermit.gateway.tickets import issue_ticket
from hermit.testing import FakeProvider
from test_gateway_tickets import gateway_pid
from test_s20_devices_browser import STORED, device_page, phone
from test_s21_socket_activation import ActivatedGateway, listening, squat


@pytest.fixture(scope="module")
def pw() -> Iterator[Any]:
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


def test_a_page_opened_while_the_gateway_restarts_reaches_it_and_signs_in_as_its_device(pw: Any,
                                                                                         tmp_path: Path) -> None:
    port, home = free_port(), tmp_path / "home"
    socks: list[socket.socket] = listening(port)
    origin = f"http://127.0.0.1:{port}"
    with FakeProvider(["hi"]) as fake:
        write_config(home, fake.openai_base_url)  # remember_devices not written: auto
        gw = ActivatedGateway(home, socks)
        gw.wait_ready()
        ctx = phone(pw, tmp_path / "profile")
        try:
            page, did = device_page(ctx, f"{origin}/#ticket={issue_ticket(home, gateway_pid(gw))}")
            assert did, "auto under a held port: the phone keeps a device"
            other = ctx.new_page()
            other.goto(f"{origin}/")
            other.wait_for_selector("#status.ok", timeout=T)

            gw.stop()  # the service restarts
            page.wait_for_selector("#status.warn", timeout=T)  # "disconnected — reconnecting"
            assert squat("127.0.0.1", port).startswith("refused")
            other.evaluate("() => { location.href = '/?opened=while-down'; }")  # the home-screen icon, meanwhile

            gw = ActivatedGateway(home, socks)
            gw.wait_ready()
            other.wait_for_url(f"{origin}/?opened=while-down", timeout=T)
            other.wait_for_selector("#status.ok", timeout=T)  # signed in with no link: the device's key
            assert other.evaluate(STORED)["device"] == did
            page.wait_for_selector("#status.ok", timeout=T)  # the open tab reconnected by itself
            assert Devices(home).get(did) is not None
        finally:
            ctx.close()
            gw.stop()
            for s in socks:
                s.close()
