"""Audit 20, outbound traffic: an embeddings key goes only to the endpoint it was configured with.

agents.defaults.memory_search.remote's credentials (api_key, api_key_env, headers) were merged into every agent
entry, also one that names an endpoint of its own: a relative's family agent pointed at the relative's Ollama server
(`provider: openai-compatible`, `remote.base_url: http://<their machine>:11434/v1`) sent the owner's OpenAI key to it
as its Bearer token, in plain HTTP, with every note it embedded. Real config loading (hermit.yaml through
load_config) and the real remote embedder against the fake embeddings server, standing for the other host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hermit.config import StatePaths
from hermit.config.load import load_config
from hermit.memory.embedders.remote import create_remote_embedder
from hermit.testing.fake_embeddings import FakeEmbeddingServer

KEY = "sk-proj-AUDIT20-OWNERS-OPENAI-KEY-41c9"
FAMILY_KEY = "fam-AUDIT20-RELATIVES-KEY-77aa"


def agents(tmp_path: Path, defaults_ms: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cfg = {"agents": {"defaults": {"model": "fake/m", "memory_search": defaults_ms},
                      "list": [{"id": "main", "default": True}, *entries]},
           "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": "http://127.0.0.1:9/v1"}}}}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    loaded = load_config(StatePaths(home), home / "hermit.yaml")
    return {a.id: a.settings.memory_search for a in loaded.agents}


def sent_auth(srv: FakeEmbeddingServer, ms: Any) -> list[str]:
    """Embed one note with the agent's settings; the Authorization headers the server got."""
    before = len(srv.requests)
    embedder = create_remote_embedder(ms, {"AUDIT20_OPENAI_KEY": KEY}, sleep=lambda _s: None)
    embedder.embed_documents(["a note"])
    return [r.headers.get("authorization", "") for r in srv.requests[before:]]


def test_a_family_agents_own_endpoint_never_gets_the_owners_key(tmp_path: Path) -> None:
    with FakeEmbeddingServer(dims=16) as relatives, FakeEmbeddingServer(dims=16) as owners:
        by_id = agents(tmp_path, {"provider": "openai-compatible", "model": "fake-embed",
                                  "remote": {"base_url": owners.openai_base_url, "api_key_env": "AUDIT20_OPENAI_KEY",
                                             "headers": {"X-Api-Key": KEY}}}, [
            # the relative's server: an endpoint of its own, no key of its own
            {"id": "family", "memory_search": {"remote": {"base_url": relatives.openai_base_url}}},
            # the same endpoint as the defaults, another model: the key goes with it
            {"id": "work", "memory_search": {"model": "fake-embed-2"}},
            # its own endpoint with its own key
            {"id": "club", "memory_search": {"remote": {"base_url": relatives.openai_base_url,
                                                        "api_key": FAMILY_KEY}}},
        ])
        family = sent_auth(relatives, by_id["family"])
        assert family and not [h for h in family if KEY in h], family
        assert not [r for r in relatives.requests if KEY in str(r.headers)], relatives.requests[0].headers
        assert sent_auth(owners, by_id["main"]) == [f"Bearer {KEY}"]
        assert sent_auth(owners, by_id["work"]) == [f"Bearer {KEY}"]
        assert sent_auth(relatives, by_id["club"]) == [f"Bearer {FAMILY_KEY}"]


def test_another_provider_does_not_get_the_defaults_key(tmp_path: Path) -> None:
    """Switching an agent's provider (openai → openai-compatible on a server of its own) drops the defaults' key
    too; naming the same provider again keeps it."""
    with FakeEmbeddingServer(dims=16) as other:
        by_id = agents(tmp_path, {"provider": "openai", "remote": {"api_key_env": "AUDIT20_OPENAI_KEY"}}, [
            {"id": "family", "memory_search": {"provider": "openai-compatible", "model": "fake-embed",
                                               "remote": {"base_url": other.openai_base_url}}},
            {"id": "same", "memory_search": {"provider": "openai"}},
        ])
        assert not [h for h in sent_auth(other, by_id["family"]) if KEY in h]
        assert by_id["same"].remote.api_key_env == "AUDIT20_OPENAI_KEY"
