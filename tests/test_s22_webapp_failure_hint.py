"""A reply that failed says, in the web app, what to do about it (session 22, t7: a new user's first week).

The page showed the reason only ("⚠ The reply failed: fake (HTTP 401) rejected the credentials: …"); what to do —
the error's hint, which `hermit chat` and the gateway log print (the key's variable and the `hermit setup` command
that stores a new one; for a model server that does not answer, how to start it) — stayed in the log, where a
person on a phone does not look. Now the turn's end (`chat.done`, to the web app only, which only the owner signs
in to) carries the hint and the page shows it under the reason. A chat channel still gets the apology only.

Real Chromium at a phone's size against `hermit gateway run` with the scripted model answering 401.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from browserdemo import PHONE_SIZE, Demo, T, browser_fixture, open_page, served_demo
from gatewayhelpers import write_config

browser = browser_fixture


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    steps: list[dict[str, Any]] = [{"error": 401}, {"text": "Fine.", "repeat": True}]  # a 401 is not retried
    with served_demo(tmp_path_factory.mktemp("s22hint") / "home", steps, write_config) as d:
        yield d


def test_a_refused_key_says_what_to_do_on_the_phone(browser: Any, demo: Demo) -> None:
    opened = open_page(browser, demo.url, *PHONE_SIZE, frames=True)
    page = opened.page
    page.fill("#input", "key-refused please")
    page.tap("#send")
    bubble = page.locator(".msg.assistant.error").last
    hint = bubble.locator(".error-hint")
    hint.wait_for(timeout=T)
    assert "rejected the credentials" in bubble.locator(".error-detail").first.inner_text()
    done = [f["payload"] for f in opened.frames if f.get("event") == "chat.done"]
    assert done and done[-1]["status"] == "error" and done[-1]["hint"]
    assert hint.inner_text() == "What to do: " + done[-1]["hint"]
    log = (demo.home / "logs" / "gateway.log").read_text()
    assert f"hint: {done[-1]['hint']}" in log  # the same hint the log has
    # A reply that worked carries none, and the page adds none.
    page.fill("#input", "hello again")
    page.tap("#send")
    page.locator(".msg.assistant[data-done='done']").last.wait_for(timeout=T)
    assert "hint" not in [f for f in opened.frames if f.get("event") == "chat.done"][-1]["payload"]
    assert page.locator(".error-hint").count() == 1
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE_SIZE[0]
    assert opened.errors == []
    opened.context.close()
