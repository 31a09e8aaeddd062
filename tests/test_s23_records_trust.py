"""Session 23, t5: the records a gateway trusts across restarts fail closed, and are checked at every reload.

- An owner id added live to a running account whose agent's recorded owners are all gone (the family bot's owner
  replaced by a stranger) was let in at once: gateway/agent_heirs.py asked only at start, and the reload's record
  then made the stranger "recorded", so the next start let them in too. Now the live reload refuses it, and `hermit
  channels accept-routes` lists and accepts it.
- `credentials/accounts.json` (which bot each account is) and `agents/workspaces.json` (which workspace each agent
  used) damaged — bad JSON, truncated by a crash, a symlink, another user's — or deleted on a state dir a gateway
  ran on read as "no record": the start adopted whatever hermit.yaml said. Now the start is refused, naming the file
  and `hermit channels accept-routes`, which records the config after the owner's yes. Writes are atomic: a writer
  killed at any point leaves a record that is trusted.
- `hermit channels accept-routes` between a start's check and its record write: the start wrote its own routes over
  the accepted ones. Now it writes only over the record its check read.
- `<state>/channels` made a symlink was followed; now refused.

Real state dirs and configs, the real loader, router and LiveConfig/LiveAccess the gateway uses, real `hermit`
processes; the file cases as root and as uid 65534.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hermit.channels import account_identity
from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths, load_config, workspaces_check
from hermit.errors import ConfigError
from hermit.gateway import owner_routes
from hermit.gateway.live_config import LiveAccess, LiveConfig
from prochelpers import PROC_TIMEOUT, python_as, pythonpath
from test_audit21_reaudit_config_routes import config, save, started

TOKEN = {"TG_FAM": "11:secret-of-the-family-bot"}
NOTE = "FAMILY-SECRET-77"


def _home(base: Path) -> Path:
    home = base / "home"
    (home / "family-ws").mkdir(parents=True)
    os.chmod(home, 0o700)
    (home / "family-ws" / "MEMORY.md").write_text(f"# Memory\n\n{NOTE}\n", encoding="utf-8")
    return home


def _cfg(home: Path, **kwargs: Any) -> dict[str, Any]:
    cfg = config(home, **kwargs)
    fam = cfg["channels"]["telegram"]["accounts"].get("family")
    if fam is not None:
        fam["token_env"] = "TG_FAM"
    return cfg


def accept_routes(home: Path, *extra: str, answer: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(TOKEN, HERMIT_HOME=str(home), HOME=str(home.parent / "user"), OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "channels", "accept-routes", *extra],
                          capture_output=True, text=True, env=env, timeout=PROC_TIMEOUT, input=answer)


# ---- 1. an owner new to an agent whose owners are gone: refused live too ------------------------------------

def test_an_owner_put_live_in_place_of_an_agents_gone_owners_is_refused_at_once(tmp_path: Path) -> None:
    home = _home(tmp_path)
    first = started(home, _cfg(home))  # the family bot, its owner 3003, the family agent holding a MEMORY.md
    live = LiveConfig(first)
    live.listen(lambda new: owner_routes.record(home, new, live.started))  # as cli/gateway.py cmd_run does
    access = LiveAccess(live, PairingStore(home), clock=lambda: 0.0)
    assert access.is_owner("telegram", "family", "3003", None)
    # The owner's second id joins while 3003 stays: applied at once (the guard).
    save(home, _cfg(home, family_owners=("3003", "3004")))
    assert access.is_owner("telegram", "family", "3004", None)
    # Live: the family bot's owners replaced by a stranger, 5005.
    save(home, _cfg(home, family_owners=("5005",)))
    with pytest.raises(ConfigError, match="telegram/family/5005 \\(new to agent family"):
        live.current()
    assert not access.is_owner("telegram", "family", "5005", None)  # failed closed: not let in
    recorded = json.loads(owner_routes.path_of(home).read_text())
    assert "telegram/family/5005" not in recorded  # and not recorded as the family agent's owner by the reload
    with pytest.raises(ConfigError, match="new to agent family"):
        owner_routes.check_start(home, load_config(StatePaths(home)))  # the next start refuses it as well
    # The way out: accept-routes lists it and, after yes, records it.
    no = accept_routes(home, answer="n\n")
    assert no.returncode == 1 and "telegram/family/5005 (new to agent family" in no.stdout, no.stdout + no.stderr
    yes = accept_routes(home, answer="y\n")
    assert yes.returncode == 0, yes.stdout + yes.stderr
    owner_routes.check_start(home, load_config(StatePaths(home)))


# ---- 2. the two records fail closed --------------------------------------------------------------------------

RECORDS = {"accounts": ("credentials", "accounts.json"), "workspaces": ("agents", "workspaces.json")}
DAMAGE = ["bad JSON", "truncated", "not the record", "a symlink", "another user's", "missing"]


def _ran(home: Path) -> None:
    """A gateway ran here: routes and workspaces recorded at its start, the family bot's identity recorded when its
    access was built, a sender approved on it."""
    loaded = started(home, _cfg(home))
    workspaces_check.record(loaded.agents, loaded.paths)  # as cli/gateway.py cmd_run does at start
    account_identity.retire_changed(PairingStore(home), loaded, TOKEN)
    _approve(home)


def _approve(home: Path) -> None:
    store = PairingStore(home)
    store.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    store.allow_file("telegram", "family").write_text('{"senders": ["4004"]}', encoding="utf-8")


def damage_record(home: Path, which: str, damage: str) -> Path:
    path = home.joinpath(*RECORDS[which])
    text = path.read_text(encoding="utf-8")
    if damage == "bad JSON":
        path.write_text(text.replace(":", ";", 1), encoding="utf-8")
    elif damage == "truncated":
        path.write_text(text[: len(text) // 2], encoding="utf-8")  # what a non-atomic write killed midway leaves
    elif damage == "not the record":
        path.write_text("[]", encoding="utf-8")
    elif damage == "a symlink":
        elsewhere = home.parent / "elsewhere.json"
        elsewhere.write_text(text, encoding="utf-8")
        path.unlink()
        path.symlink_to(elsewhere)
    elif damage == "another user's":
        if os.geteuid() == 0:
            os.chown(path, 65534, 65534)
        else:  # as an ordinary user: someone else's file is what a link to theirs reads as
            path.unlink()
            path.symlink_to("/etc/hostname")
    else:
        path.unlink()
    return path


def records_scenario(base: Path, which: str, damage: str) -> None:
    home = _home(base)
    _ran(home)
    loaded = load_config(StatePaths(home))
    owner_routes.check_start(home, loaded)  # the control: nothing to refuse
    path = damage_record(home, which, damage)
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, loaded)
    assert str(path) in refused.value.message, refused.value.message
    assert "hermit channels accept-routes" in (refused.value.hint or ""), refused.value.hint
    if damage != "missing":  # damaged, it is not written over by what a reload records (adopting hermit.yaml)
        owner_routes.record(home, loaded)
        with pytest.raises(ConfigError):
            owner_routes.check_start(home, loaded)
    r = accept_routes(home, "--yes")
    assert r.returncode == 0 and str(path) in r.stdout, r.stdout + r.stderr
    owner_routes.check_start(home, loaded)  # recorded after the owner's review
    assert path.is_file() and not path.is_symlink() and path.stat().st_uid == os.geteuid()
    assert (path.stat().st_mode & 0o777) == 0o600
    data = json.loads(path.read_text(encoding="utf-8"))
    if which == "accounts":
        assert data["accounts"]["telegram/family"] == account_identity.identity(
            "telegram", "family", loaded.config.channels.accounts_of("telegram")["family"], TOKEN)
    else:
        assert os.path.realpath(home / "family-ws") in data["workspaces"]["family"]


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("which", sorted(RECORDS))
def test_a_damaged_or_lost_record_refuses_the_start_until_accepted(tmp_path: Path, which: str, damage: str) -> None:
    records_scenario(tmp_path, which, damage)


def test_a_genuinely_first_start_still_adopts(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _approve(home)  # approved by `hermit pairing approve` before any gateway ran
    loaded = save(home, _cfg(home))
    owner_routes.check_start(home, loaded)  # no record of any kind: the first start
    account_identity.retire_changed(PairingStore(home), loaded, {})  # as its access is built: no token set yet
    owner_routes.record(home, loaded)
    owner_routes.check_start(home, loaded)  # and the next one, with the records the first wrote


def test_a_state_dir_from_before_the_records_upgrades_without_a_refusal(tmp_path: Path) -> None:
    """A state dir an s21 gateway ran on (its routes record and approvals, but neither record: that version wrote
    none) is not "a record lost": the first start of this version adopts both and records them, as a first start
    does. A record lost after that (its sibling written by the same start is there) is still refused."""
    home = _home(tmp_path)
    _ran(home)
    for which in RECORDS:
        home.joinpath(*RECORDS[which]).unlink()  # as s21 left it: routes and approvals only
    loaded = load_config(StatePaths(home))
    owner_routes.check_start(home, loaded)  # adopted, not refused
    workspaces_check.record(loaded.agents, loaded.paths)  # what the start then records
    account_identity.retire_changed(PairingStore(home), loaded, TOKEN)
    owner_routes.check_start(home, loaded)
    lost = home.joinpath(*RECORDS["workspaces"])
    lost.unlink()
    with pytest.raises(ConfigError) as refused:
        owner_routes.check_start(home, loaded)
    assert str(lost) in refused.value.message


def test_a_reload_is_refused_while_a_record_is_damaged(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _ran(home)
    live = LiveConfig(load_config(StatePaths(home)))
    damage_record(home, "workspaces", "truncated")
    save(home, _cfg(home, family_owners=("3003", "3004")))
    with pytest.raises(ConfigError, match="workspaces.json"):
        live.current()


KILLER = """
import sys
from pathlib import Path
from hermit.channels import account_identity
from hermit.channels.pairing import PairingStore
from hermit.config import StatePaths, load_config
from hermit.gateway import owner_routes
home = Path(sys.argv[1])
loaded = load_config(StatePaths(home))
store = PairingStore(home)
n = 0
while True:
    n += 1
    print(n, flush=True)
    owner_routes.accept(home, loaded)  # the routes and the workspaces, as a start records them
    account_identity.retire_changed(store, loaded, {"TG_FAM": f"{11 + n % 2}:x"})  # another bot each time
