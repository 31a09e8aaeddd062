"""Model calls end: an overall deadline beats an SSE keep-alive that never stops, a CancelToken (the
gateway's shutdown) or Ctrl-C (`hermit chat`) ends a call promptly, a refused loopback connection fails
fast with a message naming the port, and retry notices read like the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agenthelpers import load, make_runtime
from hermit.errors import Cancelled, ProviderError
from hermit.messages import UserMessage
from hermit.models import AnthropicModel, ModelProfile, ModelRequest, OpenAIModel, final_response
from hermit.models.cancel import CancelToken, run_cancellable
from hermit.sessions.transcript import CustomEntry, MessageEntry, read_transcript
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT

REQUEST = ModelRequest("You are Hermit.", (UserMessage("hello"),))


def model(api: str, fake: FakeProvider | None, *, deadline: float = 1.0, base_url: str | None = None,
          sleeps: list[float] | None = None, notices: list[str] | None = None) -> AnthropicModel | OpenAIModel:
    kw: dict[str, Any] = {"deadline_seconds": deadline, "timeout_seconds": 30.0,
                          "notify": notices.append if notices is not None else None,
                          "sleep": sleeps.append if sleeps is not None else None}
    if api == "anthropic":
        return AnthropicModel(ModelProfile("fake", "m"), "k", base_url=base_url or (fake and fake.base_url), **kw)
    return OpenAIModel(ModelProfile("fake", "m"), None, base_url=base_url or (fake and fake.openai_base_url), **kw)


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("streaming", [True, False])
def test_keepalives_forever_end_at_the_deadline(api: str, streaming: bool) -> None:
    with FakeProvider([{"text": "never sent", "keepalive": 0.1}]) as fake:
        m = model(api, fake, deadline=1.0)
        t0 = time.monotonic()
        with pytest.raises(ProviderError, match=r"no complete answer within 1s") as err:
            final_response(m.stream(REQUEST)) if streaming else m.complete(REQUEST)
        took = time.monotonic() - t0
        m.close()
    assert 0.9 <= took < 4.0, took  # the idle timeout (30 s) never fired: keep-alives kept coming
    assert "deadline_seconds" in err.value.hint
    assert len(fake.requests) == 1  # a deadline is not retried


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_keepalives_then_a_reply_within_the_deadline(api: str) -> None:
    with FakeProvider([{"text": "Hello there", "keepalive": 0.05, "keepalive_for": 0.3}]) as fake:
        m = model(api, fake, deadline=10.0)
        assert final_response(m.stream(REQUEST)).text == "Hello there"
        m.close()


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_cancel_token_ends_a_call_promptly(api: str) -> None:
    with FakeProvider([{"text": "never sent", "keepalive": 0.1}]) as fake:
        m = model(api, fake, deadline=60.0)
        token = CancelToken()
        threading.Timer(0.5, token.cancel).start()
        t0 = time.monotonic()
        with pytest.raises(Cancelled):
            final_response(m.stream(ModelRequest("s", (UserMessage("hi"),), cancel=token)))
        assert time.monotonic() - t0 < 3.0
        # an already cancelled token never starts a request
        with pytest.raises(Cancelled):
            m.complete(ModelRequest("s", (UserMessage("hi"),), cancel=token))
        assert len(fake.requests) == 1
        m.close()


def test_cancelling_the_gateway_task_cancels_the_turn(tmp_path: Path) -> None:
    with FakeProvider([{"text": "never sent", "keepalive": 0.1}]) as fake:
        rt = make_runtime(load(tmp_path / "home", "openai", fake), None, memory=False)

        async def shutdown_during_turn() -> float:
            task = asyncio.create_task(run_cancellable(
                lambda token: rt.run_turn("agent:main:main", "hi", lambda e: None, cancel=token)))
            while not fake.requests:
                await asyncio.sleep(0.02)
            t0 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return time.monotonic() - t0

        assert asyncio.run(shutdown_during_turn()) < 3.0
        record = rt.session("agent:main:main")
        assert record is not None
        entries = read_transcript(rt.store.transcript_path(record.session_id)).entries
        last = [e for e in entries if isinstance(e, MessageEntry)][-1].message
        assert last["role"] == "assistant" and last["stopReason"] == "error"
        assert "interrupted" in json.dumps(last)
        # The runtime marks the turn interrupted after the failed message, as the gateway's shutdown expects.
        assert isinstance(entries[-1], CustomEntry) and entries[-1].custom_type == "interrupted"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_refused_loopback_fails_fast_without_retries(api: str) -> None:
    port = _free_port()
    sleeps: list[float] = []
    notices: list[str] = []
    base = f"http://127.0.0.1:{port}" + ("/v1" if api == "openai" else "")
    m = model(api, None, base_url=base, sleeps=sleeps, notices=notices)
    t0 = time.monotonic()
    with pytest.raises(ProviderError) as err:
        m.complete(REQUEST)
    assert time.monotonic() - t0 < 2.0
    assert f"nothing listens on 127.0.0.1:{port} — is your local model server running?" in err.value.message
    assert "base_url" in err.value.hint
    assert sleeps == [] and notices == []
    m = model(api, None, base_url=f"http://localhost:{port}/v1", sleeps=sleeps)
    with pytest.raises(ProviderError, match=f"nothing listens on localhost:{port}"):
        m.complete(REQUEST)


def test_unreachable_remote_hosts_are_still_retried_with_cli_style_notices() -> None:
    # The test guard refuses non-loopback connections, which is a refused connection to a remote host.
    sleeps: list[float] = []
    notices: list[str] = []
    m = model("openai", None, base_url="http://10.255.255.1:9/v1", sleeps=sleeps, notices=notices, deadline=600)
    with pytest.raises(ProviderError, match="cannot reach"):
        m.complete(REQUEST)
    assert sleeps == [1.0, 2.0, 4.0]
    assert [n.split(":")[0] for n in notices] == ["retrying in 1 s (1/3)", "retrying in 2 s (2/3)",
                                                  "retrying in 4 s (3/3)"]


def _write_config(home: Path, fake: FakeProvider) -> None:
    (home / "workspace").mkdir(parents=True, exist_ok=True)  # as after `hermit init`
    cfg = {"agents": {"defaults": {"model": "fake/m", "memory_search": {"provider": "none"}}},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url,
                                             "deadline_seconds": 1.5}}}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return {**env, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}


def test_cli_retry_notice_and_deadline(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"error": 500, "message": "try later"}, "Fine now.",
                       {"text": "never", "keepalive": 0.1}]) as fake:
        _write_config(home, fake)
        r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "agent", "-m", "hi"], env=_env(home),
                           capture_output=True, text=True, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)
        assert r.returncode == 0 and "Fine now." in r.stdout, r.stderr
        assert "retrying in 1 s (1/3): fake (HTTP 500): provider error: try later" in r.stderr
        assert "WARNING" not in r.stderr and "hermit.models" not in r.stderr
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "agent", "-m", "again", "--json"],
                           env=_env(home), capture_output=True, text=True, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)
        assert r.returncode == 1 and "no complete answer within 1.5s" in r.stderr
        assert time.monotonic() - t0 < 20


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_chat_cancels_the_reply_promptly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "never", "keepalive": 0.1}, "Second answer."]) as fake:
        _write_config(home, fake)
        cfg = yaml.safe_load((home / "hermit.yaml").read_text())
        cfg["models"]["providers"]["fake"]["deadline_seconds"] = 600
        (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))
        # As from a terminal: SIGINT at its default. A test run started in the background of a
        # non-interactive shell inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
        proc = subprocess.Popen([sys.executable, "-m", "hermit.cli.main", "chat"], env=_env(home),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_sigint_default)
        try:
            assert proc.stdin is not None
            proc.stdin.write("first question\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 60
            while not fake.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert fake.requests, "the chat never called the model"
            time.sleep(0.3)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate("second question\n", timeout=PROC_TIMEOUT)
            assert time.monotonic() - t0 < 10
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "[cancelled]" in out, out + err
    assert "Second answer." in out  # the session goes on after a cancelled reply
    assert proc.returncode == 0
