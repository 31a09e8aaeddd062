"""One proxy rule for every client (s22): a request for this machine goes direct, any other follows the proxy
variables, decided per request by its host (hermit.direct_http, by hermit.loopback.is_here).

Before, two mechanisms did it: the channels' clients and setup's probe decided per request by `is_here`, which reads
127.1, 2130706433 and 0x7f.1 as 127.0.0.1 (the resolver does); the model clients, the remote embedder and the
doctor's model probe were built with httpx mounts for the names and addresses their base URL spelled
(loopback.direct_here), which read such a host as a name — so a local model written as `http://127.1:11434/v1` got
its prompts (MEMORY.md, the main session) and its key through HTTP_PROXY in plain text, and a local embeddings
server its note chunks. Real adapters, the fake provider and embeddings server on 127.0.0.1, a recording "proxy".
"""

from __future__ import annotations

import pytest

from hermit.config.schema import MemorySearchConfig
from hermit.memory.embedders.remote import create_remote_embedder
from hermit.testing.fake_embeddings import FakeEmbeddingServer
from hermit.testing.fake_provider import FakeProvider
from test_audit20_errors_proxy import KEY, MEMORY_CANARY, RecordingProxy, ask_local_model, proxy  # noqa: F401 (a fixture)

# 127.0.0.1 as the resolver (inet_aton) reads it; httpx keeps each as a name
SPELLINGS = ("127.1", "2130706433", "0x7f.1")


@pytest.mark.parametrize("host", SPELLINGS)
def test_a_local_model_so_written_gets_its_prompts_directly(proxy: RecordingProxy, host: str) -> None:  # noqa: F811
    with FakeProvider([{"text": "direct-ok", "repeat": True}], api_key=KEY) as provider:
        ask_local_model(provider, host)
    assert proxy.seen == [], proxy.seen[:1]


@pytest.mark.parametrize("host", SPELLINGS)
def test_a_local_embeddings_server_so_written_gets_the_notes_directly(proxy: RecordingProxy,  # noqa: F811
                                                                     host: str) -> None:
    with FakeEmbeddingServer(dims=16) as srv:
        cfg = MemorySearchConfig.model_validate({
            "provider": "openai-compatible", "model": "fake-embed",
            "remote": {"base_url": srv.openai_base_url.replace("127.0.0.1", host), "timeout_seconds": 3,
                       "max_retries": 0}})
        embedder = create_remote_embedder(cfg, {}, sleep=lambda _s: None)
        assert len(embedder.embed_documents([f"private note {MEMORY_CANARY}"])) == 1 and srv.requests
    assert proxy.seen == [], proxy.seen[:1]


def test_the_rule_is_the_same_for_http_and_websockets_and_the_doctor(proxy: RecordingProxy) -> None:  # noqa: F811
    """The doctor reports what the clients do, and Slack's websocket follows the same rule."""
    from hermit.direct_http import DirectHereClient, goes_direct, websocket_proxy

    here = ("localhost", "a.localhost", "localhost.", "127.0.0.2", "[::1]", "0.0.0.0", *SPELLINGS)
    elsewhere = ("api.openai.com", "192.0.2.254", "[2001:db8::9]", "localhost.example")
    with DirectHereClient() as client:
        for host in here:
            assert goes_direct(client, f"http://{host}:11434/v1"), host
            assert websocket_proxy(f"wss://{host}:8443/link") is None, host
        for host in elsewhere:
            assert not goes_direct(client, f"https://{host}/v1"), host
            assert websocket_proxy(f"wss://{host}/link") is True, host
