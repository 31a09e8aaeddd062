"""`hermit pairing list|approve|deny|revoke` against a temp state dir, and the doctor's access checks (owners,
and every route by which a non-owner could reach the main session)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermit.channels.access import AccessControl, PairingStore
from hermit.cli.main import main
from hermit.config.schema import ChannelsConfig
from prochelpers import PROC_TIMEOUT


def issue(home: Path, *senders: str) -> PairingStore:
    store = PairingStore(home)
    ac = AccessControl(ChannelsConfig.model_validate({"telegram": {"accounts": {"bot": {}}}}), store)
    for s in senders:
        assert ac.check("telegram", "bot", "dm", s, s, sender_name=f"User {s}").reply is not None
    return store


def test_list_and_approve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = issue(tmp_path, "100", "200")
    assert main(["--home", str(tmp_path), "pairing", "list"]) == 0
    out = capsys.readouterr().out
    codes = [r.code for r in store.pending()]
    assert "CHANNEL" in out and all(c in out for c in codes) and "100 (User 100)" in out
    assert "59 min" in out or "60 min" in out
    assert "no approved senders" in out

    assert main(["--home", str(tmp_path), "pairing", "list", "slack", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"pending": [], "approved": [], "pinned": []}
    assert main(["--home", str(tmp_path), "pairing", "list", "telegram", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["sender_id"] for r in listed["pending"]] == ["100", "200"] and listed["approved"] == []

    assert main(["--home", str(tmp_path), "pairing", "approve", "telegram", codes[0].lower()]) == 0
    out = capsys.readouterr().out
    assert "approved 100 (User 100) on telegram/bot as a contact (not an owner)" in out
    assert store.approved_senders("telegram", "bot") == {"100"}
    assert [r.sender_id for r in store.pending()] == ["200"]

    assert main(["--home", str(tmp_path), "pairing", "list"]) == 0
    out = capsys.readouterr().out
    pending, approved = out.split("Approved senders")
    assert "200 (User 200)" in pending and "100" not in pending
    assert "telegram  bot      100 (User 100)" in approved
    assert "hermit pairing revoke telegram 100 --account bot" in approved
    assert main(["--home", str(tmp_path), "pairing", "list", "--json"]) == 0
    [ann] = json.loads(capsys.readouterr().out)["approved"]
    assert (ann["channel"], ann["account_id"], ann["sender_id"], ann["sender_name"]) == \
        ("telegram", "bot", "100", "User 100")
    assert isinstance(ann["approved_at"], float)


def test_approve_says_what_a_contact_can_and_cannot_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hermit.yaml").write_text("channels:\n  telegram:\n    accounts:\n      bot: {owners: ['1']}\n")
    store = issue(tmp_path, "100")
    assert main(["--home", str(tmp_path), "pairing", "approve", "telegram", store.pending()[0].code]) == 0
    out = capsys.readouterr().out
    assert "their own session (agent:main:telegram:bot:dm:100); its tools run in the sandbox" in out
    assert "cannot: reach your main session, MEMORY.md or your owner-only notes, nor run commands outside " \
           "the sandbox" in out
    assert "add their id to channels.telegram.accounts.bot.owners" in out
    assert "WARNING" not in out


def test_approve_names_the_agent_and_says_discord_dms_skip_server_bindings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A member of the work server who DMs the bot reaches the agent Discord DMs route to (no DM carries a
    server), not the server's agent: the approval says which agent answers them and how to bind them."""
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  list: [{id: personal, default: true}, {id: work}]\n"
        "bindings: [{match: {channel: discord, guild_id: '111222333'}, agent_id: work}]\n"
        "channels:\n  discord:\n    accounts:\n      default: {owners: ['999']}\n")
    store = PairingStore(tmp_path)
    ac = AccessControl(ChannelsConfig.model_validate({"discord": {"accounts": {"default": {}}}}), store)
    assert ac.check("discord", "default", "dm", "4242", "4242", sender_name="Colleague").reply is not None
    assert main(["--home", str(tmp_path), "pairing", "approve", "discord", store.pending()[0].code]) == 0
    out = capsys.readouterr().out
    assert "talk to the assistant (agent personal) in their own session (agent:personal:discord:default:dm:4242)" \
        in out
    assert "Discord DMs carry no server, so the guild_id bindings (agent work) do not apply to them: their DMs " \
           "reach agent personal" in out
    assert '{match: {channel: discord, peer: {kind: dm, id: "4242"}}, agent_id: …}' in out


