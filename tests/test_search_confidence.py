"""Knowing when nothing matches (BM25 on the query's own scale), copies of conversations after the notes, and
the turns of the speaker a question names."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.memory.search.places import show_places
from hermit.memory.search.snippets import render, weigh_terms
from hermit.memory.service import MemoryKey, MemoryService
from hermit.memory.store.api import ChunkRow
from memhelpers import ERRAND_TOPICS, HashEmbedder, errand_logs


def _workspace(ws: Path) -> None:
    errand_logs(ws)


def _svc(ws: Path, db: Path, query: dict[str, object] | None = None, emb: object = None) -> MemoryService:
    cfg = MemorySearchConfig.model_validate({"provider": "none" if emb is None else "local", "query": query or {}})
    svc = MemoryService(MemoryKey("main", ws), db, cfg, emb)  # type: ignore[arg-type]
    svc.sync()
    return svc


def test_a_question_whose_rare_word_is_in_no_note_is_not_lifted_to_full_relevance(tmp_path: Path) -> None:
    """Under per-query max normalisation the best keyword hit always scores 1, so a note sharing only
    the question's everyday words ("Tom", "talked") came back as if it answered it."""
    ws = tmp_path / "ws"
    _workspace(ws)
    absent = "when did Tom go skydiving"
    old = _svc(ws, tmp_path / "max.sqlite", {"hybrid": {"text_normalization": "max"}})
    assert old.search(absent)["results"], "the old scale returns unrelated notes"
    new = _svc(ws, tmp_path / "query.sqlite")
    assert new.search(absent)["results"] == []
    # A question the notes answer keeps its full score: its best hit holds the whole query.
    hit = new.search("what did Tom say about the bike chain")["results"]
    assert hit and hit[0]["path"] == "memory/2026-04-06.md" and hit[0]["score"] >= 0.99
    old.close()
    new.close()


def test_a_memory_of_two_notes_keeps_its_keyword_matches(tmp_path: Path) -> None:
    """In two chunks FTS5 gives every word the floor idf (one chunk of two is half of them), so the query's
    own scale would make any keyword hit worthless: "staging database host" lost the note holding two of
    its three words (a new user's memory). Such a memory stays on the per-query maximum."""
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n\n- Favourite colour: teal.\n")
    write(ws / "memory" / "2026-12-01.md", "# 2026-12-01\n\n- The staging database moved to db-stage.internal.\n")
    svc = _svc(ws, tmp_path / "two.sqlite")
    assert svc.searcher.keyword.doc_count() == 2
    hits = svc.search("staging database host")["results"]
    assert [h["path"] for h in hits] == ["memory/2026-12-01.md"] and hits[0]["score"] >= 0.5
    svc.close()


def test_the_query_scale_is_the_sum_of_fts5_idfs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    svc = _svc(ws, tmp_path / "i.sqlite")
    kw = svc.searcher.keyword
    n = kw.doc_count()
    assert n == len(ERRAND_TOPICS)
    # A phrase found nowhere counts at its largest idf; one in every chunk at FTS5's floor.
    assert math.isclose(kw.ideal(["skydiving"]), math.log((n + 0.5) / 0.5))
    assert math.isclose(kw.ideal(["tom"]), 1e-6)
    assert math.isclose(kw.ideal(["bike", "bike"]), math.log((n - 1 + 0.5) / 1.5)), "each phrase once"
    svc.close()


def _dump(day: str, slug: str, lines: list[str]) -> str:
    """A session dump as agent/session_memory.py writes it on /new."""
    return (f"# Session {day} 10:15 (UTC): {slug.replace('-', ' ')}\n\n- Session key: agent:main:main\n"
            "- Session id: s1\n- Source: direct\n- Saved on /new: the last 4 user/assistant messages\n\n"
            "## Conversation\n\n" + "\n".join(lines) + "\n")


def test_a_session_dump_ranks_below_the_note_it_summarises(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    write(ws / "memory" / "2026-05-02.md", "# 2026-05-02\n\n- Passport: number X1234567, expires 2031-03.\n")
    talk = ["- User: I need my passport number for the passport renewal form, the passport office asked",
            "- Assistant: Your passport number is in today's note; the passport renewal form wants it too.",
            "- User: great, passport sorted then"]
    write(ws / "memory" / "2026-05-02-passport-renewal.md", _dump("2026-05-02", "passport-renewal", talk))
    # A dated note with a slug that is not a session dump is an ordinary note.
    write(ws / "memory" / "2026-05-03-trip-plan.md", "# Trip plan\n\n- passport passport passport: check the expiry\n")
    svc = _svc(ws, tmp_path / "d.sqlite", emb=HashEmbedder())
    paths = [r["path"] for r in svc.search("passport", 6, 0.0)["results"]]
    assert "memory/2026-05-02-passport-renewal.md" in paths
    dump = paths.index("memory/2026-05-02-passport-renewal.md")
    assert paths.index("memory/2026-05-02.md") < dump
    assert paths.index("memory/2026-05-03-trip-plan.md") < dump
    assert all(p.startswith("memory/2026-04-") for p in paths[dump + 1:]), "it still ranks above unrelated notes"
    # Without the rule the dump, repeating the word, came first.
    svc.searcher.tuning = dataclasses.replace(svc.searcher.tuning, copy_weight=1.0)
    before = [r["path"] for r in svc.search("passport", 6, 0.0)["results"]]
    assert before.index("memory/2026-05-02-passport-renewal.md") < before.index("memory/2026-05-02.md")
    # Alone, a dump is found as before.
    only = svc.search("renewal form office", 6, 0.0)["results"]
    assert only[0]["path"] == "memory/2026-05-02-passport-renewal.md"
    svc.close()


def test_a_question_naming_a_speaker_shows_that_speakers_turns() -> None:
    """"What has Melanie painted?" is answered by Melanie's turn, not by Caroline's longer talk of painting."""
    lines = ["- [D1:1] Caroline: Melanie, I painted the porch!",
             "- [D1:2] Melanie: Wow, the porch looks great.",
             "- [D1:3] Caroline: Thanks! What about you?",
             "- [D1:4] Melanie: I painted a horse last week.",
             "- [D1:5] Caroline: Love it."]
    rows = {1: ChunkRow(1, "memory/2023-05-08.md", "memory", 1, len(lines), "\n".join(lines))}
    terms = weigh_terms(["Melanie", "painted"], lambda t: 1 if t == "painted" else 50, 100)
    [anyone] = show_places([[(1, 0.9)]], rows, terms, 60)
    assert render(anyone, terms)[0] == lines[0]
    [melanie] = show_places([[(1, 0.9)]], rows, terms, 60, frozenset({"what", "has", "melanie", "painted"}))
    assert render(melanie, terms)[0] == lines[3]
    # A name that speaks no line of the place changes nothing.
    [other] = show_places([[(1, 0.9)]], rows, terms, 60, frozenset({"jon"}))
    assert render(other, terms)[0] == render(anyone, terms)[0]
