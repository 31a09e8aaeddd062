"""Config loading: defaults, per-agent overrides, and actionable errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermit.config import StatePaths, load_config
from hermit.errors import ConfigError


def _load(tmp_path: Path, text: str, name: str = "hermit.yaml") -> object:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return load_config(StatePaths(tmp_path))


def test_no_config_means_defaults(tmp_path: Path) -> None:
    cfg = load_config(StatePaths(tmp_path))
    main = cfg.agent()
    assert main.id == "main" and main.is_default
    assert main.workspace == tmp_path / "workspace"
    assert main.index_path == tmp_path / "memory" / "main.sqlite"
    ms = main.settings.memory_search
    assert ms.provider == "local"
    assert (ms.chunking.tokens, ms.chunking.overlap) == (400, 80)
    assert (ms.query.max_results, ms.query.min_score) == (6, 0.35)
    # 0.5/0.5 (not the original 0.7/0.3) was chosen on bench/retrieval; see README "Search quality".
    assert (ms.query.hybrid.vector_weight, ms.query.hybrid.text_weight) == (0.5, 0.5)
    assert ms.sync.debounce_ms == 1500


def test_agent_overrides_merge_over_defaults(tmp_path: Path) -> None:
    cfg = _load(tmp_path, """
agents:
  defaults:
    memory_search:
      query: {max_results: 8}
  list:
    - id: main
    - id: work
      workspace: ~/work-ws
      memory_search:
        provider: none
        query: {min_score: 0.5}
""")
    work = cfg.agent("work")  # type: ignore[attr-defined]
    assert work.settings.memory_search.provider == "none"
    assert work.settings.memory_search.query.min_score == 0.5
    assert work.settings.memory_search.query.max_results == 8  # inherited
    assert work.workspace == Path("~/work-ws").expanduser()
    assert work.index_path == tmp_path / "memory" / "work.sqlite"
    main = cfg.agent("main")  # type: ignore[attr-defined]
    assert main.settings.memory_search.provider == "local"


def test_unknown_key_gets_close_match_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "agents:\n  defaults:\n    memory_search:\n      provder: local\n")
    msg = str(e.value)
    assert "hermit.yaml:4" in msg
    assert "provder" in msg and "did you mean 'provider'" in msg


def test_wrong_type_names_key_path_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "agents:\n  defaults:\n    memory_search:\n      query:\n        max_results: lots\n")
    msg = str(e.value)
    assert "agents.defaults.memory_search.query.max_results" in msg
    assert "hermit.yaml:5" in msg


def test_bad_value_in_agent_entry_is_located(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "agents:\n  list:\n    - id: main\n    - id: Work Agent\n")
    assert "agents.list[1].id" in str(e.value)


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "agents:\n  defaults: [unclosed\n")
    assert "not valid YAML" in str(e.value) and "hermit.yaml:" in str(e.value)


def test_json_config_and_its_errors(tmp_path: Path) -> None:
    cfg = _load(tmp_path, '{"agents": {"defaults": {"memory_search": {"provider": "none"}}}}', "hermit.json")
    assert cfg.agent().settings.memory_search.provider == "none"  # type: ignore[attr-defined]
    (tmp_path / "hermit.json").write_text('{"agents": {', encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(StatePaths(tmp_path))
    assert "not valid JSON" in str(e.value)


def test_overlap_must_be_below_chunk_size(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, "agents:\n  defaults:\n    memory_search:\n      chunking: {tokens: 100, overlap: 100}\n")
    assert "overlap" in str(e.value)


def test_unknown_agent_suggests_close_id(tmp_path: Path) -> None:
    cfg = _load(tmp_path, "agents:\n  list:\n    - id: main\n    - id: work\n")
    with pytest.raises(ConfigError) as e:
        cfg.agent("wrok")  # type: ignore[attr-defined]
    assert "did you mean 'work'" in str(e.value)


@pytest.mark.parametrize(("text", "shared"), [
    ("agents:\n  defaults:\n    memory_search:\n      store:\n        path: ~/one.sqlite\n"
     "  list:\n    - id: main\n    - id: work\n", "memory index"),
    ("agents:\n  list:\n    - id: main\n      workspace: ~/notes\n    - id: work\n      workspace: ~/notes/\n",
     "workspace"),
])
def test_two_agents_cannot_share_an_index_or_a_workspace(tmp_path: Path, text: str, shared: str) -> None:
    """A store path without {agent_id} gave every agent the same SQLite index: the work agent's search found
    the personal agent's notes (audit K). Refused at load, with the fix in the hint."""
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    assert f"agents 'main' and 'work' share one {shared}" in e.value.message
    assert "{agent_id}" in (e.value.hint or "") if shared == "memory index" else "workspace" in (e.value.hint or "")
    ok = text.replace("~/one.sqlite", "~/idx/{agent_id}.sqlite").replace("~/notes/\n", "~/work-notes\n")
    assert _load(tmp_path, ok) is not None


