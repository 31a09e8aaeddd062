"""Session keys: the builders' shapes, round trips, classification and main-session detection (fail closed), and
the errors malformed keys get."""

from __future__ import annotations

import pytest

from hermit.errors import SessionError
from hermit.sessions import (
    SessionKey,
    SessionKind,
    agent_id_of,
    channel_session_key,
    chat_type_of,
    classify_session_key,
    cron_session_key,
    dm_session_key,
    format_session_key,
    group_session_key,
    is_main_session_key,
    main_session_key,
    parse_session_key,
    subagent_session_key,
)


def test_key_builders_match_spec_shapes() -> None:
    assert main_session_key() == "agent:main:main"
    assert main_session_key("work") == "agent:work:main"
    assert group_session_key("main", "telegram", "-100123") == "agent:main:telegram:group:-100123"
    assert dm_session_key("main", "Telegram", "42") == "agent:main:telegram:dm:42"
    assert channel_session_key("work", "slack", "C024BE91L", thread_id="1700000000.000100") == (
        "agent:work:slack:channel:C024BE91L:thread:1700000000.000100"
    )
    assert subagent_session_key("main", "r1") == "agent:main:subagent:r1"
    assert cron_session_key("daily-digest") == "cron:daily-digest"
    assert cron_session_key("j1", agent_id="work") == "agent:work:cron:j1"


@pytest.mark.parametrize(
    "key",
    [
        "agent:main:main",
        "agent:main:telegram:group:-100123",
        "agent:main:telegram:group:-100123:thread:77",
        "agent:w:discord:channel:999:thread:1",
        "agent:main:whatsapp:dm:+4912345",
        "agent:main:subagent:abc",
        "cron:job-1",
        "agent:main:cron:job-1",
        "agent:main:matrix:group:!room%3Aexample.org",
        "agent:main:dm:42",
        "agent:main:dm:U1:thread:17.5",
        "agent:main:telegram:bot1:dm:42",
        "agent:main:telegram:bot1:dm:42:topic:3",
        "agent:main:telegram:group:-100123:topic:7",
        "agent:main:slack:group:C9:thread:1700.1",
    ],
)
def test_keys_round_trip(key: str) -> None:
    assert format_session_key(parse_session_key(key)) == key
    assert str(parse_session_key(key)) == key


def test_ids_with_colons_are_encoded_and_decoded() -> None:
    key = group_session_key("main", "matrix", "!room:example.org", thread_id="$ev:x")
    assert key == "agent:main:matrix:group:!room%3Aexample.org:thread:$ev%3Ax"
    parsed = parse_session_key(key)
    assert parsed.peer_id == "!room:example.org"
    assert parsed.thread_id == "$ev:x"
    assert parsed.kind is SessionKind.GROUP


def test_classification() -> None:
    main = parse_session_key("agent:main:main")
    assert main.is_main and main.chat_type == "dm" and not main.is_group
    group = parse_session_key("agent:main:telegram:group:-1")
    assert group.is_group and group.chat_type == "group" and not group.is_main
    thread = parse_session_key("agent:main:slack:channel:C1:thread:9")
    assert thread.is_group and thread.is_thread and thread.chat_type == "thread"
    cron = parse_session_key("cron:j1")
    assert cron.is_cron and cron.agent_id is None and cron.job_id == "j1" and cron.chat_type is None
    sub = parse_session_key("agent:main:subagent:r9")
    assert sub.is_subagent and sub.run_id == "r9" and sub.chat_type is None
    dm = parse_session_key("agent:main:telegram:dm:5")
    assert dm.kind is SessionKind.DM and dm.chat_type == "dm" and not dm.is_main

    assert classify_session_key("agent:main:discord:channel:1") is SessionKind.CHANNEL
    assert chat_type_of("agent:main:telegram:dm:5:thread:2") == "thread"
    assert chat_type_of("nonsense") is None
    assert agent_id_of("agent:work:main") == "work"
    assert agent_id_of("cron:x") is None


@pytest.mark.parametrize(
    "key",
    [
        "agent:main:main",
        "agent:work:main",
    ],
)
def test_main_session_detection(key: str) -> None:
    assert is_main_session_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "agent:main:telegram:group:1",
        "agent:main:telegram:dm:1",
        "agent:main:telegram:group:1:thread:2",
        "agent:main:telegram:group:1:topic:2",
        "agent:main:dm:1",
        "agent:main:telegram:acct:dm:1",
        "agent:main:dm:main",
        "agent:main:main:dm:1",
        "agent:main:subagent:x",
        "cron:main",
        "agent:main:cron:main",
        "agent:main:main:extra",
        "agent:main:main:thread:1",
        "agent:Main:main",
        "agent::main",
        "main",
        "",
        " agent:main:main",
        "agent:main:telegram:group:",
        "agent:main:telegram:pm:1",
        "recovered:abc",
    ],
)
def test_everything_else_is_not_main_fail_closed(key: str) -> None:
    assert not is_main_session_key(key)


@pytest.mark.parametrize(
    "key",
    ["", "main", "agent:main", "agent:BAD:main", "agent:main:x", "agent:main:tg:group:1:chapter:2", "cron:a:b",
     "agent:main:tg:acct:group:1", "agent:main:dm:1:x:2", "agent:main:group:dm:1", "agent:main:tg:group:1:topic:"],
)
def test_parse_rejects_malformed_keys_with_hint(key: str) -> None:
    with pytest.raises(SessionError) as info:
        parse_session_key(key)
    assert "session key" in info.value.message
    assert info.value.hint
    assert classify_session_key(key) is SessionKind.UNKNOWN


def test_format_validates_parts() -> None:
    with pytest.raises(SessionError):
        group_session_key("Bad Agent", "telegram", "1")
    with pytest.raises(SessionError):
        group_session_key("main", "telegram", "")
    with pytest.raises(SessionError):
        format_session_key(SessionKey(SessionKind.UNKNOWN, agent_id="main"))
    with pytest.raises(SessionError, match="cannot be a channel name"):
        group_session_key("main", "dm", "1")
    with pytest.raises(SessionError, match="not both"):
        group_session_key("main", "telegram", "1", "2", topic_id="3")
    with pytest.raises(SessionError, match="only DM keys carry an account"):
        format_session_key(SessionKey(SessionKind.GROUP, agent_id="main", channel="tg", peer_id="1", account_id="a"))
    with pytest.raises(SessionError, match="needs its channel"):
        dm_session_key("main", None, "1", account_id="a")
