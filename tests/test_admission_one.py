"""One admission decision for chats and scheduled deliveries (s17 h1).

`scheduler/targets.not_let_in` (jobs, heartbeat alerts) kept its own copy of channels/access.py's admission
rules, and the copies disagreed: the scheduler let owners in under `dm_policy: disabled` and on an account with
`enabled: false`, where the gateway refuses them; the gateway refused an owner (or contact) listed by an
@username pinned to their id once they presented another name (or none), and sent that owner a pairing code,
where the pin makes the entry mean that id (channels/username_pins.py) and the scheduler let them in; and the
gateway raised on approvals it could not read where the scheduler said no. Now both ask `access.decide` (pure:
no code issued, no username pinned); the gateway takes the side effects it asks for.

The table below runs the gateway's check (a DM from the peer presenting no username; a group message from an
owner that mentions the bot) and not_let_in over ~1,000 configs and pairing states, on four platforms: they must
give one answer. The named defects each have their own test, through the real gateway check, the real
scheduler, real pairing files and (for the race and the second user) real processes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ciguard import need
from hermit.channels.access import AccessControl
from hermit.channels.pairing import PairingStore
from hermit.channels.username_pins import UsernamePins
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.scheduler import CronJobs
from hermit.scheduler.targets import not_let_in, peer_kind_of
from prochelpers import PROC_TIMEOUT, python_as, pythonpath, shared_dir
from test_cron_revoked import HOUR, PLAN, Live
from test_reaudit16b_heartbeat_let_in import Beats

SECRETS: dict[str, dict[str, str]] = {"slack": {"bot_token": "xoxb-1", "app_token": "xapp-1"}}
# Each platform's peers: a user's id in the forms people write it (Slack's member of another workspace `U@T`, a
# WhatsApp number with its + and dashes), and ids and names only a group has (Telegram's `-100…`/`@name`,
# Slack's `C…`/`#name`), which a delivery sends to the group whatever kind the job names.
PEERS = {"telegram": ["42", "@family_news", "-1001"], "discord": ["42"], "slack": ["U42", "U42@T9", "C77", "#general"],
         "whatsapp": ["+1 555-0100"]}
NAMES = {"telegram": "@ann_smith", "discord": "@ann"}  # platforms with usernames
OTHER = {"telegram": "7", "discord": "7", "slack": "U7", "whatsapp": "15559999"}


@dataclass(frozen=True)
class Case:
    channel: str
    peer: str
    dm_policy: str
    owners: str  # "id": the peer is an owner by id; "name": by @username; "other": someone else is
    allow_from: bool
    state: str  # the pairing files: nothing, approved, approved then revoked, a pending code, the name pinned
    enabled: bool
    group_policy: str
    listed: bool  # the peer (a group) is under `groups`

    @property
    def kind(self) -> str:
        return peer_kind_of(self.channel, "dm", self.peer)


def cases() -> list[Case]:
    out = []
    for ch, peers in PEERS.items():
        for values in itertools.product(peers, ["pairing", "allowlist", "open", "disabled"], ["id", "name", "other"],
                                        [False, True], ["none", "approved", "revoked", "pending", "pin_peer",
                                                        "pin_other"], [True, False],
                                        ["allowlist", "open", "disabled"], [False, True]):
            c = Case(ch, *values)
            if (c.owners == "name" or c.state.startswith("pin")) and ch not in NAMES:
                continue
            if c.kind == "dm" and (c.group_policy != "allowlist" or c.listed):
                continue  # group settings do not bear on a DM
            if c.kind == "group" and (c.owners != "id" or c.allow_from or c.state != "none" or c.dm_policy != "pairing"):
                continue  # DM settings do not bear on a group
            out.append(c)
    return out


def setup(home: Path, c: Case) -> LoadedConfig:
    owner = {"id": c.peer if c.kind == "dm" else OTHER[c.channel], "name": NAMES.get(c.channel, ""),
             "other": OTHER[c.channel]}[c.owners]
    acc: dict[str, Any] = {"owners": [owner], "dm_policy": c.dm_policy, "enabled": c.enabled,
                           "group_policy": c.group_policy, **SECRETS.get(c.channel, {})}
    if c.allow_from:
        acc["allow_from"] = [c.peer]
    if c.listed:
        acc["groups"] = [c.peer]
    loaded = build_config({"channels": {c.channel: {"accounts": {"default": acc}}}}, StatePaths(home))
    store = PairingStore(home)
    if c.state in ("approved", "revoked", "pending"):
        req = store.request(c.channel, "default", c.peer, "Bob", None)
        assert req is not None
        if c.state != "pending":
            store.approve(c.channel, req.code)
        if c.state == "revoked":
            store.revoke(c.channel, c.peer, "default")
    if c.state.startswith("pin"):
        UsernamePins(store).pin(c.channel, NAMES[c.channel], c.peer if c.state == "pin_peer" else "999", "default")
    return loaded


@pytest.mark.parametrize("channel", sorted(PEERS))
def test_the_gateway_and_the_scheduler_give_one_answer(tmp_path: Path, channel: str) -> None:
    disagree, n = [], 0
    for i, c in enumerate(x for x in cases() if x.channel == channel):
        home = tmp_path / str(i)
        loaded = setup(home, c)
        scheduled = not_let_in(loaded, c.channel, None, "dm", c.peer)
        gateway = AccessControl(loaded.config.channels, PairingStore(home))
        if c.kind == "dm":
            d = gateway.check(c.channel, "default", "dm", c.peer.strip(), c.peer.strip())
        else:
            d = gateway.check(c.channel, "default", "group", c.peer, OTHER[c.channel], mentioned=True)
        n += 1
        if d.allowed != (scheduled is None):
            disagree.append((c, d.reason, scheduled))
    assert n > 40
    assert disagree == [], f"{len(disagree)} of {n} disagree, e.g. {disagree[:3]}"


def telegram(home: Path, **account: Any) -> LoadedConfig:
    return build_config({"agents": {"defaults": {"timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
                                                 "heartbeat": {"every_minutes": 0}}},
                         "channels": {"telegram": {"accounts": {"default": {"owners": ["1"], **account}}}}},
                        StatePaths(home))


def test_a_renamed_owner_is_still_the_owner_and_gets_no_pairing_code(tmp_path: Path) -> None:
    """Pinned to 1001, @boss_person means 1001: after renaming (or hiding the name) they are still the owner,
    and a listed group member still a member. Before: a stranger, sent a pairing code in their own DM."""
    loaded = telegram(tmp_path, owners=["@boss_person"], groups=["-100555"], group_allow_from=["@boss_person"])
    ac = AccessControl(loaded.config.channels, PairingStore(tmp_path))
    first = ac.check("telegram", "default", "dm", "1001", "1001", sender_username="Boss_Person")
    assert first.allowed and "owner" in first.reason  # first seen: pinned
    for name in ("boss_renamed", None):
        d = ac.check("telegram", "default", "dm", "1001", "1001", sender_username=name)
        assert d.allowed and d.reply is None and "owner" in d.reason, (name, d)
        assert ac.is_owner("telegram", "default", "1001", name)
        assert ac.check("telegram", "default", "group", "-100555", "1001", sender_username=name, mentioned=True).allowed
    assert PairingStore(tmp_path).pending() == []
    taker = ac.check("telegram", "default", "dm", "1002", "1002", sender_username="boss_person")
    assert not taker.allowed and taker.reply is not None  # someone else with the name: a stranger, as before
    assert not ac.is_owner("telegram", "default", "1002", "boss_person")
    assert not_let_in(loaded, "telegram", None, "dm", "1001") is None
    assert not_let_in(loaded, "telegram", None, "dm", "1002") is not None


def test_a_job_to_an_owner_on_an_account_with_dms_disabled_is_skipped_and_resumes(tmp_path: Path) -> None:
    """`dm_policy: disabled` — DMs are ignored, the owners' too — held the owner's DMs, but a job went on sending
    there. Now it is skipped with the reason and the job kept; DMs back on, it delivers again."""
    home = tmp_path / "home"
    live = Live(home, telegram(home))
    live.service.jobs.add({"id": "plan", "message": "plan", "schedule": HOUR,
                           "delivery": {"mode": "announce", "channel": "telegram", "to": "1"}})

    async def main() -> None:
        await live.service.start(run_loop=False)
        try:
            live.loaded = telegram(home, dm_policy="disabled")
            await live.tick_at(1)
            live.loaded = telegram(home)
            await live.tick_at(2)
        finally:
            await live.service.stop()

    asyncio.run(main())
    assert [(t.peer_id, x) for t, x in live.channel.sent] == [("1", PLAN)]
    first, second = live.runs("plan")
    assert first["status"] == "skipped" and "dm_policy is disabled on telegram/default" in json.dumps(first), first
    # The fix named (cron list, the web app, doctor) is the one that lets them in again: approving an owner would
    # change nothing.
    cron = CronJobs(home, telegram(home, dm_policy="disabled"))
    said = cron.not_let_in(next(j for j in cron.load().jobs if j.id == "plan"))
    assert said is not None and "dm_policy to pairing or allowlist" in said.text and "pairing approve" not in said.text, said
    assert second["status"] == "ok" and second["delivered"]


def test_an_account_turned_off_holds_the_jobs_aimed_through_it(tmp_path: Path) -> None:
    """`enabled: false` lets nobody in at the gateway; the scheduler's copy let an owner or contact in (no warning in
    cron list, the web app, doctor or `pairing revoke`'s list). Now it says the account is off."""
    home = tmp_path / "home"
    CronJobs(home, telegram(home, allow_from=["42"])).add(
        {"id": "bob", "message": "plan", "schedule": HOUR,
         "delivery": {"mode": "announce", "channel": "telegram", "to": "42"}})
    off = telegram(home, allow_from=["42"], enabled=False)
    assert str(not_let_in(off, "telegram", None, "dm", "1")) == "telegram 1 (telegram/default is disabled: enabled is false)"
    cron = CronJobs(home, off)
    [job] = cron.load().jobs
    warning = cron.not_let_in(job)
    assert warning is not None and "telegram/default is disabled" in warning.text
    assert "accounts.default.enabled to true" in warning.text and "pairing approve" not in warning.text, warning


