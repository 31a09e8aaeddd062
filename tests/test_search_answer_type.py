"""The answer's type read from the question (memory.search.answer_type): a question asking for a time puts the
place whose line carries one first, on both stores; other questions and the nearness rule are untouched."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.memory.search.answer_type import asks_time, timed_lines
from hermit.memory.search.tuning import DEFAULT_TUNING
from hermit.memory.service import MemoryKey, MemoryService
from hermit.memory.store.api import ChunkRow
from memhelpers import Backend, HashEmbedder, on_backend

# Daily notes of bullets (a memory of notes: the places take the blend of score and best line).
_NOTES = {
    # The note whose line shares one more of the question's words ("when"), with no time in it.
    "2026-03-02": ["When we go camping, I love camping.", "Camping sounds fun to Felix.", "Camping it is.",
                   "Felix brings the tent."],
    # The one that answers "when": the same, told with a time.
    "2026-03-09": ["We did go camping last weekend, I love camping.", "Camping sounds fun to Felix.", "Camping it was.",
                   "Felix brought the tent."],
    "2026-03-16": ["Baked sourdough bread.", "Felix says sell it at the market.", "The starter is called Gerald.",
                   "Gerald is a fine name."],
}


def _workspace(ws: Path) -> None:
    write(ws / "MEMORY.md", "# Memory\n\n- Nadia's notes.\n")
    for day, lines in _NOTES.items():
        write(ws / "memory" / f"{day}.md", f"# {day}\n\n" + "".join(f"- {t}\n" for t in lines))


def _search(ws: Path, db: Path, query: str, bonus: float) -> tuple[list[tuple[str, float]], int]:
    cfg = on_backend(MemorySearchConfig.model_validate({"provider": "local", "line_vectors": True}), db)
    svc = MemoryService(MemoryKey("main", ws), db, cfg, HashEmbedder(),  # type: ignore[arg-type]
                        tuning=dataclasses.replace(DEFAULT_TUNING, time_line_bonus=bonus),
                        environ={"HERMIT_TEST_PG_DSN": Backend.dsn})
    try:
        svc.sync()
        out = svc.search_outcome(query, 6)
        return [(h.path, h.score) for h in out.hits], out.unmatched
    finally:
        svc.close()


def test_a_question_asking_for_a_time_puts_the_timed_turn_first(tmp_path: Path, store_backend: str) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    db = tmp_path / "when.sqlite"
    plain, _ = _search(ws, db, "When did we go camping?", 0.0)
    typed, _ = _search(ws, db, "When did we go camping?", DEFAULT_TUNING.time_line_bonus)
    # Without the answer type the note sharing most words comes first; with it, the line saying when.
    assert [p for p, _ in plain[:2]] == ["memory/2026-03-02.md", "memory/2026-03-09.md"]
    assert [p for p, _ in typed[:2]] == ["memory/2026-03-09.md", "memory/2026-03-02.md"]
    assert DEFAULT_TUNING.time_line_bonus > 0


def test_other_questions_and_the_nearness_rule_are_untouched(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    db = tmp_path / "other.sqlite"
    for query in ("Where did we go camping?", "What is the sourdough starter called?"):
        assert _search(ws, db, query, 0.0) == _search(ws, db, query, 0.4)
    # A question asking for a time about something never said: whether anything said is near it reads the
    # plain cosines, so the lift does not turn an empty search into one with results.
    assert _search(ws, db, "When did Felix go skydiving?", 0.0)[1] == _search(ws, db, "When did Felix go skydiving?", 0.4)[1]


def test_which_questions_ask_for_a_time_and_which_lines_carry_one() -> None:
    for q in ("When did Maria meet Jean?", "what year did John move?", "How long ago was the trip?",
              "In which month did Gina open her store?"):
        assert asks_time(q)
    for q in ("What did Maria paint?", "Where has Melanie camped?", "Who is Jean?", "Whenever is fine"):
        assert not asks_time(q)
    text = "\n".join(["## 13:56 — session 1 (2023)", "- [D1:1] Nadia: I went camping last weekend.",
                      "- [D1:2] Felix: Nice!", "- [D1:3] Nadia: Back in 2019 I hated tents.",
                      "- [D1:4] Felix: Two years ago you loved them.", "- [D1:5] Nadia: I see you Tuesday."])
    row = ChunkRow(id=1, path="memory/2023-05-08.md", source="memory", start_line=3, end_line=8, text=text)
    # Headings carry the day of every chunk of a log: never counted.
    assert timed_lines(row) == [4, 6, 7, 8]
    # A chunk whose text does not map one line to one number (a split long line) gets none.
    assert timed_lines(dataclasses.replace(row, end_line=3)) == []
