"""The bounded-cost keyword leg (memory/search/keyword.py) against FTS5's own bm25() on a real index."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from conftest import write
from hermit.memory.search import keyword as kw_mod
from hermit.memory.search.fts import or_match
from hermit.memory.search.keyword import FtsTokens, KeywordSearcher
from hermit.memory.search.terms import term_coverage
from hermit.memory.service import MemoryService
from hermit.memory.store.sqlite import read_varint
from memhelpers import HashEmbedder, service, sql


def _memory(tmp_path: Path) -> MemoryService:
    """60 daily logs: 'kumquat' in 6 (rare), 'project' in ~half, 'notes' in all, '钢琴' in a third."""
    r = random.Random(7)
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n")
    for d in range(60):
        lines = [f"# Day {d}", ""]
        lines += ["Meeting notes: " + " ".join(r.choice(["notes", "note", "noted", "agenda", "coffee"])
                                                for _ in range(r.randint(1, 6)))]
        if d % 2 == 0:
            lines.append("The project plan moved forward; projects overlap." if d % 4 == 0 else "Project status.")
        if d % 10 == 3:
            lines.append("Bought a kumquat tree for the balcony." + (" Kumquat jam next." if d > 30 else ""))
        if d % 3 == 0:
            lines.append("周末练习钢琴，钢琴老师很耐心。" if d % 2 else "钢琴课改到周三。")
        lines += ["filler words " * r.randint(5, 40)]
        write(ws / "memory" / f"2026-01-{d % 28 + 1:02d}-{d}.md", "\n".join(lines) + "\n")
    svc = service(ws, tmp_path / "idx.sqlite", HashEmbedder())
    svc.sync()
    return svc


def _exact(svc: MemoryService, phrases: list[str], ids: list[int]) -> dict[int, float]:
    match = or_match(phrases)
    assert match
    return svc.store.fts_scores(match, ids)


def test_fts_tokens_are_the_index_tokens() -> None:
    t = FtsTokens()
    got = t.tokens(["running", "notes", "Happily", "café", "钢琴", "TICKET-4821", ""])
    assert got == [("run",), ("note",), ("happili",), ("cafe",), ("钢琴",), ("ticket", "4821"), ()]
    assert t.tokens(["notes"]) == [("note",)]  # cached


def test_fts_tokens_leave_nothing_behind_between_batches() -> None:
    """Each batch is read from its own rows only (they are rolled back after): a long word list, a
    shorter one, and positions, each as from a fresh table."""
    t = FtsTokens()
    long = [f"word{i} notes running" for i in range(40)]
    assert t.uncached(long) == [(f"word{i}", "note", "run") for i in range(40)]
    assert t.uncached(["kumquats", ""]) == [("kumquat",), ()]
    assert t.positions(["notes notes run", "钢琴"]) == [({"note": [0, 1], "run": [2]}, 3), ({"钢琴": [0]}, 1)]
    assert t._conn.execute("select count(*) from t").fetchone()[0] == 0


def test_unbounded_plan_is_plain_fts5(tmp_path: Path, store_backend: str) -> None:
    svc = _memory(tmp_path)
    ks = KeywordSearcher(svc.store)  # default budget: everything fits, FTS5 ranks all phrases
    phrases = ["kumquat", "project", "notes"]
    hits = ks.search(phrases, 10)
    assert ks.last_plan and not ks.last_plan.scored and not ks.last_plan.skipped
    assert hits == svc.store.fts_search(or_match(phrases) or "", 10)


@pytest.mark.parametrize("walk", [10_000, 0])  # common phrases scored by FTS5 on the candidates / in Python
def test_bounded_scores_equal_fts5_bm25(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, walk: int, store_backend: str) -> None:
    svc = _memory(tmp_path)
    monkeypatch.setattr(kw_mod, "SCORE_WALK_BUDGET", walk)
    ks = KeywordSearcher(svc.store, budget=8)  # only 'kumquat' (6 chunks) fits
    phrases = ["kumquat", "project", "notes", "钢琴"]
    hits = ks.search(phrases, 10)
    plan = ks.last_plan
    assert plan is not None and plan.kept == ["kumquat"]
    assert (plan.scored if walk else plan.skipped) == ["钢琴", "project", "notes"]
    assert len(hits) == 6  # every kumquat chunk, nothing else
    exact = _exact(svc, phrases, [i for i, _ in hits])
    for cid, rel in hits:
        assert rel == pytest.approx(exact[cid], rel=1e-4)
    assert [i for i, _ in hits] == sorted(exact, key=lambda i: -exact[i])
    assert any(exact[i] > exact[j] + 0.1 for i, _ in hits for j, _ in hits), "the common words must matter"


def test_python_scores_split_latin_words_at_cjk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                store_backend: str) -> None:
    """Words glued to Chinese characters ("买了kumquat树", "notes笔记") are words of their own, as the index
    splits them: the terms added in Python still equal FTS5's bm25()."""
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n")
    r = random.Random(11)
    for d in range(30):
        # 'notes' and 'project' in about a third of the chunks each, so their idf counts.
        lines = [f"# Day {d}", "", "会议notes笔记" + " notes" * r.randint(0, 3) if d % 3 == 0 else "会议笔记",
                 "notesy笔记 and 记notes_x and xnotes" if d % 3 else "Project计划, projects and 项目project进展。",
                 "filler words " * r.randint(5, 30)]
        if d % 5 == 0:
            lines.append("买了kumquat树。Kumquat果酱" if d % 2 else "The kumquat tree.")
        write(ws / "memory" / f"2026-02-{d % 28 + 1:02d}-{d}.md", "\n".join(lines) + "\n")
    svc = service(ws, tmp_path / "idx.sqlite", HashEmbedder())
    svc.sync()
    monkeypatch.setattr(kw_mod, "SCORE_WALK_BUDGET", 0)  # every common phrase scored in Python
    ks = KeywordSearcher(svc.store, budget=8)
    phrases = ["kumquat", "notes", "project"]
    hits = ks.search(phrases, 10)
    assert ks.last_plan is not None and ks.last_plan.kept == ["kumquat"]
    assert sorted(ks.last_plan.skipped) == ["notes", "project"]
    assert len(hits) == 6
    exact = _exact(svc, phrases, [i for i, _ in hits])
    for cid, rel in hits:
        assert rel == pytest.approx(exact[cid], rel=1e-4)