def test_approvals_that_cannot_be_read_are_a_refusal_not_an_exception(tmp_path: Path) -> None:
    """A damaged approvals file made the gateway's check raise for every sender who was not an owner (the scheduler
    said no). Now both say no, with the reason; no pairing code is issued over it; owners are let in."""
    loaded = telegram(tmp_path)
    store = PairingStore(tmp_path)
    store.dir.mkdir(mode=0o700)
    store.allow_file("telegram", "default").write_text("{damaged", encoding="utf-8")
    ac = AccessControl(loaded.config.channels, store)
    d = ac.check("telegram", "default", "dm", "42", "42")
    assert not d.allowed and d.reply is None and "cannot be read" in d.reason
    assert store.pending() == []
    assert ac.check("telegram", "default", "dm", "1", "1").allowed
    assert "cannot be read" in str(not_let_in(loaded, "telegram", None, "dm", "42"))


def test_the_decision_itself_writes_nothing(tmp_path: Path) -> None:
    """`decide` over the state as it is: a first sighting of a listed name and a stranger under pairing are answered
    (pin it; may be sent a code) with nothing written; the gateway's check then takes those side effects."""
    from hermit.channels.access import Message, decide, standing

    loaded = telegram(tmp_path, owners=["@boss_person"])
    store = PairingStore(tmp_path)
    known = standing(store, UsernamePins(store), "telegram", "default")
    first = decide(loaded.config.channels, "telegram", "default", "dm", "1001", known, Message("1001", "boss_person"))
    stranger = decide(loaded.config.channels, "telegram", "default", "dm", "42", known, Message("42"))
    delivery = decide(loaded.config.channels, "telegram", "default", "dm", "1001", known)
    assert (first.let_in, first.owner, first.pin) == (True, True, "@boss_person")
    assert (stranger.let_in, stranger.may_pair, stranger.rule) == (False, True, "stranger")
    assert (delivery.let_in, delivery.pin) == (False, None)  # no name presented: not pinned yet, nobody
    assert not store.dir.exists()
    ac = AccessControl(loaded.config.channels, store)
    assert ac.check("telegram", "default", "dm", "1001", "1001", sender_username="boss_person").allowed
    assert ac.check("telegram", "default", "dm", "42", "42").reply is not None
    assert [p.sender_id for p in UsernamePins(store).all()] == ["1001"] and len(store.pending()) == 1


