"""The config schema: pydantic models with extra=forbid, snake_case keys, every default of SPEC.md."""

from __future__ import annotations

import builtins
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RemoteEmbeddingConfig(Strict):
    """Settings for remote embedding providers (openai, gemini, openai-compatible)."""

    base_url: str | None = None
    api_key: str | None = None
    # Name of the environment variable holding the key; the provider's usual one when unset.
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    batch_size: int = Field(64, ge=1, le=2048)
    timeout_seconds: float = Field(60.0, gt=0)
    max_retries: int = Field(4, ge=0, le=20)


class ChunkingConfig(Strict):
    tokens: int = Field(400, ge=32, le=8192)
    overlap: int = Field(80, ge=0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingConfig:
        if self.overlap >= self.tokens:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than tokens ({self.tokens})")
        return self


class HybridConfig(Strict):
    enabled: bool = True
    # weighted: score = vector_weight * vector + text_weight * text (weights normalised to sum 1).
    # rrf: reciprocal rank fusion, rescaled to [0, 1].
    fusion: Literal["weighted", "rrf"] = "weighted"
    vector_weight: float = Field(0.7, ge=0)
    text_weight: float = Field(0.3, ge=0)
    candidate_multiplier: int = Field(4, ge=1, le=50)
    max_candidates: int = Field(200, ge=1)
    rrf_k: int = Field(60, ge=1)
    # How BM25 relevance (the negated, hence positive, FTS5 bm25()) becomes a [0, 1] text score:
    # "saturation": rel / (rel + bm25_saturation) — absolute, comparable across queries;
    # "max": rel / best rel of this query — the best keyword hit always scores 1.
    text_normalization: Literal["saturation", "max"] = "max"
    bm25_saturation: float = Field(2.0, gt=0)
    # A chunk that contains every content term of the query (an exact id, a name) scores at least its
    # text score, so keyword-only hits are not lost under minScore (with 0.7/0.3 they could reach 0.3).
    exact_match_rescue: bool = True

    @model_validator(mode="after")
    def _weights(self) -> HybridConfig:
        if self.vector_weight + self.text_weight <= 0:
            raise ValueError("vector_weight + text_weight must be > 0")
        return self


class TemporalDecayConfig(Strict):
    enabled: bool = False
    half_life_days: float = Field(30.0, gt=0)


class MmrConfig(Strict):
    enabled: bool = False
    lambda_: float = Field(0.7, ge=0, le=1, alias="lambda")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class QueryConfig(Strict):
    max_results: int = Field(6, ge=1, le=100)
    min_score: float = Field(0.35, ge=0, le=1)
    hybrid: HybridConfig = HybridConfig()
    temporal_decay: TemporalDecayConfig = TemporalDecayConfig()
    mmr: MmrConfig = MmrConfig()


class SyncConfig(Strict):
    watch: bool = True
    debounce_ms: int = Field(1500, ge=0, le=600_000)
    on_session_start: bool = True
    on_search: bool = True


class CacheConfig(Strict):
    enabled: bool = True
    max_entries: int | None = Field(None, ge=1)


class StoreConfig(Strict):
    # Default: <state>/memory/<agentId>.sqlite; "{agent_id}" is substituted.
    path: str | None = None
    vector_enabled: bool = True


class MemorySearchConfig(Strict):
    enabled: bool = True
    provider: Literal["local", "openai", "gemini", "openai-compatible", "none"] = "local"
    # Provider default when unset: local → multilingual-e5-small, openai → text-embedding-3-small,
    # gemini → gemini-embedding-001.
    model: str | None = None
    # When the embedder fails at index or query time: "keyword" keeps search working keyword-only
    # (and says so in the result); "error" fails loudly.
    on_embedding_failure: Literal["keyword", "error"] = "keyword"
    remote: RemoteEmbeddingConfig = RemoteEmbeddingConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    query: QueryConfig = QueryConfig()
    sync: SyncConfig = SyncConfig()
    cache: CacheConfig = CacheConfig()
    store: StoreConfig = StoreConfig()
    extra_paths: list[str] = Field(default_factory=list)
    sources: tuple[Literal["memory", "sessions"], ...] = ("memory",)
    # Files larger than this are skipped with a warning (a huge log pasted into memory/).
    max_file_bytes: int = Field(5_000_000, ge=1024)


class SandboxConfig(Strict):
    mode: Literal["off", "non-main", "all"] = "non-main"


class AgentSettings(Strict):
    """Everything an agent can have; agents.defaults holds these, agents.list entries override them."""

    workspace: str | None = None
    model: str | None = None
    timezone: str | None = None
    memory_search: MemorySearchConfig = MemorySearchConfig()
    sandbox: SandboxConfig = SandboxConfig()
    max_tool_iterations: int = Field(25, ge=1, le=500)
    bootstrap_max_chars: int = Field(20_000, ge=1000)
    bootstrap_total_max_chars: int = Field(150_000, ge=1000)


class AgentEntry(AgentSettings):
    id: str
    name: str | None = None
    default: bool = False

    @field_validator("id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        import re

        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", v):
            raise ValueError("agent id must be lowercase letters, digits, '-' or '_' (max 64 chars)")
        return v


class AgentsConfig(Strict):
    defaults: dict[str, object] = Field(default_factory=dict)
    list: builtins.list[dict[str, object]] = Field(default_factory=builtins.list)


class ModelInfo(Strict):
    context_window: int = Field(200_000, ge=1024)
    max_output_tokens: int = Field(8192, ge=1)


class ProviderConfig(Strict):
    type: Literal["anthropic", "openai", "openai-compatible"]
    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    timeout_seconds: float = Field(120.0, gt=0)
    max_retries: int = Field(3, ge=0, le=20)
    models: dict[str, ModelInfo] = Field(default_factory=dict)


class ModelsConfig(Strict):
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)


class HermitConfig(Strict):
    agents: AgentsConfig = AgentsConfig()
    models: ModelsConfig = ModelsConfig()
