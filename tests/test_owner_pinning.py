"""An owner listed by @username whose name is freed and taken by someone else: the first sender seen with a
listed username is pinned to it, and another id presenting that name later is a stranger — never the owner,
never a listed group member. End to end through `hermit gateway run` (a subprocess) with the real Telegram
adapter against the fake Bot API and the fake model provider, the pin surviving a killed gateway, and the
`hermit pairing list` / `hermit doctor` CLI showing the pinned id to write into the config."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

from channeldrivers import TelegramDriver
from channelhelpers import run
from ciguard import need
from fakes.fake_telegram import FakeTelegram
from hermit.channels.access import AccessControl
from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths
from hermit.config.load import build_config
from hermit.testing.fake_provider import FakeProvider
from prochelpers import PROC_TIMEOUT, python_as, pythonpath, shared_dir
from test_channel_gateway import SECRET, Gateway, env_for, stack, until

OWNER, TAKER = "1001", "1002"  # the username's first holder, and who holds it after it was freed
NAME = "boss_person"
GROUP = "-100777"
CODE_RE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")
POLICIES = {"pair": {"dm_policy": "pairing", "owners": [f"@{NAME}"], "groups": [GROUP],
                     "group_allow_from": [f"@{NAME}"]}}


def dm(d: TelegramDriver, sender: str, text: str, username: str | None = NAME) -> None:
    d.fakes["pair"].push_message(chat_id=int(sender), text=text, username=username)


def in_group(d: TelegramDriver, sender: str, text: str) -> None:
    fake = d.fakes["pair"]
    fake.push_message(chat_id=int(GROUP), from_id=int(sender), chat_type="supergroup", username=NAME,
                      text=f"@{fake.username} {text}")


def hermit(home: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), *args],
                         capture_output=True, text=True, timeout=PROC_TIMEOUT)
    return out.stdout + out.stderr


def test_a_freed_username_taken_by_another_id_gets_nothing_of_the_owners(tmp_path: Path) -> None:
    script = [{"text": "agent says hi", "repeat": True}]

    async def main() -> None:
        with FakeProvider(script) as provider:
            async with stack(tmp_path, "telegram", provider, POLICIES) as (d, gw):
                assert isinstance(d, TelegramDriver)
                # The username's holder when the owner wrote the config: the owner, in the main session.
                dm(d, OWNER, "it's me")
                await until(lambda: d.texts("pair", OWNER), "the owner's reply")
                assert d.texts("pair", OWNER) == ["agent says hi"]
                assert SECRET in json.dumps(provider.requests[-1].body)  # MEMORY.md: the main session

                # The owner gave the name up and someone else took it: a stranger, with a pairing code.
                dm(d, TAKER, "TAKER-1: it's me, the boss; what do you know?", username=NAME.upper())
                await until(lambda: d.texts("pair", TAKER), "the taker's reply")
                [reply] = d.texts("pair", TAKER)
                assert CODE_RE.search(reply) and f"Your Telegram user id: {TAKER}" in reply
                assert len(provider.requests) == 1  # the model was never asked for them
                # In the allowed group, where only the listed name may talk to the bot, they are no member.
                in_group(d, TAKER, "TAKER-2: what do you know?")
                in_group(d, OWNER, "and in the group?")
                await until(lambda: d.texts("pair", GROUP), "the owner's group reply")
                await asyncio.sleep(1.0)  # the taker's message came first: it would have been answered by now
                assert d.texts("pair", GROUP) == ["agent says hi"] and len(provider.requests) == 2
                assert "and in the group?" in json.dumps(provider.requests[-1].body)
                assert "TAKER-" not in json.dumps([r.body for r in provider.requests])

                pins = tmp_path / "credentials" / "usernames.json"
                assert json.loads(pins.read_text())["pins"]["telegram"][f"@{NAME}"]["id"] == OWNER
                assert stat.S_IMODE(pins.stat().st_mode) == 0o600
                # A gateway killed and started again keeps the pin: the taker is still a stranger.
                assert gw.proc is not None
                gw.proc.send_signal(signal.SIGKILL)
                await asyncio.wait_for(gw.proc.wait(), PROC_TIMEOUT)
                gw.proc = (await Gateway(tmp_path, env_for(d)).start()).proc
                dm(d, TAKER, "TAKER-3: again, I am the owner")
                dm(d, OWNER, "still me")
                await until(lambda: len(d.texts("pair", OWNER)) == 2, "the owner's reply after the restart")
                await asyncio.sleep(1.0)
                assert len(d.texts("pair", TAKER)) == 1  # no second code within the hour, and no answer
                assert len(provider.requests) == 3 and "TAKER-" not in json.dumps([r.body for r in provider.requests])

        # `hermit pairing list` shows the taker's request as not the person the config names by that username.
        listed = hermit(tmp_path, "pairing", "list", "telegram")
        assert re.search(rf"{TAKER} \(Ann, @BOSS_PERSON\) \[NOT the @{NAME} pinned to {OWNER}\]", listed), listed
        # The warning names who, which pin, and the fix; once an hour per name in each gateway run, not once a
        # message (the taker's three messages were checked six times).
        stderr = (tmp_path / "gateway.stderr").read_text(errors="replace")
        warned = [line for line in stderr.splitlines() if f"presents the username @{NAME}" in line]
        assert len(warned) == 2, warned
        assert TAKER in warned[0] and f"pinned to {OWNER}" in warned[0]
        assert f"list their id {TAKER} under channels.telegram.accounts.pair.owners" in warned[0]

    run(main, timeout=PROC_TIMEOUT)


def test_concurrent_first_sightings_pin_one_id_and_the_file_is_never_torn(tmp_path: Path) -> None:
    """Two processes (the gateway and the CLI, or two gateways on a shared state dir) seeing the name at once:
    the pairing lock lets exactly one pin, and the other reads that pin, not its own."""
    code = ("import sys; from pathlib import Path; from hermit.channels.pairing import PairingStore; "
            "from hermit.channels.username_pins import UsernamePins; "
            "p = UsernamePins(PairingStore(Path(sys.argv[1]))); "
            "print(p.pin('telegram', '@boss_person', sys.argv[2], 'default').sender_id)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(3000 + i)], stdout=subprocess.PIPE,
                              text=True) for i in range(6)]
    from hermit.channels.username_pins import UsernamePins

    winners = {p.communicate(timeout=PROC_TIMEOUT)[0].strip() for p in procs}
    assert len(winners) == 1
    [pin] = UsernamePins(PairingStore(tmp_path)).all()
    assert pin.sender_id in winners and pin.username == "@boss_person"


def access(tmp_path: Path, **account: object) -> AccessControl:
    loaded = build_config({"channels": {"telegram": {"accounts": {"default": account}}}}, StatePaths(tmp_path))
    return AccessControl(loaded.config.channels, PairingStore(tmp_path))


def test_a_pins_file_that_cannot_be_read_matches_nobody_by_name_and_ids_still_work(tmp_path: Path) -> None:
    ac = access(tmp_path, owners=["@boss_person", "42"], dm_policy="allowlist")
    (tmp_path / "credentials").mkdir(mode=0o700)
    (tmp_path / "credentials" / "usernames.json").write_text("{torn", encoding="utf-8")
    assert not ac.is_owner("telegram", "default", "1001", NAME)  # fails closed: no new pin over a bad file
    assert not ac.check("telegram", "default", "dm", "1001", "1001", sender_username=NAME).allowed
    assert ac.is_owner("telegram", "default", "42")
    assert (tmp_path / "credentials" / "usernames.json").read_text() == "{torn"


# The gateway's side as another uid: access control seeing the owner's name from two ids, in turn.
AS_NOBODY = """
import json, sys
from pathlib import Path
from hermit.channels.access import AccessControl, PairingStore
from hermit.config.schema import ChannelsConfig
ac = AccessControl(ChannelsConfig.model_validate({"telegram": {"accounts": {"bot": {"owners": ["@boss_person"]}}}}),
                   PairingStore(Path(sys.argv[1])))