RACER = """
import json, sys
from pathlib import Path
from hermit.channels.access import AccessControl, PairingStore
from hermit.config.schema import ChannelsConfig
ac = AccessControl(ChannelsConfig.model_validate({"telegram": {"accounts": {"default": {
    "owners": ["@boss_person"], "dm_policy": "allowlist"}}}}), PairingStore(Path(sys.argv[1])))
me = sys.argv[2]
sys.stdin.readline()  # all started: go together
d = ac.check("telegram", "default", "dm", me, me, sender_username="boss_person")
print(json.dumps([d.allowed, ac.is_owner("telegram", "default", me, "Boss_Person"), d.reason]))
"""


def test_racing_first_sightings_of_an_owners_name_let_exactly_one_id_in(tmp_path: Path) -> None:
    """Six processes (gateways on a shared state dir) checking a DM from six ids presenting the owner's name at
    once: the decision asks for the pin, the pin in force decides again, so one id is the owner, the rest are not —
    in their check and in routing's `is_owner` after it."""
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), str(3000 + i)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": pythonpath()})
             for i in range(6)]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    answers = [json.loads(p.communicate(timeout=PROC_TIMEOUT)[0]) for p in procs]
    assert sorted(a[0] for a in answers) == [False] * 5 + [True], answers
    assert all(a[0] == a[1] for a in answers), answers
    [pin] = UsernamePins(PairingStore(tmp_path)).all()
    assert answers[int(pin.sender_id) - 3000][0]


