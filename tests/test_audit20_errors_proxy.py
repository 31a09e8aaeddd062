"""Audit 20, outbound traffic: a proxy from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY — set for package
downloads in a corporate shell or a container, without NO_PROXY) never gets a request meant for this machine.

httpx, like curl and requests, sent `http://127.0.0.1:11434/v1/chat/completions` through HTTP_PROXY: the proxy got
every prompt of the owner's local model (MEMORY.md, the main session) and its key in plain text, and could answer
with tool calls that run as the owner; a Bot API server of the owner's own got the bot token in every URL; the local
embeddings server's chunks of private notes went the same way; and the port check (hermit.loopback) looked at the
proxy's socket instead of the server's. Real `hermit gateway run` with the real Telegram adapter, the fake Bot API
and the fake provider on 127.0.0.1, and a recording "proxy" on 127.0.0.1 that answers 502 to whatever reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from audit19_who import until
from channeldrivers import Driver, SlackDriver, TelegramDriver
from channelhelpers import run
from hermit.cli.model_check import probe
from hermit.config.schema import MemorySearchConfig
from hermit.errors import HermitError
from hermit.memory.embedders.remote import create_remote_embedder
from hermit.messages import UserMessage
from hermit.models import AnthropicModel, ModelProfile, ModelRequest, OpenAIModel, final_response
from hermit.testing.fake_embeddings import FakeEmbeddingServer
from hermit.testing.fake_provider import FakeProvider
from test_channel_gateway import Gateway, env_for

KEY = "sk-local-AUDIT20-PROXYKEY-5521"
MEMORY_CANARY = "QUOLL-MEMORY-PROXY-9911"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


class RecordingProxy:
    """A TCP server on 127.0.0.1 standing for a proxy on another host: it records the first bytes of every
    connection and answers 502, as a proxy that cannot reach the target would."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.seen: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def answer(self) -> bytes:
        return b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.seen.append(conn.recv(65536))
                    conn.sendall(self.answer())
                except OSError:
                    pass

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # close() alone leaves the thread blocked in accept() until join's timeout (10 s per server); shutting
        # the listening socket down wakes it at once (EINVAL on Linux).
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the recording server's thread did not stop"


def proxied_env(base: dict[str, str], proxy: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k.lower() != "no_proxy"}
    return env | {name: proxy for name in PROXY_VARS}


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingProxy]:
    with RecordingProxy() as p:
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        for name in PROXY_VARS:
            monkeypatch.setenv(name, p.url)
        yield p


