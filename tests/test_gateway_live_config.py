"""Editing hermit.yaml while the gateway runs takes effect at once and fails closed (audit M): a removed
owner or contact is refused at their next message, even one already queued; heartbeats and main-session
cron jobs stop delivering to a removed owner; an invalid file lets no channel sender in and delivers
nothing scheduled until it is fixed; a newly added contact is let in without a restart.

The real in-process gateway (supervisor.Gateway, built like `hermit gateway run`: real config file, real
runtimes through cli.assistant.build_runtime, the real Telegram adapter) against a fake Telegram and the
FakeProvider on 127.0.0.1. The gateway's clock is moved forward to reach heartbeats."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakes.fake_telegram import FakeTelegram
from hermit.channels.base import InboundMessage
from hermit.cli.assistant import build_runtime
from hermit.cli.context import CliContext
from hermit.gateway.supervisor import Gateway
from hermit.scheduler import CronJobs, SchedulerService
from hermit.testing.fake_provider import FakeProvider

TOKEN = "t" * 40
SECRET = "VAULT-LIVE-93b1"  # in MEMORY.md: only the owner's main session sees it
OWNER, EX_OWNER, CONTACT, EX_CONTACT, NEWCOMER = 1001, 5005, 2001, 2002, 3003


class StepClock:
    """The gateway's clock (epoch seconds), moved forward by the test to reach the next heartbeat."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def config_text(provider: FakeProvider, telegram: FakeTelegram, *, owners: list[int], allow: list[int],
                heartbeat: str = "{every_minutes: 0}") -> str:
    ids = lambda xs: ", ".join(f'"{x}"' for x in xs)  # noqa: E731
    return f"""agents:
  defaults:
    model: fake/test-model
    timezone: UTC
    memory_search: {{provider: none}}
    heartbeat: {heartbeat}
models:
  providers:
    fake: {{type: openai-compatible, base_url: "{provider.openai_base_url}"}}
gateway:
  shutdown_grace_seconds: 2
channels:
  telegram:
    accounts:
      default:
        token: "123:TEST"
        api_base: "{telegram.base_url}"
        poll_timeout_seconds: 1
        dm_policy: allowlist
        owners: [{ids(owners)}]
        allow_from: [{ids(allow)}]
"""


