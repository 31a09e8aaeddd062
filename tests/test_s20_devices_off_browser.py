"""Signed-in devices are opt-in (gateway.remember_devices, off by default), in Debian's Chromium at a phone's size:
off, a link signs the tab in with the token as before devices (no key kept, Devices says "off — …"); a browser that
holds a device from when it was on is told why it is not signed in (the setting named) and keeps its key, so turning
the setting back on signs it in again with no new link."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browserdemo import T
from gatewayhelpers import free_port, write_config
from hermit.testing import FakeProvider
from test_s20_devices_browser import REMEMBER, STORED, Served, device_page, phone, pw, signed_in

__all__ = ["pw"]  # the fixture, shared with the devices' own browser tests

OFF_WORDS = "off (gateway.remember_devices: auto): its port goes free whenever the gateway stops or restarts"


@pytest.fixture()
def served_off(tmp_path: Path) -> Iterator[tuple[Served, str]]:
    """A gateway with the default config (remember_devices off) behind a TLS proxy's https origin (its phone links are
    https); (it, its FakeProvider's base URL)."""
    home = tmp_path / "home"
    with FakeProvider(["hi"] * 8) as fake:
        write_config(home, fake.openai_base_url, extra='  allowed_origins: ["https://hermit.example"]\n')  # a proxy's
        s = Served(home, free_port())
        try:
            yield s, fake.openai_base_url
        finally:
            s.gw.stop()


def test_off_a_link_signs_the_tab_in_with_the_token_and_devices_says_off(pw: Any, served_off: tuple[Served, str],
                                                                        tmp_path: Path) -> None:
    served, _ = served_off
    ctx = phone(pw, tmp_path / "profile")
    try:
        page = ctx.new_page()
        signed_in(page, served.link())
        stored = page.evaluate(STORED)
        assert stored["device"] is None  # no key kept
        assert page.evaluate("sessionStorage.getItem('hermit.token')") == served.gw.token  # the tab's, as before
        assert not (served.home / "gateway" / "devices.json").exists()
        page.tap("#menu")
        page.wait_for_selector("#sidebar", state="visible", timeout=T)
        page.tap(".tab[data-view='ops']")
        page.wait_for_selector("#devices li.empty", timeout=T)
        shown = page.inner_text("#devices")  # off, why (auto, run by hand) and how to turn it on
        assert shown.startswith(OFF_WORDS) and "hermit service install" in shown, shown
        page.wait_for_selector("#sidebar", state="hidden", timeout=T)
        page.tap("#phone-open")  # Sign in a phone: the note does not promise a phone that stays signed in
        page.wait_for_selector("#phone-qr", state="visible", timeout=T)
        assert "for as long as that tab stays open: this gateway keeps no browser signed in " \
               "(gateway.remember_devices is off)." in page.inner_text("#phone-note")
        page.reload()  # the tab reconnects with its token
        page.wait_for_selector("#status.ok", timeout=T)
        other = ctx.new_page()  # a new tab is not signed in: nothing outlives the tab
        other.goto(served.origin + "/")
        other.wait_for_selector("#status.bad", timeout=T)
        assert "not signed in" in other.inner_text("#signin")
    finally:
        ctx.close()


def test_a_device_kept_while_off_is_told_why_and_signs_in_again_when_on(pw: Any, served_off: tuple[Served, str],
                                                                       tmp_path: Path) -> None:
    served, base_url = served_off
    write_config(served.home, base_url, extra=REMEMBER)
    served.restart()
    profile = tmp_path / "profile"
    ctx = phone(pw, profile)
    try:
        page, did = device_page(ctx, served.link())
        assert did
        page.close()

        write_config(served.home, base_url)  # turned off
        served.restart()
        page = ctx.new_page()  # the home-screen icon: the start URL
        page.goto(served.origin + "/")
        page.wait_for_function("() => document.querySelector('#signin').innerText.includes('remember_devices')",
                               timeout=T)
        said = page.inner_text("#signin")
        assert "does not keep browsers signed in" in said and "gateway.remember_devices: true" in said, said
        assert page.inner_text("#status") == "not signed in"
        assert page.evaluate(STORED)["device"] == did  # the key is kept
        page.close()

        write_config(served.home, base_url, extra=REMEMBER)  # back on: the same device, no new link
        served.restart()
        page = ctx.new_page()
        signed_in(page, served.origin + "/")
        assert page.evaluate(STORED)["device"] == did
        assert page.evaluate("sessionStorage.getItem('hermit.token')") is None
    finally:
        ctx.close()
