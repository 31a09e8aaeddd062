"""A binding's Slack `team_id` and Discord `guild_id` are written the way messages carry them, whatever was
pasted (audit F2): they were compared exactly, so `team_id: t0123` or ` T0123` silently sent a whole work
workspace's contacts and groups to the default (personal) agent, and `hermit doctor` said nothing. Now
both are normalised at config load (a team id upper-cased, a guild id digits or a config error with a
hint), and doctor names a team id no Slack event can carry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hermit.agent.routing import RouteInput, Router, binding_problems
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError
from prochelpers import PROC_TIMEOUT


def personal_and_work(home: Path, bindings: list[dict[str, Any]]) -> LoadedConfig:
    open_to_all = {"dm_policy": "open", "allow_from": ["*"], "group_policy": "open"}
    return build_config({
        "agents": {"list": [{"id": "personal", "default": True}, {"id": "work"}]},
        "channels": {"slack": {"accounts": {"default": open_to_all}},
                     "discord": {"accounts": {"default": open_to_all}}},
        "bindings": bindings}, StatePaths(home))


@pytest.mark.parametrize("written", ["t0123", " T0123", "T0123\t"])
def test_a_team_id_in_any_case_or_spacing_routes_its_workspace(tmp_path: Path, written: str) -> None:
    loaded = personal_and_work(tmp_path, [{"match": {"channel": "slack", "team_id": written}, "agent_id": "work"}])
    assert loaded.config.bindings[0].match.team_id == "T0123"
    router = Router.from_config(loaded)
    dm = router.resolve(RouteInput("slack", "default", "dm", "U999", team_id="T0123"))
    group = router.resolve(RouteInput("slack", "default", "group", "C777", team_id="T0123"))
    assert (dm.agent_id, dm.matched_by, dm.session_key) == ("work", "team", "agent:work:slack:default:dm:U999@T0123")
    assert (group.agent_id, group.session_key) == ("work", "agent:work:slack:group:C777@T0123")
    other = router.resolve(RouteInput("slack", "default", "dm", "U999", team_id="T0999"))
    assert other.agent_id == "personal"  # another workspace is still not this one
    assert binding_problems(loaded.config.bindings, ["personal", "work"], loaded.config.channels) == []


def test_a_guild_id_is_digits_and_anything_else_is_a_config_error_with_a_hint(tmp_path: Path) -> None:
    loaded = personal_and_work(tmp_path, [{"match": {"channel": "discord", "guild_id": " 81234567890 "},
                                           "agent_id": "work"}])
    assert loaded.config.bindings[0].match.guild_id == "81234567890"
    route = Router.from_config(loaded).resolve(RouteInput("discord", "default", "group", "55", guild_id="81234567890"))
    assert (route.agent_id, route.matched_by) == ("work", "guild")
    for written in ("My Server", "discord.gg/abc123", "G7"):
        with pytest.raises(ConfigError) as e:
            personal_and_work(tmp_path, [{"match": {"channel": "discord", "guild_id": written}, "agent_id": "work"}])
        assert f"bindings[0].match.guild_id: not a Discord server id: server ids are digits (got {written!r})" \
            in e.value.message
        assert "Copy Server ID" in e.value.hint


def test_doctor_names_a_team_id_no_slack_event_carries(tmp_path: Path) -> None:
    loaded = personal_and_work(tmp_path, [
        {"match": {"channel": "slack", "team_id": "acme.slack.com"}, "agent_id": "work"},
        {"match": {"channel": "slack", "team_id": "#general"}, "agent_id": "work"},
        {"match": {"channel": "slack", "team_id": "T0123"}, "agent_id": "work"},
        {"match": {"channel": "slack", "team_id": "t0123 "}, "agent_id": "personal"},
    ])
    problems = binding_problems(loaded.config.bindings, ["personal", "work"], loaded.config.channels)
    assert problems[0].startswith("bindings[0] matches team_id 'ACME.SLACK.COM', which no Slack event carries: "
                                  "'ACME.SLACK.COM' is not a Slack workspace id; use the workspace id, like T0123ABCD")
    assert problems[1].startswith("bindings[1] matches team_id '#GENERAL', which no Slack event carries")
    # The same workspace written twice is one match: the later binding never applies.
    assert problems[2] == "bindings[3] has the same match as bindings[2], which wins: it never applies"
    assert len(problems) == 3

    (tmp_path / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    memory_search: {provider: none}\n  list: [{id: main}, {id: work}]\n"
        "channels:\n  slack:\n    accounts:\n      corp: {}\n"
        "bindings:\n  - {match: {channel: slack, team_id: acme}, agent_id: work}\n")
    env = {**os.environ, "HERMIT_HOME": str(tmp_path), "OMP_WAIT_POLICY": "PASSIVE"}
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", "doctor", "--json"], env=env, text=True,
                       capture_output=True, timeout=PROC_TIMEOUT)
    check = {c["name"]: c for c in json.loads(r.stdout)}["bindings"]
    assert check["ok"] is False and "bindings[0] matches team_id 'ACME', which no Slack event carries" in check["detail"]
