"""Inside the gateway, the scheduler's "no account" hint names this gateway's restart in words for how it runs.

A delivery aimed at a channel with no account ends its fix with the gateway's restart. t6 gave the CLI those words
(tests/test_s20_cli_scheduler_hint.py); inside the gateway the three places that say it — the agent's cron tool, the
web app's job editing (`cron.add`) and the heartbeat target checked at start (the gateway log) — still sent the owner
to "restart the gateway as setup says (…`hermit doctor` says it too)". The gateway knows how it runs
(gateway/state.HowRun): it now hands the words to the scheduler, whose errors carry them.

A real `hermit gateway run` (by hand: Ctrl-C / `kill PID`, then `hermit gateway run`), the fake provider on
127.0.0.1 scripting the model's cron tool call, the web app's WebSocket; ports the system gives.
"""

from __future__ import annotations

import json
from pathlib import Path

from gatewayhelpers import GatewayProcess, write_config, ws_calls
from hermit.testing.fake_provider import FakeProvider

FIX = "add one under channels.discord.accounts with `hermit setup --channel discord`, then "
JOB = {"name": "weekly", "message": "the weekly summary", "schedule": {"kind": "every", "every_ms": 604_800_000},
       "delivery": {"mode": "announce", "channel": "discord", "to": "42"}}


def test_the_gateway_names_its_own_restart_in_the_no_account_hint(tmp_path: Path) -> None:
    home = tmp_path / "state"
    with FakeProvider([{"match": {"contains": "T10-CRON"}, "tool_calls": [{"name": "cron", "arguments": {
                          "action": "add", "job": JOB}}]},
                       {"match": {"contains": "T10-CRON"}, "text": "t10-done"}]) as fake:
        write_config(home, fake.openai_base_url)
        text = (home / "hermit.yaml").read_text(encoding="utf-8")
        (home / "hermit.yaml").write_text(text.replace(
            "    timezone: Europe/Paris\n",
            "    timezone: Europe/Paris\n    heartbeat: {every_minutes: 30, target: {channel: discord, to: '42'}}\n"),
            encoding="utf-8")
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()
            then = (f"restart the gateway: stop it (Ctrl-C where it runs, or `kill {gw.proc.pid}`) and start it again "
                    "with `hermit gateway run`")
            added, sent, jobs = ws_calls(gw.ws_url, gw.token, [("cron.add", {"job": JOB}),
                                                               ("chat.send", {"text": "T10-CRON remind me"}),
                                                               ("cron.list", {})])
            log = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
        finally:
            gw.stop()
        # The web app's job editing: refused, the fix ending with this gateway's restart.
        assert not added["ok"]
        assert "no discord account is configured, so nothing could be delivered" in added["error"]["message"]
        assert added["error"]["hint"] == FIX + then, added["error"]
        # The cron tool: the model was told the same fix.
        assert sent["ok"], sent
        tool_results = [m["content"] for r in fake.requests for m in r.body.get("messages", [])
                        if m.get("role") == "tool"]
        assert any("no discord account is configured" in str(c) and f"hint: {FIX}{then}" in str(c)
                   for c in tool_results), tool_results
        assert jobs["ok"] and jobs["payload"]["jobs"] == []  # neither refused job was added
        # The heartbeat's target, checked as the gateway starts: the log says the same fix.
        assert f"heartbeat target of main: no discord account is configured, so nothing could be delivered ({FIX}{then})" \
            in log, log
        everything = json.dumps([added, tool_results]) + log
        assert "as setup says" not in everything
