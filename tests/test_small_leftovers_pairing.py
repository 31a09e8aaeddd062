"""`hermit pairing revoke` names the scheduled jobs aimed at the contact it revokes (small-leftovers 2).

Since a job aimed at someone no longer let in is skipped (scheduler/targets.py `not_let_in`), revoking a contact
quietly stops the jobs that deliver to them; the owner learned it only from `cron list` or `doctor` later. Through
the real CLI over real config, job and pairing files: `pairing revoke`, what is asserted, runs as a subprocess; the
jobs it finds are set up by `hermit cron add` called in this process (the same CLI code, without a Python start
per job).
"""

from __future__ import annotations

from pathlib import Path

from hermit.channels.pairing import PairingStore
from hermit.cli.main import main
from test_cron_cli import hermit, write_config

OWNERS = {"owners": ["1"], "groups": ["-100555"]}


def approve(home: Path, sender: str) -> None:
    store = PairingStore(home)
    req = store.request("telegram", "default", sender, "Bob", None)
    assert req is not None
    store.approve("telegram", req.code)


def add(home: Path, job_id: str, to: str, *more: str) -> None:
    assert main(["--home", str(home), "cron", "add", "--id", job_id, "--every", "1h", "-m", "plan",
                 "--announce", to, *more]) == 0


def test_revoke_names_the_jobs_aimed_at_them_that_will_be_skipped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, channels={"telegram": {"accounts": {"default": OWNERS, "work": {"owners": ["1"]}}}})
    for sender in ("42", "43"):
        approve(home, sender)
    add(home, "plan", "telegram:42", "--name", "Bob's plan")
    add(home, "second", "telegram:default:42")
    add(home, "off", "telegram:42", "--disabled")        # never runs: nothing to skip
    add(home, "carol", "telegram:43")                     # someone else, still let in
    add(home, "owner", "telegram:1")                      # the owner
    add(home, "group", "telegram:-100555", "--group")     # a group of the same account
    add(home, "elsewhere", "telegram:work:42")            # another account's 42, not revoked there

    r = hermit(home, "pairing", "revoke", "telegram", "42", "--account", "default")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("revoked 42 (Bob) on telegram/default") and "new pairing code" in lines[0], r.stdout
    assert lines[1].startswith("2 scheduled jobs aimed at them will be skipped until they are approved again: "
                               "plan (Bob's plan), second (re-aim one with `hermit cron edit"), r.stdout
    assert len(lines) == 2, r.stdout

    # Another contact: their own jobs, not the ones already held for 42.
    add(home, "only", "telegram:43")
    r = hermit(home, "pairing", "revoke", "telegram", "43")
    assert r.returncode == 0, r.stderr
    assert "\n2 scheduled jobs aimed at them will be skipped until they are approved again: carol, only (" in \
        r.stdout, r.stdout



def test_revoke_says_nothing_of_jobs_when_they_are_still_let_in_or_have_none(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, channels={"telegram": {"accounts": {"default": {"owners": ["1"], "allow_from": ["42"]}}}})
    approve(home, "42")
    approve(home, "43")
    add(home, "plan", "telegram:42")  # allow_from still lets 42 in: the job keeps delivering
    r = hermit(home, "pairing", "revoke", "telegram", "42")
    assert r.returncode == 0 and "allow_from" in r.stdout and "scheduled job" not in r.stdout, r.stdout
    r = hermit(home, "pairing", "revoke", "telegram", "43")  # no job aimed at them
    assert r.returncode == 0 and r.stdout.startswith("revoked") and "scheduled job" not in r.stdout, r.stdout


def test_one_job_is_said_in_the_singular(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, channels={"telegram": {"accounts": {"default": {"owners": ["1"]}}}})
    approve(home, "42")
    add(home, "plan", "telegram:42")
    r = hermit(home, "pairing", "revoke", "telegram", "42")
    assert r.returncode == 0, r.stderr
    assert "\n1 scheduled job aimed at them will be skipped until they are approved again: plan (" in r.stdout, \
        r.stdout
