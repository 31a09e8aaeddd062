"""The web chat in a real browser: headless Chromium (Debian's) driven by Playwright against
`hermit gateway run` with the fake provider. Saves docs/webchat.png for the README."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gatewayhelpers import GatewayProcess, need_chromium, write_config
from hermit.testing import FakeProvider

FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "webchat.png"
XSS = 'Try this: <img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script>'

SCRIPT = [
    {"tool_calls": [{"name": "memory_search", "arguments": {"query": "coffee order"}}]},
    {"text": "You take an **oat milk flat white**, no sugar — it's in `MEMORY.md`.\n\n"
             "- size: medium\n- shop: the corner café"},
    {"text": XSS},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium = need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # Playwright gives every launch a fresh temporary profile (user-data-dir).
        b = p.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def test_web_chat_in_a_real_browser(tmp_path: Path, browser: Any) -> None:
    home = tmp_path / "home"
    (home / "workspace" / "memory").mkdir(parents=True)
    (home / "workspace" / "MEMORY.md").write_text("# Preferences\n- Coffee: oat milk flat white, medium, no sugar.\n",
                                                  encoding="utf-8")
    with FakeProvider(SCRIPT) as fake:
        write_config(home, fake.openai_base_url)
        port = free_port()
        gw = GatewayProcess(home, "--port", str(port))
        try:
            url = gw.wait_ready()
            context = browser.new_context(viewport={"width": 1100, "height": 720})
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("#status.ok", timeout=20_000)
            assert "token=" not in page.url  # taken out of the address bar once read

            page.fill("#input", "How do I take my coffee?")
            page.press("#input", "Enter")
            reply = page.locator(".msg.assistant[data-done='done']").first
            reply.wait_for(timeout=30_000)
            assert "oat milk flat white" in reply.inner_text()
            assert reply.locator("strong").inner_text() == "oat milk flat white"  # Markdown rendered
            tool = page.locator(".tool[data-name='memory_search']")
            assert tool.get_attribute("data-status") == "done" and "memory_search" in tool.inner_text()
            page.wait_for_selector("#sessions li.active", timeout=10_000)

            page.reload()  # history comes back from the transcript
            page.wait_for_selector("#status.ok", timeout=20_000)
            page.wait_for_selector(".msg.assistant >> text=oat milk flat white", timeout=20_000)
            assert page.locator(".msg.user").first.inner_text() == "How do I take my coffee?"
            assert page.locator(".tool[data-name='memory_search'][data-status='done']").count() == 1

            page.fill("#input", "Show me some HTML")
            page.press("#input", "Enter")
            last = page.locator(".msg.assistant[data-done='done']")  # after the reload, only this live turn
            last.wait_for(timeout=30_000)
            text = last.inner_text()
            assert '<img src=x onerror="window.__pwned=1">' in text and "<script>" in text  # shown as text
            assert page.locator("#messages img, #messages script").count() == 0
            assert page.evaluate("window.__pwned") is None
            assert errors == []
            page.screenshot(path=str(SCREENSHOT))

            # A dropped connection: the page reconnects by itself and reloads the history.
            gw.stop()
            page.wait_for_selector("#status.warn", timeout=20_000)
            gw = GatewayProcess(home, "--port", str(port))
            gw.wait_ready()
            page.wait_for_selector("#status.ok", timeout=30_000)
            page.wait_for_selector(".msg.assistant >> text=window.__pwned=1", timeout=20_000)
            assert page.locator(".msg.user").count() == 2

            wrong = context.new_page()
            wrong.goto(url.split("?", 1)[0] + "?token=wrong-token")
            wrong.wait_for_selector("#status.bad", timeout=20_000)
            status = wrong.inner_text("#status")
            assert "wrong" in status and "token" in status, status
            assert wrong.locator(".msg").count() == 0
            context.close()
        finally:
            gw.stop()
    assert gw.proc.returncode == 0