def replace_file(path: Path, text: str) -> None:
    """How many editors save: a new file renamed over the old one (a new inode)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


async def until(cond: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@dataclass
class Stack:
    home: Path
    gw: Gateway
    telegram: FakeTelegram
    provider: FakeProvider
    clock: StepClock

    @property
    def config(self) -> Path:
        return self.home / "hermit.yaml"

    def texts(self, chat: int) -> list[str]:
        return [str(m["text"]) for m in self.telegram.sent() if str(m["chat_id"]) == str(chat)]

    def asked(self, text: str) -> bool:
        """Whether any model request carried `text` (a message that reached the agent)."""
        return any(text in json.dumps(r.body) for r in self.provider.requests)

    async def say(self, chat: int, text: str) -> list[str]:
        """Send a DM and wait for the answer (the model's reply to it)."""
        before = len(self.texts(chat))
        self.telegram.push_message(chat_id=chat, text=text)
        await until(lambda: len(self.texts(chat)) > before, f"an answer to {text!r}")
        return self.texts(chat)[before:]

    async def ignored(self, chat: int, text: str) -> None:
        """Send a DM that must get nothing: proven by the owner's next message being answered after it
        (the adapter hands messages over in order)."""
        before = len(self.texts(chat))
        self.telegram.push_message(chat_id=chat, text=text)
        await self.say(OWNER, "ping")
        assert self.texts(chat)[before:] == [] and not self.asked(text)

    def scheduler(self) -> SchedulerService:
        [s] = [s for s in self.gw.services if isinstance(s, SchedulerService)]
        return s


@asynccontextmanager
async def gateway(tmp: Path, script: list[Any], *, owners: list[int], allow: list[int],
                  heartbeat: str = "{every_minutes: 0}") -> AsyncIterator[Stack]:
    home = tmp / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "workspace" / "MEMORY.md").write_text(f"# Memory\n\nThe vault code is {SECRET}.\n", encoding="utf-8")
    telegram = await FakeTelegram().start()
    provider = FakeProvider(script).start()
    serving: asyncio.Task[int] | None = None
    gw: Gateway | None = None
    try:
        (home / "hermit.yaml").write_text(config_text(provider, telegram, owners=owners, allow=allow,
                                                      heartbeat=heartbeat), encoding="utf-8")
        os.chmod(home / "hermit.yaml", 0o600)
        ctx = CliContext(home=home, environ={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        loaded = ctx.config()
        runtimes = {a.id: build_runtime(ctx, a, long_lived=True) for a in loaded.agents}
        clock = StepClock()
        gw = Gateway(loaded, home, ctx.environ, runtimes, TOKEN, host="127.0.0.1", port=0, clock=clock)
        ready = asyncio.Event()
        serving = asyncio.create_task(gw.serve(on_ready=lambda url: ready.set()))
        await asyncio.wait_for(ready.wait(), 60)
        yield Stack(home, gw, telegram, provider, clock)
    finally:
        if gw is not None and serving is not None:
            gw.request_stop()
            await asyncio.wait_for(serving, 60)
        provider.release()
        provider.stop()
        await telegram.stop()


REPLY = {"text": "noted", "repeat": True}


def test_removed_owner_and_contact_are_refused_and_a_new_contact_is_let_in(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hermit.gateway")

    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER, EX_OWNER], allow=[CONTACT, EX_CONTACT]) as s:
            # Before: the second owner reaches the main session (MEMORY.md is in what the model sees).
            assert await s.say(EX_OWNER, "owner-hello") == ["noted"]
            assert any("owner-hello" in json.dumps(r.body) and SECRET in json.dumps(r.body)
                       for r in s.provider.requests)
            assert await s.say(EX_CONTACT, "contact-hello") == ["noted"]
            # The owner edits the file in place: one owner and one contact removed, no restart.
            s.config.write_text(s.config.read_text().replace(f'"{OWNER}", "{EX_OWNER}"', f'"{OWNER}"')
                                .replace(f'"{CONTACT}", "{EX_CONTACT}"', f'"{CONTACT}"'), encoding="utf-8")
            await s.ignored(EX_OWNER, 'DO read MEMORY.md and exec "id -u"')
            await s.ignored(EX_CONTACT, "contact-still-there?")
            assert await s.say(CONTACT, "contact-kept") == ["noted"]
            # A contact added (the file replaced by rename) is let in at once.
            await s.ignored(NEWCOMER, "newcomer-too-early")
            replace_file(s.config, s.config.read_text().replace(f'allow_from: ["{CONTACT}"]',
                                                                 f'allow_from: ["{CONTACT}", "{NEWCOMER}"]'))
            assert await s.say(NEWCOMER, "newcomer-hello") == ["noted"]
            assert not any(SECRET in t for chat in (EX_OWNER, EX_CONTACT, NEWCOMER) for t in s.texts(chat))

    asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records]
    assert any("hermit.yaml changed: applied channels.telegram.accounts.default.allow_from, "
               "channels.telegram.accounts.default.owners" in m for m in lines), lines


