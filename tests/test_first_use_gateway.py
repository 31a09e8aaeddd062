"""A new user with a gateway running, as the first-use audit ran it: `hermit setup` and `hermit agents add`
say that the running gateway keeps its model, providers and keys until it is restarted (who may talk to it
applies at once), `hermit doctor` warns while hermit.yaml or hermit.env is newer than the gateway, `hermit
gateway status` prints its services as text, a gateway that is still stopping is waited for (not refused
with "http://None:None"), and `hermit dashboard` on a gateway bound to every address also prints the URLs a
phone on the network opens."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ciguard import need
from gatewayhelpers import GatewayProcess, write_config
from hermit.gateway.state import GatewayLock, GatewayLocked, ensure_token
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT
from test_setup import KEY, here, hermit


def doctor_line(home: Path, name: str) -> tuple[str, str]:
    """(the check's line, its fix line or "") of `hermit doctor`."""
    lines = hermit(home, "doctor").stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line[7:].startswith(name))
    fix = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].strip().startswith("fix:") else ""
    return lines[i], fix


def test_setup_and_agents_add_while_the_gateway_runs_say_it_needs_a_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}], api_key=KEY) as fake:
        write_config(home, fake.openai_base_url)
        assert here(home, "init").returncode == 0  # in this process: it only sets up the state dir
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()
            line, _ = doctor_line(home, "gateway config")
            assert line.startswith("[ok  ]") and f"pid {gw.proc.pid}" in line, line
            status = hermit(home, "gateway", "status")
            assert status.returncode == 0, status.stderr
            services = [s for s in status.stdout.splitlines() if s.strip().startswith("service ")]
            assert services and not any("{" in s or '"' in s for s in services), status.stdout
            assert any(s.startswith("  service scheduler: ") and "jobs: 0" in s for s in services), status.stdout

            r = hermit(home, "setup", "--provider", "openai-compatible", "--base-url", fake.openai_base_url,
                       "--model", "fake-model", "--api-key-stdin", stdin=KEY + "\n")
            assert r.returncode == 0, r.stderr
            note = next(n for n in r.stdout.splitlines() if n.startswith("note: the running gateway"))
            assert f"(pid {gw.proc.pid}) keeps the model, providers, API keys" in note
            assert "until it is restarted" in note and f"kill {gw.proc.pid}" in note and "hermit gateway run" in note
            assert "who may talk to it (owners, contacts, groups, bindings) applies at once" in note
            line, fix = doctor_line(home, "gateway config")
            assert line.startswith("[warn]") and "hermit.yaml and hermit.env changed after the running gateway" in line
            assert "restart it" in fix and f"kill {gw.proc.pid}" in fix

            loopback = hermit(home, "dashboard", "--no-open")  # a loopback bind: its one link, nothing more
            assert loopback.returncode == 0 and "on your network" not in loopback.stderr, loopback.stderr
            added = hermit(home, "agents", "add", "helper")
            assert added.returncode == 0, added.stderr
            assert f"note: the running gateway (pid {gw.proc.pid}) keeps" in added.stdout
        finally:
            gw.stop()
    line, _ = doctor_line(home, "gateway config")
    assert line.startswith("[ok  ]") and "no gateway running" in line
    quiet = hermit(home, "agents", "add", "another")
    assert quiet.returncode == 0 and "running gateway" not in quiet.stdout


def test_a_gateway_still_stopping_is_named_and_waited_for(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ensure_token(home)
    held = GatewayLock.acquire(home)
    try:
        held.publish({"pid": os.getpid(), "stopping": True})
        with pytest.raises(GatewayLocked) as stopping:
            GatewayLock.acquire(home)
        assert "None" not in str(stopping.value) and f"(pid {os.getpid()})" in stopping.value.message
        assert "still stopping" in stopping.value.message
        held.publish({"pid": os.getpid()})
        with pytest.raises(GatewayLocked) as starting:
            GatewayLock.acquire(home)
        assert "None" not in str(starting.value) and "is starting" in starting.value.message
        held.publish({"pid": os.getpid(), "stopping": True})
        with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
            write_config(home, fake.openai_base_url)
            gw = GatewayProcess(home)
            try:
                deadline = time.monotonic() + PROC_TIMEOUT
                while "waiting for the gateway that is stopping" not in gw.stderr():
                    assert gw.proc.poll() is None, f"the new gateway gave up: {gw.stderr()}"
                    assert time.monotonic() < deadline, "the new gateway never said it waits"
                    time.sleep(0.1)
                held.release()  # the old gateway exits
                gw.wait_ready()
            finally:
                gw.stop()
    finally:
        held.release()


def test_dashboard_on_a_gateway_bound_to_every_address_prints_urls_that_work_from_the_network(
        tmp_path: Path) -> None:
    # In a child: this process refuses non-loopback connects (conftest), the UDP one that picks a route too.
    found = subprocess.run([sys.executable, "-c", "import json; from hermit.cli.gateway import lan_addresses; "
                            "print(json.dumps(lan_addresses()))"], capture_output=True, text=True, timeout=PROC_TIMEOUT)
    addresses = json.loads(found.stdout)
    need(bool(addresses), "a non-loopback network address on this machine")
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        write_config(home, fake.openai_base_url)
        gw = GatewayProcess(home, "--host", "0.0.0.0")
        try:
            gw.wait_ready()
            port = json.loads((home / "gateway" / "gateway.lock").read_text())["port"]
            base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
            r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "dashboard",
                                "--no-open"], env=base, capture_output=True, text=True, timeout=PROC_TIMEOUT)
            assert r.returncode == 0, r.stderr
            local = re.fullmatch(rf"http://127\.0\.0\.1:{port}/#ticket=([A-Za-z0-9_-]{{43}})", r.stdout.strip())
            assert local, r.stdout  # stdout keeps its one line
            ticket = local.group(1)
            printed = re.findall(r"^  (http://\S+)$", r.stderr, re.M)
            assert printed == [f"http://{a}:{port}/#ticket={ticket}" for a in addresses], r.stderr
            assert "on your network" in r.stderr and "whichever link is opened first" in r.stderr
            # The page answers under that address (the Host check takes any of the machine's addresses). A
            # child process fetches it: this one refuses non-loopback connects (conftest), and the address
            # is this machine's own, so nothing leaves it.
            fetch = ("import sys, urllib.request\n"
                     "r = urllib.request.urlopen(sys.argv[1], timeout=30)\n"
                     "print(r.status, 'Hermit' in r.read().decode())\n")
            page = subprocess.run([sys.executable, "-c", fetch, printed[0].split("#", 1)[0]], capture_output=True,
                                  text=True, timeout=PROC_TIMEOUT, env={**os.environ, "no_proxy": "*"})
            assert page.stdout.split() == ["200", "True"], page.stderr
        finally:
            gw.stop()