@pytest.mark.parametrize("platform", ["telegram", "slack"])
def test_gateway_reaches_local_model_and_platform_directly(tmp_path: Path, platform: str) -> None:
    """The owner's DM through a platform API server on this machine (a Bot API server of one's own; a Slack relay
    with its Socket Mode websocket) and a local model, with every proxy variable set: the answer arrives, the proxy
    saw nothing (before: it got Telegram's getMe URL with the token, or Slack's auth.test with it, and the turn
    never ran)."""
    with RecordingProxy() as prox, FakeProvider([{"text": "direct-ok", "repeat": True}], api_key=KEY) as provider:
        async def body() -> list[str]:
            driver: Driver = TelegramDriver(["personal"]) if platform == "telegram" else SlackDriver(["personal"])
            owner = "1001" if platform == "telegram" else "U1001"
            await driver.start()
            home = tmp_path / "home"
            account = {**driver.account_config("personal"), "owners": [owner]}
            cfg = {"agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}}},
                   "models": {"providers": {"fake": {"type": "openai-compatible", "api_key_env": "AUDIT20_KEY",
                                                     "base_url": provider.openai_base_url}}},
                   "gateway": {"shutdown_grace_seconds": 5},
                   "channels": {platform: {"accounts": {"personal": account}}}}
            home.mkdir(mode=0o700)
            (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
            (home / "workspace").mkdir()
            (home / "workspace" / "MEMORY.md").write_text(f"- quoll {MEMORY_CANARY}\n", encoding="utf-8")
            gw = Gateway(home, proxied_env(env_for(driver), prox.url) | {"AUDIT20_KEY": KEY})
            try:
                await gw.start()
                await driver.dm("personal", owner, "hello there")
                await until(lambda: bool(driver.texts("personal", owner)), "the owner's answer", 90)
                return driver.texts("personal", owner)
            finally:
                if gw.proc is not None:
                    await gw.stop()
                await driver.stop()

        sent = run(body, timeout=150)
        assert sent == ["direct-ok"], sent
        seen = b"".join(prox.seen)
        assert prox.seen == [], seen[:400]
        assert provider.requests and MEMORY_CANARY in str(provider.requests[-1].body)


def ask_local_model(provider: FakeProvider, host: str) -> None:
    """`provider` (answering "direct-ok") at `host` asked in both wire formats, streamed and not, and probed as the
    doctor and setup do; the last request carried the memory canary."""
    request = ModelRequest(system=f"memory: {MEMORY_CANARY}", messages=(UserMessage("hi"),))
    base = provider.base_url.replace("127.0.0.1", host)
    models = (OpenAIModel(ModelProfile("fake", "m"), KEY, base_url=base + "/v1", max_retries=0),
              AnthropicModel(ModelProfile("fake", "m"), KEY, base_url=base, max_retries=0))
    for model in models:
        try:
            assert model.complete(request).text == "direct-ok"
            assert final_response(model.stream(request)).text == "direct-ok"
        finally:
            model.close()
    assert probe(base + "/v1", 5.0) is None
    assert MEMORY_CANARY in str(provider.requests[-1].body)


def test_model_clients_go_direct_to_this_machine(proxy: RecordingProxy) -> None:
    """Both wire formats, streamed and not, by 127.0.0.1 and by the name localhost (`hermit agent`, cron, the
    gateway), and the doctor's/setup's probe of a local model server."""
    with FakeProvider([{"text": "direct-ok", "repeat": True}], api_key=KEY) as provider:
        for host in ("127.0.0.1", "localhost"):
            ask_local_model(provider, host)
    assert proxy.seen == [], proxy.seen[:1]


def test_embedder_goes_direct_to_this_machine(proxy: RecordingProxy) -> None:
    """A local embeddings server (Ollama's /v1) gets the notes' chunks itself, not through the proxy."""
    with FakeEmbeddingServer(dims=16) as srv:
        cfg = MemorySearchConfig.model_validate({
            "provider": "openai-compatible", "model": "fake-embed",
            "remote": {"base_url": srv.openai_base_url, "timeout_seconds": 3, "max_retries": 0}})
        embedder = create_remote_embedder(cfg, {}, sleep=lambda _s: None)
        vectors = embedder.embed_documents([f"private note {MEMORY_CANARY}"])
        assert len(vectors) == 1 and srv.requests
    assert proxy.seen == [], proxy.seen[:1]


def test_other_hosts_keep_the_proxy(proxy: RecordingProxy) -> None:
    """Only this machine goes direct: a request for another host still goes through the environment's proxy
    (hermit.direct_http decides by the request's host)."""
    from hermit.direct_http import DirectHereClient, goes_direct

    with DirectHereClient() as client:
        resp = client.get("http://proxied.example.invalid/x")
        assert resp.status_code == 502
        assert proxy.seen and proxy.seen[0].startswith(b"GET http://proxied.example.invalid/x"), proxy.seen
        assert os.environ["HTTP_PROXY"] == proxy.url
        # Another loopback address goes direct too; a name other than localhost is not resolved.
        assert goes_direct(client, "http://127.0.0.2:11434/v1")
        assert not goes_direct(client, "https://api.openai.com/v1")


class Redirector(RecordingProxy):
    """A base URL that answers every request with a redirect to `target` (another host, for the client)."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target

    def answer(self) -> bytes:
        return (f"HTTP/1.1 307 Temporary Redirect\r\nlocation: {self.target}\r\ncontent-length: 0\r\n"
                "connection: close\r\n\r\n").encode()


def test_a_redirecting_base_url_sends_the_key_nowhere_else() -> None:
    """A base URL answering 307 to another host (a moved endpoint, a captive portal, a hostile server): the model
    adapters (Anthropic's x-api-key, which httpx would not strip on a redirect, and OpenAI's Bearer) and the
    embedder do not follow it; the call fails with an error naming base_url, and the other host gets nothing."""
    with RecordingProxy() as elsewhere, Redirector(elsewhere.url + "/v1/chat/completions") as base:
        request = ModelRequest(system=f"memory: {MEMORY_CANARY}", messages=(UserMessage("hi"),))
        for model in (OpenAIModel(ModelProfile("fake", "m"), KEY, base_url=base.url + "/v1", max_retries=0),
                      AnthropicModel(ModelProfile("fake", "m"), KEY, base_url=base.url, max_retries=0)):
            try:
                with pytest.raises(HermitError) as err:
                    model.complete(request)
            finally:
                model.close()
            assert "base_url" in str(err.value) and KEY not in str(err.value), err.value
        cfg = MemorySearchConfig.model_validate({
            "provider": "openai-compatible", "model": "fake-embed",
            "remote": {"base_url": base.url + "/v1", "api_key": KEY, "timeout_seconds": 3, "max_retries": 0}})
        with pytest.raises(HermitError) as err:
            create_remote_embedder(cfg, {}, sleep=lambda _s: None).embed_documents(["private note"])
        assert "base_url" in str(err.value) and KEY not in str(err.value), err.value
        assert len(base.seen) == 3
    assert elsewhere.seen == [], elsewhere.seen


def test_setup_token_checks_go_direct_to_this_machine(proxy: RecordingProxy) -> None:
    """`hermit setup`'s token check (getMe, auth.test) against a platform API server on this machine: the token goes
    to it, not through the environment's proxy."""
    from hermit.cli.channel_check import TokenCheck, check_token

    async def body() -> list[str]:
        tg, slack = TelegramDriver(["personal"]), SlackDriver(["personal"])
        await tg.start()
        await slack.start()
        try:
            checks = [TokenCheck("personal", tg.fakes["personal"].base_url, tg.fakes["personal"].token),
                      TokenCheck("personal", slack.fakes["personal"].base_url + "/api",
                                 slack.fakes["personal"].bot_token, channel="slack")]
            return [await asyncio.to_thread(check_token, c) for c in checks]
        finally:
            await tg.stop()
            await slack.stop()

    said = run(body)
    assert said[0].startswith("it is the token of the bot @") and said[1], said
    assert proxy.seen == [], proxy.seen[:1]