def test_approve_warns_when_the_config_shares_main_or_has_no_sandbox(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    session: {dangerously_share_main_session_with_contacts: true}\n"
        "    sandbox: {mode: 'off'}\n"
        "channels:\n  telegram:\n    accounts:\n      bot: {}\n")
    store = issue(tmp_path, "100")
    assert main(["--home", str(tmp_path), "pairing", "approve", "telegram", store.pending()[0].code]) == 0
    out = capsys.readouterr().out
    assert "in your MAIN session (agent:main:main), with MEMORY.md" in out and "their own session" not in out
    assert "cannot: reach your main session" not in out  # it used to promise this beside the warning
    assert "WARNING: agents main has session.dangerously_share_main_session_with_contacts: true, so they reach " \
           "your MAIN session" in out
    assert "WARNING: agents main has sandbox.mode: off" in out and "its tools are NOT sandboxed" in out
    assert "nor run commands outside the sandbox" not in out


def test_deny_and_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hermit.yaml").write_text("channels:\n  telegram:\n    accounts:\n      bot: {}\n")
    store = issue(tmp_path, "100", "200")
    first, second = store.pending()
    assert main(["--home", str(tmp_path), "pairing", "deny", "telegram", first.code]) == 0
    assert "denied 100 (User 100) on telegram/bot: no reply, and no new code before" in capsys.readouterr().out
    assert [r.sender_id for r in store.pending()] == ["200"]
    assert main(["--home", str(tmp_path), "pairing", "deny", "telegram", first.code]) == 1
    assert "was denied" in capsys.readouterr().err

    assert main(["--home", str(tmp_path), "pairing", "approve", "telegram", second.code]) == 0
    capsys.readouterr()
    assert main(["--home", str(tmp_path), "pairing", "revoke", "telegram", "tg:200", "--account", "bot"]) == 0
    assert "revoked 200 (User 200) on telegram/bot: their next message gets a new pairing code" in \
        capsys.readouterr().out
    assert store.approved() == []
    assert main(["--home", str(tmp_path), "pairing", "revoke", "telegram", "200"]) == 1
    err = capsys.readouterr().err
    assert "200 is not an approved sender on telegram" in err and "hermit pairing list telegram" in err


def test_approve_unknown_code_fails_with_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue(tmp_path, "100")
    assert main(["--home", str(tmp_path), "pairing", "approve", "telegram", "ZZZZZZZZ"]) == 1
    err = capsys.readouterr().err
    assert "no pending pairing request with code ZZZZZZZZ on telegram" in err
    assert "hint: check `hermit pairing list telegram`" in err


def doctor(home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor", "--json"], env=env, text=True,
                          capture_output=True, timeout=PROC_TIMEOUT)


