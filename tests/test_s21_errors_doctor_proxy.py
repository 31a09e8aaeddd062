"""`hermit doctor` names the proxy variables and what they carry (s21 t5).

s20 made every request for this machine skip a proxy from the environment, but nothing told the owner that a
proxy was set at all, or which of their endpoints it carries: a model server on another machine at
`http://…:11434` hands the proxy every prompt (MEMORY.md, the main session) in plain text. Now the doctor shows
HTTP_PROXY/HTTPS_PROXY/ALL_PROXY/NO_PROXY (a proxy's password masked), each configured endpoint's route as httpx
takes it, and warns of plain HTTP through a proxy. Real `hermit doctor --json` over a real config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from prochelpers import PROC_TIMEOUT

PASSWORD = "S21-proxy-pass-7731"
PROXY = f"http://alice:{PASSWORD}@proxy.example.test:3128"
ALL_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def doctor(home: Path, **proxies: str) -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if k.upper() not in ALL_PROXY_VARS}
    env |= proxies | {"HERMIT_HOME": str(home), "ANTHROPIC_API_KEY": "sk-ant-s21-doctor-proxy-key",
                      "TELEGRAM_BOT_TOKEN": "123456:S21-DOCTOR-PROXY-TOKEN-abcdef", "OMP_WAIT_POLICY": "PASSIVE"}
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor", "--json"], env=env, capture_output=True,
                       text=True, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)
    [c] = [c for c in json.loads(r.stdout) if c["name"] == "proxy"]
    return c, r.stdout + r.stderr


def write_home(home: Path) -> None:
    home.mkdir(mode=0o700)
    (home / "workspace").mkdir()
    (home / "hermit.yaml").write_text(yaml.safe_dump({
        "agents": {"defaults": {"model": "anthropic/claude-sonnet-4-5", "memory_search": {"provider": "none"}},
                   "list": [{"id": "main", "default": True},
                            {"id": "family", "model": "lan/llama3.3",
                             "memory_search": {"provider": "openai-compatible", "model": "nomic-embed-text",
                                               "remote": {"base_url": "http://127.0.0.1:11434/v1"}}}]},
        "models": {"providers": {"lan": {"type": "openai-compatible", "base_url": "http://192.0.2.50:11434/v1"}}},
        "channels": {"telegram": {"accounts": {"default": {"token_env": "TELEGRAM_BOT_TOKEN"}}}},
    }), encoding="utf-8")


def test_the_doctor_shows_each_proxy_and_what_it_carries(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_home(home)
    c, everything = doctor(home, HTTPS_PROXY=PROXY, http_proxy=PROXY, NO_PROXY="api.telegram.org")
    assert PASSWORD not in everything
    detail = c["detail"]
    assert "HTTPS_PROXY=http://alice:***@proxy.example.test:3128" in detail, detail
    assert "HTTP_PROXY=http://alice:***@proxy.example.test:3128" in detail and "NO_PROXY=api.telegram.org" in detail
    assert "model anthropic https://api.anthropic.com through HTTPS_PROXY" in detail
    assert "model lan http://192.0.2.50:11434 through HTTP_PROXY" in detail
    # NO_PROXY's host, and this machine's (the family agent's local embeddings server): direct
    assert "telegram/default https://api.telegram.org" in detail.split("Direct: ", 1)[1]
    assert "embeddings of family http://127.0.0.1:11434" in detail.split("Direct: ", 1)[1]
    # plain HTTP through a proxy is read by it whole: a warning, with the fix
    assert c["status"] == "warn" and "lan http://192.0.2.50:11434" in detail.split("read whole by it", 1)[1]
    assert "NO_PROXY" in c["fix"]


def test_no_proxy_variable_is_said_plainly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_home(home)
    c, _ = doctor(home)
    assert c["status"] == "ok" and "no proxy variable set" in c["detail"]
    # HTTPS only through it, nothing in plain text: told, not warned
    c, _ = doctor(home, ALL_PROXY="http://proxy.example.test:8080", NO_PROXY="192.0.2.50")
    assert c["status"] == "ok", c
    assert "ALL_PROXY=http://proxy.example.test:8080" in c["detail"]
    assert "through ALL_PROXY" in c["detail"] and "lan http://192.0.2.50:11434" in c["detail"].split("Direct: ")[1]


def test_a_socks_proxy_httpx_cannot_use_fails_with_the_fix(tmp_path: Path) -> None:
    """ALL_PROXY=socks5://… without socksio: httpx builds no client at all (every model, embeddings and channel
    call would fail with an ImportError); the doctor says so and how to fix it."""
    import importlib.util

    assert importlib.util.find_spec("socksio") is None  # as installed by requirements.lock
    home = tmp_path / "home"
    write_home(home)
    c, _ = doctor(home, ALL_PROXY=f"socks5://bob:{PASSWORD}@proxy.example.test:1080")
    assert c["status"] == "fail" and "socksio" in c["detail"] and "httpx[socks]" in c["fix"], c
    assert "ALL_PROXY=socks5://bob:***@proxy.example.test:1080" in c["detail"] and PASSWORD not in json.dumps(c)
