"""Session keys: build, parse and classify them (main private DM, direct, group, channel, thread, cron, sub-agent).

Shapes (SPEC §7, §15):

    agent:<agentId>:main                                   the user's private DMs (the *main* session)
    agent:<agentId>:dm:<peerId>                            a DM, dm_scope per-peer
    agent:<agentId>:<channel>:dm:<peerId>                  a DM, dm_scope per-channel-peer
    agent:<agentId>:<channel>:<accountId>:dm:<peerId>      a DM, dm_scope per-account-channel-peer
    agent:<agentId>:<channel>:group:<groupId>              a group chat
    agent:<agentId>:<channel>:channel:<channelId>          a Slack/Discord-style channel (older keys)
      ...:thread:<threadId> | ...:topic:<topicId>          optional suffix on every non-main chat key
    agent:<agentId>:subagent:<runId>                       a sub-agent run
    cron:<jobId>  (or agent:<agentId>:cron:<jobId>)        a scheduled job

Platform ids may contain ':' (Matrix room ids do), so ':' and '%' inside an id are percent-encoded when
a key is built and decoded when it is parsed; ordinary ids (`-100123`, `C024BE91L`) stay readable. A
channel is never named like a key word (`dm`, `group`, `main`…), so every shape parses one way only.

MEMORY.md may only be injected into the main private session (SPEC §3, §14.8). `is_main_session_key`
is the single check for that rule, and it fails closed: any key it cannot parse is *not* main.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal
from urllib.parse import unquote

from hermit.errors import SessionError

ChatType = Literal["dm", "group", "thread"]

DEFAULT_AGENT_ID = "main"
MAIN_KEY = "main"

_ID_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_KEY_HINT = (
    "session keys look like agent:<agentId>:main, agent:<agentId>:<channel>:group:<groupId> or cron:<jobId>"
)
# Words with a meaning at a fixed place in a key; a channel with one of these names would be ambiguous.
_RESERVED_CHANNELS = frozenset({"main", "dm", "group", "channel", "thread", "topic", "subagent", "cron"})
_SUFFIXES = ("thread", "topic")


class SessionKind(StrEnum):
    MAIN = "main"
    DM = "dm"
    GROUP = "group"
    CHANNEL = "channel"
    SUBAGENT = "subagent"
    CRON = "cron"
    UNKNOWN = "unknown"  # only returned by classify_session_key for keys that do not parse


_PEER_KINDS = {SessionKind.DM, SessionKind.GROUP, SessionKind.CHANNEL}


@dataclass(frozen=True)
class SessionKey:
    """A parsed session key. `peer_id` is the dm peer, group id or channel id, by kind.

    A DM key may lack `channel` (dm_scope per-peer) and carries `account_id` only for
    per-account-channel-peer. `thread_id` (Slack/Discord threads) and `topic_id` (Telegram forum
    topics) are mutually exclusive suffixes.
    """

    kind: SessionKind
    agent_id: str | None = None
    channel: str | None = None
    peer_id: str | None = None
    thread_id: str | None = None
    job_id: str | None = None
    run_id: str | None = None
    account_id: str | None = None
    topic_id: str | None = None

    def __str__(self) -> str:
        return format_session_key(self)

    @property
    def is_main(self) -> bool:
        return self.kind is SessionKind.MAIN

    @property
    def is_group(self) -> bool:
        """Group chats and channels (and threads inside them): several people can read the replies."""
        return self.kind in (SessionKind.GROUP, SessionKind.CHANNEL)

    @property
    def is_thread(self) -> bool:
        return self.thread_id is not None or self.topic_id is not None

    @property
    def is_cron(self) -> bool:
        return self.kind is SessionKind.CRON

    @property
    def is_subagent(self) -> bool:
        return self.kind is SessionKind.SUBAGENT

    @property
    def chat_type(self) -> ChatType | None:
        """The chat type reset policies are keyed by (SPEC §11); None for cron and sub-agent runs."""
        if self.is_thread:
            return "thread"
        if self.kind in (SessionKind.MAIN, SessionKind.DM):
            return "dm"
        if self.is_group:
            return "group"
        return None


def _encode(value: str, what: str) -> str:
    if not value:
        raise SessionError(f"empty {what} in a session key", hint=_KEY_HINT)
    out: list[str] = []
    for ch in value:
        if ch in ":%" or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"%{ord(ch):02X}")
        else:
            out.append(ch)
    return "".join(out)


def _check_id(value: str, what: str) -> str:
    if not _ID_RE.fullmatch(value):
        raise SessionError(
            f"invalid {what} {value!r} in a session key",
            hint=f"a {what} is lowercase letters, digits, '-' or '_' (max 64 chars)",
        )
    return value


def format_session_key(key: SessionKey) -> str:
    """The string form of a parsed key; `parse_session_key(format_session_key(k)) == k`."""
    kind = key.kind
    if kind is SessionKind.CRON:
        job = _encode(key.job_id or "", "job id")
        if key.agent_id is None:
            return f"cron:{job}"
        return f"agent:{_check_id(key.agent_id, 'agent id')}:cron:{job}"
    if kind is SessionKind.UNKNOWN:
        raise SessionError("cannot format a session key of kind 'unknown'", hint=_KEY_HINT)
    agent = _check_id(key.agent_id or "", "agent id")
    if kind is SessionKind.MAIN:
        return f"agent:{agent}:{MAIN_KEY}"
    if kind is SessionKind.SUBAGENT:
        return f"agent:{agent}:subagent:{_encode(key.run_id or '', 'sub-agent run id')}"
    if key.thread_id is not None and key.topic_id is not None:
        raise SessionError("a session key has a thread or a topic, not both", hint=_KEY_HINT)
    peer = _encode(key.peer_id or "", f"{kind.value} id")
    if kind is SessionKind.DM and key.channel is None:
        if key.account_id is not None:
            raise SessionError("a per-account DM key needs its channel", hint=_KEY_HINT)
        text = f"agent:{agent}:dm:{peer}"
    else:
        channel = _check_channel((key.channel or "").lower())
        if key.account_id is not None:
            if kind is not SessionKind.DM:
                raise SessionError("only DM keys carry an account id", hint=_KEY_HINT)
            text = f"agent:{agent}:{channel}:{_encode(key.account_id, 'account id')}:dm:{peer}"
        else:
            text = f"agent:{agent}:{channel}:{kind.value}:{peer}"
    if key.thread_id is not None:
        text += f":thread:{_encode(key.thread_id, 'thread id')}"
    if key.topic_id is not None:
        text += f":topic:{_encode(key.topic_id, 'topic id')}"
    return text


def _check_channel(value: str) -> str:
    _check_id(value, "channel")
    if value in _RESERVED_CHANNELS:
        raise SessionError(f"{value!r} cannot be a channel name in a session key",
                           hint=f"these words have a fixed place in keys: {', '.join(sorted(_RESERVED_CHANNELS))}")
    return value


def main_session_key(agent_id: str = DEFAULT_AGENT_ID) -> str:
    return format_session_key(SessionKey(SessionKind.MAIN, agent_id=agent_id))


def dm_session_key(agent_id: str, channel: str | None, peer_id: str, thread_id: str | None = None, *,
                   account_id: str | None = None, topic_id: str | None = None) -> str:
    """A non-main direct chat (MEMORY.md is never injected into it); `channel=None` for dm_scope per-peer."""
    return format_session_key(
        SessionKey(SessionKind.DM, agent_id=agent_id, channel=channel, peer_id=peer_id, thread_id=thread_id,
                   account_id=account_id, topic_id=topic_id)
    )


def group_session_key(agent_id: str, channel: str, group_id: str, thread_id: str | None = None, *,
                      topic_id: str | None = None) -> str:
    return format_session_key(
        SessionKey(
            SessionKind.GROUP, agent_id=agent_id, channel=channel, peer_id=group_id, thread_id=thread_id,
            topic_id=topic_id,
        )
    )


def channel_session_key(agent_id: str, channel: str, channel_id: str, thread_id: str | None = None) -> str:
    return format_session_key(
        SessionKey(
            SessionKind.CHANNEL, agent_id=agent_id, channel=channel, peer_id=channel_id, thread_id=thread_id
        )
    )


def subagent_session_key(agent_id: str, run_id: str) -> str:
    return format_session_key(SessionKey(SessionKind.SUBAGENT, agent_id=agent_id, run_id=run_id))


def cron_session_key(job_id: str, agent_id: str | None = None) -> str:
    """`cron:<jobId>` (SPEC §7); with an agent id, `agent:<agentId>:cron:<jobId>`."""
    return format_session_key(SessionKey(SessionKind.CRON, agent_id=agent_id, job_id=job_id))


def _bad(key: str, why: str) -> SessionError:
    return SessionError(f"invalid session key {key!r}: {why}", hint=_KEY_HINT)


def _decoded(key: str, value: str, what: str) -> str:
    if not value:
        raise _bad(key, f"empty {what}")
    return unquote(value)


def parse_session_key(key: str) -> SessionKey:  # noqa: C901 - one branch per key grammar form (SPEC §15), read top to bottom
    """Parse a key string; raises SessionError naming what is wrong with it."""
    parts = key.split(":")
    if parts[0] == "cron":
        if len(parts) != 2:
            raise _bad(key, "expected cron:<jobId>")
        return SessionKey(SessionKind.CRON, job_id=_decoded(key, parts[1], "job id"))
    if parts[0] != "agent" or len(parts) < 3:
        raise _bad(key, "expected it to start with 'agent:<agentId>:' or 'cron:'")
    agent = parts[1]
    if not _ID_RE.fullmatch(agent):
        raise _bad(key, f"invalid agent id {agent!r}")
    rest = parts[2:]
    if len(rest) == 1:
        if rest[0] != MAIN_KEY:
            raise _bad(key, f"unknown session {rest[0]!r} (only {MAIN_KEY!r} has no channel)")
        return SessionKey(SessionKind.MAIN, agent_id=agent)
    if len(rest) == 2 and rest[0] == "subagent":
        return SessionKey(SessionKind.SUBAGENT, agent_id=agent, run_id=_decoded(key, rest[1], "run id"))
    if len(rest) == 2 and rest[0] == "cron":
        return SessionKey(SessionKind.CRON, agent_id=agent, job_id=_decoded(key, rest[1], "job id"))
    # Take an optional :thread:<id> / :topic:<id> suffix off, then the length says the shape.
    thread: str | None = None
    topic: str | None = None
    if len(rest) >= 4 and rest[-2] in _SUFFIXES:
        value = _decoded(key, rest[-1], f"{rest[-2]} id")
        if rest[-2] == "thread":
            thread = value
        else:
            topic = value
        rest = rest[:-2]
    elif len(rest) >= 4 and rest[-2] not in ("dm", "group", "channel"):
        raise _bad(key, f"expected ':thread:<id>' or ':topic:<id>' at the end, got {rest[-2]!r}")
    if len(rest) == 2 and rest[0] == "dm":
        return SessionKey(SessionKind.DM, agent_id=agent, peer_id=_decoded(key, rest[1], "dm id"),
                          thread_id=thread, topic_id=topic)
    if len(rest) == 2:
        raise _bad(key, f"unknown session type {rest[0]!r}")
    account: str | None = None
    if len(rest) == 4:
        if rest[2] != "dm":
            raise _bad(key, f"expected <channel>:<account>:dm:<peer>, got {rest[2]!r} where 'dm' belongs")
        account = _decoded(key, rest[1], "account id")
        rest = [rest[0], rest[2], rest[3]]
    if len(rest) != 3:
        raise _bad(key, "wrong number of ':'-separated parts")
    channel, kind_text, peer = rest[0], rest[1], rest[2]
    if not _ID_RE.fullmatch(channel) or channel in _RESERVED_CHANNELS:
        raise _bad(key, f"invalid channel {channel!r}")
    try:
        kind = SessionKind(kind_text)
    except ValueError:
        kind = SessionKind.UNKNOWN
    if kind not in _PEER_KINDS:
        raise _bad(key, f"unknown chat kind {kind_text!r} (expected dm, group or channel)")
    return SessionKey(
        kind,
        agent_id=agent,
        channel=channel,
        peer_id=_decoded(key, peer, f"{kind_text} id"),
        thread_id=thread,
        account_id=account,
        topic_id=topic,
    )


def classify_session_key(key: str) -> SessionKind:
    """The kind of a key; SessionKind.UNKNOWN (never an exception) for keys that do not parse."""
    try:
        return parse_session_key(key).kind
    except SessionError:
        return SessionKind.UNKNOWN


def is_main_session_key(key: str) -> bool:
    """True only for `agent:<id>:main`: the one session MEMORY.md may be injected into. Fails closed."""
    return classify_session_key(key) is SessionKind.MAIN


def chat_type_of(key: str) -> ChatType | None:
    """dm / group / thread for reset policies; None for cron, sub-agent and unparseable keys."""
    try:
        return parse_session_key(key).chat_type
    except SessionError:
        return None


def agent_id_of(key: str) -> str | None:
    """The agent a key names, or None (bare `cron:<jobId>` keys and unparseable keys)."""
    try:
        return parse_session_key(key).agent_id
    except SessionError:
        return None
