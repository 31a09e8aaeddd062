"""The restart hint names launchd when the gateway runs as the launchd agent `hermit gateway install` wrote (macOS).

`hermit setup` / `agents add` / `doctor` tell the user to restart a running gateway after a config change. For a
systemd unit they say `systemctl --user restart …`; a launchd agent got "stop it (Ctrl-C where it runs, or `kill
PID`) and start it again with `hermit gateway run`" — but the plist restarts only a gateway that failed (KeepAlive
SuccessfulExit false), so `kill` stopped the service for good and `hermit gateway run` then ran a second, foreground
gateway outside it. launchd names its job in XPC_SERVICE_NAME; the gateway records the label (only a
`com.hermit.*` label, as the plist is named) and the hint is `launchctl kickstart -k gui/UID/LABEL`.

Real `hermit gateway run` processes (the launchd environment variable set as launchd sets it) and real `hermit doctor`
and `hermit agents add` processes."""

from __future__ import annotations

import os
from pathlib import Path

from gatewayhelpers import GatewayProcess, write_config
from hermit.cli.service import LAUNCHD_LABEL
from hermit.testing import FakeProvider
from test_first_use_gateway import doctor_line
from test_setup import KEY, here, hermit


def run_gateway(home: Path, xpc: str | None) -> GatewayProcess:
    saved = os.environ.get("XPC_SERVICE_NAME")
    if xpc is None:
        os.environ.pop("XPC_SERVICE_NAME", None)
    else:
        os.environ["XPC_SERVICE_NAME"] = xpc  # GatewayProcess passes this process's environment on
    try:
        gw = GatewayProcess(home)
    finally:
        if saved is None:
            os.environ.pop("XPC_SERVICE_NAME", None)
        else:
            os.environ["XPC_SERVICE_NAME"] = saved
    gw.wait_ready()
    return gw


def test_a_gateway_run_by_launchd_is_restarted_with_launchctl_kickstart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        write_config(home, fake.openai_base_url)
        assert here(home, "init").returncode == 0
        gw = run_gateway(home, LAUNCHD_LABEL)
        try:
            added = hermit(home, "agents", "add", "helper")  # a config change while it runs
            assert added.returncode == 0, added.stderr
            kick = f"`launchctl kickstart -k gui/{os.getuid()}/{LAUNCHD_LABEL}`"
            note = next(n for n in added.stdout.splitlines() if n.startswith("note: the running gateway"))
            assert kick in note and "hermit gateway run" not in note and "kill" not in note, note
            _, fix = doctor_line(home, "gateway config")
            assert kick in fix, fix
        finally:
            gw.stop()


def test_another_launchd_job_or_a_label_that_is_no_hermit_one_keeps_the_plain_hint(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        write_config(home, fake.openai_base_url)
        assert here(home, "init").returncode == 0
        # A terminal on macOS runs under launchd too (XPC_SERVICE_NAME of the terminal app, or "0"); a label with
        # shell characters is never printed into a command.
        for n, xpc in enumerate(("application.com.apple.Terminal.123", "com.hermit.x;rm -rf ~")):
            gw = run_gateway(home, xpc)
            try:
                added = hermit(home, "agents", "add", f"helper{n}")
                assert added.returncode == 0, added.stderr
                note = next(n for n in added.stdout.splitlines() if n.startswith("note: the running gateway"))
                assert "launchctl" not in note and f"kill {gw.proc.pid}" in note and "hermit gateway run" in note
            finally:
                gw.stop()
