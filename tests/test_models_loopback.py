"""A model or embeddings server on this machine run by another login user is refused before a byte is sent.

Another user can listen on the owner's local model port (Ollama's 11434) while the owner's server is down;
it would get every prompt with MEMORY.md and answer with tool calls that run as the owner. Hermit looks up
the uid holding the other end of each new connection (hermit.models.loopback) and goes on only for its own
uid, root and system accounts. The other users here are real: listeners run as other uids (the suite runs
as root in CI), on 127.0.0.1 and ::1.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ciguard import need
from hermit import loopback
from hermit.cli.model_check import probe
from hermit.config.schema import MemorySearchConfig
from hermit.errors import ConfigError, EmbeddingError, ProviderError
from hermit.memory.embedders.remote import create_remote_embedder
from hermit.messages import UserMessage
from hermit.models import AnthropicModel, ModelProfile, ModelRequest, OpenAIModel, final_response
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT, ServerAs, python_as, pythonpath, shared_dir

REQUEST = ModelRequest("You are Hermit. MEMORY.md: divorce lawyer on Tuesday", (UserMessage("hello"),))
OTHER_USER = 54321  # a regular login user's uid (UID_MIN 1000 … UID_MAX 60000)
NOBODY = 65534
SYSTEM_USER = 998  # what `useradd --system ollama` allocates

# A squatter: accepts connections, keeps every byte it receives, reports them when its stdin closes.
LISTENER = r"""
import json, os, select, socket, sys
host, port = sys.argv[1], int(sys.argv[2])
srv = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if ":" in host:
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
srv.bind((host, port)); srv.listen(16)
print(srv.getsockname()[1], flush=True)
conns, accepted, received = [], 0, b""
while True:
    ready = select.select([srv, 0, *conns], [], [])[0]
    if 0 in ready and not os.read(0, 100):
        break
    if srv in ready:
        conns.append(srv.accept()[0]); accepted += 1
    for c in [c for c in conns if c in ready]:
        try:
            data = c.recv(65536)
        except OSError:
            data = b""
        if data:
            received += data
        else:
            conns.remove(c); c.close()
print(json.dumps({"accepted": accepted, "received": received.decode("latin-1")}), flush=True)
"""


# The owner's own embeddings server, in a process of its own so that killing it ends its connections too.
OWN_EMBEDDINGS = """
import sys
from hermit.testing.fake_embeddings import FakeEmbeddingServer
with FakeEmbeddingServer() as srv:
    print(srv.base_url, flush=True)
    sys.stdin.read()
"""


def as_uid(uid: int) -> dict[str, Any]:
    need(os.geteuid() == 0, "root (to listen as another uid)")
    return {"user": uid, "group": uid}


def interpreter(uid: int) -> str:
    python = python_as(as_uid(uid))
    assert python is not None, f"no interpreter uid {uid} can run"
    return python


class Squatter(ServerAs):
    """LISTENER running as `uid`; `finish()` stops it and returns what it received."""

    def __init__(self, uid: int, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(uid, LISTENER, host, str(port))
        self.host = host

    @property
    def url(self) -> str:
        return f"http://[{self.host}]:{self.port}" if ":" in self.host else f"http://{self.host}:{self.port}"


def squatter(uid: int, host: str = "127.0.0.1", port: int = 0) -> Squatter:
    return Squatter(uid, host, port)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder other uids can read and write (pytest's tmp_path sits under a root-only 0700 folder)."""
    with shared_dir("hermit-loopback-") as path:
        yield path


def model(api: str, base_url: str) -> AnthropicModel | OpenAIModel:
    # Short clocks, so that without the check (a squatter that never answers) the test fails in seconds.
    kw: dict[str, Any] = {"timeout_seconds": 3.0, "deadline_seconds": 8.0, "sleep": lambda _s: None}
    if api == "anthropic":
        return AnthropicModel(ModelProfile("fake", "m"), "sk-ant-k", base_url=base_url, **kw)
    return OpenAIModel(ModelProfile("fake", "m"), None, base_url=base_url + "/v1", **kw)


def call(m: AnthropicModel | OpenAIModel, streaming: bool, close: bool = True) -> str:
    try:
        reply = final_response(m.stream(REQUEST)) if streaming else m.complete(REQUEST)
    finally:
        if close:
            m.close()
    return reply.text


def embedder(base_url: str) -> Any:
    cfg = MemorySearchConfig.model_validate({
        "provider": "openai-compatible", "model": "fake-embed",
        "remote": {"base_url": base_url + "/v1", "timeout_seconds": 3, "max_retries": 0}})
    return create_remote_embedder(cfg, {}, sleep=lambda _s: None)


