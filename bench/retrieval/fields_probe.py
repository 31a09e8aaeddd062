"""Round 12's probe: would speaker names (or the named speaker's turns) as their own BM25 field pay?

    python bench/retrieval/fields_probe.py DATA_DIR [--out FILE.md]

A BM25F index with a `speaker` column (the names opening each turn, `- [D1:3] Caroline: …`) weighted
apart from the text needs a new FTS table in both stores and a re-index of every memory. Before that,
this asks the indexed chunks of each LoCoMo dev conversation (bench/out/conversations/, built by
conversations.py) two questions, for the questions that name exactly one of the two speakers:

1. how many chunks hold turns of one speaker only (a speaker column can tell chunks apart only there),
   and what share of a chunk's turns are the named speaker's, in chunks holding a gold line and in the
   others;
2. how well each keyword score separates the chunks holding a gold line from the others (AUC per
   question, averaged; 0.5 is chance): BM25 of the question's words over the whole chunk (what the
   keyword leg does), over the named speaker's turns only (a speaker-conditioned text field), and the
   two summed at weights 0.3 / 0.5 / 1 for the speaker field (BM25F-style). Both use the same tokens,
   stopwords and idf (chunk level) and k1 1.2, b 0.75.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sqlite3
import statistics
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from conversations import OUT, emit  # noqa: E402

from hermit.memory.search.fts import STOPWORDS  # noqa: E402

_TURN = re.compile(r"^- (?:\[[^\]]*\] )?(\w+):(.*)$")
_WORD = re.compile(r"[a-z0-9]+")
_PAIR = re.compile(r"conversations between (\w+) and (\w+)")


def stem(w: str) -> str:
    for suf in ("ing", "ed", "es", "s"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            return w[: -len(suf)]
    return w


def tokens(text: str) -> list[str]:
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def bm25(q: list[str], docs: list[list[str]], idf: dict[str, float], avg: float) -> list[float]:
    out = []
    for d in docs:
        tf = Counter(d)
        norm = 1.2 * (1 - 0.75 + 0.75 * len(d) / max(avg, 1e-9))
        out.append(sum(idf.get(t, 0.0) * tf[t] * 2.2 / (tf[t] + norm) for t in set(q) if tf[t]))
    return out


def auc(pos: list[float], neg: list[float]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    queries = [json.loads(line) for line in (args.data / "queries.jsonl").open(encoding="utf-8") if line.strip()]
    lines = ["| conversation | chunks | with one speaker only | questions naming one speaker | named speaker's share "
             "of turns, gold / other chunks | AUC text | AUC speaker field | text + 0.3 / 0.5 / 1 × speaker | "
             "multi-hop AUC text / speaker field / + 0.5 |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for conv in sorted({str(q["conv"]) for q in queries}):
        names = _PAIR.search((args.data / "workspaces" / conv / "MEMORY.md").read_text(encoding="utf-8"))
        assert names is not None
        pair = names.groups()
        db = sqlite3.connect(OUT / f"{conv}.sqlite")
        chunks = db.execute("select path, start_line, end_line, text from chunks").fetchall()
        db.close()
        turns = [[m.groups() for ln in t.splitlines() if (m := _TURN.match(ln))] for _, _, _, t in chunks]
        whole = [tokens(t) for _, _, _, t in chunks]
        df = Counter(w for d in whole for w in set(d))
        n = len(chunks)
        idf = {w: math.log((n - k + 0.5) / (k + 0.5)) if (n - k + 0.5) > (k + 0.5) else 1e-6 for w, k in df.items()}
        avg = statistics.fmean(len(d) for d in whole)
        one_speaker = sum(1 for ts in turns if len({s for s, _ in ts}) == 1)
        share_g: list[float] = []
        share_o: list[float] = []
        aucs: dict[str, list[float]] = {k: [] for k in ("text", "spk", "0.3", "0.5", "1")}
        mh: dict[str, list[float]] = {k: [] for k in ("text", "spk", "0.5")}
        asked = [q for q in queries if q["conv"] == conv and sum(p in q["query"] for p in pair) == 1]
        for q in asked:
            name = next(p for p in pair if p in q["query"])
            qt = [t for t in tokens(q["query"]) if t != name.lower()]
            spk_docs = [tokens(" ".join(x for s, x in ts if s == name)) for ts in turns]
            gold = [any(g["path"] == p and a <= g["line"] <= b for g in q["gold"]) for p, a, b, _ in chunks]
            if not any(gold) or all(gold):
                continue
            for ts, g in zip(turns, gold, strict=True):
                if ts:
                    (share_g if g else share_o).append(sum(s == name for s, _ in ts) / len(ts))
            text = bm25(qt, whole, idf, avg)
            spk = bm25(qt, spk_docs, idf, avg / 2)
            scores = {"text": text, "spk": spk,
                      **{k: [a + float(k) * b for a, b in zip(text, spk, strict=True)] for k in ("0.3", "0.5", "1")}}
            for k, s in scores.items():
                v = auc([x for x, g in zip(s, gold, strict=True) if g], [x for x, g in zip(s, gold, strict=True) if not g])
                aucs[k].append(v)
                if q["category_name"] == "multi-hop" and k in mh:
                    mh[k].append(v)
        m = {k: statistics.fmean(v) for k, v in aucs.items()}
        lines.append(f"| {conv} | {n} | {one_speaker} | {len(asked)} | {statistics.fmean(share_g):.2f} / "
                     f"{statistics.fmean(share_o):.2f} | {m['text']:.3f} | {m['spk']:.3f} | {m['0.3']:.3f} / "
                     f"{m['0.5']:.3f} / {m['1']:.3f} | " + " / ".join(f"{statistics.fmean(mh[k]):.3f}" for k in mh)
                     + f" ({len(mh['text'])}) |")
    return emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    raise SystemExit(main())