AS_NOBODY = """
import json, sys
from pathlib import Path
from hermit.channels.access import AccessControl, PairingStore
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.scheduler.targets import not_let_in
home = Path(sys.argv[1])
loaded = build_config({"channels": {"telegram": {"accounts": {"default": {"owners": ["1"]}}}}}, StatePaths(home))
ac = AccessControl(loaded.config.channels, PairingStore(home))
print(json.dumps([str(not_let_in(loaded, "telegram", None, "dm", "42")), not_let_in(loaded, "telegram", None, "dm", "1"),
                  ac.check("telegram", "default", "dm", "42", "42").reason]))
"""


def test_another_user_who_cannot_read_the_approvals_lets_nobody_in_by_them(tmp_path: Path) -> None:
    """A second local user (uid 65534) asking about a state dir whose pairing files are the first user's (0600 in a
    0700 dir): the contact the first user approved is not let in by them — neither a delivery nor a DM — and the
    answer is a refusal with its reason, not an exception; an owner by id still is."""
    need(os.geteuid() == 0, "root, to run Hermit as uid 65534")
    as_user = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(as_user)
    need(python is not None, "a Python that uid 65534 can run this checkout with")
    assert python is not None
    with shared_dir("h1-admit-") as base:
        home = base / "home"
        home.mkdir()
        store = PairingStore(home)
        req = store.request("telegram", "default", "42", "Bob", None)
        assert req is not None
        store.approve("telegram", req.code)
        os.chown(home, 65534, 65534)
        done = subprocess.run([python, "-c", AS_NOBODY, str(home)], capture_output=True, text=True,
                              timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin", "HOME": str(home),
                                                         "PYTHONPATH": pythonpath()}, **as_user)
        assert done.returncode == 0, done.stderr
        contact, owner, dm = json.loads(done.stdout)
        assert "cannot be read" in contact and owner is None and "cannot be read" in dm
        assert store.pending() == []  # the other user issued no code into the first user's files


def test_an_owners_heartbeat_on_an_account_with_dms_disabled_is_held_and_resumes(tmp_path: Path) -> None:
    """A heartbeat whose alerts are not shared goes only to an owner, and the scheduler's copy let owners in
    always: with `dm_policy: disabled` the alert was still sent. Now it is kept in the transcript with the reason
    and the fix, and delivered again once DMs are on."""
    home = tmp_path / "home"

    def cfg(**account: Any) -> LoadedConfig:
        return build_config({"agents": {"defaults": {
            "timezone": "Europe/Berlin", "memory_search": {"provider": "none"},
            "heartbeat": {"every_minutes": 30, "target": {"channel": "telegram", "to": "1"}}}},
            "channels": {"telegram": {"accounts": {"default": {"owners": ["1"], **account}}}}}, StatePaths(home))

    beats = Beats(home, cfg(dm_policy="disabled"))
    lasts: list[dict[str, Any]] = []

    async def main() -> None:
        await beats.service.start(run_loop=False)
        try:
            lasts.append(await beats.beat())
            beats.loaded = cfg()
            beats.clock.now += timedelta(minutes=1)
            lasts.append(await beats.beat())
        finally:
            await beats.service.stop()

    asyncio.run(main())
    assert [(x["status"], x["delivered"]) for x in lasts] == [("alert", False), ("alert", True)], lasts
    assert [t.peer_id for t, _ in beats.channel.sent] == ["1"]
    reason = str(lasts[0]["reason"])
    assert "dm_policy is disabled on telegram/default" in reason and "not let in" in reason, reason
    assert "set channels.telegram.accounts.default.dm_policy to pairing or allowlist" in reason, reason
