"""Bindings: which agent answers a message from (channel, account, peer or group); most specific wins.

A binding names an agent and any of channel / account / peer / group; it matches a message when
every field it sets is equal. Among matching bindings the one setting the most fields wins (a
binding for one Slack channel beats one for all of Slack); ties go to the first in the config. No
match: the default agent. Bindings naming an unknown agent are rejected when the router is built,
so a typo fails at startup instead of silently routing to the default.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hermit.config.load import LoadedConfig
from hermit.config.schema import BindingConfig
from hermit.errors import ConfigError


@dataclass(frozen=True)
class Inbound:
    """Where a message came from, as far as routing cares."""

    channel: str
    account: str | None = None
    peer: str | None = None
    group: str | None = None


def _specificity(b: BindingConfig) -> int:
    return sum(v is not None for v in (b.channel, b.account, b.peer, b.group))


def _matches(b: BindingConfig, msg: Inbound) -> bool:
    return all(
        want is None or want == got
        for want, got in ((b.channel, msg.channel.lower()), (b.account, msg.account), (b.peer, msg.peer),
                          (b.group, msg.group))
    )


class Router:
    def __init__(self, bindings: Sequence[BindingConfig], agent_ids: Iterable[str], default_agent: str) -> None:
        ids = list(agent_ids)
        for i, b in enumerate(bindings):
            if b.agent not in ids:
                close = difflib.get_close_matches(b.agent, ids, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise ConfigError(f"bindings[{i}] routes to unknown agent {b.agent!r} (agents: {', '.join(ids)})",
                                  f"{hint}add the agent under agents.list or fix the binding")
        self.bindings = tuple(bindings)
        self.default_agent = default_agent

    @classmethod
    def from_config(cls, loaded: LoadedConfig) -> Router:
        return cls(loaded.config.bindings, [a.id for a in loaded.agents], loaded.agent().id)

    def route(self, msg: Inbound) -> str:
        best: BindingConfig | None = None
        for b in self.bindings:
            if _matches(b, msg) and (best is None or _specificity(b) > _specificity(best)):
                best = b
        return best.agent if best is not None else self.default_agent
