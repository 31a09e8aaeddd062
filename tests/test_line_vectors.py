"""Line vectors: every non-blank line gets a vector at sync, kept with its file through edits, deletes and a
config change, and search puts the places that passed min_score in order of their best line too."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from conftest import write
from hermit.config.schema import MemorySearchConfig
from hermit.memory.index.chunking import line_texts
from hermit.memory.index.line_vectors import from_line_blob, to_line_blob
from memhelpers import HashEmbedder, service

# Two days of chat. The first is all about playing (tennis, games): its chunk is the closer one to a
# question about what instrument Priya is learning. The second is about everything else, but one of
# its lines answers it.
PLAYING = """# 2026-03-02

- Priya: I played tennis with my brother all afternoon, he plays so well.
- Sam: Do you play every week?
- Priya: We play on Saturdays, and the kids play board games after.
- Sam: My son plays football at school now.
- Priya: Playing outside is so good for them.
- Sam: Agreed, we play in the park whenever it is sunny.
"""
CELLO = """# 2026-03-09

- Sam: How was your weekend? Did you finish painting the kitchen?
- Priya: Almost, the blue looks great. We also tried that new ramen place.
- Sam: Nice. Work has been hectic, the release slipped again.
- Priya: Ugh. By the way, I've been practising the cello every evening since January.
- Sam: My sister is visiting from Lisbon next week.
- Priya: Let's do dinner when she's here, maybe the tapas bar.
- Sam: Good idea, I'll book a table for Friday.
"""
QUESTION = "Which instrument has Priya been learning?"
MAX_SCALE = MemorySearchConfig.model_validate({"query": {"hybrid": {"text_normalization": "max"}}})


def _chat(workspace: Path) -> None:
    write(workspace / "memory" / "2026-03-02.md", PLAYING)
    write(workspace / "memory" / "2026-03-09.md", CELLO)
    for d in range(3):
        write(workspace / "memory" / f"2026-02-1{d}.md",
              f"# 2026-02-1{d}\n\n- Sam: groceries, bills and the car service on day {d}.\n"
              "- Priya: the garden needs watering.\n")


def test_the_place_whose_line_answers_comes_first(workspace: Path, tmp_path: Path, e5: object,
                                                 store_backend: str) -> None:
    _chat(workspace)
    # On the per-query maximum BM25 scale: the question's only indexed word is a name in every note, so on
    # the default (the query's own scale) it has no keyword evidence, both days rank by their vectors
    # and fall under minScore (tests/test_search_confidence.py). What this test checks is the order.
    on = service(workspace, tmp_path / "on.sqlite", e5, MAX_SCALE)  # type: ignore[arg-type]
    on.sync()
    hits = on.search(QUESTION)["results"]
    assert [h["path"] for h in hits[:2]] == ["memory/2026-03-09.md", "memory/2026-03-02.md"]
    assert "cello" in hits[0]["snippet"]
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    on.close()

    # Without line vectors the chunk that talks about playing wins (the order this feature changes).
    off = service(workspace, tmp_path / "off.sqlite", e5,  # type: ignore[arg-type]
                  MemorySearchConfig.model_validate({"line_vectors": False,
                                                               "query": {"hybrid": {"text_normalization": "max"}}}))
    off.sync()
    assert off.store.counts()["line_vectors"] == 0
    assert [h["path"] for h in off.search(QUESTION)["results"][:2]] == ["memory/2026-03-02.md",
                                                                       "memory/2026-03-09.md"]
    off.close()


def test_line_vectors_follow_their_file(workspace: Path, tmp_path: Path, store_backend: str) -> None:
    emb = HashEmbedder()
    write(workspace / "MEMORY.md", "# Memory\n\n- Alice leads the data team.\n- Bob owns billing.\n")
    write(workspace / "memory" / "2026-03-09.md", CELLO)
    on = MemorySearchConfig.model_validate({"line_vectors": True})  # "auto" is off for a non-local model
    svc = service(workspace, tmp_path / "i.sqlite", emb, on)
    first = svc.sync()
    n_cello = len(line_texts(CELLO))
    assert n_cello == 8 and first.lines_indexed == 3 + n_cello
    assert svc.store.counts()["line_vectors"] == 3 + n_cello

    # An edit embeds only what is new: the changed chunk and the added line (the rest is cached).
    write(workspace / "MEMORY.md", "# Memory\n\n- Alice leads the data team.\n- Bob owns billing.\n"
                                   "- Carol runs the on-call rota.\n")
    edit = svc.sync()
    assert (edit.files_indexed, edit.embedded, edit.lines_indexed, edit.lines_reused) == (1, 2, 4, 3)
    blobs = svc.store.line_vector_blobs([("MEMORY.md", 1, 5), ("memory/2026-03-09.md", 6, 6)])
    assert [len(b) // (64 * 2) for b in blobs.values()] == [4, 1]  # float16, 64 dims
    got = from_line_blob(blobs[1])
    want = emb.embed_documents(["- Priya: Ugh. By the way, I've been practising the cello every evening since January."])[0]
    assert float(got @ want) > 0.999  # float16 keeps the direction

    # A forced rebuild takes the chunks from the cache and the lines from the index it replaces.
    forced = svc.sync(force=True)
    assert forced.rebuilt and forced.embedded == 0 and forced.lines_reused == 4 + n_cello

    (workspace / "memory" / "2026-03-09.md").unlink()
    svc.sync()
    assert svc.store.counts()["line_vectors"] == 4
    assert svc.store.line_vector_blobs([("memory/2026-03-09.md", 1, 99)]) == {0: b""}
    svc.close()

    # Turning them off rebuilds the index without them (the identity changes); on again, back they come.
    off = service(workspace, tmp_path / "i.sqlite", emb, MemorySearchConfig.model_validate({"line_vectors": False}))
    assert off.sync().rebuilt and off.store.counts()["line_vectors"] == 0
    off.close()
    again = service(workspace, tmp_path / "i.sqlite", emb, on)
    report = again.sync()
    # Lines are not in the embedding cache (the index keeps them itself, at half the bytes): turned back
    # on, they are embedded again; the chunk comes from the cache.
    assert report.rebuilt and (report.embedded, report.cache_hits) == (4, 1)
    assert again.store.counts()["line_vectors"] == 4
    again.close()


def test_auto_gives_line_vectors_to_local_models_only(workspace: Path, tmp_path: Path, e5: object) -> None:
    write(workspace / "MEMORY.md", "# Memory\n\n- Alice leads the data team.\n")
    remote = service(workspace, tmp_path / "remote.sqlite", HashEmbedder())  # provider "test": billed per token
    assert remote.sync().lines_indexed == 0 and remote.store.counts()["line_vectors"] == 0
    remote.close()
    local = service(workspace, tmp_path / "local.sqlite", e5)  # type: ignore[arg-type]
    assert local.sync().lines_indexed == 2 and local.store.counts()["line_vectors"] == 2
    local.close()
    with pytest.raises(ValidationError):
        MemorySearchConfig.model_validate({"line_vectors": "sometimes"})


def test_which_lines_get_a_vector() -> None:
    text = "# Title\n\n   \n- a bullet\r\n" + "word " * 600 + "\n- last"
    lines = line_texts(text, max_tokens=400)
    # Blank lines have none; a line too long for one chunk is split into chunks, whose vectors it has.
    assert lines == {1: "# Title", 4: "- a bullet", 6: "- last"}
    assert len(to_line_blob(HashEmbedder().embed_query("x"))) == 64 * 2  # float16


def test_another_model_reuses_no_line_vector(workspace: Path, tmp_path: Path, store_backend: str) -> None:
    on = MemorySearchConfig.model_validate({"line_vectors": True})
    write(workspace / "MEMORY.md", "# Memory\n\n- Alice leads the data team.\n- Bob owns billing.\n")
    first = service(workspace, tmp_path / "m.sqlite", HashEmbedder(model="one"), on)
    assert first.sync().lines_indexed == 3
    first.close()
    second = service(workspace, tmp_path / "m.sqlite", HashEmbedder(model="two"), on)
    report = second.sync()  # a new model: the index is rebuilt, every line embedded by it
    assert report.rebuilt and (report.lines_reused, report.embedded) == (0, 4)
    second.close()
