"""Would a line-level vector index help? Measured before building one, on the conversational suite.

    python bench/retrieval/line_probe.py DATA_DIR [--out DIR]

DATA_DIR is the converted LoCoMo folder (see conversations.py). Every non-empty line of each
workspace is embedded on its own with Hermit's default model (cached in bench/out/conversations/),
and the question's vector ranks them. Reported:

- line-level recall@k: the share of gold turns among the k lines nearest the question;
- for every gold turn, why Hermit's default search does or does not show it — seen, in a returned place
  but outside its window, in a candidate below minScore, in a candidate past the sixth place, or not a
  candidate at all — with the median rank of those turns among their conversation's lines.

If the turns search misses also rank low among the lines, line vectors cannot bring them back, and an
index of them (one vector per line: about twice the embedding time of the chunks) would not pay.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any
from unittest import mock

import conversations
import numpy as np
from conversations import CATEGORIES, OUT, Variant, read_jsonl, service_for
from score import md_table

from hermit.memory.search import hybrid as search
from hermit.memory.store.api import ChunkRow

KS = (6, 12, 24, 48, 100)
WHY = ("seen", "outside the window", "below minScore", "past the sixth place", "not a candidate")


def workspace_lines(ws: Path) -> dict[tuple[str, int], str]:
    out: dict[tuple[str, int], str] = {}
    for f in sorted([*ws.glob("memory/*.md"), ws / "MEMORY.md"]):
        if f.is_file():
            rel = f.relative_to(ws).as_posix()
            for n, line in enumerate(f.read_text(encoding="utf-8").split("\n"), 1):
                if line.strip():
                    out[(rel, n)] = line
    return out


def line_vectors(conv: str, lines: dict[tuple[str, int], str]) -> np.ndarray:
    cache = OUT / f"lines-{conv}.npz"
    keys = [f"{p}:{n}" for p, n in lines]
    if cache.exists():
        z = np.load(cache, allow_pickle=False)
        if list(z["keys"]) == keys:
            return np.asarray(z["vectors"])
    assert conversations._embedder is not None
    print(f"  embedding {len(lines)} lines of {conv}", file=sys.stderr)
    vecs = conversations._embedder.embed_documents(list(lines.values()))
    np.savez(cache, keys=np.array(keys), vectors=vecs)
    return vecs


def why_missed(path: str, line: int, hits: list[Any], scored: list[tuple[int, float]],
               rows: dict[int, ChunkRow], min_score: float) -> str:
    if any(h.path == path and h.start_line <= line <= h.end_line for h in hits):
        return "seen"
    if any(h.path == path and h.place[0] <= line <= h.place[1] for h in hits):
        return "outside the window"
    best = next((s for cid, s in scored
                 if rows[cid].path == path and rows[cid].start_line <= line <= rows[cid].end_line), None)
    if best is None:
        return "not a candidate"
    return "below minScore" if best < min_score else "past the sixth place"


def probe(data: Path) -> dict[str, Any]:
    queries = read_jsonl(data / "queries.jsonl")
    default = Variant("default", "Hermit defaults")
    recall: dict[int, list[float]] = {k: [] for k in KS}
    by_cat: dict[str, list[float]] = defaultdict(list)
    ranks: dict[str, list[int]] = defaultdict(list)
    seen_args: dict[str, Any] = {}

    decay = search.HybridSearcher._decay

    def capture(self: search.HybridSearcher, scored: list[tuple[int, float]],
                rows: dict[int, ChunkRow]) -> list[tuple[int, float]]:
        # Every candidate with its final score, before min_score drops some.
        out = decay(self, scored, rows)
        seen_args.update(scored=sorted(out, key=lambda s: -s[1]), rows=rows, min_score=self.cfg.min_score)
        return out

    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = service_for(data, conv, default)
        lines = workspace_lines(data / "workspaces" / conv)
        keys = list(lines)
        vecs = line_vectors(conv, lines)
        try:
            with mock.patch.object(search.HybridSearcher, "_decay", capture):
                for q in (q for q in queries if q["conv"] == conv):
                    assert conversations._embedder is not None
                    order = np.argsort(-(vecs @ conversations._embedder.embed_query(str(q["query"]))))
                    rank_of = {keys[i]: r for r, i in enumerate(order)}
                    golds = [(str(g["path"]), int(g["line"])) for g in q["gold"]]
                    gold_ranks = [rank_of.get(g, len(keys)) for g in golds]
                    for k in KS:
                        recall[k].append(sum(r < k for r in gold_ranks) / len(golds))
                    by_cat[str(q["category_name"])].append(sum(r < 24 for r in gold_ranks) / len(golds))
                    hits = svc.search_outcome(str(q["query"]), 6).hits
                    for (path, line), r in zip(golds, gold_ranks, strict=True):
                        why = why_missed(path, line, hits, seen_args["scored"], seen_args["rows"],
                                         seen_args["min_score"])
                        ranks[why].append(r)
        finally:
            svc.close()
    return {"recall": {k: statistics.fmean(v) for k, v in recall.items()},
            "recall_24_by_category": {c: statistics.fmean(by_cat[c]) for c in CATEGORIES if by_cat[c]},
            "why": {w: {"turns": len(ranks[w]), "median_line_rank": statistics.median(ranks[w]) + 1,
                        "in_top_24": sum(r < 24 for r in ranks[w]) / len(ranks[w])}
                    for w in WHY if ranks[w]}}


def markdown(res: dict[str, Any]) -> str:
    lines = ["Line-level probe (`python bench/retrieval/line_probe.py DATA_DIR`): every line of the LoCoMo dev "
             "workspaces embedded on its own with the default model, ranked by the question's vector.", ""]
    lines += md_table([f"line recall@{k}" for k in KS], [[f"{res['recall'][k]:.3f}" for k in KS]])
    lines += ["", "Line recall@24 by category:", ""]
    cats = res["recall_24_by_category"]
    lines += md_table(list(cats), [[f"{v:.3f}" for v in cats.values()]])
    lines += ["", "Gold turns by what Hermit's default search does with them, and where the line vectors "
              "rank them (1 = nearest line of the conversation):", ""]
    lines += md_table(["gold turns", "count", "median line rank", "among the 24 nearest lines"],
                      [[w, str(m["turns"]), f"{m['median_line_rank']:.0f}", f"{m['in_top_24']:.2f}"]
                       for w, m in res["why"].items()])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="the converted LoCoMo folder (queries.jsonl, workspaces/)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent), help="where line_probe.md goes")
    args = ap.parse_args(argv)
    if not (args.data / "queries.jsonl").is_file():
        print(f"error: {args.data}/queries.jsonl not found; pass the folder of the converted LoCoMo data",
              file=sys.stderr)
        return 2
    md = markdown(probe(args.data))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "line_probe.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
