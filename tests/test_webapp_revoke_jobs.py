"""The web app's Revoke names the jobs it holds, as `hermit pairing revoke` does (s17 h1).

Revoking a contact skips the enabled jobs aimed at them until they are approved again (scheduler/targets.py
`not_let_in`); `hermit pairing revoke` lists them (fe5460b), but the web app's Revoke said only "… revoked".
Now the gateway's `pairing.revoke` answers with each contact's held jobs and the CLI's note, and the page says it
where the action was, as a warning.

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
from webapphelpers import build_demo_home

TOKEN = "123:TEST"
DANA = "5550123"  # the demo's pending pairing request
NOTE = ("1 scheduled job aimed at them will be skipped until they are approved again: dana-plan (Dana's plan) "
        "(re-aim one with `hermit cron edit ID --announce CHANNEL:ACCOUNT:PEER`, or remove it with "
        "`hermit cron remove ID`)")


def test_revoke_in_the_web_app_names_the_jobs_it_holds(browser: Any, tmp_path: Path) -> None:
    with telegram(TOKEN) as tg:
        def prepare(home: Path, base_url: str) -> None:
            build_demo_home(home, base_url)
            with (home / "hermit.yaml").open("a", encoding="utf-8") as f:
                f.write(f'channels:\n  telegram:\n    accounts:\n      default:\n        token: "{TOKEN}"\n'
                        f'        api_base: "{tg.base_url}"\n        poll_timeout_seconds: 1\n'
                        '        owners: ["1"]\n')
            os.chmod(home / "hermit.yaml", 0o600)
            jobs = CronJobs(home, load_config(StatePaths(home)))
            for job_id, name, enabled in (("dana-plan", "Dana's plan", True), ("dana-old", "Old plan", False)):
                jobs.add({"id": job_id, "name": name, "message": "plan", "enabled": enabled,
                          "schedule": {"kind": "every", "every_ms": 3_600_000},
                          "delivery": {"mode": "announce", "channel": "telegram", "to": DANA}})

        with served_demo(tmp_path / "home", [], prepare) as demo:
            opened = open_page(browser, demo.url)
            page = opened.page
            page.click(".tab[data-view='ops']")
            page.click(".pair[data-code] .approve")  # Dana let in: her job delivers
            page.wait_for_selector(f".contact[data-sender='{DANA}'] .revoke", timeout=T)

            page.once("dialog", lambda d: d.accept())  # "Revoke …?"
            page.click(f".contact[data-sender='{DANA}'] .revoke")
            page.wait_for_selector("#pairing-note.warn", timeout=T)
            note = page.text_content("#pairing-note") or ""
            assert " revoked — warning: " + NOTE in note, note  # the CLI's words; the disabled job holds nothing
            assert "dana-old" not in note
            page.wait_for_selector(".job[data-job='dana-plan'] .j-warning", timeout=T)
            assert opened.errors == []
            opened.context.close()
