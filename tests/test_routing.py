"""Routing: binding precedence (a table), session keys for every dm_scope, groups, threads and topics,
config validation of bindings, and the doctor's list of bindings that can never apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermit.agent.routing import Route, RouteInput, Router, binding_problems
from hermit.config.load import LoadedConfig, build_config
from hermit.config.paths import StatePaths
from hermit.errors import ConfigError
from hermit.sessions.keys import SessionKind, is_main_session_key, parse_session_key

BINDINGS: list[dict[str, Any]] = [
    {"match": {"channel": "slack"}, "agent_id": "work"},
    {"match": {"channel": "slack", "team_id": "T1"}, "agent_id": "ops"},
    {"match": {"channel": "slack", "account_id": "corp"}, "agent_id": "family"},
    {"match": {"channel": "slack", "peer": {"kind": "dm", "id": "U42"}}, "agent_id": "personal"},
    {"match": {"channel": "discord", "guild_id": "707"}, "agent_id": "ops"},
    {"match": {"channel": "Telegram", "peer": {"kind": "group", "id": "-100777"}}, "agent_id": "family"},
    {"match": {"channel": "telegram", "account_id": "bot2"}, "agent_id": "work"},
]
AGENTS = ["main", "work", "ops", "family", "personal"]


def loaded(tmp_path: Path, bindings: list[dict[str, Any]] = BINDINGS, **defaults: Any) -> LoadedConfig:
    raw = {"agents": {"list": [{"id": a} for a in AGENTS], "defaults": defaults}, "bindings": bindings,
           "channels": {"telegram": {"accounts": {"bot2": {}}}, "slack": {"accounts": {"corp": {}}}}}
    return build_config(raw, StatePaths(tmp_path))


@pytest.mark.parametrize(
    ("inp", "agent", "matched_by"),
    [
        # exact peer beats team, account and channel bindings that also match
        (RouteInput("slack", "corp", "dm", "U42", team_id="T1"), "personal", "peer"),
        # team beats account and channel
        (RouteInput("slack", "corp", "dm", "U9", team_id="T1"), "ops", "team"),
        # account beats channel
        (RouteInput("slack", "corp", "dm", "U9", team_id="T2"), "family", "account"),
        (RouteInput("slack", "default", "group", "C1"), "work", "channel"),
        (RouteInput("discord", "default", "group", "c5", guild_id="707"), "ops", "guild"),
        (RouteInput("discord", "default", "group", "c5", guild_id="808"), "main", "default"),
        # the peer binding wants a group: a DM with the same id is not it
        (RouteInput("telegram", "default", "dm", "-100777"), "main", "default"),
        (RouteInput("TELEGRAM", "bot2", "group", "-100777"), "family", "peer"),
        (RouteInput("telegram", "bot2", "dm", "5"), "work", "account"),
        (RouteInput("whatsapp", "default", "dm", "+49"), "main", "default"),
    ],
)
def test_binding_precedence(tmp_path: Path, inp: RouteInput, agent: str, matched_by: str) -> None:
    route = Router.from_config(loaded(tmp_path)).resolve(inp)
    assert (route.agent_id, route.matched_by) == (agent, matched_by)


def test_ties_go_to_the_more_specific_then_the_first_binding(tmp_path: Path) -> None:
    bindings = [
        {"match": {"channel": "slack", "peer": {"kind": "dm", "id": "U1"}}, "agent_id": "work"},
        {"match": {"channel": "slack", "account_id": "a", "peer": {"kind": "dm", "id": "U1"}}, "agent_id": "ops"},
        {"match": {"channel": "slack", "peer": {"kind": "dm", "id": "U1"}}, "agent_id": "family"},
    ]
    router = Router.from_config(loaded(tmp_path, bindings))
    assert router.resolve(RouteInput("slack", "a", "dm", "U1")).agent_id == "ops"
    assert router.resolve(RouteInput("slack", "b", "dm", "U1")).agent_id == "work"


OWNER = {"sender_is_owner": True}


@pytest.mark.parametrize(
    ("scope", "inp", "key", "main"),
    [
        # an owner's DMs follow dm_scope; under main, threads inside them stay in the main session
        ("main", RouteInput("telegram", "default", "dm", "42", **OWNER), "agent:main:main", True),
        ("main", RouteInput("slack", "default", "dm", "U1", thread_id="17.5", **OWNER), "agent:main:main", True),
        ("main", RouteInput("telegram", "default", "dm", "42", topic_id="3", **OWNER), "agent:main:main", True),
        ("per-peer", RouteInput("telegram", "default", "dm", "42", **OWNER), "agent:main:dm:42", False),
        ("per-channel-peer", RouteInput("telegram", "default", "dm", "42", **OWNER), "agent:main:telegram:dm:42",
         False),
        ("per-account-channel-peer", RouteInput("telegram", "bot1", "dm", "42", **OWNER),
         "agent:main:telegram:bot1:dm:42", False),
        # a contact (approved, allowlisted, open) never reaches main: under main, a key per account and sender
        ("main", RouteInput("telegram", "bot1", "dm", "42"), "agent:main:telegram:bot1:dm:42", False),
        # a Slack member id names someone within one workspace only: a contact's and a group's keys carry the team
        ("main", RouteInput("slack", "corp", "dm", "U1", thread_id="17.5", team_id="T1"),
         "agent:main:slack:corp:dm:U1@T1:thread:17.5", False),
        ("main", RouteInput("telegram", "bot1", "dm", "42", topic_id="3"), "agent:main:telegram:bot1:dm:42:topic:3",
         False),
        # per-peer (one session across channels) is the owner's: a contact's id means nothing outside its
        # platform (a Telegram user id can be someone's WhatsApp number), so theirs stays per channel
        ("per-peer", RouteInput("telegram", "default", "dm", "42"), "agent:main:telegram:dm:42", False),
        ("per-peer", RouteInput("whatsapp", "default", "dm", "42"), "agent:main:whatsapp:dm:42", False),
        ("per-channel-peer", RouteInput("telegram", "default", "dm", "42"), "agent:main:telegram:dm:42", False),
        ("per-account-channel-peer", RouteInput("telegram", "bot1", "dm", "42"),
         "agent:main:telegram:bot1:dm:42", False),
        ("per-peer", RouteInput("slack", "default", "dm", "U1", thread_id="17.5", **OWNER),
         "agent:main:dm:U1:thread:17.5", False),
        ("per-peer", RouteInput("slack", "default", "dm", "U1", thread_id="17.5", team_id="T1"),
         "agent:main:slack:dm:U1@T1:thread:17.5", False),
        ("per-peer", RouteInput("slack", "default", "dm", "W1", team_id="T1"), "agent:main:slack:dm:W1", False),
        ("per-peer", RouteInput("slack", "default", "dm", "U1@T9", team_id="T1"), "agent:main:slack:dm:U1@T9", False),
        ("main", RouteInput("telegram", "default", "group", "-100123"), "agent:main:telegram:group:-100123", False),
        ("main", RouteInput("telegram", "default", "group", "-100123", topic_id="7"),
         "agent:main:telegram:group:-100123:topic:7", False),
        ("main", RouteInput("slack", "default", "group", "C9", thread_id="1700.1", team_id="T1"),
         "agent:main:slack:group:C9@T1:thread:1700.1", False),
        ("main", RouteInput("slack", "default", "group", "C9"), "agent:main:slack:group:C9@account.default", False),
        ("main", RouteInput("discord", "default", "group", "555", thread_id="666", guild_id="9"),
         "agent:main:discord:group:555:thread:666", False),
        # the web chat is the owner's console: its DMs are the main session whatever the scope
        ("per-channel-peer", RouteInput("webchat", "default", "dm", "browser-1"), "agent:main:main", True),
        ("main", RouteInput("webchat", "default", "dm", "browser-1"), "agent:main:main", True),
    ],
)
def test_session_keys_by_dm_scope(tmp_path: Path, scope: str, inp: RouteInput, key: str, main: bool) -> None:
    router = Router.from_config(loaded(tmp_path, [], session={"dm_scope": scope}))
    route = router.resolve(inp)
    assert route == Route("main", key, main, "default")
    assert is_main_session_key(route.session_key) is main
    parsed = parse_session_key(key)
    assert str(parsed) == key
    assert parsed.is_main is main


def test_dm_scope_is_per_agent(tmp_path: Path) -> None:
    raw = {"agents": {"defaults": {"session": {"dm_scope": "per-channel-peer"}},
                      "list": [{"id": "main", "session": {"dm_scope": "main"}}, {"id": "work"}]},
           "bindings": [{"match": {"channel": "slack"}, "agent_id": "work"}]}
    router = Router.from_config(build_config(raw, StatePaths(tmp_path)))
    assert router.resolve(RouteInput("slack", "default", "dm", "U1", team_id="T1")).session_key == \
        "agent:work:slack:dm:U1@T1"
    assert router.resolve(RouteInput("telegram", "default", "dm", "5", sender_is_owner=True)).session_key == \
        "agent:main:main"
    assert router.resolve(RouteInput("telegram", "default", "dm", "5")).session_key == \
        "agent:main:telegram:default:dm:5"


def test_sharing_the_main_session_with_contacts_takes_a_setting_that_says_so(tmp_path: Path) -> None:
    raw = {"agents": {"list": [{"id": "main", "session": {"dangerously_share_main_session_with_contacts": True}},
                               {"id": "work"}]},
           "bindings": [{"match": {"channel": "slack"}, "agent_id": "work"}]}
    router = Router.from_config(build_config(raw, StatePaths(tmp_path)))
    shared = router.resolve(RouteInput("telegram", "bot", "dm", "5"))
    assert (shared.session_key, shared.main) == ("agent:main:main", True)  # the original's behaviour
    assert router.resolve(RouteInput("slack", "corp", "dm", "U1", team_id="T1")).session_key == \
        "agent:work:slack:corp:dm:U1@T1"
    assert router.resolve(RouteInput("telegram", "bot", "group", "-1")).session_key == "agent:main:telegram:group:-1"
    default = build_config({}, StatePaths(tmp_path)).agent().settings.session
    assert default.dangerously_share_main_session_with_contacts is False


def test_any_account_binding_matches_every_account_and_ranks_as_channel_wide(tmp_path: Path) -> None:
    bindings = [
        {"match": {"channel": "telegram", "account_id": "*"}, "agent_id": "family"},
        {"match": {"channel": "telegram", "account_id": "bot2"}, "agent_id": "work"},
        {"match": {"channel": "slack", "account_id": "*"}, "agent_id": "ops"},
        {"match": {"channel": "slack"}, "agent_id": "work"},
    ]
    cfg = loaded(tmp_path, bindings)
    router = Router.from_config(cfg)
    assert (router.resolve(RouteInput("telegram", "anything", "dm", "1")).agent_id,
            router.resolve(RouteInput("telegram", "anything", "dm", "1")).matched_by) == ("family", "channel")
    assert router.resolve(RouteInput("telegram", "bot2", "dm", "1")).agent_id == "work"  # a named account wins
    assert router.resolve(RouteInput("whatsapp", "x", "dm", "1")).agent_id == "main"
    problems = binding_problems(cfg.config.bindings, AGENTS, cfg.config.channels)
    # '*' is not an undefined account; it matches what a channel-only binding matches
    assert problems == ["bindings[3] has the same match as bindings[2], which wins: it never applies"]


def test_parsed_route_keys_carry_their_parts() -> None:
    k = parse_session_key("agent:main:telegram:bot1:dm:42:topic:3")
    assert (k.kind, k.channel, k.account_id, k.peer_id, k.topic_id, k.chat_type) == (
        SessionKind.DM, "telegram", "bot1", "42", "3", "thread")
    k = parse_session_key("agent:main:dm:4%3A2")
    assert (k.kind, k.channel, k.peer_id) == (SessionKind.DM, None, "4:2")


def test_unknown_agent_in_a_binding_is_a_config_error_with_a_close_match(tmp_path: Path) -> None:
    bad = loaded(tmp_path, [{"match": {"channel": "slack"}, "agent_id": "wrok"}])
    with pytest.raises(ConfigError, match="unknown agent 'wrok'") as info:
        Router.from_config(bad)
    assert "did you mean 'work'" in info.value.hint


def test_old_binding_shape_is_refused_with_the_new_key_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown key 'bindings\\[0\\].agent'"):
        build_config({"bindings": [{"agent": "work", "channel": "slack"}]}, StatePaths(tmp_path))
    with pytest.raises(ConfigError, match="bindings\\[0\\].match.peer.kind"):
        build_config({"bindings": [{"match": {"channel": "slack", "peer": {"kind": "room", "id": "1"}},
                                    "agent_id": "main"}]}, StatePaths(tmp_path))


def test_mention_patterns_are_validated_at_load(tmp_path: Path) -> None:
    ok = build_config({"agents": {"defaults": {"mention_patterns": ["\\bhermit\\b"]}}}, StatePaths(tmp_path))
    assert ok.agent().settings.mention_patterns == ("\\bhermit\\b",)
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        build_config({"agents": {"defaults": {"mention_patterns": ["(unclosed"]}}}, StatePaths(tmp_path))


def test_binding_problems_lists_bindings_that_never_apply(tmp_path: Path) -> None:
    bindings = [
        {"match": {"channel": "slack"}, "agent_id": "work"},
        {"match": {"channel": "slak"}, "agent_id": "work"},
        {"match": {"channel": "slack", "guild_id": "101"}, "agent_id": "work"},
        {"match": {"channel": "discord", "team_id": "T1"}, "agent_id": "work"},
        {"match": {"channel": "discord", "guild_id": "9", "team_id": "T9"}, "agent_id": "work"},
        {"match": {"channel": "telegram", "account_id": "nobot"}, "agent_id": "work"},
        {"match": {"channel": "slack"}, "agent_id": "ops"},
        {"match": {"channel": "webchat", "peer": {"kind": "group", "id": "x"}}, "agent_id": "work"},
        {"match": {"channel": "slack"}, "agent_id": "wrk"},
    ]
    cfg = loaded(tmp_path, bindings)
    problems = binding_problems(cfg.config.bindings, AGENTS, cfg.config.channels)
    text = "\n".join(problems)
    assert "bindings[1] matches unknown channel 'slak' (did you mean 'slack'?)" in text
    assert "bindings[2] sets guild_id on channel 'slack'" in text
    assert "bindings[3] sets team_id on channel 'discord'" in text
    assert "bindings[4] sets both guild_id" in text
    assert "bindings[5] matches account 'nobot'" in text
    assert "bindings[6] has the same match as bindings[0]" in text
    assert "bindings[7] matches a webchat group" in text
    assert "bindings[8] routes to unknown agent 'wrk' (did you mean 'work'?)" in text
    assert len(problems) == 9  # bindings[8] is both an unknown agent and a shadowed match
    assert binding_problems(loaded(tmp_path).config.bindings, AGENTS, cfg.config.channels) == []
