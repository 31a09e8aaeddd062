"""`hermit dashboard`: prints the web app's URL with a one-time ticket (never the token: a browser keeps every
URL it visits in its history), and opens it in the browser ($BROWSER here, a script that records its argv)
when a gateway runs — unless --no-open, or a Linux box without a display, where `webbrowser` would start a
text browser in the terminal. The browser is given an owner-only launcher file, never the ticket: a
browser's argv is readable by every local user for as long as it runs. `hermit gateway run` prints the
page's URL without the token (its stdout is the journal under systemd). How tickets are redeemed:
test_gateway_tickets.py."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gatewayhelpers import CHROMIUM_FLAGS, need_chromium, write_config
from hermit.gateway.state import GatewayLock, ensure_token
from hermit.gateway.tickets import PREFIX, ticket_id
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT


def dashboard(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "dashboard", *args],
                          env={**base, **env}, capture_output=True, text=True, timeout=PROC_TIMEOUT)


@pytest.fixture
def recorder(tmp_path: Path) -> tuple[str, Path]:
    """A $BROWSER command that writes its whole argv (one JSON list a line) to a file."""
    out = tmp_path / "opened.txt"
    script = tmp_path / "browser.py"
    script.write_text(f"import json, sys\nopen({str(out)!r}, 'a').write(json.dumps(sys.argv) + '\\n')\n",
                      encoding="utf-8")
    return f"{sys.executable} {script} %s", out


def opened_argvs(opened: Path) -> list[list[str]]:
    return [json.loads(line) for line in opened.read_text(encoding="utf-8").splitlines()]


def printed_ticket(r: subprocess.CompletedProcess[str], base: str) -> str:
    """The ticket of the one URL `hermit dashboard` printed, `<base>#ticket=…`, after checking the line's shape
    and the note on stderr that says what the link is good for."""
    assert r.returncode == 0, r.stderr
    found = re.fullmatch(re.escape(base) + r"#ticket=([A-Za-z0-9_-]{43})", r.stdout.strip())
    assert found, r.stdout
    assert "one-time link" in r.stderr and "10 minutes" in r.stderr
    return found.group(1)


def test_dashboard_opens_the_running_gateways_page_without_the_token_in_any_argv(
        tmp_path: Path, recorder: tuple[str, Path]) -> None:
    home = tmp_path / "home"
    token = ensure_token(home)
    browser, opened = recorder
    lock = GatewayLock.acquire(home)
    try:
        lock.publish({"pid": os.getpid(), "host": "0.0.0.0", "port": 18555})
        base = "http://127.0.0.1:18555/"  # a wildcard bind is reached through loopback

        r = dashboard(home, env={"BROWSER": browser})
        ticket = printed_ticket(r, base)  # the owner's own terminal shows the link, which is not the token
        assert token not in r.stdout + r.stderr
        [argv] = opened_argvs(opened)
        assert not any(token in a or ticket in a for a in argv)  # what `ps` shows every local user
        assert argv[1].startswith("file://")
        launcher = Path(argv[1].removeprefix("file://"))
        assert launcher.parent == home / "gateway"
        st = os.lstat(launcher)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
        page = launcher.read_text(encoding="utf-8")
        assert f'location.replace("{base}#ticket={ticket}")' in page and token not in page  # one ticket for both
        # The ticket is an owner-only file the gateway reads, named by the ticket's sha256, for this gateway.
        ticket_file = home / "gateway" / f"{PREFIX}{ticket_id(ticket)}"
        st = os.lstat(ticket_file)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
        assert json.loads(ticket_file.read_text(encoding="utf-8"))["gateway"] == os.getpid()

        r = dashboard(home, env={"BROWSER": browser})  # the next run removes the launcher the last one left
        assert r.returncode == 0, r.stderr
        second = Path(opened_argvs(opened)[1][1].removeprefix("file://"))
        assert second != launcher and second.exists() and not launcher.exists()
        assert sorted(p.name for p in (home / "gateway").glob("dashboard-*")) == [second.name]

        opened.unlink()
        r = dashboard(home, "--no-open", env={"BROWSER": browser})
        again = printed_ticket(r, base)
        assert again != ticket and not opened.exists()  # a new ticket each run

        r = dashboard(home, env={})  # Linux without a display and no $BROWSER: print only, and say why
        assert printed_ticket(r, base) not in (ticket, again) and not opened.exists()
        if sys.platform.startswith("linux"):
            assert "no display" in r.stderr and "ssh -L 18555:127.0.0.1:18555" in r.stderr
    finally:
        lock.release()

    # No gateway: no URL (whatever holds the port meanwhile would read the ticket), only how to start it.
    before = sorted((home / "gateway").glob(f"{PREFIX}*"))
    r = dashboard(home, env={"BROWSER": browser})
    assert r.returncode == 1 and r.stdout == "" and token not in r.stderr
    assert "hermit gateway run" in r.stderr and not opened.exists()
    assert sorted((home / "gateway").glob(f"{PREFIX}*")) == before  # and no ticket made


def test_the_launcher_signs_the_browser_in_and_gateway_run_prints_no_token(
        tmp_path: Path, recorder: tuple[str, Path]) -> None:
    """Through the real gateway and Debian's Chromium: the file `hermit dashboard` gives the browser lands on
    the web app, connected, with the ticket out of the address bar and the token never in it; the gateway's
    stdout holds no token."""
    chromium = need_chromium()
    from playwright.sync_api import sync_playwright

    home = tmp_path / "home"
    with FakeProvider(["hi"]) as fake:
        write_config(home, fake.openai_base_url)
        out = tmp_path / "gateway.out"
        with out.open("w") as stdout:
            proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "gateway", "run",
                                     "--port", "0"], stdout=stdout, stderr=subprocess.DEVNULL,
                                    env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
        try:
            deadline = time.monotonic() + PROC_TIMEOUT
            while "web chat: " not in out.read_text() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            printed = out.read_text()
            token = (home / "gateway" / "token").read_text(encoding="utf-8").strip()
            assert "web chat: http://127.0.0.1:" in printed and token not in printed and "hermit dashboard" in printed
            browser, opened = recorder
            r = dashboard(home, env={"BROWSER": browser})
            assert r.returncode == 0, r.stderr
            [argv] = opened_argvs(opened)
            with sync_playwright() as p:
                b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
                try:
                    page = b.new_page()
                    page.goto(argv[1])
                    page.wait_for_selector("#status.ok", timeout=30_000)  # signed in with the ticket
                    assert page.url.startswith("http://127.0.0.1:") and "token" not in page.url
                    assert "ticket" not in page.url and token not in page.url
                finally:
                    b.close()
        finally:
            proc.terminate()
            proc.wait(PROC_TIMEOUT)


def test_a_gateway_on_localhost_is_opened_at_its_literal_address(tmp_path: Path) -> None:
    """The gateway binds "localhost" as 127.0.0.1 only; a URL naming localhost could be tried on ::1 first,
    where another local user may listen and read the token from the address."""
    home = tmp_path / "home"
    ensure_token(home)
    lock = GatewayLock.acquire(home)
    try:
        lock.publish({"pid": os.getpid(), "host": "localhost", "port": 18556})
        r = dashboard(home, "--no-open", env={})
        printed_ticket(r, "http://127.0.0.1:18556/")
    finally:
        lock.release()
