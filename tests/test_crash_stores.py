"""kill -9 at every write step of Hermit's small stores: sessions.json, the pairing store, the cron job store,
hermit.env and the config file `hermit setup` edits (YAML whose comments must survive), and a first `hermit
setup` on an empty state dir.

Each operation runs in a forked child that SIGKILLs itself before its Kth write step (tests/crashharness.py), for
every K. After each kill: the file is the old one or the new one (never torn, never unparsable), nothing the user
had is gone, modes stay owner-only, and the next run works without repair and leaves no temp file behind. Played
as this process's uid and, as root, as uid 65534 (who owns a state dir in a container that drops root).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

import crashharness as ch
from hermit.channels.pairing import PairingStore
from hermit.config.envfile import read_env_file, set_env_values
from hermit.sessions.store import SessionStore
from hermit.workspace import ensure_workspace

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


uid, home = ch.uid, ch.home  # the fixtures: each test as this uid and (as root) as uid 65534


def _settled(home: Path, before: dict[str, bytes], after: dict[str, bytes], changed: str, what: str) -> None:
    """Every file is as before or as after the operation; `changed` is one of the two whole."""
    now = ch.files(home)
    for name, data in now.items():
        assert data in (before.get(name), after.get(name)), f"{what}: {name} is torn or foreign: {data[:200]!r}"
    assert now.get(changed) in (before.get(changed), after.get(changed)), f"{what}: {changed} lost"
    assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"


def test_sessions_json_update(home: Path, uid: int | None) -> None:
    sessions = home / "sessions"

    def setup() -> None:
        store = SessionStore(sessions, fsync=True)
        for n in range(3):
            store.get_or_create(f"agent:main:peer{n}")
        store.update("agent:main:peer1", chat_type="private label")

    ch.ok(setup, uid=uid)

    def op() -> None:
        SessionStore(sessions, clock=lambda: NOW).update("agent:main:peer2", chat_type="acknowledged")

    before = ch.files(home)
    sweep = ch.sweep(home, op, uid=uid)
    after = ch.files(home)
    for k, label in sweep.each():
        ch.kill(op, k, label, uid=uid)
        what = ch.describe(k, label)
        _settled(home, before, after, "sessions/sessions.json", what)

        def again() -> list[str | None]:
            store = SessionStore(sessions, clock=lambda: NOW)
            store.update("agent:main:peer2", chat_type="acknowledged")
            return [store.get(f"agent:main:peer{n}").chat_type for n in range(3)]  # type: ignore[union-attr]

        assert ch.ok(again, uid=uid).result == [None, "private label", "acknowledged"], what
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"
        assert not ch.loose_modes(home), what


def test_pairing_approve(home: Path, uid: int | None) -> None:

    def setup() -> str:
        store = PairingStore(home)
        req = store.request("telegram", "bot", "555", "Eve")
        assert req is not None
        return req.code

    code = ch.ok(setup, uid=uid).result

    def op() -> None:
        PairingStore(home).approve("telegram", code)

    sweep = ch.sweep(home, op, uid=uid)
    for k, label in sweep.each():
        ch.kill(op, k, label, uid=uid)
        what = ch.describe(k, label)

        def state() -> tuple[bool, bool]:
            store = PairingStore(home)
            return bool(store.pending("telegram")), "555" in store.approved_senders("telegram", "bot")

        pending, allowed = ch.ok(state, uid=uid).result
        assert not (pending and allowed), f"{what}: pending and let in at once (a deny would change nothing)"
        assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"

        def next_run() -> bool:  # the owner approves again, or the sender asks again and is approved
            store = PairingStore(home)
            if store.pending("telegram"):
                store.approve("telegram", code)
            elif "555" not in store.approved_senders("telegram", "bot"):
                req = store.request("telegram", "bot", "555", "Eve")
                assert req is not None
                store.approve("telegram", req.code)
            return "555" in store.approved_senders("telegram", "bot")

        assert ch.ok(next_run, uid=uid).result, what
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"


def test_cron_add(home: Path, uid: int | None) -> None:
    from hermit.scheduler.control import CronJobs
    from schedhelpers import config

    spec: dict[str, Any] = {"id": "first", "schedule": {"kind": "every", "every_ms": 3_600_000}, "message": "water plants"}

    def add(job_id: str) -> None:
        CronJobs(home, config(home), clock=lambda: NOW).add({**spec, "id": job_id})

    ch.ok(lambda: add("first"), uid=uid)
    before = ch.files(home)
    sweep = ch.sweep(home, lambda: add("second"), uid=uid)
    after = ch.files(home)
    for k, label in sweep.each():
        ch.kill(lambda: add("second"), k, label, uid=uid)
        what = ch.describe(k, label)
        _settled(home, before, after, "cron/jobs.json", what)

        def next_run() -> list[str]:
            control = CronJobs(home, config(home), clock=lambda: NOW)
            if not any(j.id == "second" for j in control.store.load().jobs):
                add("second")
            return [j.id for j in control.store.load().jobs]

        assert ch.ok(next_run, uid=uid).result == ["first", "second"], what
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"


def test_env_file_set(home: Path, uid: int | None) -> None:
    env = home / "hermit.env"

    def setup() -> None:
        set_env_values(env, {"ANTHROPIC_API_KEY": "sk-old-secret"})
        with env.open("a") as f:
            f.write("# my own note\nOTHER=kept\n")

    ch.ok(setup, uid=uid)
    before = ch.files(home)

    def op() -> None:
        set_env_values(env, {"TELEGRAM_BOT_TOKEN": "123:new-token", "ANTHROPIC_API_KEY": "sk-new-secret"})

    sweep = ch.sweep(home, op, uid=uid)
    after = ch.files(home)
    for k, label in sweep.each():
        ch.kill(op, k, label, uid=uid)
        what = ch.describe(k, label)
        _settled(home, before, after, "hermit.env", what)
        ch.ok(op, uid=uid)
        assert ch.ok(lambda: read_env_file(env).problems, uid=uid).result == [], what
        assert env.read_bytes() == after["hermit.env"], what
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"


YAML = """\
# my Hermit config: keep this comment
agents:
  defaults:
    timezone: Europe/Paris   # where I live