def by_name(r: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    return {c["name"]: c for c in json.loads(r.stdout)}


def test_doctor_reports_bad_bindings_and_loose_credentials(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    memory_search: {provider: none}\n  list: [{id: main}, {id: work}]\n"
        "bindings:\n  - {match: {channel: slak}, agent_id: work}\n  - {match: {channel: slack}, agent_id: wrk}\n"
        "channels:\n  telegram:\n    accounts:\n      bot: {dm_policy: allowlist, allow_from: ['42']}\n"
        "  discord:\n    accounts:\n      pub: {dm_policy: open, allow_from: ['*']}\n")
    issue(tmp_path, "100")  # creates credentials/
    (tmp_path / "credentials").chmod(0o755)
    checks = by_name(doctor(tmp_path))
    assert checks["bindings"]["ok"] is False
    assert "unknown channel 'slak'" in str(checks["bindings"]["detail"])
    assert "unknown agent 'wrk' (did you mean 'work'?)" in str(checks["bindings"]["detail"])
    assert checks["access"]["status"] == "warn"
    assert "telegram/bot: owners 0, DMs allowlist (1 contact), groups allowlist (0) — no owners: only the web " \
           "chat and the CLI reach the main session" in str(checks["access"]["detail"])
    assert "discord/pub: open to anyone" in str(checks["access"]["detail"])
    assert checks["credentials"]["ok"] is False and "should be 700" in str(checks["credentials"]["detail"])
    assert "chmod 700" in str(checks["credentials"]["fix"])


def test_doctor_reports_star_outside_open_as_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(
        "channels:\n  telegram:\n    accounts:\n      bot: {dm_policy: pairing, allow_from: ['*']}\n")
    r = doctor(tmp_path)
    assert r.returncode == 1
    checks = by_name(r)
    assert checks["config"]["ok"] is False
    detail = str(checks["config"]["detail"])
    assert "channels.telegram.accounts.bot" in detail and "only accepted with dm_policy: open" in detail
    assert "hermit.yaml:4" in detail  # the line of the offending account
    assert checks["credentials"]["ok"] is True
    assert checks["bindings"]["status"] == "skip" and checks["access"]["status"] == "skip"


def test_doctor_warns_about_every_route_a_non_owner_has_to_main(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    memory_search: {provider: none}\n"
        "  list:\n    - {id: main, session: {dangerously_share_main_session_with_contacts: true},\n"
        "       heartbeat: {target: {channel: telegram, account: bot, to: '555'}}}\n"
        "    - {id: work, sandbox: {mode: 'off'}}\n"
        "channels:\n  telegram:\n    accounts:\n      bot: {owners: ['tg:1', '@Boss_Person']}\n")
    access = by_name(doctor(tmp_path))["access"]
    detail = str(access["detail"])
    assert access["status"] == "warn" and access["ok"] is True  # advice: doctor still passes
    assert "telegram/bot: owners 2, DMs pairing (0 contacts), groups allowlist (0)" in detail
    assert "no owners" not in detail
    assert "agents main: session.dangerously_share_main_session_with_contacts is true — contacts' DMs" in detail
    assert "agents main: heartbeat alerts (main-session text) would go to telegram/bot dm 555, who is not " \
           "listed under channels.telegram.accounts.bot.owners: they are not delivered" in detail
    assert "agents work: sandbox.mode is off — contacts' and groups' sessions run exec and file tools " \
           "unsandboxed" in detail
    assert "owner @boss_person is matched by username" in detail
    assert "only owners should reach the main session" in str(access["fix"])


def test_doctor_warns_of_a_main_session_cron_job_whose_replies_go_to_a_non_owner(tmp_path: Path) -> None:
    """The owner may aim a main-session job anywhere with `hermit cron add --share-main-text` (without it,
    it is refused: test_main_text_opt_in); like a heartbeat target, doctor then says who gets main-session
    text. A job aimed at the owner is quiet."""
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    memory_search: {provider: none}\n"
        "channels:\n  telegram:\n    accounts:\n      bot: {owners: ['1']}\n")
    env = {**os.environ, "HERMIT_HOME": str(tmp_path), "OMP_WAIT_POLICY": "PASSIVE"}
    for args in (["--name", "mine", "--announce", "telegram:bot:1"], ["--name", "theirs", "--announce",
                 "telegram:bot:2001", "--share-main-text"],
                 ["--name", "room", "--announce", "telegram:bot:-100", "--group", "--share-main-text"]):
        r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "cron", "add", "--every", "1h", "--main",
                            "--message", "what is new?", *args], env=env, text=True, capture_output=True,
                           timeout=PROC_TIMEOUT)
        assert r.returncode == 0, r.stderr
    access = by_name(doctor(tmp_path))["access"]
    detail = str(access["detail"])
    assert access["status"] == "warn"
    assert "its replies (main-session text) go to telegram/bot dm 2001, who is not listed under " \
           "channels.telegram.accounts.bot.owners (shared on purpose: --share-main-text)" in detail
    assert "its replies (main-session text) go to the group telegram/bot -100 (shared on purpose" in detail
    assert "(mine)" not in detail and detail.count("cron job") == 2


def test_doctor_access_is_quiet_for_a_safe_config(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    memory_search: {provider: none}\n"
        "    heartbeat: {target: {channel: telegram, account: bot, to: '1'}}\n"
        "channels:\n  telegram:\n    accounts:\n      bot: {owners: ['1'], allow_from: ['7']}\n")
    access = by_name(doctor(tmp_path))["access"]
    assert access["status"] == "ok"
    assert access["detail"] == "telegram/bot: owners 1, DMs pairing (1 contact), groups allowlist (0)"
