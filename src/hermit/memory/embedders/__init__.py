"""Embedding providers behind one interface; `create_embedder` picks one from config.

Backends import their runtimes lazily, so an unused provider's dependencies are never needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hermit.config.schema import MemorySearchConfig
from hermit.errors import ConfigError
from hermit.memory.embedders.base import Embedder, EmbedderInfo

__all__ = ["Embedder", "EmbedderInfo", "create_embedder", "LOCAL_MODELS"]

# Accepted names for the two local models (first = canonical).
LOCAL_MODELS = {
    "multilingual-e5-small": ("multilingual-e5-small", "e5", "e5-small", "intfloat/multilingual-e5-small"),
    "all-MiniLM-L6-v2": ("all-MiniLM-L6-v2", "minilm", "all-minilm-l6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
}


def _local_model_name(model: str | None) -> str:
    if model is None:
        return "multilingual-e5-small"
    for canonical, aliases in LOCAL_MODELS.items():
        if model in aliases or model.lower() in (a.lower() for a in aliases):
            return canonical
    raise ConfigError(
        f"unknown local embedding model '{model}'",
        "memory_search.model for provider 'local' is one of: " + ", ".join(LOCAL_MODELS),
    )


def create_embedder(
    cfg: MemorySearchConfig, environ: Mapping[str, str], stamp_dir: Path | None = None
) -> Embedder | None:
    """The embedder for `cfg`, or None for provider 'none' (keyword-only search)."""
    provider = cfg.provider
    if provider == "none":
        return None
    if provider == "local":
        name = _local_model_name(cfg.model)
        if name == "all-MiniLM-L6-v2":
            from hermit.memory.embedders.local_minilm import MiniLMEmbedder

            return MiniLMEmbedder(stamp_dir=stamp_dir)
        from hermit.memory.embedders.local_e5 import E5Embedder

        return E5Embedder(stamp_dir=stamp_dir)
    from hermit.memory.embedders.remote import create_remote_embedder

    return create_remote_embedder(cfg, environ)
