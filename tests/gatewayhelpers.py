"""Helpers for gateway tests: runtimes on FunctionModel/ScriptedModel, and a channel that records what
the gateway sends (a real Channel implementation, not a mock)."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agenthelpers import fixed_clock, load_offline
from ciguard import need
from hermit.agent.runtime import AgentRuntime
from hermit.channels.base import (
    ChannelCapabilities,
    ChannelStatus,
    InboundMessage,
    InboundSink,
    Outbound,
    OutboundMessage,
    PeerKind,
    TurnEnd,
)
from hermit.gateway.agents import AgentHost
from hermit.gateway.bus import Admission, Bus, Routed
from hermit.gateway.supervisor import split_chunks
from hermit.models.base import ModelRequest
from hermit.sessions.keys import group_session_key, main_session_key
from hermit.testing.scripted import FunctionModel, Reply
from prochelpers import PROC_TIMEOUT


class RecordingChannel:
    """A channel that keeps every outbound item; `streaming` and limits are set per test."""

    def __init__(self, name: str = "telegram", account_id: str = "default", *, streaming: bool = False,
                 max_chars: int = 4000) -> None:
        self.name = name
        self.account_id = account_id
        self.capabilities = ChannelCapabilities(max_chars=max_chars, streaming=streaming)
        self.items: list[Outbound] = []
        self.sink: InboundSink | None = None

    async def start(self, sink: InboundSink) -> None:
        self.sink = sink

    async def send(self, item: Outbound) -> None:
        self.items.append(item)

    async def stop(self) -> None:
        self.sink = None

    def status(self) -> ChannelStatus:
        return ChannelStatus(self.name, self.account_id, connected=self.sink is not None)

    def messages(self, peer: str | None = None) -> list[OutboundMessage]:
        return [i for i in self.items if isinstance(i, OutboundMessage) and (peer is None or i.target.peer_id == peer)]

    def ends(self) -> list[TurnEnd]:
        return [i for i in self.items if isinstance(i, TurnEnd)]


def inbound(text: str, peer: str = "u1", *, kind: PeerKind = "dm", channel: str = "telegram",
            message_id: str = "") -> InboundMessage:
    return InboundMessage(channel=channel, account_id="default", peer_kind=kind, peer_id=peer, sender_id=peer,
                          text=text, message_id=message_id)


def runtime(home: Path, fn: Callable[[ModelRequest], Reply], **defaults: Any) -> AgentRuntime:
    loaded = load_offline(home, defaults=defaults)
    return AgentRuntime(loaded.agent(), FunctionModel(fn), clock=fixed_clock, fsync=False, home=home)


def route_dm_main_group_own(msg: InboundMessage) -> Routed:
    """Tests' routing: DMs go to the main session, groups to their own session (dm_scope main)."""
    if msg.peer_kind == "group":
        return Routed("main", group_session_key("main", msg.channel, msg.peer_id))
    if msg.peer_id.startswith("own-"):  # a per-peer session, for tests of concurrency
        return Routed("main", f"agent:main:{msg.channel}:dm:{msg.peer_id}")
    return Routed("main", main_session_key("main"))


def allow_all(msg: InboundMessage, agent_id: str) -> Admission:
    return Admission(True)


class HeldAdmission:
    """An admission check that lets everyone in and holds its `at`-th call (counting from 1; a message is checked
    when it is published, again when its turn is about to start, and once more before its reply is sent) until `go_on` is set; `checking` says it is
    held there."""

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0
        self.checking, self.go_on = threading.Event(), threading.Event()

    def __call__(self, _msg: InboundMessage, _agent: str) -> Admission:
        self.calls += 1
        if self.calls == self.at:
            self.checking.set()
            self.go_on.wait(20)
        return Admission(True)


def make_bus(rt: AgentRuntime, *channels: RecordingChannel, queue_limit: int = 8,
             admit: Callable[[InboundMessage, str], Admission] = allow_all) -> Bus:
    return Bus(AgentHost({"main": rt}), route=route_dm_main_group_own, admit=admit,
               channels={(c.name, c.account_id): c for c in channels}, chunk=split_chunks, queue_limit=queue_limit)


def last_user_text(request: ModelRequest) -> str:
    """The last user message's own words: a group's turn reaches the model after its sender's line
    (`[Name (id)]`, agent/speakers.py), which is left out here; tests of that line read the request."""
    for m in reversed(request.messages):
        d = m.to_dict()
        if d.get("role") == "user":
            content = d.get("content")
            text = content if isinstance(content, str) else "".join(
                p.get("text", "") for p in content or [] if isinstance(p, dict))
            return text.split("\n", 1)[1] if SENDER_LINE.match(text) else text
    return ""


