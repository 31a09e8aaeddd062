"""What every fake chat platform shares: an aiohttp server on 127.0.0.1, a record of calls, injected faults.

Faults are queued per route name (`fail("sendMessage", "429")`) and consumed one per request: "429"
(with a retry-after of `retry_after` seconds), "500", or "drop" (the connection is closed without an
answer, as a crashed proxy would). A faulted request is recorded as faulted and not acted upon, so a
client that retries delivers the message exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Literal

Fault = Literal["429", "500", "drop"]


@dataclass
class Call:
    route: str
    payload: Any
    faulted: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


class FakePlatform:
    """Subclasses add routes in `routes(app)` and call `await self.fault_or_none(route, request)` first."""

    def __init__(self, *, retry_after: float = 0.0) -> None:
        self.calls: list[Call] = []
        self.retry_after = retry_after
        self._faults: dict[str, deque[Fault]] = defaultdict(deque)
        self._runner: Any | None = None
        self.port = 0
        self.changed = asyncio.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, route: str, *faults: Fault) -> None:
        self._faults[route].extend(faults)

    def routes(self, app: Any) -> None:
        raise NotImplementedError

    def rate_limited(self, request: Any) -> Any:
        """The platform's own 429 shape; the default carries Retry-After."""
        from aiohttp import web

        return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                 headers={"Retry-After": str(self.retry_after)})

    async def fault_or_none(self, route: str, request: Any, payload: Any = None) -> Any | None:
        from aiohttp import web

        q = self._faults.get(route)
        if not q:
            return None
        fault = q.popleft()
        self.record(route, payload, faulted=fault)
        if fault == "429":
            return self.rate_limited(request)
        if fault == "500":
            return web.json_response({"ok": False, "error": "internal"}, status=500)
        if request.transport is not None:  # "drop": no answer at all
            request.transport.abort()
        raise asyncio.CancelledError  # aiohttp then closes the handler without writing a response

    def record(self, route: str, payload: Any, *, faulted: str | None = None,
               headers: dict[str, str] | None = None) -> Call:
        c = Call(route, payload, faulted, dict(headers or {}))
        self.calls.append(c)
        self.changed.set()
        return c

    def done(self, route: str) -> list[Any]:
        """Payloads of the calls to `route` that were acted upon (not faulted)."""
        return [c.payload for c in self.calls if c.route == route and c.faulted is None]

    async def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        """Until `predicate()` holds (checked after every recorded call, and every 50 ms)."""
        async def loop() -> None:
            while not predicate():
                self.changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), 0.05)
        await asyncio.wait_for(loop(), timeout)

    async def start(self, port: int = 0) -> FakePlatform:
        from aiohttp import web

        app = web.Application(client_max_size=32 * 1024 * 1024)
        self.routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def json_body(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        return {}


async def serve_forever(fake: FakePlatform, port: int) -> None:
    """`python -m hermit.testing.fake_<platform> --port N`: run a fake by hand until Ctrl-C."""
    await fake.start(port)
    print(f"{type(fake).__name__} on {fake.base_url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await fake.stop()
