"""Helpers shared by the device sign-in and ticket tests: a gateway subprocess with a fake model, and a program
squatting the gateway's port once it stopped (serving the web app's own files, answering /ws as it likes)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from gatewayhelpers import GatewayProcess, write_config
from hermit.gateway.app import STATIC_DIR
from hermit.testing import FakeProvider

if TYPE_CHECKING:
    from websockets.sync.server import ServerConnection

TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


@contextmanager
def running_gateway(home: Path, *, extra: str = "", replies: int = 1) -> Iterator[tuple[GatewayProcess, FakeProvider]]:
    """`hermit gateway run` at `home` (config written with `extra` gateway lines), its model a FakeProvider that
    answers "hi" `replies` times; ready when entered, stopped on leaving."""
    with FakeProvider(["hi"] * replies) as fake:
        write_config(home, fake.openai_base_url, extra=extra)
        gateway = GatewayProcess(home)
        gateway.wait_ready()
        try:
            yield gateway, fake
        finally:
            gateway.stop()


@contextmanager
def port_squatter(port: int, handler: Callable[[ServerConnection], None]) -> Iterator[None]:
    """A program on `port` while the gateway is down: it serves the web app's own files (as the gateway did until
    it stopped) and answers each WebSocket on /ws with `handler`."""
    from websockets.datastructures import Headers
    from websockets.http11 import Request, Response
    from websockets.sync.server import serve

    def page(_: ServerConnection, request: Request) -> Response | None:
        if request.path == "/ws":
            return None
        path = request.path.split("?")[0]
        file = STATIC_DIR / ("index.html" if path == "/" else path.removeprefix("/static/"))
        if not file.is_file():
            return Response(404, "Not Found", Headers({"Content-Length": "0"}))
        body = file.read_bytes()
        return Response(200, "OK", Headers({"Content-Type": TYPES.get(file.suffix, "application/octet-stream"),
                                            "Content-Length": str(len(body))}), body)

    with serve(handler, "127.0.0.1", port, process_request=page) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield
        finally:
            server.shutdown()
            thread.join(10)