"""


def test_a_writer_killed_at_any_point_leaves_a_record_that_is_trusted(tmp_path: Path) -> None:
    home = _home(tmp_path)
    _ran(home)
    loaded = load_config(StatePaths(home))
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    for kill_after in range(1, 16):
        proc = subprocess.Popen([sys.executable, "-c", KILLER, str(home)], stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        for _ in range(kill_after):  # the writer says each write before it makes it: killed inside one
            assert proc.stdout.readline(), "the writer ended"
        proc.send_signal(signal.SIGKILL)
        proc.wait(PROC_TIMEOUT)
        proc.stdout.close()
        owner_routes.check_start(home, loaded)  # both records still trusted: the old one or the new one


# ---- 3. accept-routes between a start's check and its record write ------------------------------------------

def test_routes_accepted_while_a_gateway_starts_are_not_written_over(tmp_path: Path) -> None:
    home = _home(tmp_path)
    started(home, _cfg(home))
    v1 = load_config(StatePaths(home))
    seen = owner_routes.check_start(home, v1)  # a gateway starting on v1: its check passed, runtimes building
    v2 = save(home, _cfg(home, family=False))  # meanwhile the owner removes the family agent…
    r = accept_routes(home, "--yes")  # …and accepts the relative's move to main
    assert r.returncode == 0, r.stdout + r.stderr
    accepted = owner_routes.path_of(home).read_bytes()
    if "seen" in inspect.signature(owner_routes.record).parameters:
        owner_routes.record(home, v1, seen=seen)  # the start's own write, as cli/gateway.py cmd_run makes it
    else:  # the tree before the fix
        owner_routes.record(home, v1)
    assert owner_routes.path_of(home).read_bytes() == accepted
    owner_routes.check_start(home, v2)  # the next start keeps what the owner accepted


# ---- 4. <state>/channels made a symlink --------------------------------------------------------------------

def link_scenario(base: Path) -> None:
    home = _home(base)
    started(home, _cfg(home))
    elsewhere = base / "elsewhere"  # a folder someone else could write, the record gone from it
    shutil.move(str(home / "channels"), str(elsewhere))
    (elsewhere / owner_routes.FILE).unlink()
    (home / "channels").symlink_to(elsewhere)
    moved = save(home, _cfg(home, family=False))  # the family agent removed: 3003 would reach main's main session
    with pytest.raises(ConfigError, match="symlink") as refused:
        owner_routes.check_start(home, moved)
    assert str(owner_routes.path_of(home)) in refused.value.message
    r = accept_routes(home, "--yes")
    assert r.returncode != 0 and "symlink" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not (elsewhere / owner_routes.FILE).exists()  # nothing written where the link points


def test_a_channels_folder_made_a_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    link_scenario(tmp_path)


# ---- the file cases as an ordinary user ----------------------------------------------------------------------

AS_USER = """
import sys
from pathlib import Path
sys.path[:0] = sys.argv[2].split(":")
import test_s23_records_trust as t
base = Path(sys.argv[1])
for which in sorted(t.RECORDS):
    for damage in t.DAMAGE:
        t.records_scenario(base / f"{which}-{damage.replace(' ', '_')}", which, damage)
