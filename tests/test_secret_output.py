"""No secret reaches anything the CLI or the gateway prints or keeps, whichever path carries it (audit S2):
F1 a channel's last error quoting its bot token (status file, `hermit channels status`, `hermit gateway
status [--json]`, GET /status); F2 secrets in hermit.env or the environment that the config does not name
(the other Slack mode's, a removed channel's, a GITHUB_TOKEN) read by the owner's `cat`; F3/F4 a model or
embeddings server's URL password in ordinary output, `--json`, warnings, httpx's --debug lines; F5 the
`Basic base64(user:password)` an HTTP client sends for that URL, echoed back by the server. Real `hermit`
subprocesses against fake servers; every printed output and every file under the state dir is searched for
the canaries."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import yaml

from agenthelpers import tool_results
from gatewayhelpers import GatewayProcess, write_config
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT

BOT_TOKEN = "7712345678:CANARYtgTOKENabcdefghijklmnop"
PROVIDER_KEY = "sk-CANARYproviderKEY0123456789"


def hermit(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), *args],
                          env={**base, "OMP_WAIT_POLICY": "PASSIVE", **(env or {})}, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=PROC_TIMEOUT)


def files_holding(home: Path, *needles: str, but: tuple[str, ...] = ()) -> list[str]:
    return sorted(f"{p.relative_to(home)}: {n}" for p in home.rglob("*") if p.is_file() and p.name not in but
                  for n in needles if n.encode() in p.read_bytes())


def write_env_file(home: Path, **values: str) -> None:
    path = home / "hermit.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()), encoding="utf-8")
    path.chmod(0o600)


@pytest.fixture
def server() -> Iterator[tuple[ThreadingHTTPServer, list[dict[str, str]]]]:
    """An HTTP server that answers every POST 401, quoting what the client sent: a Telegram Bot API echoing the
    token in its path, or a model server echoing the credentials of the Authorization header."""
    seen: list[dict[str, str]] = []

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("content-length") or 0))
            seen.append({"path": self.path, "authorization": self.headers.get("authorization") or ""})
            if self.path.startswith("/bot"):
                token = self.path.split("/")[1][3:]
                body = {"ok": False, "error_code": 401, "description": f"Unauthorized: bot token {token} is invalid"}
            else:
                sent = (self.headers.get("authorization") or "").partition(" ")[2]
                body = {"error": {"message": f"Incorrect API key provided: {sent}", "type": "invalid_request"}}
            data = json.dumps(body).encode()
            self.send_response(401)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv, seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_channel_error_quoting_the_bot_token_is_masked_wherever_the_status_goes(
        tmp_path: Path, server: tuple[ThreadingHTTPServer, list[dict[str, str]]]) -> None:
    srv, seen = server
    home = tmp_path / "home"
    api = f"http://127.0.0.1:{srv.server_address[1]}"
    write_config(home, "http://127.0.0.1:9/v1", extra=(
        f"channels: {{telegram: {{accounts: {{default: {{api_base: \"{api}\", poll_timeout_seconds: 1, "
        "owners: ['42']}}}}\n"))
    write_env_file(home, TELEGRAM_BOT_TOKEN=BOT_TOKEN)
    status_file = home / "channels" / "status" / "telegram.default.json"
    gw = GatewayProcess(home)
    try:
        gw.wait_ready()
        deadline = time.monotonic() + PROC_TIMEOUT
        while not (status_file.exists() and json.loads(status_file.read_text()).get("last_error")):
            assert time.monotonic() < deadline and gw.proc.poll() is None, gw.stderr()
            time.sleep(0.2)
        assert any(BOT_TOKEN in s["path"] for s in seen)  # the fake did quote it
        stored = json.loads(status_file.read_text())["last_error"]
        assert "bot token *** is invalid" in stored and BOT_TOKEN not in stored
        # A status file an older version wrote holds the token: masked when read.
        (status_file.parent / "telegram.old.json").write_text(json.dumps({
            "channel": "telegram", "account_id": "old", "connected": False, "messages_in": 0, "messages_out": 0,
            "last_error": f"Unauthorized: bot token {BOT_TOKEN} is invalid", "pid": 0, "updated_at": 0}))
        outputs = {}
        for args in (("channels", "status"), ("channels", "status", "--json"), ("gateway", "status"),
                     ("gateway", "status", "--json")):
            r = hermit(home, *args)
            assert r.returncode == 0, r.stderr
            outputs[" ".join(args)] = r.stdout + r.stderr
        assert "bot token *** is invalid" in outputs["channels status"]
        assert "telegram/old" in outputs["channels status"]
        assert "bot token *** is invalid" in outputs["gateway status"]
        with httpx.Client() as client:
            st = client.get(gw.url.split("/?")[0] + "/status", headers={"Authorization": f"Bearer {gw.token}"})
        assert st.status_code == 200 and "bot token *** is invalid" in st.text
        outputs["GET /status"] = st.text
    finally:
        gw.stop()
    outputs["gateway stderr"] = gw.stderr()
    leaked = {name: out for name, out in outputs.items() if BOT_TOKEN in out}
    assert leaked == {}
    assert files_holding(home, BOT_TOKEN, but=("hermit.env", "telegram.old.json")) == []


def test_every_secret_in_hermit_env_or_named_like_one_is_masked_whatever_the_config_names(tmp_path: Path) -> None:
    """The config names one provider key and a Slack account in HTTP mode; hermit.env also holds the socket
    mode's app token, a removed Telegram channel's token and a token under a name of the owner's own; the
    environment holds a GITHUB_TOKEN, a database URL's password and the Slack app token under the variable
    the account names. The owner's exec prints them all: none reaches the provider, the transcript or the
    screen."""
    home = tmp_path / "home"
    home.mkdir()
    in_file = {"HERMIT_TEST_PROVIDER_KEY": PROVIDER_KEY, "SLACK_BOT_TOKEN": "xoxb-CANARYslackbot-0123456789",
               "SLACK_SIGNING_SECRET": "CANARYsigning0123456789abcdef",
               "SLACK_APP_TOKEN": "xapp-1-CANARYslackapp-0123456789",
               "TELEGRAM_BOT_TOKEN": "123456:CANARYoldTelegramToken0123", "MY_OLD_BOT": "CANARYmyOwnName0123456"}
    in_env = {"GITHUB_TOKEN": "ghp_CANARYgithub0123456789abcdef", "MY_SLACK_APP": "xapp-1-CANARYenvAPP-987654",
              "DATABASE_URL": "postgresql://hermit:CANARYdbPW4321@db.example/hermit"}
    write_env_file(home, **in_file)
    (home / "notes.txt").write_text("".join(f"{k}={v}\n" for k, v in in_env.items()), encoding="utf-8")
    canaries = [*in_file.values(), *in_env.values(), "CANARYdbPW4321"]
    script = [{"tool_calls": [{"name": "exec", "arguments": {
        "command": f"cat {home / 'hermit.env'} {home / 'notes.txt'}"}}]}, "done"]
    with FakeProvider(script) as fake:
        (home / "hermit.yaml").write_text(yaml.safe_dump({
            "agents": {"defaults": {"model": "fake/m", "memory_search": {"provider": "none"}}},
            "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url,
                                              "api_key_env": "HERMIT_TEST_PROVIDER_KEY"}}},
            "channels": {"slack": {"accounts": {"default": {"mode": "http", "owners": ["U42"],
                                                            "app_token_env": "MY_SLACK_APP"}}}}}))
        init = hermit(home, "init", env=in_env)
        assert init.returncode == 0, init.stderr
        r = hermit(home, "agent", "-m", "show me the env file", env=in_env)
        assert r.returncode == 0, r.stderr
        result = tool_results(fake.requests[-1])[-1][0]
    assert "SLACK_APP_TOKEN=***" in result and "MY_OLD_BOT=***" in result and "GITHUB_TOKEN=***" in result
    assert [c for c in canaries if c in result] == []
    assert [c for c in canaries if c in r.stdout + r.stderr + init.stdout + init.stderr] == []
    assert files_holding(home, *canaries, but=("hermit.env", "notes.txt")) == []


def test_a_servers_url_password_is_never_printed(tmp_path: Path) -> None:
    """A provider's and an embeddings endpoint's base_url with `user:password@`: `models list` (and --json) and
    `doctor` show the URL without it; the embedder's connection warning and httpx's request lines under
    --debug show no password."""
    home = tmp_path / "home"
    home.mkdir()
    pw, emb_pw = "CANARYcfgPW0123", "CANARYembPW0123"
    with FakeProvider(["hi", "hi"]) as fake:
        url = fake.openai_base_url.replace("http://", f"http://u:{pw}@")
        emb_url = f"http://e:{emb_pw}@127.0.0.1:9/v1"  # nothing listens on the discard port
        (home / "hermit.yaml").write_text(yaml.safe_dump({
            "agents": {"defaults": {"model": "fake/m", "memory_search": {
                "provider": "openai-compatible", "model": "e",
                "remote": {"base_url": emb_url, "api_key_env": "EMB_KEY", "max_retries": 0}}}},
            "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": url,
                                              "api_key_env": "HERMIT_TEST_PROVIDER_KEY"}}}}))
        env = {"HERMIT_TEST_PROVIDER_KEY": PROVIDER_KEY, "EMB_KEY": "CANARYembKEY0123456789"}
        runs = {" ".join(args): hermit(home, *args, env=env)
                for args in (("init",), ("--debug", "agent", "-m", "hi"), ("models", "list"),
                             ("models", "list", "--json"), ("doctor",), ("memory", "index"))}
    secrets = [pw, emb_pw, env["EMB_KEY"], PROVIDER_KEY]
    leaked = {name: [s for s in secrets if s in r.stdout + r.stderr] for name, r in runs.items()}
    assert leaked == {name: [] for name in runs}
    assert runs["--debug agent -m hi"].returncode == 0, runs["--debug agent -m hi"].stderr
    assert "HTTP Request: POST" in runs["--debug agent -m hi"].stderr  # httpx's line is there, masked
    assert fake.openai_base_url in runs["models list"].stdout  # the URL, without its userinfo
    listed = json.loads(runs["models list --json"].stdout)
    assert [p["base_url"] for p in listed["providers"] if p["name"] == "fake"] == [fake.openai_base_url]
    assert f"at {fake.openai_base_url}" in runs["doctor"].stdout
    assert "127.0.0.1:9/v1" in runs["memory index"].stdout + runs["memory index"].stderr


def test_the_basic_credentials_a_url_password_becomes_are_masked_when_echoed(
        tmp_path: Path, server: tuple[ThreadingHTTPServer, list[dict[str, str]]]) -> None:
    """httpx sends a base URL's `user:password@` as `Authorization: Basic base64(user:password)` in place of
    the Bearer key; a server quoting it back put the base64 on the screen, in --debug's traceback and in
    the transcript."""
    srv, seen = server
    home = tmp_path / "home"
    home.mkdir()
    pw = "CANARYbasePW77"
    basic = base64.b64encode(f"u:{pw}".encode()).decode()
    (home / "hermit.yaml").write_text(yaml.safe_dump({
        "agents": {"defaults": {"model": "acme/m", "memory_search": {"provider": "none"}}},
        "models": {"providers": {"acme": {"type": "openai-compatible",
                                          "base_url": f"http://u:{pw}@127.0.0.1:{srv.server_address[1]}/v1",
                                          "api_key_env": "HERMIT_TEST_PROVIDER_KEY"}}}}))
    env = {"HERMIT_TEST_PROVIDER_KEY": PROVIDER_KEY}
    assert hermit(home, "init", env=env).returncode == 0
    runs = [hermit(home, "agent", "-m", "hi", env=env), hermit(home, "--debug", "agent", "-m", "hi", env=env)]
    assert seen and seen[-1]["authorization"] == f"Basic {basic}"  # what the server was sent, and echoed
    assert all(r.returncode == 1 for r in runs)
    assert "Incorrect API key provided: ***" in runs[0].stderr
    assert "Traceback" in runs[1].stderr and "Incorrect API key provided: ***" in runs[1].stderr
    assert [r.stdout + r.stderr for r in runs if basic in r.stdout + r.stderr or pw in r.stdout + r.stderr] == []
    assert files_holding(home, basic, pw, but=("hermit.yaml",)) == []


def test_what_counts_as_a_secret() -> None:
    from hermit.redaction import environment_secrets, url_passwords, without_userinfo

    basic = base64.b64encode(b"user:p@ss word").decode()
    assert url_passwords("http://user:p%40ss%20word@host/v1") == [
        "p%40ss%20word", "p@ss word", *{base64.b64encode(b"user:p%40ss%20word").decode(), basic}]
    assert without_userinfo("http://user:pw@host:8080/v1?x=1") == "http://host:8080/v1?x=1"
    assert without_userinfo("http://host/v1") == "http://host/v1"
    found = environment_secrets({
        "GITHUB_TOKEN": "ghp_0123456789", "AWS_SECRET_ACCESS_KEY": "aws-secret-123", "PGPASSWORD": "pg-pass-123",
        "OPENAI_API_KEY": "sk-openai-1234", "SSH_KEY": "ssh-key-value1", "HF_TOKEN_PATH": "/home/me/.hf/token",
        "PATH": "/usr/local/bin:/usr/bin", "HOME": "/home/someone", "SHORT_TOKEN": "abc",
        "PIP_INDEX_URL": "https://me:pipPASS123@pypi.example/simple"}, ["stored-value-1"])
    assert set(found) >= {"ghp_0123456789", "aws-secret-123", "pg-pass-123", "sk-openai-1234", "ssh-key-value1",
                          "pipPASS123", "stored-value-1"}
    assert not {"/home/me/.hf/token", "/usr/local/bin:/usr/bin", "/home/someone"} & set(found)