# -- the rule --------------------------------------------------------------------------------------------------


def test_own_root_and_system_uids_are_trusted_other_users_and_nobody_are_not() -> None:
    top = loopback.sys_uid_max()
    assert loopback.trusted_uid(os.geteuid()) and loopback.trusted_uid(0)
    assert loopback.trusted_uid(1) and loopback.trusted_uid(top) and loopback.trusted_uid(SYSTEM_USER)
    assert not loopback.trusted_uid(top + 1) or top + 1 == os.geteuid()
    assert not loopback.trusted_uid(OTHER_USER) and not loopback.trusted_uid(NOBODY)


def test_the_system_range_comes_from_login_defs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    defs = tmp_path / "login.defs"
    monkeypatch.setattr(loopback, "LOGIN_DEFS", defs)
    cases = [("UID_MIN 1000\n#SYS_UID_MAX 999\nSYS_UID_MAX\t 499\n", 499), ("UID_MIN\t\t 500\n", 499),
             ("# nothing\n", 999)]
    try:
        for text, top in cases:
            defs.write_text(text)
            loopback.sys_uid_max.cache_clear()
            assert loopback.sys_uid_max() == top, text
        defs.unlink()
        loopback.sys_uid_max.cache_clear()
        assert loopback.sys_uid_max() == 999
    finally:
        monkeypatch.undo()
        loopback.sys_uid_max.cache_clear()


# -- the chat model ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize("uid", [OTHER_USER, NOBODY])
def test_a_model_server_of_another_user_gets_nothing(api: str, streaming: bool, uid: int) -> None:
    with squatter(uid) as sq:
        with pytest.raises(ProviderError) as err:
            call(model(api, sq.url), streaming)
        seen = sq.finish()
    assert seen["received"] == "", "the request reached the other user's server"
    msg = str(err.value)
    assert f"127.0.0.1:{sq.port} is run by another user (uid {uid}" in msg
    assert "Hermit sent it nothing" in msg and "ollama serve" in err.value.hint
    assert "models.providers.fake.base_url" in err.value.hint


@pytest.mark.parametrize("host,connect", [("::1", "::1"), ("::", "127.0.0.1"), ("::", "::1")])
def test_ipv6_and_dual_stack_listeners_are_looked_up_too(host: str, connect: str) -> None:
    with squatter(OTHER_USER, host) as sq:
        url = f"http://[{connect}]:{sq.port}" if ":" in connect else f"http://{connect}:{sq.port}"
        with pytest.raises(ProviderError, match=rf"uid {OTHER_USER}\b"):
            call(model("openai", url), True)
        assert sq.finish()["received"] == ""


def test_localhost_and_a_wildcard_listener_are_checked() -> None:
    with squatter(OTHER_USER, "0.0.0.0") as sq:
        with pytest.raises(ProviderError, match=rf"uid {OTHER_USER}\b"):
            call(model("openai", f"http://localhost:{sq.port}"), False)
        assert sq.finish()["received"] == ""


def test_this_machines_own_addresses_are_looked_up_and_other_machines_are_not() -> None:
    """(Connecting to a non-loopback address is refused by conftest's guard, so only the test of it here.)"""
    assert loopback._is_own_address(ipaddress.ip_address("127.0.0.1"))
    assert loopback._is_own_address(ipaddress.ip_address("0.0.0.0"))
    assert not loopback._is_own_address(ipaddress.ip_address("203.0.113.7"))  # TEST-NET-3: no one's


def test_a_server_of_a_system_account_answers(shared: Path) -> None:
    """The common case besides `ollama serve`: Ollama's installer runs it as the system user `ollama`."""
    script = shared / "steps.json"
    script.write_text(json.dumps([{"text": "hello from the service", "repeat": True}]))
    proc = subprocess.Popen([interpreter(SYSTEM_USER), "-m", "hermit.testing.fake_provider", "--script",
                             str(script)], stdout=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()}, **as_uid(SYSTEM_USER))
    try:
        assert proc.stdout is not None
        found = re.search(r"http://127\.0\.0\.1:\d+", proc.stdout.readline())
        assert found, "the fake provider did not start"
        assert call(model("openai", found.group(0)), True) == "hello from the service"
        assert call(model("anthropic", found.group(0)), False) == "hello from the service"
    finally:
        proc.terminate()
        proc.wait(PROC_TIMEOUT)


def test_the_owners_own_server_answers() -> None:
    with FakeProvider([{"text": "mine", "repeat": True}]) as fake:
        assert call(model("openai", fake.base_url), True) == "mine"
        assert call(model("anthropic", fake.base_url), False) == "mine"


