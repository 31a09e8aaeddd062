"""Who holds the gateway's port, looked at again while it runs and never taken from a name (gateway/listen.py
`holder_of`, `watch_holder`; gateway/device_policy.py `lost`).

1. A socket unit stopped while its gateway runs (`systemctl --user stop <name>.socket`: systemd closes its copies of
   the listening sockets) left devices on until the gateway restarted, though the port now goes free the moment the
   gateway stops. Here this test process is the service manager (LISTEN_FDS, as in test_s21_socket_activation.py);
   closing its sockets is the stopped unit: the gateway turns devices off (lock file, `hermit doctor`, a device's
   sign-in refused with `devices_off`), a restart in place keeps them off, and once it stops uid 65534 binds the port.
2. A parent whose fds the gateway cannot read (another user's, root here) was taken for the holder when its name was
   `systemd` — a name whoever starts a process chooses (prctl PR_SET_NAME). Such a parent that holds nothing made a
   gateway run as uid 65534 "held"; now an unreadable parent is never the holder, whatever its name."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gatewayhelpers import free_port, write_config
from hermit.gateway.state import read_lock_info
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT, python_as, pythonpath
from test_s20_devices_protocol import Key, device_conn, sign_in
from test_s21_socket_activation import BIND_BOTH, LAUNCH, ActivatedGateway, doctor_devices, listening, squat

NOBODY = {"user": 65534, "group": 65534, "extra_groups": []}


def lock_changes(home: Path, pid: int, held: bool) -> dict[str, Any]:
    """The gateway's lock file once it says `held` (the gateway rewrites it when it notices; bounded by PROC_TIMEOUT)."""
    deadline = time.monotonic() + PROC_TIMEOUT
    while time.monotonic() < deadline:
        info = read_lock_info(home) or {}
        if info.get("pid") == pid and info.get("held") is held and "port" in info:
            return info
        time.sleep(0.05)
    raise AssertionError(f"the lock file never said held={held}: {read_lock_info(home)}")


def test_a_socket_unit_stopped_while_the_gateway_runs_turns_devices_off_until_a_restart(tmp_path: Path) -> None:
    port = free_port()
    socks = listening(port)
    home = tmp_path / "home"
    with FakeProvider(["hi"] * 4) as fake:
        write_config(home, fake.openai_base_url)  # remember_devices: auto
        gw = ActivatedGateway(home, socks)
        try:
            gw.wait_ready()
            info = read_lock_info(home) or {}
            assert info["held"] is True and info["devices"]["on"] is True, info
            key = Key()
            did = sign_in(gw, key)["device"]["id"]
            with device_conn(gw, key, did) as (_, reply):
                assert reply["ok"], reply  # on while the unit holds the port

            for s in socks:  # `systemctl --user stop <name>.socket`: the manager's copies are closed
                s.close()
            info = lock_changes(home, gw.proc.pid, held=False)
            assert info["devices"]["on"] is False and "stopped holding" in info["devices"]["why"], info
            assert "hermit service restart" in info["devices"]["hint"]
            assert "stopped holding" in doctor_devices(home)
            with device_conn(gw, key, did) as (_, reply):  # a device's sign-in is refused, saying why
                assert not reply["ok"] and reply["error"]["code"] == "devices_off", reply
            assert squat("127.0.0.1", port).startswith("refused")  # the gateway itself still holds it while it runs
            log = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
            assert "no longer holds its listening sockets" in log, log[-2000:]

            gw.proc.send_signal(signal.SIGUSR1)  # a restart in place does not turn them on again
            gw.wait_ready()
            info = read_lock_info(home) or {}
            assert info["held"] is False and info["devices"]["on"] is False, info
            with device_conn(gw, key, did) as (_, reply):
                assert not reply["ok"] and reply["error"]["code"] == "devices_off", reply
        finally:
            gw.stop()
            for s in socks:
                s.close()
    assert gw.proc.returncode == 0, gw.stderr()[-2000:]
    assert squat("127.0.0.1", port) == "bound"  # why: stopped, the gateway let the port go


