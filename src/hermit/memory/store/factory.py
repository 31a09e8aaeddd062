"""Opens the memory store an agent's config asks for: SQLite (the default) or PostgreSQL."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hermit.config.schema import MemorySearchConfig
from hermit.memory.store.api import MemoryStore


def open_store(cfg: MemorySearchConfig, index_path: Path, agent_id: str, environ: Mapping[str, str],
               state_dir: Path | None = None) -> MemoryStore:
    """The agent's index: `index_path` for SQLite; schema <prefix><agent id> on $<dsn_env>'s server, which must
    belong to the state dir `state_dir` (its `state-id`; without one, the index's folder's: postgres/claim.py)."""
    if cfg.store.backend == "postgres":
        from hermit.memory.store.postgres.claim import StateId
        from hermit.memory.store.postgres.schema import schema_name
        from hermit.memory.store.postgres.store import open_pg_store

        pg = cfg.store.postgres
        state = StateId.of(state_dir if state_dir is not None else index_path.parent)
        return open_pg_store(pg.dsn_env, environ, schema_name(pg.schema_prefix, agent_id), pg, state)
    from hermit.memory.store.sqlite import IndexStore

    return IndexStore(index_path, want_vec=cfg.store.vector_enabled, own_dir=cfg.store.owns_dir)
