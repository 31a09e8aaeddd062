"""The config `hermit init` writes: every value it shows is the schema's default, so the two never drift."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.config.schema import AgentSettings, HermitConfig
from hermit.workspace import template_text


def _leaves(data: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(data, dict) and data:
        return [leaf for k, v in data.items() for leaf in _leaves(v, (*path, str(k)))]
    return [(path, data)]


def _default(model: BaseModel, path: tuple[str, ...]) -> Any:
    cur: Any = model
    for part in path:
        cur = cur[part] if isinstance(cur, dict) else getattr(cur, part.replace("lambda", "lambda_"))
    return cur.model_dump(by_alias=True) if isinstance(cur, BaseModel) else cur


def test_every_value_the_template_shows_is_the_schema_default() -> None:
    data = yaml.safe_load(template_text("hermit.yaml"))
    defaults = data["agents"].pop("defaults")
    shown = _leaves(defaults)
    assert len(shown) >= 10  # the template does show the main knobs
    wrong = [(".".join(p), v, _default(AgentSettings(), p)) for p, v in shown if v != _default(AgentSettings(), p)]
    assert not wrong, f"template value != schema default: {wrong}"
    if not data["agents"]:
        del data["agents"]
    rest = _leaves(data)
    wrong = [(".".join(p), v) for p, v in rest if p and v != _default(HermitConfig(), p)]
    assert not wrong, f"template value != schema default: {wrong}"


def test_the_template_loads_and_equals_no_config_at_all(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(template_text("hermit.yaml"))
    with_template = load_config(StatePaths(tmp_path)).agent()
    without = load_config(StatePaths(tmp_path / "empty")).agent()
    assert with_template.settings == without.settings
