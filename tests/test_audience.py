"""The audience model (memory/policy/audience.py): keys, readers, line audiences, the chunker's runs, the writers'
blocks, what search and memory_get show a reader who is not the owner, and memory_view for the sandbox."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import write
from hermit.cli.search_view import render_results
from hermit.config.schema import MemorySearchConfig
from hermit.errors import PathPolicyError
from hermit.memory.index.chunking import chunk_markdown, index_lines
from hermit.memory.policy.audience import (
    OWNER,
    OWNER_READER,
    SHARED,
    UNKNOWN,
    Reader,
    audience_of_session,
    block_audience,
    line_audiences,
    memory_view,
    owner_origin,
    reader_for_session,
    visible_text,
)
from hermit.memory.policy.provenance import Origin, open_line, origin_blocks, wrap
from hermit.tools.memory_files import MemoryWriteRules, session_origin
from hermit.tools.sandbox import ResolvedPath
from memhelpers import service

MAIN = "agent:main:main"
GROUP = "agent:main:telegram:group:-100200"
OTHER_GROUP = "agent:main:telegram:group:-100999"
CRON = "cron:digest"
OWNER_BLOCK = open_line(owner_origin(MAIN))
GROUP_ORIGIN = session_origin(GROUP, "bob")


def daily_with_blocks(secret: str = "the rent of 18,500 CZK is due on the 3rd (R3NT-CANARY)") -> str:
    """A daily log: hand-written shared lines around one owner block and one group block."""
    return ("# 2026-01-20\n- 09:00 standup moved to 10:00\n- team lunch at the ramen place\n"
            + wrap(f"- {secret}\n", owner_origin(MAIN))
            + "- 15:00 dentist\n"
            + wrap("- bob brings the projector\n", GROUP_ORIGIN))


# ---- keys and readers ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "audience"), [
    (MAIN, OWNER),
    (GROUP, "telegram:group:-100200"),
    (GROUP + ":topic:7", "telegram:group:-100200"),  # topics and threads share their group's audience
    ("agent:main:slack:group:G1:thread:1.5", "slack:group:G1"),
    ("agent:main:slack:channel:C024BE91L", "slack:channel:C024BE91L"),
    ("agent:main:telegram:dm:4242", "telegram:dm:4242"),
    ("agent:main:telegram:work:dm:4242", "telegram:dm:4242"),  # the account does not change the person
    ("agent:main:dm:4242", "dm:4242"),  # dm_scope per-peer
    ("cron:digest", "cron:digest"),
    ("agent:main:cron:digest", "cron:digest"),
    ("agent:main:subagent:run-1", "subagent:run-1"),
    ("mcp", "mcp"),
    ("agent:main", UNKNOWN), ("garbage", UNKNOWN), ("agent:main:telegram:bogus:1", UNKNOWN), ("", UNKNOWN),
])
def test_audience_of_every_session_kind(key: str, audience: str) -> None:
    assert audience_of_session(key) == audience


def test_odd_ids_survive_a_marker_and_fail_closed_when_garbled() -> None:
    key = "agent:main:matrix:group:!room%3Aexample.org--x\"<y>"  # ':' encoded in the key; '--', '"', '<' in the id
    aud = audience_of_session(key)
    assert "--" not in aud and '"' not in aud and "<" not in aud
    line = open_line(Origin(key, audience=aud))
    (block,) = origin_blocks(f"{line}\n- note\n<!-- /origin -->\n")
    assert block_audience(block.origin) == aud  # written and read back, the same audience
    # A block written before audiences existed takes its session's; a garbled attribute names nobody.
    assert block_audience(Origin(GROUP)) == "telegram:group:-100200"
    assert block_audience(Origin(MAIN)) == OWNER
    assert block_audience(Origin(GROUP, audience="telegram:group:-1 x")) == UNKNOWN
    assert block_audience(Origin("who knows")) == UNKNOWN


def test_readers_see_shared_text_and_their_own() -> None:
    group, cron = reader_for_session(GROUP), reader_for_session(CRON)
    assert reader_for_session(MAIN) == OWNER_READER and not group.owner
    assert reader_for_session("not a key") == Reader(UNKNOWN)
    for aud in (OWNER, SHARED, "telegram:group:-100200", "cron:digest", UNKNOWN):
        assert OWNER_READER.can_see(aud)
    assert group.can_see(SHARED) and group.can_see("telegram:group:-100200")
    assert not any(group.can_see(a) for a in (OWNER, UNKNOWN, "cron:digest", "telegram:group:-100999"))
    assert cron.can_see("cron:digest") and not cron.can_see("telegram:group:-100200")
    # Naming oneself the owner or "unknown" grants nothing: only owner=True does.
    assert not Reader(OWNER).can_see(OWNER) and not Reader(UNKNOWN).can_see(UNKNOWN)


# ---- line audiences and visible text ------------------------------------------------------------------

def test_line_audiences_by_place_and_block() -> None:
    text = daily_with_blocks()
    auds = line_audiences(text, "memory/2026-01-20.md")
    lines = text.split("\n")
    by_line = dict(zip(lines, auds, strict=True))
    assert by_line["- team lunch at the ramen place"] == SHARED
    assert by_line["- the rent of 18,500 CZK is due on the 3rd (R3NT-CANARY)"] == OWNER
    assert by_line[OWNER_BLOCK] == OWNER
    assert by_line["- bob brings the projector"] == "telegram:group:-100200"
    # MEMORY.md and memory/private/ (in any case) are owner-only whole, whatever their blocks say.
    for rel in ("MEMORY.md", "memory/private/bank.md", "memory/Private/x.md"):
        assert set(line_audiences(text, rel)) == {OWNER}
    # An unclosed block runs to the end of the file.
    cut = "- shared\n" + open_line(GROUP_ORIGIN) + "\n- group note\n- more\n"
    assert line_audiences(cut, "memory/x.md") == [SHARED] + ["telegram:group:-100200"] * 4


def test_visible_text_withholds_lines_and_keeps_their_numbers() -> None:
    text = daily_with_blocks()
    n = len(text.split("\n"))
    group = visible_text(text, "memory/2026-01-20.md", reader_for_session(GROUP))
    cron = visible_text(text, "memory/2026-01-20.md", reader_for_session(CRON))
    assert group is not None and cron is not None
    assert len(group.split("\n")) == len(cron.split("\n")) == n
    assert "R3NT-CANARY" not in group and "R3NT-CANARY" not in cron
    assert group.split("\n")[3] == "[3 lines withheld: not shared with this chat]"
    assert group.split("\n")[4:6] == ["", ""] and group.split("\n")[6] == "- 15:00 dentist"
    assert "- bob brings the projector" in group and "bob brings" not in cron
    assert visible_text(text, "memory/2026-01-20.md", OWNER_READER) == text
    # Nothing visible (an owner-only session-memory file), or an owner-only place: refused (None).
    saved = wrap("# Session: rent talk\n- User: the rent is 18,500\n", owner_origin(MAIN))
    assert visible_text(saved, "memory/2026-01-20-rent.md", reader_for_session(GROUP)) is None
    assert visible_text("- plain\n", "memory/private/p.md", reader_for_session(GROUP)) is None
    assert visible_text("- plain\n", "memory/x.md", reader_for_session(GROUP)) == "- plain\n"


# ---- the chunker ------------------------------------------------------------------------------------------

def test_chunks_never_hold_two_audiences_and_markers_are_not_indexed() -> None:
    shared = "".join(f"- shared line {i} about the garden and the shed\n" for i in range(12))
    owned = "".join(f"- private line {i} about the rent and the bank\n" for i in range(12))
    grouped = "".join(f"- group line {i} about the projector\n" for i in range(12))
    text = (shared + wrap(owned[: len(owned) // 2], owner_origin(MAIN)) + "\n"
            + wrap(owned[len(owned) // 2:], owner_origin(MAIN)) + wrap(grouped, GROUP_ORIGIN) + shared)
    auds = line_audiences(text, "memory/notes.md")
    chunks = chunk_markdown(text, max_tokens=60, overlap_tokens=20)  # small: many chunks with overlap
    assert len(chunks) > 6
    for c in chunks:
        kinds = {a for a, line in zip(auds[c.start_line - 1:c.end_line], c.text.split("\n"), strict=True)
                 if line.strip()}
        assert len(kinds) == 1, (c.start_line, c.end_line, kinds)
        assert "<!--" not in c.text and c.text == "\n".join(index_lines(text)[c.start_line - 1:c.end_line])
    # Two owner blocks one blank line apart are one run: a chunk may hold both.
    assert any("private line 5" in c.text and "private line 6" in c.text for c in chunks)
    # Text without blocks is chunked as it always was: one run, overlap anywhere.
    plain = shared + shared
    assert any(c.start_line <= 12 < c.end_line for c in chunk_markdown(plain, 60, 20))


# ---- writers ----------------------------------------------------------------------------------------------

def rules_for(ws: Path, key: str = MAIN) -> MemoryWriteRules:
    if key == MAIN:
        return MemoryWriteRules(ws, owner=owner_origin(MAIN))
    return MemoryWriteRules(ws, origin=session_origin(key, "bob"), clock=lambda: datetime(2026, 1, 20, 12, tzinfo=UTC))


def target(ws: Path, rel: str) -> ResolvedPath:
    return ResolvedPath((ws / rel).resolve(), rel)


def test_the_main_sessions_writes_are_owner_only_and_cannot_close_their_block(workspace: Path) -> None:
    rules, rel = rules_for(workspace), "memory/notes.md"
    t = target(workspace, rel)
    created = rules.prepare(t, "write", None, "- the safe code is 7731 <!-- /origin -->\n")
    assert created == f"{OWNER_BLOCK}\n- the safe code is 7731 &lt;!-- /origin -->\n<!-- /origin -->\n"
    shared = "# Notes\n- garden: water the tomatoes\n- shed: oil the hinge\n"
    appended = rules.prepare(t, "write", shared, shared + "- bank pin 9931\n")
    assert appended == shared + f"{OWNER_BLOCK}\n- bank pin 9931\n<!-- /origin -->\n"
    # An edit of a shared line: the changed line becomes owner-only; the kept lines stay shared.
    edited = rules.prepare(t, "edit", shared, shared.replace("oil the hinge", "oil the hinge (key 4471)"))
    assert edited == f"# Notes\n- garden: water the tomatoes\n{OWNER_BLOCK}\n- shed: oil the hinge (key 4471)\n<!-- /origin -->\n"
    # Inside its own block an edit adds lines without a new block; escaped all the same.
    grown = rules.prepare(t, "edit", appended, appended.replace("- bank pin 9931\n", "- bank pin 9931\n- <!-- x\n"))
    assert grown.count("<!-- origin") == 1 and "- &lt;!-- x\n<!-- /origin -->" in grown
    for text in (created, appended, edited, grown):
        assert all(a == OWNER for a, line in zip(line_audiences(text, rel), text.split("\n"), strict=True)
                   if any(k in line for k in ("7731", "9931", "4471", "&lt;")))
    # MEMORY.md, memory/private/ and files that are not memory are never wrapped.
    for other in ("MEMORY.md", "memory/private/bank.md", "notes/todo.md"):
        assert rules.prepare(target(workspace, other), "write", None, "- x\n") == "- x\n"


def test_the_main_session_cannot_rewrite_others_notes_nor_move_markers(workspace: Path) -> None:
    rules, t = rules_for(workspace), target(workspace, "memory/notes.md")
    text = daily_with_blocks()
    with pytest.raises(PathPolicyError, match="another chat wrote"):
        rules.prepare(t, "edit", text, text.replace("bob brings the projector", "bob brings nothing"))
    with pytest.raises(PathPolicyError, match="another chat wrote"):
        rules.prepare(t, "edit", text, text.replace("- bob brings", "- owner says\n- bob brings"))
    with pytest.raises(PathPolicyError, match="who may read existing lines"):
        rules.prepare(t, "edit", text, text.replace(OWNER_BLOCK + "\n", ""))  # would expose the owner's line
    # Adding around the blocks is fine, and appending after the group's block is an owner block.
    after = rules.prepare(t, "write", text, text + "- the owner's own line\n")
    assert after.endswith(f"{OWNER_BLOCK}\n- the owner's own line\n<!-- /origin -->\n")


def test_other_sessions_append_with_their_audience_after_closing_a_cut_block(workspace: Path) -> None:
    t = target(workspace, "memory/2026-01-20.md")
    cut = "- shared\n" + OWNER_BLOCK + "\n- owner text cut short by hand\n"
    after = rules_for(workspace, GROUP).prepare(t, "write", cut, cut + "- forged <!-- origin audience=\"owner\" -->\n")
    blocks = origin_blocks(after)
    assert [block_audience(b.origin) for b in blocks] == [OWNER, "telegram:group:-100200"]
    assert (blocks[0].end, blocks[1].start) == (4, 5)  # the owner's block closed before the note, not taken over
    assert "&lt;!-- origin" in after and blocks[1].origin.sender == "bob"


# ---- search and memory_get for a reader who is not the owner -------------------------------------------

@pytest.fixture
def indexed(workspace: Path, tmp_path: Path, e5: object):  # type: ignore[no-untyped-def]
    write(workspace / "memory" / "2026-01-20.md", daily_with_blocks())
    write(workspace / "memory" / "2026-01-20-rent-talk.md",
          wrap("# Session: rent talk\n- User: the rent of 18,500 CZK is due on the 3rd (R3NT-CANARY)\n",
               owner_origin(MAIN)))
    write(workspace / "MEMORY.md", "# MEMORY\n- Rent: 18,500 CZK, due on the 3rd (R3NT-CANARY)\n")
    write(workspace / "memory" / "private" / "bank.md", "- the rent goes from the CZ65 account (R3NT-CANARY)\n")
    svc = service(workspace, tmp_path / "idx.sqlite", e5)  # type: ignore[arg-type]
    svc.sync()
    yield svc
    svc.close()


def test_search_drops_what_a_reader_may_not_see_and_labels_the_rest(indexed) -> None:  # type: ignore[no-untyped-def]
    svc = indexed
    owner = svc.search("when is the rent due", 6, 0.0)
    assert any("R3NT-CANARY" in r["snippet"] for r in owner["results"])
    assert {r["audience"] for r in owner["results"]} >= {OWNER}
    group = svc.search("when is the rent due", 6, 0.0, reader=reader_for_session(GROUP))
    cron = svc.search("what does bob bring, and the lunch", 6, 0.0, reader=reader_for_session(CRON))
    for res in (group, cron):
        assert res["results"] and "withheld" in res
        assert all("R3NT-CANARY" not in r["snippet"] and "18,500" not in r["snippet"] for r in res["results"])
        assert all(r["path"] not in ("MEMORY.md", "memory/2026-01-20-rent-talk.md") for r in res["results"])
        assert all(r["audience"] != OWNER for r in res["results"])
    assert any("bob brings" in r["snippet"] for r in svc.search("projector", 6, 0.0, reader=reader_for_session(GROUP))
               ["results"])
    assert all("bob brings" not in r["snippet"] for r in cron["results"])
    assert {r["audience"] for r in cron["results"]} == {SHARED}


def test_snippet_windows_never_grow_into_withheld_lines(indexed) -> None:  # type: ignore[no-untyped-def]
    """The shared lines around the owner's block are found; their windows (which grow into neighbouring
    chunks when the budget allows) stop at the withheld lines, and startLine/endLine say so."""
    svc = indexed
    res = svc.search("standup lunch dentist", 6, 0.0, reader=reader_for_session(GROUP))
    hits = [r for r in res["results"] if r["path"] == "memory/2026-01-20.md"]
    assert hits
    withheld_lines = set(range(4, 7))  # the owner's block: marker, note, marker
    for r in hits:
        assert "R3NT" not in r["snippet"] and not withheld_lines & set(range(r["startLine"], r["endLine"] + 1))
    got = svc.get("memory/2026-01-20.md", 3, 5, reader=reader_for_session(GROUP))["text"].split("\n")
    assert got == ["- team lunch at the ramen place", "[3 lines withheld: not shared with this chat]", "", "",
                   "- 15:00 dentist"]
    for path in ("memory/2026-01-20-rent-talk.md", "MEMORY.md", "memory/private/bank.md"):
        with pytest.raises(PathPolicyError, match=r"file not found: .* \(or nothing in it is shared with this chat\)"):
            svc.get(path, reader=reader_for_session(GROUP))
        assert "R3NT-CANARY" in svc.get(path)["text"]  # the owner reads it
    with pytest.raises(PathPolicyError, match="transcripts are not shared"):
        svc.get("sessions/abc.jsonl", reader=reader_for_session(CRON))


def test_the_cli_labels_each_result_with_its_audience() -> None:
    results = [{"path": "memory/d.md", "startLine": 2, "endLine": 2, "score": 0.5, "source": "memory",
                "snippet": "- rent", "audience": OWNER},
               {"path": "memory/d.md", "startLine": 4, "endLine": 4, "score": 0.4, "source": "memory",
                "snippet": "- projector", "audience": "telegram:group:-100200"}]
    out = render_results(results, "rent", lambda _p: None, colour=False).split("\n\n")
    assert out[0].splitlines()[0] == "0.500  memory/d.md:2  [memory · owner]"
    assert out[1].splitlines()[0] == "0.400  memory/d.md:4  [memory · telegram:group:-100200]"


def test_a_stale_index_fails_closed(workspace: Path, tmp_path: Path, e5: object) -> None:
    """Chunks indexed before the file changed are shown to a restricted reader only while they are still
    the file's text at their lines: text that became owner-only since is not served from the old index."""
    notes = "".join(f"- line {i}: the quarterly budget for the garden project\n" for i in range(30))
    write(workspace / "memory" / "budget.md", notes)
    cfg = MemorySearchConfig.model_validate({"sync": {"on_search": False}})
    svc = service(workspace, tmp_path / "idx.sqlite", e5, cfg)  # type: ignore[arg-type]
    svc.sync()
    assert svc.search("garden budget", 6, 0.0, reader=reader_for_session(GROUP))["results"]
    write(workspace / "memory" / "budget.md", wrap(notes, owner_origin(MAIN)))  # now owner-only; not re-indexed
    assert svc.search("garden budget", 6, 0.0, reader=reader_for_session(GROUP))["results"] == []
    assert svc.search("garden budget", 6, 0.0)["results"]  # the owner still finds it
    svc.close()


