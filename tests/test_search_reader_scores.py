"""A chat's search scores say nothing about the notes it may not see.

The keyword leg's scale (the best hit) and BM25's word counts were the whole index's, so a chat that
wrote a guess into a note of its own and searched for it watched its note's score drop when the owner's
MEMORY.md held the same word: one search per guess (an audit read a PIN out of MEMORY.md in 200
searches). Every test builds two memories that differ only in one word of an owner-only note, of the
same length, and asks as a chat: its answers must be identical.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hermit.config.schema import MemorySearchConfig
from hermit.memory.policy.audience import owner_origin, reader_for_session
from hermit.memory.policy.provenance import wrap
from hermit.memory.service import MemoryService
from hermit.sessions.keys import dm_session_key
from memhelpers import HashEmbedder, service, sql

CHAT = reader_for_session(dm_session_key("main", "telegram", "777"))
SHARED_LOG = ("# 2026-01-20\n"
              "- reminder about Varga and the fence and the garden shed\n"
              "- numbers 4820 4821 4822 zebra\n"
              "- zebra crossing near the garden\n")


def _memory(tmp_path: Path, name: str, secret: str, provider: str) -> MemoryService:
    ws = tmp_path / name
    (ws / "memory" / "private").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(f"# Memory\n- the safe PIN is {secret}, ask {secret} {secret}\n")
    (ws / "memory" / "private" / "health.md").write_text(f"# Health\n- {secret} biopsy with Dr {secret}\n")
    for day in range(1, 8):  # enough notes that BM25's idf tells rare words from common ones
        (ws / "memory" / f"2026-01-0{day}.md").write_text(f"# 2026-01-0{day}\n- walked the dog on day {day}\n")
    (ws / "memory" / "2026-01-20.md").write_text(SHARED_LOG)
    cfg = MemorySearchConfig.model_validate({"provider": "local" if provider == "hash" else "none"})
    embedder = HashEmbedder() if provider == "hash" else None
    return service(ws, tmp_path / f"{name}.sqlite", embedder, cfg)


def _answers(svc: MemoryService, queries: list[str], reader: Any) -> list[list[tuple[str, int, float, str]]]:
    out = []
    for q in queries:
        hits = svc.search(q, reader=reader)["results"]
        out.append([(h["path"], h["startLine"], h["score"], h["snippet"]) for h in hits])
    return out


@pytest.mark.parametrize("provider", ["hash", "none"])
def test_a_chats_scores_are_the_same_whatever_word_the_owners_notes_hold(tmp_path: Path, provider: str,
                                                                         store_backend: str) -> None:
    with_pin = _memory(tmp_path, "pin", "4821", provider)
    without = _memory(tmp_path, "other", "9375", provider)
    queries = ["4821", "Varga", "4821 zebra", "zebra 4821 garden", "biopsy 4821"]
    try:
        seen = _answers(with_pin, queries, CHAT)
        assert seen == _answers(without, queries, CHAT)
        assert all(paths for paths in seen[:4])  # the chat finds its own notes
        assert all(path == "memory/2026-01-20.md" for answer in seen for path, *_ in answer)
        # The owner's own search does see the difference (the note is there).
        owner = with_pin.search("4821 biopsy")["results"]
        assert {h["path"] for h in owner} >= {"MEMORY.md", "memory/private/health.md"}
    finally:
        with_pin.close()
        without.close()


def _crowd(ws: Path, owner_notes: list[str], shared_note: str) -> None:
    """`ws` with one owner-only note per line of `owner_notes` (memory/private/) and the chat-visible daily
    log holding `shared_note`."""
    (ws / "memory" / "private").mkdir(parents=True)
    for i, note in enumerate(owner_notes):
        (ws / "memory" / "private" / f"n{i:03d}.md").write_text(f"# Note {i}\n- {note}\n")
    (ws / "memory" / "2026-01-20.md").write_text(f"# 2026-01-20\n- {shared_note}\n")


@pytest.mark.parametrize("provider", ["hash", "none"])
def test_a_chats_own_note_is_not_crowded_out_by_notes_it_may_not_see(tmp_path: Path, provider: str,
                                                                  store_backend: str) -> None:
    """The keyword pool was taken from everyone's notes and filtered after: with enough owner-only notes
    naming Keller, the chat's own note about Keller vanished from its results (at one result, 16 sufficed),
    which said the owner writes about Keller. A chat's pool is filled from what it may see."""
    answers = []
    for name, word in (("keller", "keller"), ("other", "zander")):
        ws = tmp_path / name
        _crowd(ws, [f"{word} {word} {word} call"] * 40, "met keller about the fence and the shed")
        cfg = MemorySearchConfig.model_validate({"provider": "local" if provider == "hash" else "none"})
        svc = service(ws, tmp_path / f"{name}.sqlite", HashEmbedder() if provider == "hash" else None, cfg)
        try:
            answers.append([[(h["path"], h["score"]) for h in svc.search("keller", max_results=n, reader=CHAT)["results"]]
                            for n in (1, 3, 6)])
            if word == "keller":  # the owner's own search is crowded by them, as it should be
                assert all(h["path"].startswith("memory/private/") for h in svc.search("keller", max_results=1)["results"])
        finally:
            svc.close()
    assert answers[0] == answers[1]
    assert all(a and a[0][0] == "memory/2026-01-20.md" for a in answers[0])


class TopicEmbedder(HashEmbedder):
    """Meaning without shared words: "garden" questions, rose and tulip notes and the hedge note point the
    same way (the hedge a little off), everything else elsewhere."""

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.info.dims, dtype=np.float32)
        low = text.lower()
        if "garden" in low or "tulips" in low:
            v[0] = 1.0
        elif "hedge" in low:
            v[0], v[1] = 0.9, 0.44
        else:
            v[2 + len(low) % 7] = 1.0
        return v


