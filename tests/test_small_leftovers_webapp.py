"""The web app's Operations view shows a job's warning when it is aimed at someone not let in (small-leftovers 3).

Since 5f5a047 such a job's runs are skipped, and `cron.add`/`cron.update` answer with a `warning`; the web app
enables jobs (and adds them) but showed only "enabled". Now the answer's warning is said where the action was,
and each job aimed at someone not let in carries the warning in its card (cron.list), until they are let in.

Real Chromium (Playwright) against `hermit gateway run` on the demo state dir, with a Telegram account served by
the fake Telegram on 127.0.0.1; ports the system gives.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from browserdemo import T, browser_fixture, open_page, served_demo  # noqa: F401 - browser_fixture: the `browser` fixture
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.scheduler import CronJobs
from test_firstday_telegram import telegram
from webapphelpers import JOB_ID, build_demo_home

TOKEN = "123:TEST"
DANA = "5550123"  # the demo's pending pairing request: not let in until approved
HELD = "dana-plan"
SAID = "is not let in to talk to the assistant now, so its runs are skipped"


def test_a_job_aimed_at_someone_not_let_in_shows_its_warning_until_they_are(browser: Any, tmp_path: Path) -> None:
    with telegram(TOKEN) as tg:
        def prepare(home: Path, base_url: str) -> None:
            build_demo_home(home, base_url)
            with (home / "hermit.yaml").open("a", encoding="utf-8") as f:
                f.write(f'channels:\n  telegram:\n    accounts:\n      default:\n        token: "{TOKEN}"\n'
                        f'        api_base: "{tg.base_url}"\n        poll_timeout_seconds: 1\n'
                        '        owners: ["1"]\n')
            os.chmod(home / "hermit.yaml", 0o600)
            CronJobs(home, load_config(StatePaths(home))).add({
                "id": HELD, "name": "Dana's plan", "message": "plan", "enabled": False,
                "schedule": {"kind": "every", "every_ms": 3_600_000},
                "delivery": {"mode": "announce", "channel": "telegram", "to": DANA}})

        with served_demo(tmp_path / "home", [], prepare) as demo:
            opened = open_page(browser, demo.url)
            page = opened.page
            card = f".job[data-job='{HELD}']"
            page.click(".tab[data-view='ops']")
            page.wait_for_selector(f"{card} .toggle", timeout=T)
            assert page.locator(".j-warning").count() == 0  # disabled: nothing is skipped

            page.click(f"{card} .toggle")  # Enable
            page.wait_for_selector("#cron-note.warn", timeout=T)
            note = page.text_content("#cron-note") or ""
            assert note.startswith(f"{HELD} enabled — warning: job {HELD} (Dana's plan): telegram {DANA}"), note
            assert SAID in note and "hermit pairing approve" in note, note
            page.wait_for_selector(f"{card} .j-warning", timeout=T)
            assert SAID in (page.text_content(f"{card} .j-warning") or "")
            assert page.locator(f".job[data-job='{JOB_ID}'] .j-warning").count() == 0  # delivers to no one

            page.reload()  # the card says it from the job list, not from the answer it got
            page.wait_for_selector("#status.ok", timeout=T)
            page.click(".tab[data-view='ops']")
            page.wait_for_selector(f"{card} .j-warning", timeout=T)

            page.click(".pair[data-code] .approve")  # Dana let in: the job delivers again
            page.wait_for_selector(f"{card} .j-warning", state="detached", timeout=T)
            assert page.locator(".j-warning").count() == 0

            page.once("dialog", lambda d: d.accept())  # "Revoke …?"
            page.click(f".contact[data-sender='{DANA}'] .revoke")  # cut off again: the card says so again
            page.wait_for_selector(f"{card} .j-warning", timeout=T)
            assert opened.errors == []
            opened.context.close()