@pytest.mark.parametrize("streaming", [True, False])
def test_a_server_replaced_between_calls_is_caught_on_the_next_one(streaming: bool) -> None:
    with FakeProvider([{"text": "mine", "repeat": True}]) as fake:
        m = model("openai", fake.base_url)
        port = fake.port
        assert call(m, streaming, close=False) == "mine"
    with squatter(OTHER_USER, port=port) as sq:
        with pytest.raises(ProviderError, match=rf"uid {OTHER_USER}\b"):
            call(m, streaming)  # the same model object, as a long-running gateway keeps it
        assert sq.finish()["received"] == ""


# -- memory_search's remote embeddings --------------------------------------------------------------------


def test_an_embeddings_server_of_another_user_gets_no_note() -> None:
    with squatter(OTHER_USER) as sq:
        emb = embedder(sq.url)
        with pytest.raises(EmbeddingError) as err:
            emb.embed_documents(["- PRIVATE: divorce lawyer appointment Tuesday"])
        emb.close()
        assert sq.finish()["received"] == ""
    assert f"uid {OTHER_USER}" in str(err.value) and "memory_search.remote.base_url" in err.value.hint


def test_an_embeddings_server_replaced_between_calls_is_caught() -> None:
    """The embedder keeps connections alive: when the owner's server dies (killed, its connections with it),
    the next call's new connection is checked again."""
    own = subprocess.Popen([sys.executable, "-c", OWN_EMBEDDINGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert own.stdout is not None
        base_url = own.stdout.readline().strip()
        emb = embedder(base_url)
        assert emb.embed_query("mine").shape[0] > 0
    finally:
        own.kill()
        own.wait(PROC_TIMEOUT)
    with squatter(OTHER_USER, port=int(base_url.rsplit(":", 1)[1])) as sq:
        with pytest.raises(EmbeddingError, match=rf"uid {OTHER_USER}\b"):
            emb.embed_query("divorce lawyer")
        emb.close()
        assert sq.finish()["received"] == ""


# -- end to end: the auditor's reproducer --------------------------------------------------------------------


def test_hermit_agent_sends_no_prompt_to_another_users_server(tmp_path: Path, shared: Path) -> None:
    """`hermit agent -m` against a server another user started on the configured port: it fails naming the
    uid, the server records no request, and the tool call it would answer with never runs."""
    pwned = shared / "owner_exec_by_otheruser.txt"
    steps = shared / "steps.json"
    steps.write_text(json.dumps([{"tool_calls": [{"name": "exec", "arguments": {"command": f"id > {pwned}"}}]},
                                 {"text": "ok", "repeat": True}]))
    record = shared / "requests.jsonl"
    fake = subprocess.Popen([interpreter(OTHER_USER), "-m", "hermit.testing.fake_provider", "--script", str(steps),
                             "--record", str(record)], stdout=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath()}, **as_uid(OTHER_USER))
    try:
        assert fake.stdout is not None
        found = re.search(r"http://127\.0\.0\.1:\d+", fake.stdout.readline())
        assert found, "the fake provider did not start"
        home = tmp_path / "home"
        (home / "workspace").mkdir(parents=True)
        (home / "workspace" / "MEMORY.md").write_text("- PRIVATE: divorce lawyer appointment Tuesday\n")
        (home / "hermit.yaml").write_text(yaml.safe_dump({
            "agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}}},
            "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": found.group(0) + "/v1",
                                              "timeout_seconds": 5, "deadline_seconds": 20}}}}))
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        proc = subprocess.run([sys.executable, "-m", "hermit.cli.main", "agent", "-m", "what is on my calendar?"],
                              capture_output=True, text=True, timeout=PROC_TIMEOUT,
                              env={**env, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"})
    finally:
        fake.terminate()
        fake.wait(PROC_TIMEOUT)
    assert proc.returncode != 0
    assert f"is run by another user (uid {OTHER_USER}" in proc.stderr, proc.stderr
    assert not pwned.exists()
    assert not record.exists() or record.read_text() == ""


def test_the_doctor_names_the_user_holding_the_model_port() -> None:
    with squatter(OTHER_USER) as sq:
        with pytest.raises(ConfigError, match=rf"127\.0\.0\.1:{sq.port} is run by another user \(uid {OTHER_USER}"):
            probe(sq.url + "/v1")
        assert sq.finish()["received"] == ""
    with FakeProvider([]) as fake:
        assert probe(fake.openai_base_url) is None
