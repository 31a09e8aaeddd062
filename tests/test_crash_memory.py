"""kill -9 at every write step of the memory writes: a note appended to today's log (memory_append, MCP, the web
app), MEMORY.md rewritten and edited through the file tools (the web app's save is the `write` tool), and the
index sync that follows (chunks, FTS, vectors).

After each kill (tests/crashharness.py): every note the user had is intact, the changed file is the old one or the
new one (an append: the old text, then the note whole or not at all), no file is readable by others, and the next
run works: the write done again lands once, and a sync afterwards gives the same chunks as an index built from
nothing, with every note found by search and none twice.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import crashharness as ch
from hermit.memory.policy.daily_log import append_daily_note
from hermit.workspace import ensure_workspace
from memhelpers import HashEmbedder, service, sql

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
DAILY = "memory/2026-03-01.md"
OLD_DAILY = "# 2026-03-01\n\n- booked the dentist for Tuesday (zebrafinch)\n"
OLD_MEMORY = "# MEMORY\n\n- my sister's birthday is 12 May (quokkaline)\n- allergic to penicillin (marmotway)\n"
OTHER = "memory/2026-02-27.md"
OTHER_TEXT = "# 2026-02-27\n\n- the boiler code is 4411 (pangolinix)\n"

uid = ch.uid  # the fixture: each test as this uid and (as root) as uid 65534


@pytest.fixture
def home(tmp_path: Path, uid: int | None) -> Iterator[Path]:
    with ch.state_dir(tmp_path, uid) as made:
        ws = made / "workspace"
        ch.ok(lambda: bool(ensure_workspace(ws)), uid=uid)  # as a first start made it: no template written again
        for rel, text in ((DAILY, OLD_DAILY), ("MEMORY.md", OLD_MEMORY), (OTHER, OTHER_TEXT)):
            (ws / rel).write_text(text)
            os.chmod(ws / rel, 0o600)
        if uid is not None:
            ch.chown_tree(made, uid)
        yield made


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """Every step once in this process, so a child as uid 65534 has its lazy imports (root's Python is not theirs
    to read)."""
    def steps(scratch: Path) -> None:
        (scratch / "workspace" / "memory").mkdir(parents=True)
        (scratch / "workspace" / "MEMORY.md").write_text(OLD_MEMORY)
        _WS[:] = [scratch / "workspace"]
        _append()
        _sync(scratch)
        _sync(scratch, True)
        _chunks(scratch)
        _found(scratch, ["zebrafinch"])
        _tool(scratch, "write", path="MEMORY.md", content=NEW_MEMORY)
        _tool(scratch, "edit", path="MEMORY.md", old="(wombatine)", new="(wombatine!)")
        _tool(scratch, "write", path="MEMORY.md", content=OLD_MEMORY)

    ch.warm(steps)


def _svc(home: Path) -> Any:
    return service(home / "workspace", home / "index.sqlite", HashEmbedder())


def _chunks(home: Path) -> list[tuple[str, str]]:
    """(path, text) of every chunk in the index, sorted: duplicates show as repeats."""
    svc = _svc(home)
    try:
        return sorted((str(p), str(t)) for p, t in sql(svc, "SELECT path, text FROM {t}chunks"))
    finally:
        svc.close()


def _found(home: Path, words: list[str]) -> dict[str, list[str]]:
    svc = _svc(home)
    try:
        return {w: sorted({r["path"] for r in svc.search(w, min_score=0.0)["results"] if w in r["snippet"]})
                for w in words}
    finally:
        svc.close()


def _sync(home: Path, force: bool = False) -> None:
    svc = _svc(home)
    try:
        svc.sync(force=force)
    finally:
        svc.close()


def _fresh_chunks(home: Path, uid: int | None) -> list[tuple[str, str]]:
    """The chunks an index built from nothing holds for the workspace as it is now."""
    index = home / "index.sqlite"
    saved = home.parent / "saved-index"
    saved.mkdir(exist_ok=True)
    moved = [p for p in home.iterdir() if p.name.startswith("index.sqlite")]
    for p in moved:
        os.rename(p, saved / p.name)
    try:
        ch.ok(lambda: _sync(home), uid=uid)
        return ch.ok(lambda: _chunks(home), uid=uid).result
    finally:
        for p in home.iterdir():
            if p.name.startswith("index.sqlite"):
                os.unlink(p)
        for p in moved:
            os.rename(saved / p.name, index.with_name(p.name))


def _intact(home: Path, what: str) -> None:
    """The notes the user had before the operation are all still there, word for word."""
    ws = home / "workspace"
    assert (ws / OTHER).read_text() == OTHER_TEXT, what
    assert OLD_DAILY in (ws / DAILY).read_text(), what
    assert not ch.loose_modes(home, skip=("saved-index",)), f"{what}: {ch.loose_modes(home)}"


def _append() -> dict[str, Any]:
    return append_daily_note(_WS[0], "- the new locker code is 2207 (axolotlid)", NOW)


_WS: list[Path] = []


def test_append_note(home: Path, uid: int | None) -> None:
    _WS[:] = [home / "workspace"]
    ch.ok(lambda: _sync(home), uid=uid)
    before = (home / "workspace" / DAILY).read_text()
    sweep = ch.sweep(home, _append, uid=uid)
    after = (home / "workspace" / DAILY).read_text()
    assert after.startswith(before) and "axolotlid" in after
    fresh = _fresh_chunks(home, uid)
    for k, label in sweep.each():
        ch.kill(_append, k, label, uid=uid)
        what = ch.describe(k, label)
        _intact(home, what)
        assert (home / "workspace" / DAILY).read_text() in (before, after), f"{what}: torn note"
        if "axolotlid" not in (home / "workspace" / DAILY).read_text():  # not acknowledged: the caller retries
            ch.ok(_append, uid=uid)
        assert (home / "workspace" / DAILY).read_text() == after, what
        ch.ok(lambda: _sync(home), uid=uid)
        assert ch.ok(lambda: _chunks(home), uid=uid).result == fresh, what
        found = ch.ok(lambda: _found(home, ["axolotlid", "zebrafinch", "pangolinix"]), uid=uid).result
        assert found == {"axolotlid": [DAILY], "zebrafinch": [DAILY], "pangolinix": [OTHER]}, f"{what}: {found}"
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"


def _tool(home: Path, name: str, **args: Any) -> str:
    from hermit.agent.routing import main_session_key
    from hermit.testing import FunctionModel
    from sessionhelpers import runtime, small_config

    rt = runtime(small_config(home), FunctionModel(lambda r: "ok"))
    tool = rt.tools_for(main_session_key(rt.agent.id)).get(name)
    assert tool is not None
    return str(tool.function(**args))


NEW_MEMORY = OLD_MEMORY.replace("is 12 May (quokkaline)", "is 14 May (quokkaline)\n- prefers tea to coffee (wombatine)")


@pytest.mark.parametrize("tool", ["write", "edit"])
def test_memory_md_rewrite(home: Path, uid: int | None, tool: str) -> None:
    """The write tool (what the web app's save calls) and the edit tool on MEMORY.md."""
    def op() -> str:
        if tool == "write":
            return _tool(home, "write", path="MEMORY.md", content=NEW_MEMORY)
        return _tool(home, "edit", path="MEMORY.md", old="is 12 May (quokkaline)\n",
                     new="is 14 May (quokkaline)\n- prefers tea to coffee (wombatine)\n")

    ch.ok(lambda: _sync(home), uid=uid)
    sweep = ch.sweep(home, op, uid=uid)
    memory = home / "workspace" / "MEMORY.md"
    after = memory.read_text()
    assert "wombatine" in after and "quokkaline" in after
    fresh = _fresh_chunks(home, uid)
    for k, label in sweep.each(limit=12, also="memory_files.py"):
        ch.kill(op, k, label, uid=uid)
        what = ch.describe(k, label)
        history = home / "agents" / "main" / "memory-history"
        copies = [p.read_text() for p in history.iterdir() if not p.name.startswith(".")] if history.is_dir() else []
        assert all(c == OLD_MEMORY for c in copies), f"{what}: a torn previous version of MEMORY.md: {copies}"
        _intact(home, what)
        assert memory.read_text() in (OLD_MEMORY, after), f"{what}: torn MEMORY.md"
        if "wombatine" not in memory.read_text():
            ch.ok(op, uid=uid)
        assert memory.read_text() == after, what
        ch.ok(lambda: _sync(home), uid=uid)
        assert ch.ok(lambda: _chunks(home), uid=uid).result == fresh, what
        found = ch.ok(lambda: _found(home, ["wombatine", "quokkaline", "zebrafinch"]), uid=uid).result
        assert found == {"wombatine": ["MEMORY.md"], "quokkaline": ["MEMORY.md"], "zebrafinch": [DAILY]}, what
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"


@pytest.mark.parametrize("force", [False, True], ids=["sync", "rebuild"])
def test_index_sync(home: Path, uid: int | None, force: bool) -> None:
    """A sync that adds a file, changes one and drops one (or `memory index --force`: a rebuild into a new file),
    killed at each step; the next sync converges."""
    ws = home / "workspace"
    ch.ok(lambda: _sync(home), uid=uid)
    (ws / "memory" / "2026-03-02.md").write_text("# 2026-03-02\n\n- the plumber comes Friday (capybarine)\n")
    (ws / "MEMORY.md").write_text(NEW_MEMORY)
    (ws / OTHER).unlink()
    for p in (ws / "memory" / "2026-03-02.md", ws / "MEMORY.md"):
        os.chmod(p, 0o600)
        if uid is not None:
            os.chown(p, uid, uid)
    sweep = ch.sweep(home, lambda: _sync(home, force), uid=uid)
    fresh = _fresh_chunks(home, uid)
    for k, label in sweep.each(limit=20):
        ch.kill(lambda: _sync(home, force), k, label, uid=uid)
        what = ch.describe(k, label)
        ch.ok(lambda: _sync(home), uid=uid)
        assert ch.ok(lambda: _chunks(home), uid=uid).result == fresh, what
        found = ch.ok(lambda: _found(home, ["capybarine", "wombatine", "zebrafinch", "pangolinix"]), uid=uid).result
        assert found == {"capybarine": ["memory/2026-03-02.md"], "wombatine": ["MEMORY.md"], "zebrafinch": [DAILY],
                         "pangolinix": []}, f"{what}: {found}"
        assert not ch.temps(home), f"{what}: {ch.temps(home)}"
        assert not ch.loose_modes(home, skip=("saved-index",)), f"{what}: {ch.loose_modes(home)}"