def test_a_chats_own_note_is_not_crowded_out_of_the_vector_leg_either(tmp_path: Path, store_backend: str) -> None:
    """The nearest chunks were taken from everyone's notes and filtered after: forty owner-only notes nearer
    to the question than the chat's own note (which shares no word with it) pushed that note out."""
    answers = []
    for name, owner_note in (("near", "rose bed and tulips {i}"), ("far", "invoice number {i} paid")):
        ws = tmp_path / name
        _crowd(ws, [owner_note.format(i=i) for i in range(40)], "trimmed the hedge by the shed")
        svc = service(ws, tmp_path / f"{name}.sqlite", TopicEmbedder(), MemorySearchConfig())
        try:
            answers.append([[h["path"] for h in svc.search("garden", max_results=n, reader=CHAT)["results"]]
                            for n in (1, 6)])
        finally:
            svc.close()
    assert answers[0] == answers[1] == [["memory/2026-01-20.md"]] * 2



def test_a_chats_dated_notes_are_not_crowded_out_by_the_owners_of_that_day(tmp_path: Path,
                                                                          store_backend: str) -> None:
    """The chunks of the day a question names join the candidates (at most 200): they were taken from
    everyone's daily files first and filtered after, so the owner's many owner-only notes of that day (the
    /new files `memory/<day>-<slug>.md` sort before the log) pushed the chat's own note of that day out, which
    said how much the owner wrote that day (audit Z). A chat's 200 are the first it may see."""
    answers = []
    for name, owner_chunks in (("busy", 260), ("quiet", 0)):
        ws = tmp_path / name
        (ws / "memory").mkdir(parents=True)
        (ws / "memory" / "2026-01-20.md").write_text("- walked to the lake with Bob\n")  # only its name has the day
        if owner_chunks:
            lines = "".join(f"- {i} owner errand {i}: " + "groceries pharmacy post office " * 3 + "\n"
                            for i in range(owner_chunks))  # ~25 tokens: one line a chunk
            (ws / "memory" / "2026-01-20-errands.md").write_text(wrap(lines, owner_origin("agent:main:main")))
        cfg = MemorySearchConfig.model_validate({"provider": "none", "chunking": {"tokens": 32, "overlap": 0}})
        svc = service(ws, tmp_path / f"{name}.sqlite", None, cfg)
        try:
            svc.sync()
            assert (svc.store.chunk_count() > 200) == bool(owner_chunks)
            answers.append([(h["path"], h["startLine"], h["score"])
                            for h in svc.search("what did we do on 2026-01-20", 6, 0.0, reader=CHAT)["results"]])
        finally:
            svc.close()
    assert answers[0] == answers[1] and answers[0] and answers[0][0][0] == "memory/2026-01-20.md"

def test_a_chats_deepest_search_stays_within_the_stores_limits(tmp_path: Path, store_backend: str) -> None:
    """Five hundred owner-only notes nearer to the question than the chat's own: the search went 96 → 384
    → 1,536 deep, and PostgreSQL refused hnsw.ef_search 1,536 (pgvector allows 1..1000) — the chat got the
    error, DSN included, and whether it got it said what the owner writes about."""
    ws = tmp_path / "ws"
    # 500 owner-only chunks in 20 notes of 25 one-chunk lines (~25 tokens each, chunks of 32): the depth is counted
    # in chunks; 500 one-line notes cost a file write each (~20 s on PostgreSQL under load, against ~2 s).
    _crowd(ws, ["\n- ".join(f"rose bed and tulips {i} " + "in the front border " * 3 for i in range(n, n + 25))
                for n in range(0, 500, 25)], "trimmed the hedge by the shed")
    cfg = MemorySearchConfig.model_validate({"chunking": {"tokens": 32, "overlap": 0}})
    svc = service(ws, tmp_path / "idx.sqlite", TopicEmbedder(), cfg)
    try:
        out = svc.search("garden", reader=CHAT)
        assert "error" not in out and [h["path"] for h in out["results"]] == ["memory/2026-01-20.md"]
        assert len(sql(svc, "select path from {t}chunks where path like ?", ("memory/private/%",))) == 500
    finally:
        svc.close()


class RefusingEmbedder(HashEmbedder):
    """Indexes, then the provider starts refusing queries (a revoked key): its error names the endpoint."""

    def embed_query(self, text: str) -> np.ndarray:
        from hermit.errors import EmbeddingError

        raise EmbeddingError("openai embeddings at http://10.0.0.5:8080/v1 refused the API key (HTTP 401): "
                             "Incorrect API key provided: sk-proj-AbCd****wxyz")


def test_a_chat_is_not_told_why_vector_search_failed(tmp_path: Path) -> None:
    """The keyword-only fallback's reason went to every reader: the owner's embedding endpoint and the
    provider's error text, part of the key included (audit P). A chat learns only that it is keyword-only."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-01-20.md").write_text("# 2026-01-20\n- trimmed the hedge by the shed\n")
    svc = service(ws, tmp_path / "idx.sqlite", RefusingEmbedder(), MemorySearchConfig())
    try:
        chat, owner = svc.search("hedge", reader=CHAT), svc.search("hedge")
        assert chat["results"] and chat["mode"] == "keyword-only"
        assert "10.0.0.5" not in json.dumps(chat) and "sk-proj" not in json.dumps(chat)
        assert "keyword search" in chat["reason"] and "10.0.0.5" in owner["reason"]
    finally:
        svc.close()