def test_a_socket_unit_that_keeps_holding_keeps_devices_on(tmp_path: Path) -> None:
    """Held: while the manager keeps its sockets the gateway's looks find them (a restart in place keeps them on)."""
    port = free_port()
    socks = listening(port)
    home = tmp_path / "home"
    with FakeProvider(["hi"] * 4) as fake:
        write_config(home, fake.openai_base_url)
        gw = ActivatedGateway(home, socks)
        try:
            gw.wait_ready()
            key = Key()
            did = sign_in(gw, key)["device"]["id"]
            gw.proc.send_signal(signal.SIGUSR1)
            gw.wait_ready()
            info = read_lock_info(home) or {}
            assert info["held"] is True and info["devices"]["on"] is True, info
            with device_conn(gw, key, did) as (_, reply):
                assert reply["ok"], reply
            log = (home / "logs" / "gateway.log").read_text(encoding="utf-8")
            assert "no longer holds" not in log, log[-2000:]
        finally:
            gw.stop()
            for s in socks:
                s.close()


# Run as uid 65534 by the root "systemd" below, through LAUNCH: waits until its parent has let go of the sockets,
# then takes them as the gateway does.
TAKES = """
import json, sys
from hermit.gateway.listen import open_listeners
sys.stdin.readline()
got = open_listeners("127.0.0.1", 0, None)
print(json.dumps({"held": got.held, "inherited": got.inherited}))
"""

# Root, named "systemd": binds 127.0.0.1 and [::1] at one port, hands them to uid 65534's child (LISTEN_FDS), then
# closes its own copies (so it holds nothing) before the child looks. `keep`: it keeps them instead.
NAMED = """
import ctypes, json, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(15, b"systemd", 0, 0, 0) == 0  # PR_SET_NAME
python, path, launch, takes, keep = sys.argv[1:6]
""" + BIND_BOTH + """
child = subprocess.Popen([python, "-c", launch, ",".join(map(str, fds)), "-c", takes], pass_fds=fds,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, user=65534, group=65534,
                         extra_groups=[], env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path})
if keep != "keep":
    for s in socks:
        s.close()
out, _ = child.communicate("go\\n", timeout=300)
print(json.dumps({"child": json.loads(out), "comm": open("/proc/self/comm").read().strip()}))
"""


def test_a_parent_the_gateway_cannot_read_is_not_its_holder_whatever_its_name() -> None:
    python = python_as(NOBODY)
    assert python is not None, "no interpreter that imports this checkout as uid 65534"
    for keep in ("drop", "keep"):
        done = subprocess.run([sys.executable, "-c", NAMED, python, pythonpath(), LAUNCH, TAKES, keep],
                              capture_output=True, text=True, timeout=PROC_TIMEOUT)
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert got["comm"] == "systemd" and got["child"]["inherited"] is True, got
        # holds nothing ("drop"), or holds them but cannot be looked at again ("keep"): not held either way
        assert got["child"]["held"] is False, (keep, got)


def test_a_parent_of_the_same_user_named_anything_is_judged_by_its_sockets() -> None:
    """Held: the name is not what counts either way — a same-uid parent named `systemd` that let the sockets go is
    not the holder, one named `python3` that keeps them is (as uid 65534, whose parent is uid 65534 too)."""
    python = python_as(NOBODY)
    assert python is not None, "no interpreter that imports this checkout as uid 65534"
    for keep, held in (("drop", False), ("keep", True)):
        code = NAMED.replace("user=65534, group=65534,\n                         extra_groups=[], ", "")
        assert code != NAMED
        done = subprocess.run([python, "-c", code, python, pythonpath(), LAUNCH, TAKES, keep], capture_output=True,
                              text=True, timeout=PROC_TIMEOUT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()},
                              **NOBODY)  # type: ignore[call-overload]
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert got["child"]["held"] is held, (keep, got)
