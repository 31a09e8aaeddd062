"""Round 11's probe for line-to-line links: would lines that share a rare word bring a multi-hop
question's other turns in?

    python bench/retrieval/links_probe.py DATA_DIR [--category multi-hop]

The idea (an index-time link between two lines that share a rare word — a name, a title, a place — so
that a question reaching one line brings its partner's place into the candidates) is measured for
what it could give at most, before anything is built. For every question of the category, at default
settings on the indexes `conversations.py` built: the lines the search shows (its windows) are the
lines "reached"; every other line of the conversation that shares a rare word with one of them is
"linked" (a word of 4+ letters, not a stopword, not a speaker's name, in at most `df` lines of the
conversation). Reported per `df`: how many of the gold turns the search does not show are linked (the
ceiling: a link would still have to rank them into a free slot), how many lines are linked per search
in all (what they would compete with), and how many gold turns the 1 or 2 linked lines nearest the
question (their stored line vectors) hold — against the 1 or 2 nearest lines not shown, linked or not
(what the line vectors find without links).
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402

from hermit.memory.index.line_vectors import from_line_blob  # noqa: E402
from hermit.memory.search.fts import STOPWORDS  # noqa: E402

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_SPEAKER = re.compile(r"^- \[[^\]]*\] ([^:]{1,40}):")
DFS = (1, 2, 3, 5, 8)


def conversation_lines(ws: Path) -> dict[tuple[str, int], set[str]]:
    """(path, line) → the line's words (lowercase), for every turn of the conversation."""
    out: dict[tuple[str, int], set[str]] = {}
    speakers: set[str] = set()
    for f in sorted((ws / "memory").glob("*.md")):
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            m = _SPEAKER.match(line)
            if not m:
                continue
            speakers.add(m.group(1).lower())
            out[(f"memory/{f.name}", n)] = {w.lower().strip("'-") for w in _WORD.findall(line[m.end():])}
    for words in out.values():
        words -= STOPWORDS | speakers
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--category", default="multi-hop")
    args = ap.parse_args(argv)
    queries = [q for q in C.read_jsonl(args.data / "queries.jsonl")
               if args.category == "all" or q["category_name"] == args.category]
    v = next(x for x in C.variants() if x.name == "default")
    missed = 0
    linked_gold: collections.Counter[int] = collections.Counter()
    linked_all: dict[int, list[int]] = {d: [] for d in DFS}
    top_linked: dict[tuple[int, int], int] = collections.Counter()
    top_any: collections.Counter[int] = collections.Counter()
    for conv in sorted({str(q["conv"]) for q in queries}):
        lines = conversation_lines(args.data / "workspaces" / conv)
        df: collections.Counter[str] = collections.Counter(w for ws in lines.values() for w in ws)
        svc = C.service_for(args.data, conv, v)
        keys = sorted(lines)
        blobs = svc.store.line_vector_blobs([(p, n, n) for p, n in keys])
        have = [k for j, k in enumerate(keys) if blobs.get(j)]
        mat = np.vstack([from_line_blob(blobs[j]) for j, k in enumerate(keys) if blobs.get(j)])
        try:
            for q in (q for q in queries if q["conv"] == conv):
                hits = svc.search_outcome(str(q["query"]), v.max_results).hits
                shown = {(h.path, n) for h in hits for n in range(h.start_line, h.end_line + 1)}
                gold = [(str(g["path"]), int(g["line"])) for g in q["gold"]]
                lost = [g for g in gold if g not in shown]
                missed += len(lost)
                assert svc.searcher.embedder is not None
                sims = mat @ np.asarray(svc.searcher.embedder.embed_query(str(q["query"])), dtype=np.float32)
                order = [have[j] for j in np.argsort(-sims)]
                unseen = [k for k in order if k not in shown]
                for t in (1, 2):
                    top_any[t] += sum(1 for g in lost if g in unseen[:t])
                for d in DFS:
                    rare = {w for key in shown if key in lines for w in lines[key] if df[w] <= d}
                    linked = {key for key, ws in lines.items() if key not in shown and ws & rare}
                    linked_all[d].append(len(linked))
                    linked_gold[d] += sum(1 for g in lost if g in linked)
                    near = [k for k in order if k in linked]
                    for t in (1, 2):
                        top_linked[(d, t)] += sum(1 for g in lost if g in near[:t])
        finally:
            svc.close()
    print(f"{len(queries)} questions ({args.category}); gold turns not shown: {missed}")
    print("| rare = in at most df lines | gold turns not shown, linked | lines linked per search (mean / median) "
          "| gold in the nearest 1 / 2 linked lines |")
    print("|---:|---:|---:|---:|")
    for d in DFS:
        print(f"| {d} | {linked_gold[d]} of {missed} | {statistics.fmean(linked_all[d]):.1f} / "
              f"{statistics.median(linked_all[d]):.0f} | {top_linked[(d, 1)]} / {top_linked[(d, 2)]} |")
    print(f"| any line not shown (no links) | | | {top_any[1]} / {top_any[2]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
