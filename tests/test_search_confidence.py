"""Knowing when nothing matches (BM25 on the query's own scale, searches that matched only everyday words),
copies of conversations after the notes, and the turns of the speaker a question names."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.memory.search.places import show_places
from hermit.memory.search.snippets import render, weigh_terms
from hermit.memory.service import MemoryKey, MemoryService
from hermit.memory.store.api import ChunkRow
from memhelpers import ERRAND_TOPICS, HashEmbedder, errand_logs
from prochelpers import PROC_TIMEOUT


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


_TALK = {  # a conversation logged one turn a line, as channels and LoCoMo-style logs are
    "2026-03-02": ["Nadia: Hey Felix! I finally signed up for the pottery class at the community centre.",
                   "Felix: That's great! What are you going to make first?",
                   "Nadia: A set of mugs for my sister, she just moved into a new flat.",
                   "Felix: I spent the weekend repairing the old bicycle my grandfather left me.",
                   "Nadia: Did you manage to fix the brakes?", "Felix: Yes, new pads and a cable, it rides like new now."],
    "2026-03-09": ["Felix: I went hiking in the hills with my dog on Saturday, we saw a fox.",
                   "Nadia: Lovely! My mugs came out of the kiln, two of them cracked though.",
                   "Felix: Oh no. Will you try again?", "Nadia: Yes, the teacher says I pulled the walls too thin.",
                   "Felix: I'm thinking about volunteering at the animal shelter on Sundays."],
    "2026-03-16": ["Nadia: My sister loved the mugs, she uses the blue one every morning.",
                   "Felix: I started volunteering at the shelter, I walk three dogs every Sunday.",
                   "Nadia: You must come home exhausted.", "Felix: A bit, but it's the best part of my week."],
    "2026-03-23": ["Felix: My cousin's wedding is next month, I have to write a speech.",
                   "Nadia: Keep it short and tell one funny story.",
                   "Felix: Good idea, I'll tell the one about the canoe trip."],
    "2026-03-30": ["Nadia: I started reading a novel about a lighthouse keeper, it's beautiful.", "Felix: Who wrote it?",
                   "Nadia: A Norwegian author, I forget the name, my book club picked it."],
    "2026-04-06": ["Felix: The shelter let me take one of the dogs home for the weekend, his name is Biscuit.",
                   "Nadia: Are you going to adopt him?", "Felix: I'm seriously thinking about it, he's so calm."],
    "2026-04-13": ["Nadia: I baked sourdough for the first time, the crust was perfect.",
                   "Felix: You should sell it at the farmers market!",
                   "Nadia: Ha, maybe one day. The starter is called Gerald."],
    "2026-04-20": ["Felix: I adopted Biscuit! He sleeps on my feet every night.", "Nadia: That's wonderful, send me photos.",
                   "Felix: [shares a photo of a brown dog on a sofa]"],
    "2026-04-27": ["Nadia: My pottery teacher asked me to help with the beginners' class.",
                   "Felix: You've come a long way since the cracked mugs.", "Nadia: I know, I'm making a teapot now."],
    "2026-05-04": ["Felix: I ran my first 10k race on Sunday, 54 minutes.", "Nadia: Amazing! Were you training for long?",
                   "Felix: Two months, three runs a week with Biscuit."],
    "2026-05-11": ["Nadia: We're planning a trip to Lisbon in June with my sister.",
                   "Felix: Try the custard tarts in Belem.", "Nadia: Already on the list!"],
}


def _write_talk(ws: Path) -> None:
    """_TALK as daily notes, one turn a line (`- [D<session>:<turn>] Speaker: text`)."""
    for n, (day, turns) in enumerate(_TALK.items(), 1):
        write(ws / "memory" / f"{day}.md", f"# {day}\n\n" + "".join(f"- [D{n}:{k}] {t}\n" for k, t in enumerate(turns, 1)))


def test_a_search_that_matched_only_everyday_words_returns_nothing(tmp_path: Path, e5: object) -> None:
    """"When did Nadia go skydiving?" over a conversation that never mentions it: the name and "go" are
    everywhere, so two sessions pass min_score on those words (0.42, 0.37) while nothing said in them comes
    near the question. Such a search returns nothing (SearchTuning.unmatched_line); questions the talk
    answers keep every result."""
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n\n- Conversation between Nadia and Felix.\n")
    _write_talk(ws)
    cfg = MemorySearchConfig()
    svc = MemoryService(MemoryKey("main", ws), tmp_path / "u.sqlite", cfg, e5, cache_dir=tmp_path / "cache")  # type: ignore[arg-type]
    svc.sync()
    absent = ["When did Nadia go skydiving?", "When did Felix go to the concert?"]
    answered = {"What did Felix name his dog?": "2026-04-06", "Where is Nadia travelling in June?": "2026-05-11"}
    try:
        for q in absent:
            out = svc.search(q)
            assert out["results"] == []
            # The result says why nothing came back though notes shared its words.
            assert re.fullmatch(r"[2-9] passage\(s\) shared only the question's common words.*", out["unmatched"])
        # A min_score given with the search is a hard threshold: what passes it is returned.
        assert all(len(svc.search(q, None, 0.35)["results"]) >= 2 for q in absent)
        found = {q: svc.search(q)["results"] for q in answered}
        assert not any("unmatched" in svc.search(q) for q in answered)
        assert all(found[q][0]["path"] == f"memory/{day}.md" for q, day in answered.items())
        # Without the rule the everyday words bring back sessions that do not answer; the answers are the same.
        svc.searcher.tuning = dataclasses.replace(svc.searcher.tuning, unmatched_line=0.0)
        assert all(len(svc.search(q)["results"]) >= 2 for q in absent)
        assert {q: svc.search(q)["results"] for q in answered} == found
    finally:
        svc.close()


def test_the_cli_says_why_such_a_search_is_empty_and_how_to_see_what_was_left_out(tmp_path: Path) -> None:
    """`hermit memory search` prints "no results" and, on stderr, that passages sharing only common words
    were left out and that an explicit --min-score shows them; with it, they are shown."""
    home = tmp_path / "home"
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, text=True,
                              capture_output=True, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)

    assert cli("init").returncode == 0
    ws = home / "workspace"
    _write_talk(ws)
    empty = cli("memory", "search", "When did Nadia go skydiving?")
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout == "no results\n"
    assert re.search(r"hint: [2-9] passage\(s\) shared only the question's common words.* \(--min-score 0\.35 shows them\)",
                     empty.stderr), empty.stderr
    shown = json.loads(cli("memory", "search", "--json", "--min-score", "0.35", "When did Nadia go skydiving?").stdout)
    assert len(shown["results"]) >= 2 and "unmatched" not in shown
