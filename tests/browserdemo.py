"""The web app's browser-test setup, shared by the tests/test_gateway_browser*.py modules and the
tests/test_webapp_*.py ones: a `hermit gateway run` subprocess on a demo state dir with the scripted model
(hermit.testing.FakeProvider) behind it, Debian's headless Chromium (Playwright), and a page opened signed in
at a phone's or a desktop's size.

A module builds its state dir its own way (`prepare(home, base_url)`) and names its model's steps; the rest
(the fake provider, a free port, the gateway's start and stop, the browser, a page with its errors collected)
is here, once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gatewayhelpers import GatewayProcess, free_port, launched_chromium
from hermit.testing import FakeProvider

T = 30_000  # ms: generous for a busy 2-core machine
PHONE_SIZE = (390, 844)
DESKTOP_SIZE = (1280, 800)


@dataclass
class Demo:
    """A running gateway on a demo state dir: `url` signs a page in (the token in its query)."""

    home: Path
    gw: GatewayProcess
    port: int
    url: str

    def stop(self) -> None:
        self.gw.stop()

    def start(self) -> None:
        """Start the gateway again on the same port (after `stop`: a page open on it reconnects)."""
        self.gw = GatewayProcess(self.home, "--port", str(self.port))
        self.gw.wait_ready()


@contextmanager
def served_demo(home: Path, steps: list[dict[str, Any]], prepare: Callable[[Path, str], object]) -> Iterator[Demo]:
    """The fake provider scripted with `steps`, `prepare(home, its base url)` writing the state dir, and a
    gateway on it, stopped on the way out."""
    with FakeProvider(steps) as fake:
        prepare(home, fake.openai_base_url)
        port = free_port()
        gw = GatewayProcess(home, "--port", str(port))
        demo = Demo(home, gw, port, gw.wait_ready())
        try:
            yield demo
        finally:
            demo.gw.stop()


@pytest.fixture(scope="module", name="browser")
def browser_fixture() -> Iterator[Any]:
    """`browser`, one Chromium for the module that imports this (each test opens its own context)."""
    yield from launched_chromium()


@dataclass
class Page:
    """A page in a fresh browser context: what the page threw or logged as an error, and (with `frames`) every
    WebSocket frame it received, parsed."""

    context: Any
    page: Any
    errors: list[str] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)


def open_page(browser: Any, url: str, width: int = DESKTOP_SIZE[0], height: int = DESKTOP_SIZE[1], *,
              signed_in: bool = True, console_errors: bool = False, frames: bool = False,
              context: Any = None) -> Page:
    """Open `url` in a new context (or a new tab of `context`) at width×height — below 700 px a phone: mobile
    and touch — and, when `signed_in`, wait until the page says it is connected."""
    narrow = width < 700
    if context is None:
        context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=narrow,
                                      has_touch=narrow)
    opened = Page(context, context.new_page())
    page = opened.page
    page.on("pageerror", lambda e: opened.errors.append(str(e)))
    if console_errors:
        page.on("console", lambda m: opened.errors.append(f"console: {m.text}") if m.type == "error" else None)
    if frames:
        page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: opened.frames.append(json.loads(payload))))
    page.goto(url)
    if signed_in:
        page.wait_for_selector("#status.ok", timeout=T)
    return opened
