"""`hermit agents add` edits the config without losing a comment, a quote or the user's layout."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
import yaml

from hermit.cli.main import main
from hermit.config.edit import append_agents
from hermit.workspace import template_text

HAND_WRITTEN = """\
# my config — hand written
agents:
    defaults:
        timezone: "Europe/Paris"   # where I live
        memory_search: { provider: none, query: {max_results: 3} }
    list:
      - id: main     # me
        model: 'local/llama'
      - { id: lab, workspace: ~/lab }
      # - id: old    (retired)

models:
    providers:
        local: {type: openai-compatible, base_url: "http://127.0.0.1:11434/v1"}
# trailing comment
"""


def only_added(before: str, after: str) -> list[str]:
    """The lines `after` adds to `before`; fails if any line of `before` was changed or dropped."""
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    removed = [d for d in diff if d.startswith("- ")]
    assert not removed, "\n".join(removed)
    return [d[2:] for d in diff if d.startswith("+ ")]


def add(home: Path, *args: str) -> int:
    return main(["--home", str(home), "agents", "add", *args])


def test_add_after_init_keeps_the_commented_template(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    assert main(["--home", str(home), "init"]) == 0
    before = (home / "hermit.yaml").read_text()
    assert add(home, "work") == 0
    after = (home / "hermit.yaml").read_text()
    assert only_added(before, after) == ["  list:", "    - id: main", "    - id: work"]
    assert before == template_text("hermit.yaml")
    assert main(["--home", str(home), "agents", "list", "--json"]) == 0
    capsys.readouterr()
    assert add(home, "play", "--model", "local/qwen3") == 0
    assert only_added(after, (home / "hermit.yaml").read_text()) == ["    - id: play", "      model: local/qwen3"]


def test_add_to_a_hand_written_file_with_odd_layout(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermit.yaml").write_text(HAND_WRITTEN)
    ws = tmp_path / "work space"
    assert add(home, "work", "--workspace", str(ws), "--model", "local/llama") == 0
    after = (home / "hermit.yaml").read_text()
    assert only_added(HAND_WRITTEN, after) == ["      - id: work", f'        workspace: "{ws}"',
                                               "        model: local/llama"]
    data = yaml.safe_load(after)
    assert [a["id"] for a in data["agents"]["list"]] == ["main", "lab", "work"]
    assert data["agents"]["list"][2]["workspace"] == str(ws)


@pytest.mark.parametrize("text", [
    "",
    "# only a comment\n",
    "models:\n  providers: {}\n",
    "agents:\n  defaults:\n    timezone: UTC\n# about models\nmodels: {}\n",
    "agents:\n  list:\n  - id: main\n  defaults: {timezone: UTC}\n",
    "agents:\n  list: [{id: main}]   # flow style\n  defaults: {timezone: UTC}\n",
    "agents: {defaults: {timezone: UTC}}\n",
    "agents:\n  list:\n  - id: main\n",  # no newline issues at EOF
    "agents:\n  list:\n  - id: main",
])
def test_append_agents_keeps_every_line_and_the_data(text: str) -> None:
    new = append_agents(text, [{"id": "work"}], is_yaml=True, source="x.yaml")
    data = yaml.safe_load(new)
    ids = [a["id"] for a in data["agents"]["list"]]
    assert ids[-1] == "work" and ids.count("work") == 1
    before = yaml.safe_load(text) or {}
    for key, value in before.items():
        if key != "agents":
            assert data[key] == value
    assert data["agents"].get("defaults") == (before.get("agents") or {}).get("defaults")
    for line in text.splitlines():
        if line.strip().startswith("#"):
            assert line.strip() in new  # comments survive, even through the round-trip fallback


def test_json_config_stays_json(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    original = {"agents": {"defaults": {"timezone": "UTC"}}, "models": {"providers": {}}}
    (home / "hermit.json").write_text(json.dumps(original, indent=4))
    assert add(home, "work") == 0
    data = json.loads((home / "hermit.json").read_text())
    assert data == {"agents": {"defaults": {"timezone": "UTC"}, "list": [{"id": "main"}, {"id": "work"}]},
                    "models": {"providers": {}}}


def test_a_bad_id_leaves_the_file_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hermit.yaml").write_text(HAND_WRITTEN)
    assert add(home, "Bad Id") == 1
    assert "'Bad Id' is not a valid agent id: an id is lowercase letters" in capsys.readouterr().err
    assert (home / "hermit.yaml").read_text() == HAND_WRITTEN