"""


def _setup_argv(home: Path) -> list[str]:
    return ["--home", str(home), "setup", "--non-interactive", "--no-check", "--channel", "telegram",
            "--token", "123456:ABCdefGHIjklMNOpqrSTUvwxYZ", "--owner", "42"]


def _run_setup(home: Path) -> int:
    import contextlib
    import io

    from hermit.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(_setup_argv(home))


@pytest.mark.parametrize("fresh", [False, True], ids=["existing-yaml", "fresh-home"])
def test_setup_channel(home: Path, uid: int | None, fresh: bool) -> None:
    """`hermit setup --channel telegram`: the token goes to hermit.env, the account into the YAML (comments kept);
    on a fresh state dir the config template and the workspace are made first."""
    if not fresh:
        (home / "hermit.yaml").write_text(YAML)
        os.chmod(home / "hermit.yaml", 0o600)
        if uid is not None:
            ch.chown_tree(home, uid)
    os.environ.pop("TELEGRAM_BOT_TOKEN", None)
    ch.warm(_run_setup)  # here first: a uid-65534 child cannot import what root's Python has not yet
    before = ch.files(home)
    sweep = ch.sweep(home, lambda: _run_setup(home), uid=uid)
    after = ch.files(home)
    for k, label in sweep.each(limit=6):
        ch.kill(lambda: _run_setup(home), k, label, uid=uid)
        what = ch.describe(k, label)
        assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"
        if not fresh:
            _settled(home, before, after, "hermit.yaml", what)
        assert ch.ok(lambda: _run_setup(home), uid=uid).result == 0, what
        config = yaml.safe_load((home / "hermit.yaml").read_text())
        assert config["channels"]["telegram"]["accounts"], what
        assert "123456:ABCdefGHIjklMNOpqrSTUvwxYZ" in (home / "hermit.env").read_text(), what
        if not fresh:
            assert (home / "hermit.yaml").read_text().startswith("# my Hermit config: keep this comment"), what
            assert ch.files(home) == after, what
        else:  # killed before the workspace was made: the first chat or gateway start makes it (AgentRuntime)
            ch.ok(lambda: bool(ensure_workspace(home / "workspace")), uid=uid)
            assert sorted(ch.files(home)) == sorted(after), what
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"
        assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"


def test_first_workspace(home: Path, uid: int | None) -> None:
    """The first start makes the workspace from templates; killed part-way, the next start must still write
    BOOTSTRAP.md (the first-run ritual), which it writes only into a brand-new workspace."""
    workspace = home / "workspace"

    def op() -> list[str]:
        return ensure_workspace(workspace).created

    ch.warm(ensure_workspace)
    sweep = ch.sweep(home, op, uid=uid)
    after = ch.files(home)
    assert "workspace/BOOTSTRAP.md" in after
    for k, label in sweep.each(limit=16):
        ch.kill(op, k, label, uid=uid)
        what = ch.describe(k, label)
        ch.ok(op, uid=uid)
        assert ch.files(home) == after, f"{what}: {sorted(set(after) - set(ch.files(home)))} missing"
        assert not ch.temps(home) and not ch.loose_modes(home), what


def test_cron_run_log_trim(home: Path, uid: int | None) -> None:
    """A run appended to a job's run log that has grown past its cap, so the log is trimmed to its last records."""
    from hermit.scheduler.store import RUN_LOG_KEEP, RUN_LOG_MAX_BYTES, JobStore, RunRecord

    def record(n: int) -> RunRecord:
        return RunRecord(f"run-{n:05d}", "daily", NOW.isoformat(), NOW.isoformat(), "ok", "schedule",
                         reply="x" * (RUN_LOG_MAX_BYTES // RUN_LOG_KEEP))

    def setup() -> None:
        store = JobStore(home)
        store.dir.mkdir(mode=0o700)
        store.runs_dir.mkdir(mode=0o700)
        count = RUN_LOG_KEEP + 10  # each line over 1/1000 of the cap: the next run trims the log
        with open(store.run_log_path("daily"), "w", encoding="utf-8") as f:
            f.writelines(record(n).to_json() + "\n" for n in range(count))
        os.chmod(store.run_log_path("daily"), 0o600)

    ch.ok(setup, uid=uid)
    total = len((home / "cron" / "runs" / "daily.jsonl").read_text().splitlines())

    def op() -> None:
        JobStore(home).append_run(record(total))

    sweep = ch.sweep(home, op, uid=uid)
    ids = [r["run_id"] for r in JobStore(home).runs("daily", limit=0)]
    assert ids[-1] == f"run-{total:05d}" and len(ids) == RUN_LOG_KEEP
    for k, label in sweep.each(also="store.py"):
        ch.kill(op, k, label, uid=uid)
        what = ch.describe(k, label)
        runs = JobStore(home).runs("daily", limit=0)
        assert all(r["status"] == "ok" for r in runs), f"{what}: a torn record"
        got = [r["run_id"] for r in runs]
        assert got in ([f"run-{n:05d}" for n in range(total)], [f"run-{n:05d}" for n in range(total + 1)], ids), what
        ch.ok(lambda: JobStore(home).append_run(record(total + 1)), uid=uid)
        runs = JobStore(home).runs("daily", limit=0)
        assert runs[-1]["run_id"] == f"run-{total + 1:05d}" and all(r["status"] == "ok" for r in runs), what
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"
        assert not ch.loose_modes(home), f"{what}: {ch.loose_modes(home)}"