print(json.dumps([ac.is_owner("telegram", "bot", i, "boss_person") for i in ("1001", "1002", "1001")]))
"""


def test_pins_work_as_an_unprivileged_uid_and_stay_owner_only(tmp_path: Path) -> None:
    """Hermit run by uid 65534 (the tests run as root in CI) writes its pins owner-only and reads them back."""
    need(os.geteuid() == 0, "root, to run Hermit as uid 65534")
    as_user = {"user": 65534, "group": 65534, "extra_groups": []}
    python = python_as(as_user)
    need(python is not None, "a Python that uid 65534 can run this checkout with")
    assert python is not None
    with shared_dir("h6-pins-") as base:
        home = base / "home"
        home.mkdir()
        os.chown(home, 65534, 65534)
        done = subprocess.run([python, "-c", AS_NOBODY, str(home)], capture_output=True, text=True,
                              timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin", "HOME": str(home),
                                                         "PYTHONPATH": pythonpath()}, **as_user)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == [True, False, True]
        f = home / "credentials" / "usernames.json"
        assert f.stat().st_uid == 65534 and stat.S_IMODE(f.stat().st_mode) == 0o600
        assert stat.S_IMODE(f.parent.stat().st_mode) == 0o700


def test_a_listed_username_is_pinned_from_the_first_sender_the_adapter_reports(tmp_path: Path) -> None:
    """Without the gateway: the real adapter's message, then access control, then `hermit pairing list` and
    `hermit doctor` naming the pinned id to write into the config."""
    (tmp_path / "hermit.yaml").write_text(
        "channels:\n  telegram:\n    accounts:\n      default:\n        owners: ['@Boss_Person']\n", encoding="utf-8")
    ac = access(tmp_path, owners=["@Boss_Person"])

    async def main() -> None:
        from channelhelpers import FAST, QueueSink
        from hermit.channels.telegram import TelegramChannel

        fake = await FakeTelegram().start()
        cfg = ac.channels.telegram.accounts["default"].model_copy(update={"api_base": fake.base_url,
                                                                         "poll_timeout_seconds": 1})
        ch = TelegramChannel("default", cfg, fake.token, state_dir=tmp_path / "s", inbox_dir=tmp_path / "inbox",
                             policy=FAST)
        sink = QueueSink()
        await ch.start(sink)
        try:
            fake.push_message(chat_id=31, text="hi", username="boss_person")
            fake.push_message(chat_id=32, text="hi", username="Boss_Person")
            first, second = await sink.next(), await sink.next()
        finally:
            await ch.stop()
            await fake.stop()
        assert ac.is_owner(first.channel, first.account_id, first.sender_id, first.sender_username)
        assert not ac.is_owner(second.channel, second.account_id, second.sender_id, second.sender_username)

    run(main)
    listed = hermit(tmp_path, "pairing", "list", "telegram")
    assert re.search(r"telegram\s+@boss_person\s+31\b", listed), listed
    channels = hermit(tmp_path, "channels", "list")
    assert "owners: @boss_person (pinned to 31)" in channels, channels
    doctor = hermit(tmp_path, "doctor")
    assert "owner @boss_person is pinned to id 31" in doctor, doctor
    assert "write 31 into channels.telegram.accounts.default.owners" in doctor, doctor


def test_a_job_aimed_at_the_pinned_id_is_refused_with_the_way_to_deliver_there(tmp_path: Path) -> None:
    """Delivery targets match owners by id only (a name can change hands): a main-session job aimed at the id an
    owner's @username is pinned to is still not the owner's, and the refusal says which line makes it so."""
    from hermit.scheduler.targets import not_the_owner

    loaded = build_config({"channels": {"telegram": {"accounts": {"default": {"owners": ["@Boss_Person"]}}}}},
                          StatePaths(tmp_path))
    ac = AccessControl(loaded.config.channels, PairingStore(tmp_path))
    assert ac.is_owner("telegram", "default", "31", "boss_person")  # pinned: 31
    risk = not_the_owner(loaded, "main", "telegram", "default", "dm", "31")
    assert risk is not None and "not listed under channels.telegram.accounts.default.owners" in risk
    assert "the owner @boss_person is pinned to: write 31 into those owners" in risk
    assert "pinned" not in (not_the_owner(loaded, "main", "telegram", "default", "dm", "32") or "")


def test_discord_usernames_are_pinned_too_and_each_list_shares_the_pin(tmp_path: Path) -> None:
    loaded = build_config({"channels": {"discord": {"accounts": {"default": {
        "owners": ["@ann.smith"], "allow_from": ["@bob_b"], "dm_policy": "allowlist"}}}}}, StatePaths(tmp_path))
    ac = AccessControl(loaded.config.channels, PairingStore(tmp_path))

    def dm(sender: str, username: str) -> bool:
        return ac.check("discord", "default", "dm", sender, sender, sender_username=username).allowed

    assert dm("600000000000000001", "ann.smith") and dm("600000000000000002", "bob_b")
    assert not dm("600000000000000003", "Ann.Smith") and not dm("600000000000000004", "bob_b")
    assert not ac.is_owner("discord", "default", "600000000000000002", "ann.smith")  # bob is no owner by her name
    assert ac.is_owner("discord", "default", "600000000000000001", "ann.smith")


def test_unpin_lets_the_next_sender_with_the_name_be_pinned(tmp_path: Path) -> None:
    """The owner's way out when the wrong id was pinned first (or the name really moved to their new account)."""
    (tmp_path / "hermit.yaml").write_text(
        "channels:\n  telegram:\n    accounts:\n      default:\n        owners: ['@boss_person']\n", encoding="utf-8")
    ac = access(tmp_path, owners=["@boss_person"])
    assert ac.is_owner("telegram", "default", "666", "boss_person")  # someone else got there first
    assert not ac.is_owner("telegram", "default", "31", "boss_person")
    out = hermit(tmp_path, "pairing", "unpin", "telegram", "@Boss_Person")
    assert "unpinned @boss_person on telegram (it was 666)" in out, out
    assert ac.is_owner("telegram", "default", "31", "boss_person")
    assert not ac.is_owner("telegram", "default", "666", "boss_person")
    assert "is not pinned on telegram" in hermit(tmp_path, "pairing", "unpin", "telegram", "@nobody_here")
