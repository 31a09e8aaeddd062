"""A chat platform's API on this machine must be run by you, root or a system account (hermit.loopback).

Telegram's `api_base` and Slack's and WhatsApp's `base_url` may point at this machine: a Telegram Bot API
server of your own, a relay, a test double. While that server is down any local user can listen on its
port, and would get the token on every call (in Telegram's URL, in Slack's and WhatsApp's Authorization
header), answer with messages "from" an owner id that drive the owner's main session, and read every reply.

So every HTTP client a channel makes comes from `client()`: each new connection — to the configured base,
to a file or media URL the platform hands out, to a proxy — is checked right after the TCP handshake, and
one whose other end another login user holds is closed before a byte of the request is sent. Slack's Socket
Mode websocket is checked the same way before its opening handshake (`websocket_class`).

The refusal is a ChannelError naming the port, the uid and the fix. It is not a transport error, so
retry.request does not repeat it at once: a receive loop shows it in `hermit channels status` and tries
again later, as after any network failure, and a send fails with it as with an unreachable platform.
Discord has no such setting: discord.py talks to discord.com only.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hermit.errors import ChannelError
from hermit.loopback import Holder, async_trace, foreign_holder, port_holder

if TYPE_CHECKING:  # the channels import it themselves; `hermit doctor` checks the settings without it
    import httpx

Refuse = Callable[[Holder], ChannelError]

# The setting that points each platform's HTTP client somewhere (Discord has none).
BASE_SETTINGS = ("api_base", "base_url")

STAKES = ("it would get the bot token, could write to Hermit as any of your contacts (an owner too) and "
          "would read every reply")


def refusal(title: str, setting: str, server: str) -> Refuse:
    """The error for a connection another user's program holds: `title` names the platform, `server` what
    the owner meant to run there, `setting` the config key that points at it. The fix is in the message
    too, since `hermit channels status` shows the message only."""
    def refuse(holder: Holder) -> ChannelError:
        return ChannelError(
            f"{title}: {holder.describe(STAKES)}. Start {server} as yourself, as root or as a system account "
            f"(another user's program holds port {holder.port}: stop it, or ask an administrator to); the "
            "channel tries again by itself",
            f"or point {setting} at a server of yours")
    return refuse


def client(refuse: Refuse, **kwargs: Any) -> httpx.AsyncClient:
    """An httpx.AsyncClient whose every request carries the check (httpcore's "trace" extension), and goes direct
    when it is for this machine (hermit.direct_http)."""
    from hermit.direct_http import DirectHereAsyncClient

    trace = async_trace(refuse)

    async def attach(request: httpx.Request) -> None:
        request.extensions["trace"] = trace

    # A proxy from the environment carries nothing to this machine (hermit.direct_http): a Bot API server of one's own
    # got the token in every URL, in plain text, through HTTP_PROXY; each request is decided by its host, so a URL
    # the platform hands out (WhatsApp's media at 127.0.0.2) is too.
    return DirectHereAsyncClient(event_hooks={"request": [attach]}, **kwargs)


def websocket_class(refuse: Refuse) -> Any:
    """A `websockets` client connection class (connect's `create_connection`) that checks the socket before
    it sends the opening handshake; on a redirect the new connection is checked again."""
    from websockets.asyncio.client import ClientConnection

    class GuardedConnection(ClientConnection):
        async def handshake(self, *args: Any, **kwargs: Any) -> None:
            sock = self.transport.get_extra_info("socket")
            holder = foreign_holder(sock) if sock is not None else None
            if holder is not None:
                self.transport.abort()
                raise refuse(holder)
            await super().handshake(*args, **kwargs)

    return GuardedConnection


def base_setting(cfg: Any) -> tuple[str, str] | None:
    """(setting name, URL) of an account's platform API base, if its platform has one."""
    for name in BASE_SETTINGS:
        url = getattr(cfg, name, None)
        if isinstance(url, str) and url:
            return name, url
    return None


def url_holder(url: str, timeout: float = 2.0) -> Holder | None:
    """For `hermit doctor`: the holder of the port `url` names when it is on this machine (an address, or
    localhost) and run by a uid the channel would refuse; None otherwise. Other names are not resolved (the
    doctor calls no DNS for them; the channel's own check covers every connection)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        if host != "localhost" and not host.endswith(".localhost"):
            return None
    return port_holder(host, port, timeout)