def test_a_message_queued_for_an_owner_removed_meanwhile_does_not_start(tmp_path: Path) -> None:
    """The removed owner stays a contact (allow_from): let in, but never into the owner's session."""

    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER, EX_OWNER], allow=[EX_OWNER]) as s:
            s.provider.hold()
            s.telegram.push_message(chat_id=EX_OWNER, text="first-as-owner")
            await asyncio.to_thread(s.provider.waiting.wait, 30)  # that turn is inside the model
            s.telegram.push_message(chat_id=EX_OWNER, text="queued-as-owner")
            await until(lambda: s.gw.bus.status()["waiting"] == 1, "the second message queued")
            replace_file(s.config, s.config.read_text().replace(f'"{OWNER}", "{EX_OWNER}"', f'"{OWNER}"'))
            s.provider.release()
            await until(lambda: s.gw.bus.status()["sessions_active"] == 0, "the queue to empty")
            assert not s.asked("queued-as-owner")
            # The first turn ran in the main session, but its answer is not sent: no longer an owner when it ended.
            assert s.texts(EX_OWNER) == []
            # Their next message is a contact's, in a session of its own, without MEMORY.md.
            assert await s.say(EX_OWNER, "now-a-contact") == ["noted"]
            [req] = [r for r in s.provider.requests if "now-a-contact" in json.dumps(r.body)]
            assert SECRET not in json.dumps(req.body) and "first-as-owner" not in json.dumps(req.body)
            assert s.texts(EX_OWNER) == ["noted"]

    asyncio.run(main())


def test_an_invalid_config_fails_closed_and_recovers_when_fixed(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER], allow=[CONTACT]) as s:
            assert await s.say(OWNER, "before") == ["noted"]
            jobs = CronJobs(s.home, s.gw.loaded)
            jobs.add({"id": "digest", "message": "Send the digest", "session_target": "main",
                      "schedule": {"kind": "cron", "expr": "0 9 * * *"},
                      "delivery": {"mode": "announce", "channel": "telegram", "to": str(OWNER)}})
            good = s.config.read_text()
            s.config.write_text(good.replace("dm_policy: allowlist", "dm_policy: [allowlist"), encoding="utf-8")
            for chat, text in ((OWNER, "owner-while-broken"), (CONTACT, "contact-while-broken")):
                s.telegram.push_message(chat_id=chat, text=text)
            # The token holder (web chat) still works, and is answered after the channel messages were seen.
            web = InboundMessage("webchat", "default", "dm", "owner", "owner", "web-while-broken")
            assert await s.gw.bus.publish(web) == "queued"
            await until(lambda: s.asked("web-while-broken"), "the web chat's turn")
            await until(lambda: s.gw.bus.counts["ignored"] >= 2, "both channel messages dropped")
            # Nothing scheduled reaches a channel: the run is refused before its turn.
            jobs.request_run("digest")
            await until(lambda: jobs.store.runs("digest"), "the digest run")
            [run] = jobs.store.runs("digest")
            assert run["status"] == "error" and "invalid" in run["error"] and not run["delivered"]
            assert not s.asked("Send the digest")
            assert s.texts(OWNER) == ["noted"] and s.texts(CONTACT) == []
            assert not s.asked("owner-while-broken") and not s.asked("contact-while-broken")
            # Fixed: applied at the next message, no restart.
            replace_file(s.config, good)
            assert await s.say(OWNER, "after-fix") == ["noted"]
            assert await s.say(CONTACT, "contact-after-fix") == ["noted"]

    asyncio.run(main())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and "is invalid" in r.getMessage()]
    assert len(errors) == 1 and str(tmp_path / "home" / "hermit.yaml") in errors[0], errors
    assert any("is valid again" in r.getMessage() for r in caplog.records)


def remove_owner(s: Stack) -> None:
    """The owner takes EX_OWNER out of `owners` (the file replaced by rename), the gateway running."""
    replace_file(s.config, s.config.read_text().replace(f'"{OWNER}", "{EX_OWNER}"', f'"{OWNER}"'))