def test_doc_freq_is_cached_per_index_generation_and_sees_other_writers(tmp_path: Path, store_backend: str) -> None:
    """The per-phrase chunk counts are the MATCH counts, cached per index generation: a file indexed by
    another connection is counted on the next search."""
    svc = _memory(tmp_path)
    ks = KeywordSearcher(svc.store)
    for p in ["kumquat", "Kumquats", "notes", "钢琴", "钢琴老师", "project plan", "Day 3", "zzzz"]:
        match = or_match([p])
        assert match and ks.doc_freq(p) == svc.store.fts_count(match), p
    assert ks.search(["kumquat"], 20) and ks.doc_freq("kumquat") == 6
    other = service(tmp_path / "ws", tmp_path / "idx.sqlite", HashEmbedder())  # another connection
    write(tmp_path / "ws" / "memory" / "2026-03-01.md", "# March\n\nA kumquat by the door.\n")
    other.sync()
    hits = ks.search(["kumquat"], 20)
    assert ks.doc_freq("kumquat") == 7 and len(hits) == 7
    assert ks.last_plan is not None and ks.last_plan.df["kumquat"] == 7


def test_all_common_phrases_rank_the_newest_chunks(tmp_path: Path, store_backend: str) -> None:
    svc = _memory(tmp_path)
    ks = KeywordSearcher(svc.store, budget=5)
    hits = ks.search(["notes"], 10)
    plan = ks.last_plan
    assert plan is not None and plan.kept == ["notes"] and plan.min_rowid is not None
    assert hits and all(cid >= plan.min_rowid for cid, _ in hits)
    exact = _exact(svc, ["notes"], [i for i, _ in hits])
    assert all(rel == pytest.approx(exact[cid], rel=1e-6) for cid, rel in hits)


def test_hostile_and_empty_phrases(tmp_path: Path, store_backend: str) -> None:
    svc = _memory(tmp_path)
    ks = KeywordSearcher(svc.store, budget=8)
    assert ks.search([], 5) == []
    assert ks.search(["zzzz-not-there"], 5) == []
    assert ks.search(['he said "NEAR(', "AND", "a*b"], 5) == []


def test_fts_stats_and_document_lengths(tmp_path: Path, store_backend: str) -> None:
    svc = _memory(tmp_path)
    ids = [int(r[0]) for r in sql(svc, "select id from {t}chunks")]
    n, avg = svc.store.fts_stats()
    lengths = svc.store.fts_doc_lengths(ids)
    assert n == len(ids) == len(lengths)
    assert avg == pytest.approx(sum(lengths.values()) / n)


def test_read_varint() -> None:
    assert read_varint(bytes([0x05]), 0) == (5, 1)
    assert read_varint(bytes([0x86, 0x8D, 0x29]), 0) == (100009, 3)
    nine = bytes([0xFF] * 8 + [0x01])
    assert read_varint(nine, 0) == (((1 << 56) - 1) << 8 | 1, 9)


def test_term_coverage_words_variants_and_cjk() -> None:
    got = term_coverage(["notes", "TICKET 4821", "钢琴"],
                        {1: "My Notes on ticket-4821", 2: "钢琴课 note", 3: "footnotes, nothing", 4: "notes_x"})
    assert got[1] == pytest.approx(2 / 3)
    assert got[2] == pytest.approx(2 / 3)
    assert got[3] == 0.0  # "footnotes" is not the word "notes"
    assert got[4] == 0.0  # nor is "notes_x"


def test_matrix_pass_holds_blas_and_matches(tmp_path: Path) -> None:
    from hermit.memory.search.vectors import VectorMatrix

    svc = _memory(tmp_path)
    m = VectorMatrix()
    m.refresh(svc.store)
    q = HashEmbedder().embed_query("kumquat tree")
    top = m.topk(q, 3)
    full = m.mat @ q
    assert [i for i, _ in top] == [int(m.ids[j]) for j in np.argsort(-full)[:3]]


def test_matrix_pass_blocks_shared_by_two_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from hermit.memory.search.vectors import MatrixPass

    rng = np.random.default_rng(3)
    mat = rng.standard_normal((3 * MatrixPass.BLOCK_ROWS + 17, 32), dtype=np.float32)
    q = rng.standard_normal(32, dtype=np.float32)
    p = MatrixPass(mat, q)
    with ThreadPoolExecutor(1) as ex:
        job = ex.submit(p.work)
        p.work()
        job.result()
    assert np.allclose(p.out, mat @ q, rtol=1e-5, atol=1e-5)
    assert p.busy_ms > 0


def test_idf_of_a_phrase_counted_in_more_chunks_than_the_index_holds() -> None:
    """Counts read while another process indexes can disagree (PostgreSQL reads them in two statements):
    the phrase scores as an everyday word instead of failing the search with a math domain error."""
    from hermit.memory.search.fts import bm25_idf

    assert bm25_idf(3, 5) == 1e-6 and bm25_idf(0, 1) == 1e-6
    assert bm25_idf(100, 1) == pytest.approx(math.log(99.5 / 1.5))
    assert bm25_idf(100, 60) == 1e-6  # FTS5's floor for a word in most chunks
