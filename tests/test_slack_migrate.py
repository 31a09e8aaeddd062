"""Slack sessions from before session keys named the workspace continue after the upgrade (channels/slack_migrate.py).

Real files throughout: a state dir with hermit.yaml, sessions made by the real SessionStore under the old keys,
notes with origin blocks, rooms and the accounts' workspace.json records; the migration renames what belongs to
one workspace for certain, leaves what two accounts could claim (and says so in `hermit doctor`), survives a
kill -9 at every step, and a second run changes nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

import crashharness as ch
from hermit.channels.slack import workspace_path
from hermit.channels.slack_migrate import journal_path, migrate
from hermit.config.load import LoadedConfig, load_config
from hermit.config.paths import StatePaths
from hermit.gateway.history import chat_history
from hermit.memory.policy.audience import audience_of_session
from hermit.memory.policy.provenance import Origin, origin_blocks, wrap
from hermit.sessions.lock import lock_path
from hermit.sessions.store import SessionStore
from hermit.sessions.transcript import read_transcript
from hermit.tools.rooms import room_slug

OWNER = "U0OWNER1"
TEAM_A, TEAM_B = "T0AAAA1", "T0BBBB2"
CONTACT_DM = "agent:main:slack:work:dm:U0CONT1"  # dm_scope main: a contact's key names the account
GROUP = "agent:main:slack:group:C0GRP1"
GROUP_THREAD = "agent:main:slack:group:C0GRP1:thread:1700000000.000100"
OWNER_DM = "agent:main:slack:work:dm:U0OWNER1"  # per-account-channel-peer: the owner's, stays bare
PEER_DM = "agent:main:slack:dm:U0PEER1"  # per-channel-peer: a contact's, names no account
NEW = {CONTACT_DM: f"agent:main:slack:work:dm:U0CONT1@{TEAM_A}", GROUP: f"agent:main:slack:group:C0GRP1@{TEAM_A}",
       GROUP_THREAD: f"agent:main:slack:group:C0GRP1@{TEAM_A}:thread:1700000000.000100",
       PEER_DM: f"agent:main:slack:dm:U0PEER1@{TEAM_A}"}
NOTE = "memory/2026-12-01.md"


def setup(home: Path, accounts: dict[str, dict[str, Any]], workspaces: dict[str, str]) -> LoadedConfig:
    cfg = {"agents": {"defaults": {"memory_search": {"provider": "none"}}},
           "channels": {"slack": {"accounts": accounts}}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    for account, team in workspaces.items():
        path = workspace_path(home, account)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"workspace": team}) + "\n", encoding="utf-8")
    return load_config(StatePaths(home))


def sessions(loaded: LoadedConfig, keys: list[str]) -> dict[str, str]:
    """One session (with a message of its own) under each key, a note of its audience and a room; key -> id."""
    agent = loaded.agent()
    store = SessionStore(agent.sessions_dir)
    ids = {}
    notes = ["# Notes\n"]
    for key in keys:
        rec = store.get_or_create(key).record
        store.open_transcript(rec).append_message({"role": "user", "content": f"SAID-IN {key}"})
        store.update(key, compaction_count=3)
        ids[key] = rec.session_id
        audience = audience_of_session(key)
        notes.append(wrap(f"kept for {audience}", Origin(key, channel="slack", audience=audience)))
        room = agent.sessions_dir.parent / "rooms" / room_slug(audience)
        room.mkdir(parents=True, exist_ok=True)
        (room / "plan.txt").write_text(f"ROOM OF {audience}", encoding="utf-8")
        lock_path(agent.sessions_dir, key).touch()
    (agent.workspace / "memory").mkdir(parents=True, exist_ok=True)
    (agent.workspace / NOTE).write_text("\n".join(notes), encoding="utf-8")
    return ids


def snapshot(loaded: LoadedConfig) -> dict[str, Any]:
    """Everything the migration may change, as it is on disk."""
    agent = loaded.agent()
    files = {}
    for base in (agent.sessions_dir, agent.sessions_dir.parent / "rooms", agent.workspace / "memory"):
        for p in sorted(base.rglob("*")):
            files[str(p)] = p.read_bytes() if p.is_file() else None
    return files


def audiences(loaded: LoadedConfig) -> list[str]:
    text = (loaded.agent().workspace / NOTE).read_text(encoding="utf-8")
    return [str(b.origin.audience) for b in origin_blocks(text)]


def test_one_workspace_every_old_contact_and_group_session_continues_under_its_new_key(tmp_path: Path) -> None:
    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}}, {"work": TEAM_A})
    ids = sessions(loaded, [CONTACT_DM, GROUP, GROUP_THREAD, OWNER_DM, PEER_DM])
    agent = loaded.agent()
    ended = ids[GROUP]  # the group's /new: an ended session of the key, and the current one
    current = SessionStore(agent.sessions_dir).new_session(GROUP).record
    SessionStore(agent.sessions_dir).open_transcript(current).append_message({"role": "user", "content": "AFTER /new"})
    ids[GROUP] = current.session_id

    report = migrate(loaded, tmp_path)

    store = SessionStore(agent.sessions_dir)
    for old, new in NEW.items():
        assert store.get(old) is None
        rec = store.get(new)
        assert rec is not None and rec.session_id == ids[old] and rec.key == new
        assert rec.compaction_count == (0 if old == GROUP else 3)  # the record itself moved, counters and all
        path = store.transcript_path(rec.session_id)
        said = "AFTER /new" if old == GROUP else f"SAID-IN {old}"
        assert read_transcript(path).header.session_key == new and said in path.read_text()
        assert not lock_path(agent.sessions_dir, old).exists()
    # The web app's history of the key: its current session and the ended one (each transcript names the key).
    assert "AFTER /new" in json.dumps(chat_history(store, NEW[GROUP], 10))
    assert f"SAID-IN {GROUP}" in json.dumps(chat_history(store, NEW[GROUP], 10, session_id=ended))
    assert store.get(NEW[GROUP]).previous_session_id == ended
    assert store.get(OWNER_DM) is not None and store.get(OWNER_DM).session_id == ids[OWNER_DM]
    assert len(report.moved) == 4 and not report.left and not report.waiting, report
    # The notes' audiences and the rooms follow: the group's and the contacts' (not the owner's).
    want = [audience_of_session(NEW.get(k, k)) for k in (CONTACT_DM, GROUP, GROUP_THREAD, OWNER_DM, PEER_DM)]
    assert audiences(loaded) == want
    assert "slack:group:C0GRP1@T0AAAA1" in want and "slack:dm:U0OWNER1" in want
    rooms = agent.sessions_dir.parent / "rooms"
    for old, new in NEW.items():
        assert (rooms / room_slug(audience_of_session(new)) / "plan.txt").read_text() == f"ROOM OF {audience_of_session(old)}"
    assert (rooms / room_slug("slack:dm:U0OWNER1")).is_dir()
    assert not journal_path(tmp_path).exists()

    # Once: a second run finds nothing and changes nothing.
    before = snapshot(loaded)
    again = migrate(loaded, tmp_path)
    assert not again.moved and not again.notes and not again.rooms and not again.left
    assert snapshot(loaded) == before


def test_two_workspaces_only_the_keys_naming_their_account_move_and_the_rest_is_left_and_said(tmp_path: Path) -> None:
    from hermit.cli.doctor_slack import slack_sessions_check
    from test_slack_binding_warning import doctor_ctx

    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}, "club": {}}, {"work": TEAM_A, "club": TEAM_B})
    ids = sessions(loaded, [CONTACT_DM, GROUP, PEER_DM])
    before = audiences(loaded)

    warned = slack_sessions_check(doctor_ctx(tmp_path))
    assert warned.status == "warn" and "1 Slack session" in warned.detail and GROUP in warned.detail, warned

    report = migrate(loaded, tmp_path)
    store = SessionStore(loaded.agent().sessions_dir)
    assert report.moved == [f"agent main: {CONTACT_DM} -> {NEW[CONTACT_DM]}"]
    assert store.get(NEW[CONTACT_DM]).session_id == ids[CONTACT_DM]
    for stays in (GROUP, PEER_DM):  # either workspace's: nothing guessed
        assert store.get(stays).session_id == ids[stays]
        assert any(stays in line and "different workspaces" in line for line in report.left), report.left
    assert audiences(loaded) == before  # `slack:dm:U0CONT1` could be a contact of either account too

    check = slack_sessions_check(doctor_ctx(tmp_path))
    assert check.status == "warn" and GROUP in check.detail and PEER_DM in check.detail, check
    assert "different workspaces" in check.detail and check.fix


def test_an_account_not_connected_yet_holds_back_what_it_could_claim_and_a_later_run_finishes(tmp_path: Path) -> None:
    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}, "club": {}}, {"work": TEAM_A})
    ids = sessions(loaded, [CONTACT_DM, GROUP])
    report = migrate(loaded, tmp_path)
    assert [m.split(" -> ")[0] for m in report.moved] == [f"agent main: {CONTACT_DM}"]
    assert any(GROUP in w and "club" in w and "not recorded yet" in w for w in report.waiting), report.waiting

    # club connects: its workspace is A's too. Now the group (and the audiences) are certain.
    setup(tmp_path, {"work": {"owners": [OWNER]}, "club": {}}, {"work": TEAM_A, "club": TEAM_A})
    report = migrate(loaded, tmp_path)
    store = SessionStore(loaded.agent().sessions_dir)
    assert store.get(NEW[GROUP]).session_id == ids[GROUP]
    assert audiences(loaded) == [audience_of_session(NEW[CONTACT_DM]), audience_of_session(NEW[GROUP])]


def test_a_new_key_that_has_a_session_already_is_not_overwritten(tmp_path: Path) -> None:
    loaded = setup(tmp_path, {"work": {}}, {"work": TEAM_A})
    ids = sessions(loaded, [GROUP, NEW[GROUP]])
    report = migrate(loaded, tmp_path)
    store = SessionStore(loaded.agent().sessions_dir)
    assert store.get(GROUP).session_id == ids[GROUP]
    assert store.get(NEW[GROUP]).session_id == ids[NEW[GROUP]]
    assert not report.moved and any("has a session of its own already" in x for x in report.left), report.left


def test_an_org_wide_install_is_never_guessed(tmp_path: Path) -> None:
    loaded = setup(tmp_path, {"work": {}}, {"work": "E0ORG1"})
    sessions(loaded, [CONTACT_DM, GROUP])
    before = snapshot(loaded)
    report = migrate(loaded, tmp_path)
    assert not report.moved and all("org-wide" in line for line in report.left) and report.left
    assert snapshot(loaded) == before


_KILLED_RUN = """
import os, signal, sys
from pathlib import Path
from hermit.channels.slack_migrate import migrate
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
home, at = Path(sys.argv[1]), int(sys.argv[2])
seen = []
def step(what):
    seen.append(what)
    if len(seen) == at:
        os.kill(os.getpid(), signal.SIGKILL)