# A group turn's first line, as the model is shown it (`[Gus (3001)]`, `[g1]`, `[Ann (1001) — the owner]`); never
# a scheduled job's own header (`[Scheduled job standup · …]`), which is the turn's text.
SENDER_LINE = re.compile(r"\[(?!Scheduled job |System event from scheduled job )[^\[\]\n]*\]\n")
CHROMIUM = "/usr/lib/chromium/chromium"
# Flags that work headless as root on a shared machine (MACHINE.md); no network the tests did not ask for.
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launched_chromium(*flags: str) -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (with `flags` besides CHROMIUM_FLAGS), for a module's `browser`
    fixture (`yield from`)."""
    chromium = need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=[*CHROMIUM_FLAGS, *flags], headless=True)
        try:
            yield b
        finally:
            b.close()


def need_chromium() -> str:
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium") or ""
    need(bool(path), "Chromium (apt-get install -y --no-install-recommends chromium)")
    return path


def write_config(home: Path, base_url: str, *, grace: float = 10.0, extra: str = "") -> None:
    """hermit.yaml for a gateway subprocess talking to a FakeProvider (keyword-only memory: no model load)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    model: fake/test-model\n    timezone: Europe/Paris\n"
        "    memory_search: {provider: none}\n"
        f"models:\n  providers:\n    fake: {{type: openai-compatible, base_url: \"{base_url}\"}}\n"
        f"gateway:\n  shutdown_grace_seconds: {grace}\n{extra}", encoding="utf-8")


class GatewayProcess:
    """`hermit gateway run --port 0` as a subprocess; `url` is the web chat URL with the token."""

    def __init__(self, home: Path, *args: str) -> None:
        self.home = home
        self.stderr_path = home / "gateway.stderr"
        self._stderr = self.stderr_path.open("w")
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hermit.cli.main", "--home", str(home), "gateway", "run", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = ""

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_ready(self, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if line.startswith("web chat: "):  # the page's URL, without the token (stdout may be a journal)
                token = (self.home / "gateway" / "token").read_text(encoding="utf-8").strip()
                self.url = f"{line.split()[2]}?token={token}"
                return self.url
        raise AssertionError(f"gateway did not start (exit {self.proc.poll()}): {self.stderr()}")

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    @property
    def port(self) -> int:
        """The port the gateway chose (once ready)."""
        p = urlsplit(self.url).port
        assert p is not None, self.url
        return p

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://").split("/?", 1)[0] + "/ws"

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(PROC_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._stderr.close()


def transcript_lines(home: Path) -> list[dict[str, Any]]:
    """Every line of every transcript of agent main, parsed (fails on a line that is not JSON)."""
    out = []
    for path in sorted((home / "agents" / "main" / "sessions").glob("*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert line.strip(), f"{path}:{n} is empty"
            out.append(json.loads(line))
    return out


def ws_calls(ws_url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Sign in to the gateway's WebSocket at `ws_url` as the web app does and make `calls`; each `res` frame (a
    chat.send's once its reply has ended)."""
    from websockets.sync.client import connect

    out: list[dict[str, Any]] = []
    with connect(ws_url, origin=None) as ws:
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": token}}))
        assert json.loads(ws.recv(30))["ok"]
        for n, (method, params) in enumerate(calls):
            rid = f"r{n}"
            ws.send(json.dumps({"type": "req", "id": rid, "method": method, "params": params}))
            res: dict[str, Any] | None = None
            while True:
                f = json.loads(ws.recv(120))
                if f.get("type") == "res" and f.get("id") == rid:
                    res = f
                    if method != "chat.send" or not f["ok"]:
                        break
                elif f.get("event") == "chat.done" and f["payload"].get("replyTo") == rid:
                    break
            assert res is not None
            out.append(res)
    return out


def unused_model_gateway(home: Path, extra: str = "", *args: str) -> Iterator[GatewayProcess]:
    """A ready `hermit gateway run` at `home` (with `args`) whose model is never called (nothing listens at its
    provider's address), its config written with `extra` gateway lines; for a fixture (`yield from`), stopped
    afterwards (SIGTERM)."""
    write_config(home, "http://127.0.0.1:9/v1", extra=extra)
    gw = GatewayProcess(home, *args)
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


# The same for a `with` in a test body.
running_gateway = contextmanager(unused_model_gateway)