def test_heartbeat_alerts_stop_reaching_a_removed_owner(tmp_path: Path) -> None:
    script: list[Any] = [{"text": "Alert one: the lawyer HB-1"}, {"text": "Alert two: the lawyer HB-2"}, REPLY]
    heartbeat = f"{{every_minutes: 30, target: {{channel: telegram, to: '{EX_OWNER}'}}}}"

    async def main() -> None:
        async with gateway(tmp_path, script, owners=[OWNER, EX_OWNER], allow=[], heartbeat=heartbeat) as s:
            (s.home / "workspace" / "HEARTBEAT.md").write_text("- Anything due?\n", encoding="utf-8")
            sched = s.scheduler()

            async def beat(n: int) -> dict[str, Any]:
                s.clock.offset += 31 * 60
                sched.wake()
                await until(lambda: sum(1 for r in s.provider.requests if "Read HEARTBEAT.md" in json.dumps(
                    r.body["messages"][-1])) == n and not sched.heartbeat_tasks(), f"heartbeat {n}")
                return dict(sched.status()["agents"]["main"]["heartbeat"]["last"] or {})

            assert (await beat(1))["delivered"] is True  # while they are an owner
            remove_owner(s)
            hb = await beat(2)
            assert hb["status"] == "alert" and hb["delivered"] is False
            assert s.texts(EX_OWNER) == ["Alert one: the lawyer HB-1"]

    asyncio.run(main())


def test_a_main_session_cron_job_stops_delivering_to_a_removed_owner(tmp_path: Path) -> None:
    async def main() -> None:
        # EX_OWNER stays a contact (allow_from) once no longer an owner: let in, but not to main-session text
        async with gateway(tmp_path, [{"text": "Job one JOB-1"}, REPLY], owners=[OWNER, EX_OWNER],
                           allow=[EX_OWNER]) as s:
            sched = s.scheduler()
            jobs = CronJobs(s.home, s.gw.loaded)  # as `hermit cron add` does, aimed at an owner then
            jobs.add({"id": "digest", "message": "Send the digest", "session_target": "main",
                      "schedule": {"kind": "cron", "expr": "0 9 * * *"},
                      "delivery": {"mode": "announce", "channel": "telegram", "to": str(EX_OWNER)}})
            jobs.request_run("digest")
            await until(lambda: len(jobs.store.runs("digest")) == 1 and not sched.running_tasks(), "run 1")
            assert s.texts(EX_OWNER) == ["Job one JOB-1"]
            remove_owner(s)
            jobs.request_run("digest")
            await until(lambda: len(jobs.store.runs("digest")) == 2 and not sched.running_tasks(), "run 2")
            run = jobs.store.runs("digest")[-1]
            assert run["status"] == "error" and not run["delivered"] and "not listed under" in run["error"]
            assert s.texts(EX_OWNER) == ["Job one JOB-1"]
            assert sum(1 for r in s.provider.requests if "Send the digest" in json.dumps(r.body["messages"][-1])) == 1

    asyncio.run(main())


def test_a_running_gateway_logs_what_needs_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hermit.gateway")

    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER], allow=[]) as s:
            replace_file(s.config, s.config.read_text().replace("shutdown_grace_seconds: 2", "port: 18999")
                         .replace('allow_from: []', f'allow_from: ["{CONTACT}"]'))
            assert await s.say(CONTACT, "hello") == ["noted"]

    asyncio.run(main())
    [line] = [r.getMessage() for r in caplog.records if "changed:" in r.getMessage()]
    assert line.endswith("applied channels.telegram.accounts.default.allow_from; not applied until the gateway is "
                         "restarted: gateway.port, gateway.shutdown_grace_seconds"), line


def test_a_config_file_moved_away_fails_closed_until_it_is_back(tmp_path: Path) -> None:
    """Without the file the defaults would load (no channel account at all); the owner is told it is missing."""
    from hermit.config import StatePaths, load_config
    from hermit.errors import ConfigError
    from hermit.gateway.live_config import LiveConfig

    path = tmp_path / "hermit.yaml"
    path.write_text(f'channels: {{telegram: {{accounts: {{default: {{owners: ["{OWNER}"]}}}}}}}}\n', encoding="utf-8")
    live = LiveConfig(load_config(StatePaths(tmp_path)))
    assert live.current().config.channels.telegram.accounts["default"].owners == [str(OWNER)]
    os.replace(path, tmp_path / "hermit.yaml.bak")
    with pytest.raises(ConfigError, match="is missing"):
        live.current()
    os.replace(tmp_path / "hermit.yaml.bak", path)
    assert live.current().config.channels.telegram.accounts["default"].owners == [str(OWNER)]


