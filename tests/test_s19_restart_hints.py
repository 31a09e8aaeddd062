"""Every stop/restart hint names the command for how the gateway runs: a systemd user unit, a launchd agent
(`hermit gateway install`'s), or by hand.

A second `hermit gateway run` on a state dir whose gateway runs said "stop it first (Ctrl-C or kill its pid)" and a
message routed to an agent the gateway did not start said "`systemctl --user restart` its service, or stop it and
run `hermit gateway run` again" whatever ran it. Under a service manager a kill stops the service until the next
login (the unit and the plist restart only a gateway that failed) and `hermit gateway run` starts a second gateway
outside it. Now both say `systemctl --user stop|restart UNIT`, `launchctl kill TERM|kickstart -k gui/UID/LABEL`, or
Ctrl-C / `kill PID`, as `hermit doctor` and `agents add` already did for a restart (aca3042).

Real `hermit gateway run` processes. A systemd user unit is the process's cgroup (/proc/PID/cgroup, as systemd
places it): the test puts the running gateway in a real cgroup named as systemd names a user unit's (root, as CI runs;
removed after). launchd is XPC_SERVICE_NAME, which launchd sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import yaml

from ciguard import need
from gatewayhelpers import GatewayProcess, write_config
from hermit.cli.service import LAUNCHD_LABEL
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_first_use_gateway import doctor_line
from test_restart_hint_under_launchd import run_gateway
from test_setup import KEY, env_for, here, hermit

UNIT = "hermit-gateway-s19.service"


def cgroup_tree() -> tuple[Path, str] | None:
    """A cgroup hierarchy root may write, and its controllers field in /proc/PID/cgroup: systemd's named v1
    hierarchy where there is one (this machine), else the v2 one (unified beside v1, or the only one)."""
    for root, prefix in ((Path("/sys/fs/cgroup/systemd"), "name=systemd"), (Path("/sys/fs/cgroup/unified"), ""),
                         (Path("/sys/fs/cgroup"), "")):
        if (root / "cgroup.procs").exists() and os.access(root, os.W_OK):
            return root, prefix
    return None


@contextmanager
def in_user_unit(pid: int, unit: str = UNIT) -> Iterator[None]:
    """Process `pid` in a cgroup shaped as a user unit's (…/user@UID.service/app.slice/UNIT), as systemd puts
    `hermit gateway install`'s gateway; back in its own cgroup after."""
    tree = cgroup_tree() if os.geteuid() == 0 else None
    need(tree is not None, "root and a writable cgroup hierarchy (/sys/fs/cgroup/systemd or cgroup v2)")
    assert tree is not None
    root, prefix = tree
    was = next(fields[2] for fields in (line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
               if fields[1] == prefix)
    top = root / f"hermit-test-{uuid.uuid4().hex[:12]}.slice"
    leaf = top / f"user@{os.getuid()}.service" / "app.slice" / unit
    leaf.mkdir(parents=True)
    try:
        (leaf / "cgroup.procs").write_text(str(pid))
        assert f"/user@{os.getuid()}.service/app.slice/{unit}" in Path(f"/proc/{pid}/cgroup").read_text()
        yield
    finally:
        if Path(f"/proc/{pid}").exists():
            with open(root / was.lstrip("/") / "cgroup.procs", "w") as f:  # back where it was: the group can go
                f.write(str(pid))
        for d in (leaf, leaf.parent, leaf.parent.parent, top):
            d.rmdir()


def second_gateway(home: Path, **env: str) -> str:
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "gateway", "run", "--port", "0"], capture_output=True,
                       text=True, env=env_for(home, **env), timeout=PROC_TIMEOUT)
    assert r.returncode != 0, r.stdout
    assert "another gateway is already running on" in r.stderr, r.stderr
    return r.stderr


def started(tmp_path: Path, fake: FakeProvider) -> Path:
    home = tmp_path / "home"
    write_config(home, fake.openai_base_url)
    assert here(home, "init").returncode == 0
    return home


def test_under_a_systemd_user_unit(tmp_path: Path) -> None:
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        home = started(tmp_path, fake)
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()
            with in_user_unit(gw.proc.pid):
                err = second_gateway(home)
                assert f"(the systemd user service {UNIT})" in err
                assert f"stop it first (`systemctl --user stop {UNIT}`), or use another --home; to restart it " \
                       f"instead: `systemctl --user restart {UNIT}`" in err, err
                assert "kill" not in err and "Ctrl-C" not in err
                added = hermit(home, "agents", "add", "helper")  # a config change while it runs: the restart hint
                assert added.returncode == 0, added.stderr
                assert f"`systemctl --user restart {UNIT}`" in added.stdout, added.stdout
                _, fix = doctor_line(home, "gateway config")
                assert f"`systemctl --user restart {UNIT}`" in fix, fix
        finally:
            gw.stop()


def test_as_a_launchd_agent(tmp_path: Path) -> None:
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        home = started(tmp_path, fake)
        gw = run_gateway(home, LAUNCHD_LABEL)
        try:
            err = second_gateway(home)
            target = f"gui/{os.getuid()}/{LAUNCHD_LABEL}"
            assert f"(the launchd agent {LAUNCHD_LABEL})" in err
            assert f"stop it first (`launchctl kill TERM {target}`), or use another --home; to restart it instead: " \
                   f"`launchctl kickstart -k {target}`" in err, err
            assert f"kill {gw.proc.pid}" not in err and "Ctrl-C" not in err and "systemctl" not in err
        finally:
            gw.stop()


