"""A chat account the gateway could not build because its secret is missing (its variable unset): it stands in the
account's place, so the gateway starts without it instead of refusing to start at all (web app and every other
channel down with it).

It fails closed for that account alone: it never connects, receives nothing, and a reply or a scheduled delivery
to it raises ChannelError. Its status (`hermit gateway status`, `hermit channels status`, GET /status, the doctor's
"not connected") names the account, the missing variable and the command that stores it; the gateway's log says it
once at start. Storing the secret takes a restart of the gateway, as any channel token does (gateway/live_config.py).
"""

from __future__ import annotations

import logging

from hermit.channels.base import ChannelCapabilities, ChannelDeps, ChannelStatus, InboundSink, Outbound
from hermit.channels.credentials import MissingSecret
from hermit.channels.platforms import secrets
from hermit.channels.status import StatusTracker
from hermit.config.channels import ChannelAccessConfig
from hermit.errors import ChannelError

log = logging.getLogger("hermit.gateway")


def fix_command(name: str, account_id: str, cfg: ChannelAccessConfig, field: str) -> str:
    """`hermit setup` storing this account's `field` in hermit.env (the value on stdin), as the doctor says it."""
    first = next((s.field for s in secrets(name, cfg)), field)
    flag = "--token-stdin" if field == first else f"--secret-stdin {field}"
    return f"hermit setup --channel {name} --account {account_id} {flag}"


class UnstartedChannel:
    """The stand-in for `name`/`account_id`, whose secret `missing` is not set."""

    def __init__(self, deps: ChannelDeps, name: str, account_id: str, cfg: ChannelAccessConfig,
                 missing: MissingSecret) -> None:
        self.name = name
        self.account_id = account_id
        self.capabilities = ChannelCapabilities()
        var = missing.env_name or f"{missing.where}.{missing.field}_env"
        self.message = (f"{name}/{account_id} not started: no {missing.field} (the environment variable {var} is "
                        f"not set, in hermit.env or the gateway's environment)")
        self.hint = (f"store it with `{fix_command(name, account_id, cfg, missing.field)}` (the value on stdin), or "
                     f"add {var}=… to {deps.state_dir / 'hermit.env'}; then {deps.restart}")
        self._status = StatusTracker(name, account_id, deps.state_dir, deps.clock)

    async def start(self, sink: InboundSink) -> None:
        log.warning("%s; the gateway runs without this account (nobody reaches anything through it) — %s",
                    self.message, self.hint)
        self._status.error(self.message, self.hint)

    async def send(self, item: Outbound) -> None:
        raise ChannelError(self.message, self.hint)

    async def stop(self) -> None:
        return None

    def status(self) -> ChannelStatus:
        return self._status.status
