"""`hermit dashboard`: prints the web app's URL with the token, and opens it in the browser ($BROWSER here, a
script that records what it was given) when a gateway runs — unless --no-open, or a Linux box without a
display, where `webbrowser` would start a text browser in the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermit.gateway.state import GatewayLock, ensure_token
from prochelpers import PROC_TIMEOUT


def dashboard(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "dashboard", *args],
                          env={**base, **env}, capture_output=True, text=True, timeout=PROC_TIMEOUT)


@pytest.fixture
def recorder(tmp_path: Path) -> tuple[str, Path]:
    """A $BROWSER command that writes the URL it is given to a file."""
    out = tmp_path / "opened.txt"
    script = tmp_path / "browser.py"
    script.write_text(f"import sys\nopen({str(out)!r}, 'a').write(sys.argv[1] + '\\n')\n", encoding="utf-8")
    return f"{sys.executable} {script} %s", out


def test_dashboard_opens_the_running_gateways_page_with_the_token(tmp_path: Path, recorder: tuple[str, Path]) -> None:
    home = tmp_path / "home"
    token = ensure_token(home)
    browser, opened = recorder
    lock = GatewayLock.acquire(home)
    try:
        lock.publish({"pid": os.getpid(), "host": "0.0.0.0", "port": 18555})
        url = f"http://127.0.0.1:18555/?token={token}"  # a wildcard bind is reached through loopback

        r = dashboard(home, env={"BROWSER": browser})
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == url and opened.read_text(encoding="utf-8") == url + "\n"

        opened.unlink()
        r = dashboard(home, "--no-open", env={"BROWSER": browser})
        assert (r.returncode, r.stdout.strip(), opened.exists()) == (0, url, False)

        r = dashboard(home, env={})  # Linux without a display and no $BROWSER: print only, and say why
        assert (r.returncode, r.stdout.strip(), opened.exists()) == (0, url, False)
        if sys.platform.startswith("linux"):
            assert "no display" in r.stderr and "ssh -L 18555:127.0.0.1:18555" in r.stderr
    finally:
        lock.release()

    r = dashboard(home, env={"BROWSER": browser})  # no gateway: the configured address, and how to start it
    assert r.returncode == 0 and r.stdout.strip() == f"http://127.0.0.1:18789/?token={token}"
    assert "hermit gateway run" in r.stderr and not opened.exists()