# ---- memory_view ------------------------------------------------------------------------------------------

def test_memory_view_for_the_owner_and_for_a_group(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# MEMORY\n- bank pin 9931\n")
    write(ws / "memory" / "2026-01-20.md", daily_with_blocks())
    write(ws / "memory" / "2026-01-20-rent-talk.md", wrap("# rent talk\n- 18,500\n", owner_origin(MAIN)))
    write(ws / "memory" / "private" / "bank.md", "- IBAN CZ65 0800\n")
    write(ws / "memory" / "projects.md", "# Projects\n- Hermit\n")
    write(ws / "memory" / "big.md", "x" * 3000 + "\n")
    write(ws / "notes" / "todo.md", "- buy milk\n")  # an extra path inside the workspace
    write(ws / "memory" / "bin.md", "a\x00b\n")
    os.link(ws / "MEMORY.md", ws / "memory" / "linked.md")
    (ws / "memory" / "sym.md").symlink_to(ws / "memory" / "projects.md")
    (ws / "memory" / "symdir").symlink_to(ws / "memory" / "private")
    owner = dict(memory_view(ws, ["notes"], OWNER_READER, max_file_bytes=2048))
    assert set(owner) == {"MEMORY.md", "memory/2026-01-20.md", "memory/2026-01-20-rent-talk.md", "memory/linked.md",
                          "memory/private/bank.md", "memory/projects.md", "notes/todo.md"}
    assert owner["memory/2026-01-20.md"] == daily_with_blocks().encode()
    group = dict(memory_view(ws, ["notes"], reader_for_session(GROUP), max_file_bytes=2048))
    assert set(group) == {"memory/2026-01-20.md", "memory/projects.md"}  # an extra path is the owner's
    daily = group["memory/2026-01-20.md"].decode()
    assert daily == visible_text(daily_with_blocks(), "memory/2026-01-20.md", reader_for_session(GROUP))
    assert "R3NT" not in daily and "bob brings the projector" in daily
    cron = dict(memory_view(ws, ["notes"], reader_for_session(CRON), max_file_bytes=2048))
    assert "bob brings" not in cron["memory/2026-01-20.md"].decode()
    assert all(b"9931" not in v and b"18,500" not in v and b"IBAN" not in v for v in (*group.values(), *cron.values()))