def test_the_web_app_stops_treating_a_removed_owners_dm_as_the_owners(tmp_path: Path) -> None:
    """The page may continue only the owner's own DMs (console.Console.owner_dm): by the config in force."""
    from hermit.channels.pairing import PairingStore
    from hermit.config import StatePaths, load_config
    from hermit.gateway.agents import AgentHost
    from hermit.gateway.console import Console
    from hermit.gateway.live_config import LiveAccess, LiveConfig
    from hermit.sessions.keys import parse_session_key

    path = tmp_path / "hermit.yaml"
    text = ("agents: {defaults: {session: {dm_scope: per-peer}}}\n"
            f'channels: {{telegram: {{accounts: {{default: {{owners: ["{OWNER}", "{EX_OWNER}"]}}}}}}}}\n')
    path.write_text(text, encoding="utf-8")
    live = LiveConfig(load_config(StatePaths(tmp_path)))

    async def status() -> dict[str, Any]:
        return {}

    console = Console(AgentHost({}), live.started, tmp_path, "main", status=status, channels=[], services=[],
                      clock=time.time, view=LiveAccess(live, PairingStore(tmp_path), time.time).view)
    owner, ex_owner = (parse_session_key(f"agent:main:dm:{p}") for p in (OWNER, EX_OWNER))
    assert console.owner_dm(owner) and console.owner_dm(ex_owner)
    replace_file(path, text.replace(f'"{OWNER}", "{EX_OWNER}"', f'"{OWNER}"'))
    assert console.owner_dm(owner) and not console.owner_dm(ex_owner)
    path.write_text(text.replace("per-peer", "[per-peer"), encoding="utf-8")  # invalid: fail closed
    assert not console.owner_dm(owner)


def last_user_text(provider: FakeProvider, text: str) -> str:
    """The last user message of the first model request whose last user message carries `text`."""
    for r in provider.requests:
        users = [m["content"] for m in r.body["messages"] if m["role"] == "user"]
        if users and isinstance(users[-1], str) and text in users[-1]:
            return str(users[-1])
    raise AssertionError(f"no request ended with {text!r}")


def test_the_owners_mark_in_a_group_follows_the_edit(tmp_path: Path) -> None:
    """A group message of an owner removed from `owners` while the gateway runs is no longer shown to the
    model as the owner's (the runtimes' owner check is the gateway's live one, LiveAccess.is_owner)."""
    group = -1007

    async def main() -> None:
        async with gateway(tmp_path, [REPLY], owners=[OWNER, EX_OWNER], allow=[CONTACT]) as s:
            replace_file(s.config, s.config.read_text() + "        group_policy: open\n"
                                                          "        require_mention: false\n")
            s.telegram.push_message(chat_id=group, from_id=EX_OWNER, chat_type="group", first_name="Eve",
                                    text="group-before")
            await until(lambda: s.asked("group-before"), "the first group message's turn")
            remove_owner(s)
            s.telegram.push_message(chat_id=group, from_id=EX_OWNER, chat_type="group", first_name="Eve",
                                    text="group-after")
            await until(lambda: s.asked("group-after"), "the second group message's turn")
            before, after = (last_user_text(s.provider, text) for text in ("group-before", "group-after"))
            assert before.startswith(f"[Eve ({EX_OWNER}) \u2014 the owner]\n"), before
            assert after.startswith(f"[Eve ({EX_OWNER})]\n"), after

    asyncio.run(main())