@pytest.mark.parametrize("origin", ["hermit.example", "null", "*", "", "https://hermit.example/app",
                                    "ftp://hermit.example", "https://user@hermit.example"])
def test_an_allowed_origin_must_be_an_origin(tmp_path: Path, origin: str) -> None:
    """A bare name was dropped from the Host check in silence; "null" let sandboxed frames and file: pages
    through the Origin check (audit K)."""
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, f'gateway:\n  allowed_origins: ["{origin}"]\n')
    assert "is not an origin" in e.value.message and "https://hermit.example" in e.value.message


def test_an_allowed_origin_is_kept_as_a_browser_sends_it(tmp_path: Path) -> None:
    loaded = _load(tmp_path, 'gateway:\n  allowed_origins: ["https://Hermit.Example:443/", "http://mybox.local:18789"]\n')
    assert loaded.config.gateway.allowed_origins == ["https://hermit.example", "http://mybox.local:18789"]  # type: ignore[attr-defined]


def test_agents_sharing_a_workspace_through_a_link_or_nesting_one_are_refused(tmp_path: Path) -> None:
    """Names compared as written let a symlinked path or `//` through, and a workspace inside another one
    made the inner agent's MEMORY.md a shared note of the outer agent (audit O)."""
    (tmp_path / "real" / "ws").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for main, work, how in ((f"{tmp_path}/real/ws", f"{tmp_path}/link/ws", "share one"),
                            (f"{tmp_path}/real/ws", f"/{tmp_path}/real/ws", "share one"),
                            (f"{tmp_path}/real/ws/memory/main", f"{tmp_path}/real/ws", "have nested")):
        with pytest.raises(ConfigError) as e:
            _load(tmp_path, f"agents:\n  list:\n    - id: main\n      workspace: {main}\n"
                            f"    - id: work\n      workspace: {work}\n")
        assert f"agents 'main' and 'work' {how} workspace" in e.value.message
    assert _load(tmp_path, f"agents:\n  list:\n    - id: main\n      workspace: {tmp_path}/real/ws\n"
                           f"    - id: work\n      workspace: {tmp_path}/real/ws-work\n") is not None


def test_extra_paths_cannot_reach_another_agents_workspace_or_the_state_dir(tmp_path: Path) -> None:
    """The work agent's extra_paths pointing at the main agent's workspace made main's MEMORY.md and
    memory/private/ shared notes of work, found and read by work's contacts (audit P)."""
    main_ws = tmp_path / "ws-main"
    for extra, problem in ((str(main_ws), "reaches agent 'main''s workspace"),
                           (f"{main_ws}/memory", "reaches agent 'main''s workspace"),
                           (f"{main_ws}/MEMORY.md", "reaches agent 'main''s workspace"),
                           (str(tmp_path), "reaches agent 'main''s workspace"),
                           (f"{tmp_path}/agents", "reaches Hermit's state dir")):
        with pytest.raises(ConfigError) as e:
            _load(tmp_path, f"agents:\n  list:\n    - id: main\n      workspace: {main_ws}\n    - id: work\n"
                            f"      workspace: {tmp_path}/ws-work\n      memory_search:\n        extra_paths: ['{extra}']\n")
        assert f"agent 'work': memory_search.extra_paths entry '{extra}' {problem}" in e.value.message
    notes = tmp_path.parent / f"{tmp_path.name}-notes"
    assert _load(tmp_path, f"agents:\n  list:\n    - id: main\n      workspace: {main_ws}\n    - id: work\n"
                           f"      memory_search:\n        extra_paths: ['{notes}', 'memory/more']\n") is not None
