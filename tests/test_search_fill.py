"""Places under min_score in the results a search leaves unused: only once something passed, after the passed
places, in the characters their windows left, and showing the line nearest the question."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.memory.search.ordering import spare_candidates
from hermit.memory.search.places import show_places, spare_places
from hermit.memory.search.snippets import render, weigh_terms
from hermit.memory.service import MemoryKey, MemoryService
from hermit.memory.store.api import ChunkRow
from memhelpers import errand_logs


def _workspace(ws: Path) -> None:
    errand_logs(ws)
    # One answer in two sessions: the first shares the question's words, the second only the name.
    write(ws / "memory" / "2026-05-01.md", "# 2026-05-01\n\n- Mel: I play the clarinet in the town band on Fridays.\n"
          "- Tom: Nice!\n")
    write(ws / "memory" / "2026-05-02.md", "# 2026-05-02\n\n- Mel: I practised the violin for an hour tonight.\n"
          "- Tom: Lovely.\n")


def _search(ws: Path, db: Path, query: str, fill: bool, emb: object, min_score: float | None = None) -> list[dict[str, object]]:
    cfg = MemorySearchConfig.model_validate({"query": {"fill_results": fill}})
    svc = MemoryService(MemoryKey("main", ws), db, cfg, emb, cache_dir=db.parent / "cache")  # type: ignore[arg-type]
    try:
        svc.sync()
        return list(svc.search(query, None, min_score)["results"])
    finally:
        svc.close()


def test_a_weaker_session_fills_a_result_left_unused_once_something_passed(tmp_path: Path, e5: object) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    question = "what does Mel play in the band"
    filled = _search(ws, tmp_path / "a.sqlite", question, True, e5)
    strict = _search(ws, tmp_path / "b.sqlite", question, False, e5)
    assert [r["path"] for r in strict] == ["memory/2026-05-01.md"]
    # The violin session is under min_score: it comes right after the passed result (the nearest line
    # first), and its score says it is weaker.
    assert [r["path"] for r in filled][:2] == ["memory/2026-05-01.md", "memory/2026-05-02.md"]
    assert float(filled[1]["score"]) < 0.35 <= float(filled[0]["score"])  # type: ignore[arg-type]
    assert "violin" in str(filled[1]["snippet"])
    # The passed result keeps exactly the window it had without the fill, and the cap holds.
    assert filled[0] == strict[0]
    assert sum(len(str(r["snippet"])) for r in filled) <= 4_200
    # A min_score given with the search is a hard threshold.
    assert _search(ws, tmp_path / "a.sqlite", question, True, e5, 0.35) == strict


def test_a_search_where_nothing_passes_still_returns_nothing(tmp_path: Path, e5: object) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    # "Tom" is in every note and nothing holds the rest of the question: there are weak candidates, none
    # passes min_score, and the weak ones do not fill an empty answer.
    assert _search(ws, tmp_path / "a.sqlite", "what did Tom tell me about the passport renewal", True, e5) == []
    assert spare_candidates([(1, 0.3), (2, 0.2)], [], 0.35) == []
    assert spare_candidates([(1, 0.3), (3, 0.9), (2, 0.2), (4, 0.0)], [(3, 0.9)], 0.35, 0.05) == [(1, 0.3), (2, 0.2)]
    # A best place only just over min_score has probably not found the topic: nothing fills after it.
    assert spare_candidates([(1, 0.3), (3, 0.42)], [(3, 0.42)], 0.35, 0.05, 0.5) == []
    assert spare_candidates([(1, 0.3), (3, 0.5)], [(3, 0.5)], 0.35, 0.05, 0.5) == [(1, 0.3)]


def test_a_search_whose_best_is_under_the_gate_is_not_filled(tmp_path: Path, e5: object) -> None:
    """The first test's memory and question: its best place (0.86) passes the default gate (0.5) and the
    violin session fills a slot; with the gate just over that best score, only what passed is returned."""
    ws = tmp_path / "ws"
    _workspace(ws)
    question = "what does Mel play in the band"
    cfg = MemorySearchConfig.model_validate({"query": {"fill_results": True}})
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "a.sqlite", cfg, e5,  # type: ignore[arg-type]
                        cache_dir=tmp_path / "cache")
    try:
        svc.sync()
        filled = svc.search(question)["results"]
        best = float(filled[0]["score"])
        assert best >= svc.searcher.tuning.fill_min_top == 0.5 and len(filled) == 2
        svc.searcher.tuning = dataclasses.replace(svc.searcher.tuning, fill_min_top=best + 0.01)
        gated = svc.search(question)["results"]
    finally:
        svc.close()
    assert gated == filled[:1] and float(filled[1]["score"]) < 0.35


def _rows(n_lines: int) -> dict[int, ChunkRow]:
    text = "\n".join(f"- [D1:{i}] Ana: a long line about the weather and the bus, number {i:02d}" for i in range(n_lines))
    other = "\n".join(f"- [D2:{i}] Ana: filler about the weather and the bus, number {i:02d}" for i in range(n_lines))
    weak = [f"- [D3:{i}] Ana: ok" for i in range(n_lines)]
    weak[7] = "- [D3:7] Ana: the weather was fine for kickboxing"
    return {1: ChunkRow(1, "memory/a.md", "memory", 1, n_lines, text),
            2: ChunkRow(2, "memory/a.md", "memory", n_lines + 1, 2 * n_lines, other),
            3: ChunkRow(3, "memory/c.md", "memory", 1, n_lines, "\n".join(weak))}


def test_spare_places_share_only_what_the_passed_windows_left() -> None:
    rows = _rows(20)
    terms = weigh_terms(["weather"], lambda t: 3, 100)
    chosen = [[(1, 0.8)]]
    budget = 1_000
    passed = show_places(chosen, rows, terms, budget)
    before = [(p.lo, p.hi) for p in passed]
    used = sum(len(render(p, terms)[0]) for p in passed)
    # Chunk 2 touches the passed place of the same file (its window may already reach it): not offered.
    more, shown = spare_places(chosen, passed, [(2, 0.3), (3, 0.2)], rows, terms, budget, 6)
    assert [g[0][0] for g in more] == [3]
    # The passed window is unchanged, the spare one shows its matching line whole, within the cap.
    assert [(p.lo, p.hi) for p in passed] == before
    assert render(shown[0], terms)[0].startswith("- [D3:7] Ana: the weather was fine for kickboxing")
    assert used + sum(len(render(p, terms)[0]) for p in shown) <= budget
    # Room for less than its line: no stub of it is shown.
    assert spare_places(chosen, passed, [(3, 0.2)], rows, terms, used + 20, 6) == ([], [])
    # Without room left, or without a result slot, nothing is added.
    assert spare_places(chosen, passed, [(3, 0.2)], rows, terms, used, 6) == ([], [])
    assert spare_places(chosen, passed, [(3, 0.2)], rows, terms, budget, 1) == ([], [])
