"""`memory_search.extra_paths` may not reach another agent's files: its workspace and the state dir were checked,
but `session.store_dir` moves every agent's folder — its sessions and its chats' rooms, where the files a contact
or group of another agent sent and wrote lie — out of the state dir, and an extra path naming that store (or a
folder holding it) was accepted: agent family's index took in the Markdown files in agent main's contacts' rooms."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError


def config(home: Path, store: Path, extra: Path) -> dict[str, object]:
    return {"agents": {"defaults": {"memory_search": {"provider": "none"}, "session": {"store_dir": str(store)}},
                       "list": [{"id": "main"}, {"id": "family", "memory_search": {"extra_paths": [str(extra)]}}]}}


@pytest.mark.parametrize("where", ["store", "main-rooms", "above"])
def test_extra_paths_may_not_reach_the_session_store(tmp_path: Path, where: str) -> None:
    home, store = tmp_path / "home", tmp_path / "shared" / "sessions"
    home.mkdir()
    store.mkdir(parents=True)
    extra = {"store": store, "main-rooms": store / "agents" / "main" / "rooms", "above": tmp_path / "shared"}[where]
    with pytest.raises(ConfigError, match="memory_search.extra_paths entry .* reaches the sessions and chats' rooms"):
        build_config(config(home, store, extra), StatePaths(home))


def test_a_notes_folder_beside_the_store_is_fine(tmp_path: Path) -> None:
    home, store, notes = tmp_path / "home", tmp_path / "shared" / "sessions", tmp_path / "shared" / "notes"
    for d in (home, store, notes):
        d.mkdir(parents=True)
    loaded = build_config(config(home, store, notes), StatePaths(home))
    assert loaded.agent("family").settings.memory_search.extra_paths == [str(notes)]


def test_two_agents_may_not_share_one_folder_of_sessions_and_rooms(tmp_path: Path) -> None:
    """A link at <state>/agents/family to agent main's folder had both agents keep their sessions (main's
    `agent:main:main` transcript among them, indexed by family's `sources: sessions`) and their chats' rooms in one
    place; the workspace and index checks compared only those. Refused like a shared workspace now."""
    home = tmp_path / "home"
    (home / "agents" / "main" / "sessions").mkdir(parents=True)
    (home / "agents" / "family").symlink_to(home / "agents" / "main")
    raw = {"agents": {"defaults": {"memory_search": {"provider": "none"}}, "list": [{"id": "main"}, {"id": "family"}]}}
    with pytest.raises(ConfigError, match="agents 'main' and 'family' share one folder of sessions and rooms"):
        build_config(raw, StatePaths(home))
