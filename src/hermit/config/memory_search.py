"""The `memory_search:` section of the config: the embedding provider, chunking, the query's scoring,
sync, the cache and the index store (SQLite or PostgreSQL). Split from config/schema.py by
responsibility; `MemorySearchConfig` stays importable from there."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


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
    # 0.5/0.5 measured best on bench/retrieval (the original's 0.7/0.3 is a row there); normalised to sum 1.
    vector_weight: float = Field(0.5, ge=0)
    text_weight: float = Field(0.5, ge=0)
    candidate_multiplier: int = Field(4, ge=1, le=50)
    max_candidates: int = Field(200, ge=1)
    rrf_k: int = Field(60, ge=1)
    # How BM25 relevance (the negated, hence positive, FTS5 bm25()) becomes a [0, 1] text score:
    # "saturation": rel / (rel + bm25_saturation) — absolute, comparable across queries;
    # "max": rel / best rel of this query — the best keyword hit always scores 1;
    # "query": rel / the larger of the best rel and the query's own BM25 (a chunk of average length
    # holding each query term once) — as "max" when a chunk holds the whole query, lower when no chunk
    # holds its rare words, so a question whose answer is in no note is not lifted to 1 by a chunk that
    # shares only its everyday words.
    text_normalization: Literal["saturation", "max", "query"] = "query"
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
    # English ↔ Chinese dictionary translation of the keyword query (CC-CEDICT); a translated hit's
    # BM25 relevance counts this much of an original-language hit. 0 turns it off.
    translation_weight: float = Field(0.8, ge=0, le=1)
    # Also embed the translated query and keep each chunk's best cosine (one more query embedding).
    translate_vectors: bool = True
    # A question naming a day ("July 13", "the week of Aug 10", "last week") lifts chunks of daily logs
    # of those days: score += (1 - score) * date_boost. 0 turns it off.
    date_boost: float = Field(0.5, ge=0, le=1)
    # When a search finds something at or above min_score (its best place at 0.5 or more:
    # SearchTuning.fill_min_top) but leaves result slots and characters unused,
    # the candidates under min_score fill them, nearest line first, within the characters left (their
    # scores show they are weaker): an answer spread over sessions often has one part above min_score and the rest
    # just under it. A search that finds nothing still returns nothing, and a min_score given with the
    # search (the tool's minScore, `--min-score`) stays a hard threshold. false: results below min_score
    # are always dropped (SPEC §6 as written). Measured in bench/retrieval/README.md (round 7).
    fill_results: bool = True
    hybrid: HybridConfig = HybridConfig()
    temporal_decay: TemporalDecayConfig = TemporalDecayConfig()
    mmr: MmrConfig = MmrConfig()


class SyncConfig(Strict):
    watch: bool = True
    debounce_ms: int = Field(1500, ge=0, le=600_000)
    on_session_start: bool = True
    on_search: bool = True
    # A long-lived process stats every memory file before a search at most this often (a watcher or a
    # write tool marks the index dirty at once); 9k files take ~0.15 s to stat.
    dirty_check_interval_ms: int = Field(1000, ge=0)


class CacheConfig(Strict):
    enabled: bool = True
    max_entries: int | None = Field(None, ge=1)


class PostgresStoreConfig(Strict):
    # The NAME of the environment variable holding the DSN (postgresql://user:pw@host/db); the DSN
    # itself never appears in config files, logs or errors.
    dsn_env: str = Field("HERMIT_PG_DSN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # Each agent's index is one schema: <schema_prefix><agent id>.
    schema_prefix: str = Field("hermit_", pattern=r"^[a-z_][a-z0-9_]{0,30}$")
    # Past this many vectors an HNSW index is built (below it an exact scan is as fast; measured,
    # see docs/postgres.md).
    hnsw_threshold: int = Field(10_000, ge=0)
    hnsw_m: int = Field(16, ge=2, le=100)
    hnsw_ef_construction: int = Field(64, ge=4, le=1000)
    # HNSW candidate list per query (recall vs time); raised to the number of results asked for.
    # 600: recall@10 0.958 at 1M vectors loaded through PgStore (500 gave 0.943 there, 0.954 on the raw
    # benchmark table: below 0.95 on one of two builds); it runs beside the keyword leg (docs/postgres.md).
    ef_search: int = Field(600, ge=1, le=1000)
    connect_timeout_s: int = Field(10, ge=1, le=300)


class StoreConfig(Strict):
    # Default: <state>/memory/<agentId>.sqlite; "{agent_id}" is substituted.
    path: str | None = None
    vector_enabled: bool = True
    # sqlite: one file per agent (the default). postgres: a shared server with pgvector (issue 15).
    backend: Literal["sqlite", "postgres"] = "sqlite"
    postgres: PostgresStoreConfig = PostgresStoreConfig()

    @property
    def owns_dir(self) -> bool:
        """Whether the SQLite index's directory is Hermit's (the state layout's), so its mode may be
        tightened; a `path` names a directory of the user's, which keeps its mode (the files are 0600)."""
        return self.path is None


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
    # A vector for every non-blank line too, used to re-order the places that passed min_score by
    # their best line (a turn of a conversation, a bullet of a note). About doubles the embedding work
    # of indexing; "auto" turns them on for the local model only (a remote provider would bill twice
    # the tokens). Changing it rebuilds the index.
    line_vectors: bool | Literal["auto"] = "auto"
    extra_paths: list[str] = Field(default_factory=list)
    sources: tuple[Literal["memory", "sessions"], ...] = ("memory",)
    # Files larger than this are skipped with a warning (a huge log pasted into memory/).
    max_file_bytes: int = Field(5_000_000, ge=1024)

    @field_validator("extra_paths")
    @classmethod
    def _extra_paths_inside(cls, v: list[str]) -> list[str]:
        """An entry that is empty, `.` or a folder holding the workspace (`..`) would make every workspace
        file memory: AGENTS.md, SOUL.md… indexed and readable through memory_get. An absolute path equal
        to the workspace is refused where it is used (memory.policy.paths), since the workspace is not known here."""
        import posixpath

        for raw in v:
            if not raw.strip():
                raise ValueError("an empty entry would index the whole workspace (AGENTS.md, SOUL.md… would "
                                 "become memory): remove it, or name a folder or file such as notes/")
            norm = posixpath.normpath(raw.strip().replace("\\", "/"))
            if norm == "." or all(part == ".." for part in norm.split("/")):
                raise ValueError(f"{raw!r} names the workspace itself (or a folder holding it), so every "
                                 "workspace file would become memory: name a folder or file inside it, such as "
                                 "notes/ (MEMORY.md and memory/ are always memory)")
        return v