def test_run_by_hand(tmp_path: Path) -> None:
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        home = started(tmp_path, fake)
        gw = run_gateway(home, None)
        try:
            err = second_gateway(home)
            assert f"stop it first (Ctrl-C where it runs, or `kill {gw.proc.pid}`), or use another --home" in err, err
            assert "systemctl" not in err and "launchctl" not in err and "to restart it instead" not in err
        finally:
            gw.stop()


# A gateway routing a message to an agent the config gained after it started: the hint of live_route, from the
# gateway process itself. The child waits on stdin so the test can put it in the unit first.
ROUTE = """
import sys
from pathlib import Path
from hermit.channels.base import InboundMessage
from hermit.channels.pairing import PairingStore
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError
from hermit.gateway.live_config import LiveAccess, LiveConfig
from hermit.gateway.supervisor import live_route
home = Path(sys.argv[1])
loaded = load_config(StatePaths(home))
state = LiveAccess(LiveConfig(loaded), PairingStore(home, lambda: 0.0), lambda: 0.0)
print("ready", flush=True)
sys.stdin.readline()
try:
    live_route(state, {"main"})(InboundMessage("webchat", "default", "dm", "owner", "owner", "hi"))
except ConfigError as e:
    print(e.hint, flush=True)
"""


def child_output(script: str, home: Path, in_unit: bool = False, **env: str) -> tuple[str, int]:
    """What `script` (given `home`) prints once told to go — after being put in a systemd-shaped user unit when
    `in_unit` — and its pid."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(home)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_for(home, **env))
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        with in_user_unit(proc.pid) if in_unit else nullcontext():
            proc.stdin.write("go\n")
            proc.stdin.flush()
            out, err = proc.communicate(timeout=PROC_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    return out.strip(), proc.pid


def route_hint(home: Path, in_unit: bool = False, **env: str) -> tuple[str, int]:
    return child_output(ROUTE, home, in_unit, **env)


def test_an_agent_not_started_names_the_restart_of_this_gateway(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1")
    cfg = yaml.safe_load((home / "hermit.yaml").read_text())
    cfg["agents"]["list"] = [{"id": "main", "default": True}, {"id": "helper"}]
    cfg["bindings"] = [{"match": {"channel": "webchat"}, "agent_id": "helper"}]
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
    assert here(home, "init").returncode == 0
    hint, pid = route_hint(home)
    assert hint == (f"restart the gateway to start it: stop it (Ctrl-C where it runs, or `kill {pid}`) and start it "
                    "again with `hermit gateway run`"), hint
    hint, _ = route_hint(home, XPC_SERVICE_NAME=LAUNCHD_LABEL)
    assert hint == f"restart the gateway to start it: `launchctl kickstart -k gui/{os.getuid()}/{LAUNCHD_LABEL}`"
    hint, _ = route_hint(home, in_unit=True)
    assert hint == f"restart the gateway to start it: `systemctl --user restart {UNIT}`"


def slack_doctor_fix(home: Path, **env: str) -> str:
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor", "--json"], capture_output=True, text=True,
                       env=env_for(home, **env), timeout=PROC_TIMEOUT)
    [line] = [c for c in json.loads(r.stdout) if c["name"] == "slack sessions"]
    assert line["status"] == "warn", line
    return str(line["fix"])


def test_doctor_starts_the_installed_service_or_restarts_the_running_gateway(tmp_path: Path) -> None:
    """`hermit doctor` on an interrupted Slack rename said "start the gateway (`hermit gateway run`, or restart its
    service)": with a service installed for this state dir, `hermit gateway run` starts a second gateway beside
    it. Now it names the installed unit's start, or the running gateway's restart."""
    from hermit.channels.slack_migrate import journal_path

    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        home = tmp_path / "home"
        write_config(home, fake.openai_base_url,
                     extra="channels:\n  slack:\n    accounts:\n      work: {bot_token: xoxb-1, app_token: xapp-1}\n")
        assert here(home, "init").returncode == 0
        journal_path(home).parent.mkdir(parents=True, exist_ok=True)
        journal_path(home).write_text("{}", encoding="utf-8")
        user = tmp_path / "user"
        user.mkdir(mode=0o700)
        env = {"HOME": str(user), "XDG_CONFIG_HOME": str(user / ".config")}
        assert slack_doctor_fix(home, **env) == "start the gateway: `hermit gateway run`: it finishes the rename first"
        done = hermit(home, "gateway", "install", "--no-start", **env)
        assert done.returncode == 0, done.stderr
        [unit] = (user / ".config" / "systemd" / "user").glob("*.service")
        assert slack_doctor_fix(home, **env) == (f"start the gateway: `systemctl --user start {unit.name}`: it finishes "
                                                 "the rename first")
        other = tmp_path / "other"  # another state dir's doctor does not take this unit for its own
        write_config(other, fake.openai_base_url, extra="channels:\n  slack:\n    accounts:\n      w: {}\n")
        journal_path(other).parent.mkdir(parents=True, exist_ok=True)
        journal_path(other).write_text("{}", encoding="utf-8")
        assert "`hermit gateway run`" in slack_doctor_fix(other, **env)
        gw = run_gateway(home, LAUNCHD_LABEL)  # it finishes the rename as it starts: a journal left once more
        try:
            journal_path(home).write_text("{}", encoding="utf-8")
            assert slack_doctor_fix(home, **env) == (f"restart the gateway: `launchctl kickstart -k gui/{os.getuid()}/"
                                                     f"{LAUNCHD_LABEL}`: it finishes the rename first")
        finally:
            gw.stop()
