"""A DSN written where the NAME of its variable goes (`dsn_env: postgresql://hermit:PW@db/hermit`, the mistake
the option invites) is refused without repeating it: the config error went to the terminal, `hermit doctor`
and — re-read by a running gateway at each message — to the gateway's log, with the password in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError

PASSWORD = "S3cretPW-8812"


@pytest.mark.parametrize("value", [f"postgresql://hermit:{PASSWORD}@db.lan:5432/hermit",
                                   f"host=db.lan user=hermit password={PASSWORD} dbname=hermit"])
def test_a_dsn_in_dsn_env_is_refused_without_showing_it(tmp_path: Path, value: str) -> None:
    store = {"backend": "postgres", "postgres": {"dsn_env": value}}
    (tmp_path / "hermit.yaml").write_text(json.dumps({"agents": {"defaults": {"memory_search": {"store": store}}}}),
                                          encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(StatePaths(tmp_path))
    shown = f"{e.value.message}\n{e.value.hint}"
    assert "dsn_env" in shown  # still names the option to fix
    assert PASSWORD not in shown and "db.lan" not in shown, shown


def test_a_bad_value_elsewhere_is_still_shown(tmp_path: Path) -> None:
    (tmp_path / "hermit.yaml").write_text(json.dumps({"agents": {"defaults": {"timezone": 5}}}), encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(StatePaths(tmp_path))
    assert "(got 5)" in e.value.message
