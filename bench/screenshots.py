"""The README's screenshots of the web app, at a desktop's size (1280×800) and a phone's (390×844).

    python bench/screenshots.py                 # docs/webchat-{1280,390}-{chat,memory,ops}.png, webchat-390-sessions.png
    python bench/screenshots.py --out /tmp/shots

What runs: a demo state dir (the demo memory in English and 中文, a CLI and a group session, a cron job, a
pending pairing request; tests/webapphelpers.py), `hermit gateway run` against the fake provider on
127.0.0.1, and Debian's Chromium driven by Playwright. Nothing reaches the network. The test suite never
writes these files; run this after changing the page.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gatewayhelpers import CHROMIUM_FLAGS, GatewayProcess, need_chromium  # noqa: E402
from hermit.testing import FakeProvider  # noqa: E402
from webapphelpers import JOB_ID, JOB_STEP, build_demo_home  # noqa: E402

STEPS = [
    {"match": {"contains": "take my coffee"}, "tool_calls": [{"name": "memory_search", "arguments": {"query": "coffee"}}]},
    {"match": {"contains": "take my coffee"},
     "text": "You take an **oat-milk flat white**, no sugar — it's in `MEMORY.md`.\n\n"
             "- tea after 3pm\n- meetings never before 10:00"},
    {"match": {"contains": "灰度"}, "tool_calls": [{"name": "memory_search", "arguments": {"query": "灰度 王伟"}}]},
    {"match": {"contains": "灰度"},
     "text": "和王伟的周会上定了：**下周三开始灰度**（见 `memory/2026-11-21.md`）。\n\n"
             "- 安卓端的离线缓存要先升级到 v3.2\n- 女儿的钢琴课改到周六上午十点"},
    JOB_STEP,
]


def shoot(browser: Any, url: str, out: Path, width: int, height: int) -> None:
    narrow = width < 700
    # Reduced motion: the phone drawer snaps shut instead of being caught halfway by a screenshot.
    context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=narrow, has_touch=narrow,
                                  reduced_motion="reduce")
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("#status.ok", timeout=30_000)
    for text in ("How do I take my coffee?", "王伟那边什么时候开始灰度？"):
        if page.locator(".msg.user", has_text=text).count():
            continue  # the second size finds the first one's conversation in the history
        page.fill("#input", text)
        page.press("#input", "Enter")
        page.locator(".msg.assistant[data-done='done']").last.wait_for(timeout=30_000)
    page.wait_for_selector(".msg.assistant >> text=下周三开始灰度", timeout=30_000)
    page.screenshot(path=str(out / f"webchat-{width}-chat.png"))
    if narrow:  # the sidebar: a drawer behind ☰
        page.click("#menu")
        page.wait_for_selector("#sidebar", state="visible")
        page.wait_for_timeout(400)  # let the slide-in finish
        page.screenshot(path=str(out / f"webchat-{width}-sessions.png"))
        page.click("#scrim", position={"x": 370, "y": 400})

    page.evaluate("location.hash = 'memory'")
    page.fill("#memory-query", "钢琴课 Lisbon")
    page.press("#memory-query", "Enter")
    page.locator(".result").first.wait_for(timeout=30_000)
    page.locator(".result", has_text="2026-11-21").first.click()
    page.wait_for_selector("#memory-lines .line.hit", timeout=30_000)
    page.screenshot(path=str(out / f"webchat-{width}-memory.png"))

    page.evaluate("location.hash = 'ops'")
    job = page.locator(f".job[data-job='{JOB_ID}']")
    job.wait_for(timeout=30_000)
    if not job.locator(".run").count():
        job.locator(".run-now").click()
        job.locator(".run[data-status='ok']").first.wait_for(timeout=60_000)
    page.wait_for_selector(".pair", timeout=30_000)
    page.screenshot(path=str(out / f"webchat-{width}-ops.png"))
    context.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="where the PNG files go (default docs/)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="hermit-shots-") as tmp:
        home = Path(tmp) / "home"
        with FakeProvider(STEPS) as fake:
            build_demo_home(home, fake.openai_base_url)
            gw = GatewayProcess(home)
            try:
                url = gw.wait_ready()
                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=need_chromium(), args=CHROMIUM_FLAGS, headless=True)
                    try:
                        for width, height in ((1280, 800), (390, 844)):
                            shoot(browser, url, args.out, width, height)
                    finally:
                        browser.close()
            finally:
                gw.stop()
    for f in sorted(args.out.glob("webchat-*.png")):
        print(f"wrote {f} ({f.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