migrate(load_config(StatePaths(home)), home, step=step)
print(len(seen))
"""


def _migrate_killed_at(home: Path, at: int) -> int:
    """What `_KILLED_RUN` does, for a forked child (tests/crashharness.py): the migration SIGKILLs itself at its
    `at`th step (0: never); the steps it made."""
    seen: list[str] = []

    def step(what: str) -> None:
        seen.append(what)
        if len(seen) == at:
            os.kill(os.getpid(), signal.SIGKILL)

    migrate(load_config(StatePaths(home)), home, step=step)
    return len(seen)


def test_kill_9_at_every_step_leaves_each_session_usable_and_a_rerun_finishes(tmp_path: Path) -> None:
    """Each kill point starts from one prepared state dir (an exact copy: modes, owners, the same session ids) and
    runs the migration in a forked child (a process with Hermit imported and its per-process caches cleared), so
    the killed run and the rerun are separate processes, as `kill -9` and a restart are."""
    keys = [CONTACT_DM, GROUP, GROUP_THREAD, PEER_DM]
    home = tmp_path / "home"
    home.mkdir()
    lk = setup(home, {"work": {"owners": [OWNER]}}, {"work": TEAM_A})
    ids = sessions(lk, keys)
    template = tmp_path / "before"
    ch.copy_tree(home, template)
    steps = ch.ok(lambda: _migrate_killed_at(home, 0)).result
    assert steps == 1 + 4 + 4 + 1 + 3  # journal, records, headers, the notes file, rooms (a group and its thread share one)
    whole_audiences = audiences(lk)
    rooms_dir = lk.agent().sessions_dir.parent / "rooms"
    whole_rooms = sorted(p.name for p in rooms_dir.iterdir() if p.is_dir())

    for at in range(1, steps + 1):
        ch.copy_tree(template, home)
        killed = ch.run(lambda: _migrate_killed_at(home, at), count=False)  # noqa: B023 - run before `at` changes
        assert killed.killed, (at, killed.status, killed.error)
        store = SessionStore(lk.agent().sessions_dir)
        for old in keys:  # usable: under the old key or the new one, the same session, its history readable
            rec = store.get(old) or store.get(NEW[old])
            assert rec is not None and rec.session_id == ids[old], (at, old)
            assert f"SAID-IN {old}" in store.transcript_path(rec.session_id).read_text(), (at, old)
        assert journal_path(home).exists()
        ch.ok(lambda: _migrate_killed_at(home, 0))
        assert not journal_path(home).exists()
        for old in keys:
            rec = store.get(NEW[old])
            assert rec is not None and rec.session_id == ids[old] and store.get(old) is None, (at, old)
            assert read_transcript(store.transcript_path(rec.session_id)).header.session_key == NEW[old]
        assert audiences(lk) == whole_audiences, at
        rooms = sorted(p.name for p in rooms_dir.iterdir() if p.is_dir())
        assert rooms == whole_rooms


def test_end_to_end_an_upgraded_gateway_continues_the_contact_and_group_conversations(tmp_path: Path) -> None:
    """`hermit gateway run` with the real Slack adapter (Socket Mode) against the fake Slack: sessions made under the
    old keys before the upgrade, no workspace recorded yet. The account records its workspace when it connects,
    the keys are renamed before it takes an event, and the contact's and the group's next turns carry what was
    said before (the model is sent the old history); the group's note is still the group's."""
    from channelhelpers import run
    from hermit.messages import AssistantMessage, TextPart, UserMessage
    from hermit.testing.fake_provider import FakeProvider
    from prochelpers import PROC_TIMEOUT
    from test_channel_ids_slack import TEAMS, bodies, dm, mention, replied, two_workspaces

    team = TEAMS["a"]
    store = SessionStore(StatePaths(tmp_path).sessions_dir("main"))
    old = {"agent:main:slack:a:dm:U0CONT1": "OLD-DM-CONTEXT: my dog is called Rex",
           "agent:main:slack:group:C77": "OLD-GROUP-CONTEXT: the launch moved to Friday"}
    for key, said in old.items():
        rec = store.get_or_create(key).record
        t = store.open_transcript(rec)
        t.append_message(UserMessage(said).to_dict())
        t.append_message(AssistantMessage((TextPart("noted"),), stop_reason="end_turn").to_dict())
    note = tmp_path / "workspace" / NOTE
    note.parent.mkdir(parents=True)
    note.write_text(wrap("the group's plan: ship on Friday", Origin("agent:main:slack:group:C77", channel="slack",
                                                                   audience="slack:group:C77")), encoding="utf-8")
    policies = {"a": {"dm_policy": "allowlist", "owners": [OWNER], "allow_from": ["U0CONT1"],
                      "group_policy": "allowlist", "groups": ["C77"]}}

    async def main() -> None:
        with FakeProvider([{"text": "agent says hi", "repeat": True}]) as provider:
            async with two_workspaces(tmp_path, provider, policies, "main") as d:
                await dm(d, "a", "U0CONT1", "NEW-DM: what is my dog called?")
                await replied(d, "a", "DU0CONT1", 1, "the contact's reply")
                sent = bodies(provider)
                assert "NEW-DM" in sent and "OLD-DM-CONTEXT" in sent, "the contact's conversation started anew"
                seen = len(provider.requests)
                await mention(d, "a", "U0MEMB1", "C77", "NEW-GROUP: when is the launch?")
                await replied(d, "a", "C77", 1, "the group's reply")
                later = bodies(provider, seen)
                assert "NEW-GROUP" in later and "OLD-GROUP-CONTEXT" in later, "the group's conversation started anew"
                assert "OLD-DM-CONTEXT" not in later

    run(main, timeout=PROC_TIMEOUT)
    assert store.get(f"agent:main:slack:a:dm:U0CONT1@{team}") is not None
    assert store.get("agent:main:slack:a:dm:U0CONT1") is None and store.get("agent:main:slack:group:C77") is None
    assert [b.origin.audience for b in origin_blocks(note.read_text())] == [f"slack:group:C77@{team}"]


UIDS = [None, 65534] if os.geteuid() == 0 else [None]


@pytest.mark.parametrize("uid", UIDS, ids=lambda u: "self" if u is None else f"uid{u}")
def test_as_the_user_running_it_root_or_not(uid: int | None) -> None:
    """The same run as root (containers, CI) and as a normal user: each file is opened as that user's own."""
    base = Path(tempfile.mkdtemp(prefix="h3-slack-migrate-", dir="/tmp"))
    try:
        home = base / "home"
        home.mkdir(mode=0o700)
        loaded = setup(home, {"work": {"owners": [OWNER]}}, {"work": TEAM_A})
        ids = sessions(loaded, [CONTACT_DM, GROUP])
        prefix: list[str] = []
        if uid is not None:
            for p in [base, *base.rglob("*")]:
                os.chown(p, uid, uid, follow_symlinks=False)
            prefix = ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups"]
        done = subprocess.run([*prefix, sys.executable, "-c", _KILLED_RUN, str(home), "0"], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        folder = loaded.agent().sessions_dir  # read as bytes: Hermit as root refuses another user's sessions
        index = json.loads((folder / "sessions.json").read_text())
        for old in (CONTACT_DM, GROUP):
            assert old not in index and index[NEW[old]]["sessionId"] == ids[old], index
            path = folder / f"{ids[old]}.jsonl"
            assert json.loads(path.read_text().split("\n")[0])["sessionKey"] == NEW[old]
            st = path.stat()
            assert (st.st_uid, st.st_mode & 0o777) == (os.geteuid() if uid is None else uid, 0o600)
        assert audiences(loaded) == [audience_of_session(NEW[CONTACT_DM]), audience_of_session(NEW[GROUP])]
    finally:
        shutil.rmtree(base)


def test_a_planted_transcript_naming_an_old_key_is_neither_read_nor_rewritten(tmp_path: Path) -> None:
    """A link (and, as root, another user's file) in the sessions folder whose header names the group's old key:
    Hermit never writes through a link nor into a file not its own, so it renames the group's own transcript
    and leaves those as they are."""
    loaded = setup(tmp_path, {"work": {}}, {"work": TEAM_A})
    ids = sessions(loaded, [GROUP])
    folder = loaded.agent().sessions_dir
    header = json.dumps({"type": "session", "id": "x", "timestamp": "", "cwd": "", "sessionKey": GROUP}) + "\n"
    target = tmp_path / "elsewhere.jsonl"
    target.write_text(header)
    (folder / "0000-link.jsonl").symlink_to(target)
    foreign = folder / "0000-foreign.jsonl"
    if os.geteuid() == 0:
        foreign.write_text(header)
        os.chown(foreign, 65534, 65534)
    report = migrate(loaded, tmp_path)
    assert SessionStore(folder).get(NEW[GROUP]).session_id == ids[GROUP]
    assert target.read_text() == header and (folder / "0000-link.jsonl").is_symlink()
    if os.geteuid() == 0:
        assert foreign.read_text() == header and foreign.stat().st_uid == 65534
    assert report.moved


_HOLD = """
import sys
import tempfile
from pathlib import Path
from hermit.sessions.lock import session_lock
with session_lock(Path(sys.argv[1]), sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_session_another_process_is_answering_in_is_left_for_the_next_run(tmp_path: Path) -> None:
    loaded = setup(tmp_path, {"work": {}}, {"work": TEAM_A})
    ids = sessions(loaded, [GROUP, PEER_DM])
    folder = loaded.agent().sessions_dir
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder), GROUP], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        report = migrate(loaded, tmp_path)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    store = SessionStore(folder)
    assert store.get(GROUP).session_id == ids[GROUP]
    assert store.get(NEW[PEER_DM]).session_id == ids[PEER_DM]
    assert any(GROUP in w and "next start" in w for w in report.waiting), report.waiting
    # The group's notes and room wait with it (its turn may be using the room).
    assert audiences(loaded) == ["slack:group:C0GRP1", audience_of_session(NEW[PEER_DM])]

    again = migrate(loaded, tmp_path)
    assert again.moved == [f"agent main: {GROUP} -> {NEW[GROUP]}"]
    assert audiences(loaded) == [audience_of_session(NEW[GROUP]), audience_of_session(NEW[PEER_DM])]


def test_the_owner_of_one_account_as_a_contact_of_another_continues_but_the_owners_notes_stay_theirs(
        tmp_path: Path) -> None:
    """Two accounts in one workspace; work lists U0OWNER1 as its owner, club does not. Their DMs to club were a
    contact's session (per account): it continues under the @team key. But `slack:dm:U0OWNER1` is also the
    audience of the owner's own DM sessions on work: those notes and that room are not moved."""
    loaded = setup(tmp_path, {"work": {"owners": [OWNER]}, "club": {}}, {"work": TEAM_A, "club": TEAM_A})
    as_contact = "agent:main:slack:club:dm:U0OWNER1"
    ids = sessions(loaded, [as_contact, OWNER_DM])
    report = migrate(loaded, tmp_path)
    store = SessionStore(loaded.agent().sessions_dir)
    assert store.get(f"{as_contact}@{TEAM_A}").session_id == ids[as_contact]
    assert store.get(OWNER_DM).session_id == ids[OWNER_DM]
    assert audiences(loaded) == ["slack:dm:U0OWNER1", "slack:dm:U0OWNER1"] and not report.notes and not report.rooms
    assert (loaded.agent().sessions_dir.parent / "rooms" / room_slug("slack:dm:U0OWNER1") / "plan.txt").exists()
