"""A chat account's webhook answers only while hermit.yaml, as it is now, has the account turned on.

The webhook routes (WhatsApp, Slack's HTTP Events API) are mounted once, at start, for the accounts enabled then.
An account removed from hermit.yaml or set `enabled: false` while the gateway ran kept its route until a restart:
its senders were refused by access control, but only after the adapter had handled the event — a WhatsApp
message's media was fetched from Meta with the account's token (up to the size cap, then thrown away) for
anyone still writing to the number. Each handler is now gated on the config in force: an account that is gone or
off is answered 404 (what a restarted gateway, which mounts no route for it, answers) before its adapter sees the
request — nothing parsed, nothing fetched; while hermit.yaml is invalid, 503 (the platform redelivers later, when
the file may be fixed). Turned on again under the same settings, the route answers again at once; an account
added or re-pointed still needs a restart, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from hermit.channels.base import Channel
from hermit.channels.webhook import (
    REFUSALS,
    Handler,
    WebhookRequest,
    WebhookResponse,
    WebhookRoute,
    http_routes,
)
from hermit.config.load import LoadedConfig
from hermit.errors import ConfigError

log = logging.getLogger("hermit.gateway")


def gated_routes(ch: Channel, current: Callable[[], LoadedConfig]) -> Sequence[Any] | None:
    """`ch`'s webhook routes, each answering only while `current()` has its account on; None when `ch` has no
    WebhookRoute list to gate (its own http_routes are mounted as they are)."""
    routes = getattr(ch, "webhook_routes", None)
    if not callable(routes):
        return None
    return http_routes([WebhookRoute(r.path, r.methods, gate(ch.name, ch.account_id, r.handler, current))
                        for r in routes()])


def gate(channel: str, account: str, handler: Handler, current: Callable[[], LoadedConfig]) -> Handler:
    async def gated(req: WebhookRequest) -> WebhookResponse:
        try:
            cfg = current().config.channels.accounts_of(channel).get(account)
        except ConfigError:
            REFUSALS.warning(f"{channel} {account} webhooks while hermit.yaml is invalid",
                             "%s %s: webhook answered 503: hermit.yaml is invalid", channel, account)
            return WebhookResponse(503, b"retry later")
        if cfg is None or not cfg.enabled:
            REFUSALS.warning(f"{channel} {account} webhooks of an account removed or off",
                             "%s %s: webhook answered 404: the account is %s in hermit.yaml (nothing fetched)",
                             channel, account, "not" if cfg is None else "turned off")
            return WebhookResponse(404, b"no such account")
        return await handler(req)

    return gated
