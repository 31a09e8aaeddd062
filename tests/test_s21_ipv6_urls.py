"""A gateway on an IPv6 address prints, publishes and reports URLs a browser can open: the address in brackets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from gatewayhelpers import GatewayProcess, write_config
from hermit.loopback import url_host


def test_url_host_brackets_ipv6_only() -> None:
    assert url_host("::1") == "[::1]"
    assert url_host("fd77::1") == "[fd77::1]"
    assert url_host("[::1]") == "[::1]"
    assert url_host("127.0.0.1") == "127.0.0.1"
    assert url_host("localhost") == "localhost"


def test_a_gateway_on_ipv6_loopback_prints_and_publishes_an_openable_url(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1")
    gateway = GatewayProcess(home, "--host", "::1")
    try:
        url = gateway.wait_ready()
        assert url.startswith("http://[::1]:"), url  # before: http://::1:PORT/, which no browser opens
        parts = urlsplit(url)
        assert parts.hostname == "::1" and parts.port == gateway.port
        published = json.loads((home / "gateway" / "gateway.lock").read_text(encoding="utf-8"))
        assert published["url"] == f"http://[::1]:{gateway.port}/", published
        assert httpx.get(f"http://[::1]:{gateway.port}/healthz", timeout=10, trust_env=False).status_code in {200, 404}
        status = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "gateway", "status"],
                                capture_output=True, text=True, timeout=60)
        assert f"[::1]:{gateway.port}" in status.stdout + status.stderr, status
        assert "http://::1:" not in status.stdout + status.stderr
    finally:
        gateway.stop()