t.link_scenario(base / "link")
print("all held")
"""


def test_the_file_cases_as_uid_65534(tmp_path: Path) -> None:
    user = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    python = python_as(user)
    assert python is not None, "a Python that can import this checkout as uid 65534"
    base = Path("/tmp") / f"t5-s23-{os.getpid()}-{tmp_path.name}"
    base.mkdir(mode=0o755)
    try:
        if user:
            os.chown(base, 65534, 65534)
        path = os.pathsep.join([str(Path(__file__).parent), pythonpath()])
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "HOME": str(base), "CI": os.environ.get("CI", "")}
        done = subprocess.run([python, "-c", AS_USER, str(base), path], capture_output=True, text=True,
                              timeout=PROC_TIMEOUT * 6, env=env, **user)
        assert done.returncode == 0 and "all held" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_running_gateway_refuses_a_stranger_put_in_place_of_the_family_bots_owner(tmp_path: Path) -> None:
    """End to end: a real `hermit gateway run`, the family bot on a fake Bot API; its owner (the relative) replaced
    by a stranger in hermit.yaml while the gateway runs. The stranger's DM is not let in (the model is never asked
    with the family's MEMORY.md); the relative, put back, is answered again."""
    from channelhelpers import run
    from hermit.testing.fake_provider import FakeProvider
    from test_channel_gateway import Gateway, env_for, until
    from test_s22_accounts_identity import dm, driver_with
    from test_s22_accounts_workspaces import save as save_yaml

    home = tmp_path / "home"
    home.mkdir()
    d = driver_with("1:TOKENONE")
    relative, stranger = "2002", "4004"

    async def main() -> tuple[list[str], list[str], str]:
        with FakeProvider([{"text": "agent says hi", "repeat": True}]) as provider:
            await d.start()
            try:
                fam = {"api_base": d.fakes["bot1"].base_url, "poll_timeout_seconds": 1, "token_env": "TG_BOT1",
                       "dm_policy": "allowlist"}
                agents = [{"id": "main", "default": True}, {"id": "family"}]
                binding = [{"agent_id": "family", "match": {"channel": "telegram", "account_id": "fam"}}]
                save_yaml(home, provider, agents, {"fam": {**fam, "owners": [relative]}}, binding)
                (home / "workspace-family").mkdir()
                (home / "workspace-family" / "MEMORY.md").write_text(f"# Memory\n\n{NOTE}\n", encoding="utf-8")
                gw = await Gateway(home, env_for(d)).start()
                try:
                    assert await dm(d, "bot1", relative, "hi") == "agent says hi"
                    save_yaml(home, provider, agents, {"fam": {**fam, "owners": [stranger]}}, binding)
                    await d.dm("bot1", stranger, "what do you remember?")
                    await until(lambda: "new to agent family" in gw.stderr.read_text(), "the reload refused",
                                PROC_TIMEOUT)
                    save_yaml(home, provider, agents, {"fam": {**fam, "owners": [relative]}}, binding)
                    assert await dm(d, "bot1", relative, "still there?") == "agent says hi"  # after the stranger's
                finally:
                    await gw.stop()
                return d.texts("bot1", stranger), [json.dumps(r.body) for r in provider.requests], \
                    gw.stderr.read_text()
            finally:
                await d.stop()

    to_stranger, asked, log = run(main, timeout=PROC_TIMEOUT * 3)
    assert to_stranger == []
    assert not any("what do you remember" in text for text in asked)  # the stranger's words never reached a turn
    assert f"telegram/fam/{stranger} (new to agent family, whose owners telegram/fam/{relative} no longer reach it" \
        in log
