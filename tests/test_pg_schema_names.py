"""Two agents of one config may not name one PostgreSQL schema: prefix `hermit_` + agent `x_y` and prefix
`hermit_x_` + agent `y` are both `hermit_x_y`, which would be one index read and written by both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError
from hermit.memory.store.postgres.schema import schema_name


def _load(home: Path, agents: list[dict[str, Any]], backend: str = "postgres") -> list[str]:
    raw = {"agents": {"defaults": {"memory_search": {"store": {"backend": backend}}}, "list": agents}}
    return [a.id for a in build_config(raw, StatePaths(home)).agents]


def _prefix(prefix: str, **pg: str) -> dict[str, Any]:
    return {"memory_search": {"store": {"postgres": {"schema_prefix": prefix, **pg}}}}


def test_two_agents_whose_prefix_and_id_spell_one_schema_are_refused(tmp_path: Path) -> None:
    assert schema_name("hermit_", "x_y") == schema_name("hermit_x_", "y") == "hermit_x_y"
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, [{"id": "x_y"}, {"id": "y", **_prefix("hermit_x_")}])
    assert "agents 'x_y' and 'y' share one PostgreSQL memory schema, hermit_x_y" in e.value.message
    assert "'hermit_' + 'x_y', 'hermit_x_' + 'y'" in e.value.message
    assert "give agent 'y' another memory_search.store.postgres.schema_prefix" in e.value.hint


def test_distinct_schemas_other_dsn_variables_and_sqlite_agents_are_accepted(tmp_path: Path) -> None:
    # Named like a leftover of agent work's rebuild, but a schema of its own (the cleanup checks marks).
    assert _load(tmp_path, [{"id": "work"}, {"id": "work_old20240101"}]) == ["work", "work_old20240101"]
    assert _load(tmp_path, [{"id": "x_y"}, {"id": "y", **_prefix("hermit_x_", dsn_env="OTHER_PG_DSN")}]) == ["x_y", "y"]
    assert _load(tmp_path, [{"id": "x_y"}, {"id": "y", **_prefix("hermit_x_")}], backend="sqlite") == ["x_y", "y"]
