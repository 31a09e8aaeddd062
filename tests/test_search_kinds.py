"""The kind of memory a chunk is, and the order learned for dialogue (memory.search.kinds): dialogue chunks
among the passed places are put in the combiner's order in the places dialogue holds, a note keeps its
place, and every chunk keeps its score, on both stores."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conftest import write
from hermit.agent.session_memory import Line, render_dialogue
from hermit.config.schema import MemorySearchConfig
from hermit.memory.search.kinds import dialogue_shaped, in_dialogue_places
from hermit.memory.search.tuning import DEFAULT_TUNING
from hermit.memory.service import MemoryKey, MemoryService
from memhelpers import Backend, on_backend

_SMALL_TALK = ["Tom: How was your week?", "Mel: Busy, the kids had a cold.", "Tom: Oh no, are they better?",
               "Mel: Much better now, thanks.", "Tom: Did you watch the game?", "Mel: No, I fell asleep early.",
               "Tom: Ha, me too."]


def _log(day: str, turns: list[str]) -> str:
    return f"# {day}\n\n" + "\n".join(f"- {t}" for t in turns) + "\n"


def test_dialogue_is_told_from_notes_by_the_shape_of_its_lines() -> None:
    # A session dump as Hermit writes it on /new, a chat log, a transcript with tags and times, Chinese turns.
    dump = render_dialogue([Line("user", "Log the new kitchen numbers."), Line("assistant", "Logged: $47,500."),
                            Line("user", "And the schedule?"), Line("assistant", "Cabinets arrive Oct 20.")])
    assert dialogue_shaped(dump)
    assert dialogue_shaped(_log("2026-03-08", _SMALL_TALK))
    assert dialogue_shaped("- [D1:1] Caroline: Hey Mel!\n- [D1:2] Melanie: Hi!\n- [D1:3] Caroline: How are you?\n"
                           "- [D1:4] Melanie: Swamped with the kids.")
    assert dialogue_shaped("09:14 Ana: ready?\n09:15 Bo: yes\n09:15 Ana: go\n09:16 Bo: done")
    assert dialogue_shaped("用户：明天几点开会？\n助手：上午十点。\n用户：在哪里？\n助手：三楼会议室。")
    # Notes: prose, bullets, and "Key: value" lines whose keys are all different (no one speaks again).
    assert not dialogue_shaped("# Kitchen\n\nThe electrician found knob-and-tube wiring; the budget is $47,500.")
    assert not dialogue_shaped("- Owner: Aisha\n- Status: open\n- Severity: 2\n- Due: Friday")
    assert not dialogue_shaped("# Hobbies\n\n- Mel: pottery (ceramics, glazes).\n- Tom: football.\n- Both: hiking.")
    # Two turns are not yet a conversation; a note quoting one line of talk is still a note.
    assert not dialogue_shaped("Tom: hi\nMel: hi")
    assert not dialogue_shaped("# Call with Ana\n\nWe agreed on the date.\nAna: I'll send the contract.\n"
                               "The fee is 400 EUR.\nPayment within 30 days.")


def test_only_the_dialogue_places_change_hands_wherever_they_are() -> None:
    # After notes_first (a session dump passed: everything sorted by score again) the dialogue chunks of
    # the head may sit anywhere; they take each other's places, the notes (1, 4) and a chunk past the head
    # (6) keep theirs, and every chunk keeps its score.
    ordered = [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6), (5, 0.5), (6, 0.4)]
    value = {2: -1.0, 3: 0.5, 5: 2.0}
    assert in_dialogue_places(ordered, {2, 3, 5}, value) == [(1, 0.9), (5, 0.5), (3, 0.7), (4, 0.6), (2, 0.8),
                                                              (6, 0.4)]
    # Equal values keep the order they had.
    assert in_dialogue_places(ordered, {2, 3}, {2: 0.0, 3: 0.0}) == ordered


def _workspace(ws: Path) -> None:
    write(ws / "MEMORY.md", "# MEMORY\n\nThings to remember.\n")
    # A session about pottery in every turn, that never says when the class is ...
    write(ws / "memory" / "2026-03-01.md", _log("2026-03-01", [
        "Mel: I love pottery, the pottery studio downtown is amazing.", "Tom: Pottery sounds relaxing.",
        "Mel: Pottery and ceramics are my favourite hobbies, I read pottery blogs every day.",
        "Tom: Which pottery blogs?", "Mel: Mostly ones about glazes and kilns.", "Tom: Cool, pottery people are nice.",
        "Mel: I might take a class some day."]))
    # ... the session where Mel signed up, in one turn among small talk ...
    write(ws / "memory" / "2026-03-08.md", _log("2026-03-08", _SMALL_TALK[:3] + [
        "Mel: Oh, and I signed up for the Tuesday evening pottery class.", "Tom: Nice, when does it start?",
        "Mel: Next week."] + _SMALL_TALK[3:]))
    # ... one whose single turn names the class, and one about what Mel makes.
    write(ws / "memory" / "2026-03-15.md", _log("2026-03-15", _SMALL_TALK + ["Mel: The pottery class was fun.",
                                                                            "Tom: Great!"]))
    write(ws / "memory" / "2026-03-20.md", _log("2026-03-20", [
        "Tom: Are you still doing pottery?", "Mel: Yes! Ceramics every week.", "Tom: What do you make?",
        "Mel: Mugs and bowls, pottery is so calming.", "Tom: Pottery gifts are the best."]))
    # A note (its "Name: thing" lines name a different person each: not dialogue).
    write(ws / "memory" / "hobbies.md", "# Hobbies\n\n- Mel: pottery (ceramics, glazes).\n- Tom: football.\n"
          "- Both: hiking.\n")


def _search(ws: Path, db: Path, e5: object, dialogue_order: bool) -> list[tuple[str, float]]:
    cfg = on_backend(MemorySearchConfig(), db)
    svc = MemoryService(MemoryKey("main", ws), db, cfg, e5,  # type: ignore[arg-type]
                        tuning=dataclasses.replace(DEFAULT_TUNING, dialogue_order=dialogue_order),
                        environ={"HERMIT_TEST_PG_DSN": Backend.dsn})
    try:
        svc.sync()
        # A min_score given with the search: every place above it passes, none fills, none is left out.
        out = svc.search_outcome("When did Mel sign up for the pottery class?", 6, min_score=0.05)
        return [(h.path, h.score) for h in out.hits]
    finally:
        svc.close()


def test_dialogue_places_take_the_learned_order_and_a_note_keeps_its_place(tmp_path: Path, e5: object,
                                                                           store_backend: str) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    blend = _search(ws, tmp_path / "kinds.sqlite", e5, dialogue_order=False)
    learned = _search(ws, tmp_path / "kinds.sqlite", e5, dialogue_order=True)
    # The hand-picked blend (0.8 fused + 0.2 best line) puts the session that talks pottery throughout
    # before the one whose turn says "the pottery class"; the combiner learned on conversations (the
    # question's words and the best turn over the chunk's vector) the other way round.
    assert [p for p, _ in blend] == ["memory/2026-03-08.md", "memory/hobbies.md", "memory/2026-03-01.md",
                                     "memory/2026-03-15.md", "memory/2026-03-20.md"]
    assert [p for p, _ in learned] == ["memory/2026-03-08.md", "memory/hobbies.md", "memory/2026-03-15.md",
                                       "memory/2026-03-01.md", "memory/2026-03-20.md"]
    # The note is ranked by the blend in both: same place, same score. Every place keeps its own score.
    assert blend[1] == learned[1] == ("memory/hobbies.md", blend[1][1])
    assert dict(blend) == dict(learned)


def test_both_stores_give_the_same_learned_order(tmp_path: Path, e5: object, pg_dsn: str) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    sqlite = _search(ws, tmp_path / "parity.sqlite", e5, dialogue_order=True)
    Backend.name, Backend.dsn = "postgres", pg_dsn
    try:
        postgres = _search(ws, tmp_path / "parity.sqlite", e5, dialogue_order=True)
    finally:
        Backend.name, Backend.dsn = "sqlite", ""
    assert [p for p, _ in postgres] == [p for p, _ in sqlite]
    assert [round(s, 3) for _, s in postgres] == [round(s, 3) for _, s in sqlite]


def _dump(ws: Path, day: str, slug: str, turns: list[str]) -> None:
    # A session dump as agent/session_memory.py saves it on /new: a copy of a conversation (ordering.notes_first).
    write(ws / "memory" / f"{day}-{slug}.md", f"# Session {day} 19:02 UTC\n\n- Session ID: s-{slug}\n"
          f"- Saved on /new: the last {len(turns)} user/assistant messages\n\n" + "\n\n".join(turns) + "\n")


def test_the_learned_order_survives_notes_first_among_session_dumps(tmp_path: Path, e5: object) -> None:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# MEMORY\n\nThings to remember.\n")
    _dump(ws, "2026-03-01", "pottery", [
        "User: I love pottery, the pottery studio downtown is amazing.", "Assistant: Pottery sounds relaxing.",
        "User: Pottery and ceramics are my favourite hobbies, I read pottery blogs every day.",
        "Assistant: Which pottery blogs do you like?", "User: Mostly ones about glazes and kilns.",
        "Assistant: Pottery people are nice.", "User: I might take a class some day."])
    _dump(ws, "2026-03-08", "week", [
        "User: How was your week?", "Assistant: Busy, thanks for asking.",
        "User: Oh, and I signed up for the Tuesday evening pottery class.", "Assistant: Nice, when does it start?",
        "User: Next week.", "Assistant: Noted."])
    _dump(ws, "2026-03-15", "weekend", ["User: Plans for the weekend?", "Assistant: Rest, mostly.",
                                        "User: The pottery class was fun.", "Assistant: Great!", "User: Thanks."])
    _dump(ws, "2026-03-20", "gifts", [
        "User: Am I still doing pottery?", "Assistant: Yes, ceramics every week.", "User: What do I make?",
        "Assistant: Mugs and bowls, pottery is so calming.", "User: Pottery gifts are the best."])
    write(ws / "memory" / "hobbies.md", "# Hobbies\n\n- Mel: pottery (ceramics, glazes).\n- Tom: football.\n"
          "- Both: hiking.\n")

    def search(dialogue_order: bool) -> list[tuple[str, float]]:
        svc = MemoryService(MemoryKey("main", ws), tmp_path / "dumps.sqlite", MemorySearchConfig(), e5,  # type: ignore[arg-type]
                            tuning=dataclasses.replace(DEFAULT_TUNING, dialogue_order=dialogue_order))
        try:
            svc.sync()
            return [(h.path, h.score) for h in svc.search_outcome("What do I make in pottery?", 6, min_score=0.05).hits]
        finally:
            svc.close()

    blend, learned = search(False), search(True)
    # A dump passed, so notes_first sorts every place by its score again (dumps at 0.8 of theirs): the
    # learned order is applied after it, not undone by it. The note keeps its place.
    assert [p for p, _ in blend][:5] == ["memory/2026-03-20-gifts.md", "memory/hobbies.md",
                                         "memory/2026-03-01-pottery.md", "memory/2026-03-15-weekend.md",
                                         "memory/2026-03-08-week.md"]
    assert [p for p, _ in learned][:5] == ["memory/2026-03-20-gifts.md", "memory/hobbies.md",
                                           "memory/2026-03-01-pottery.md", "memory/2026-03-08-week.md",
                                           "memory/2026-03-15-weekend.md"]
    assert dict(blend) == dict(learned)
