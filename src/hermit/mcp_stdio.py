"""`hermit mcp serve`'s stdio transport: every line from the client is checked before the SDK sees it, so every
request gets an answer.

The SDK's own stdin reader hands a line it cannot validate to the session as an exception, which only logs
it: a request carrying a lone surrogate (`"\\ud800"`, which its JSON parser refuses) was never answered,
and a line that is not JSON got no JSON-RPC error. Here each line is parsed through `hermit.wire` (depth
cap, text made valid Unicode): bad JSON is answered with -32700 (id null), JSON that is not a JSON-RPC
message with -32600 (with its id when it has one), and a good message goes on to the SDK re-encoded,
surrogates replaced. Answers go out through the SDK's own writer, so stdout has one writer and stays
whole; the SDK's `stdio_server` still points fd 1 at stderr while serving (a stray print cannot corrupt
the protocol).
"""

from __future__ import annotations

import io
import json
import logging
import os
from typing import Any

from hermit.wire import WireError, load_json

log = logging.getLogger(__name__)

MAX_LINE_CHARS = 4 * 1024 * 1024  # far over any tool call (queries are capped at 2,000 characters)
PARSE_ERROR = -32700  # JSON-RPC 2.0's codes (also in mcp_types; here so the check needs no SDK)
INVALID_REQUEST = -32600


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def check_line(line: str) -> tuple[str | None, dict[str, Any] | None]:
    """One line from the client → (the line to hand the SDK, or None) and (an error response, or None).
    A blank line gets neither."""
    if not line.strip():
        return None, None
    if len(line) > MAX_LINE_CHARS:
        return None, _error(None, PARSE_ERROR, f"Parse error: a message of {len(line):,} characters is over "
                                               f"the {MAX_LINE_CHARS:,} limit")
    try:
        value = load_json(line)
    except WireError as e:
        return None, _error(None, PARSE_ERROR, f"Parse error: {e.reason}")
    from mcp_types import jsonrpc_message_adapter
    from pydantic import ValidationError

    try:
        jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError as e:
        rid = value.get("id") if isinstance(value, dict) else None
        rid = rid if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)) else None
        first = e.errors()[0] if e.errors() else {"msg": "not a JSON-RPC 2.0 message"}
        return None, _error(rid, INVALID_REQUEST, f"Invalid Request: not a JSON-RPC 2.0 message ({first['msg']})")
    return json.dumps(value, ensure_ascii=False), None


class _CheckedLines:
    """The client's stdin as the SDK's reader iterates it (text lines), each line checked first; errors go to
    `reply`, set once the SDK's write stream exists (before the reader task first runs)."""

    def __init__(self, source: Any) -> None:
        self._source = source
        self.reply: Any = None

    def __aiter__(self) -> _CheckedLines:
        return self

    async def __anext__(self) -> str:
        from mcp.shared.message import SessionMessage
        from mcp_types import jsonrpc_message_adapter

        while True:
            line = await self._source.readline()
            if line == "":
                raise StopAsyncIteration
            good, error = check_line(line)
            if good is not None:
                return good
            if error is not None:
                log.warning("mcp: answered a bad message: %s", error["error"]["message"][:200])
                assert self.reply is not None
                await self.reply.send(SessionMessage(jsonrpc_message_adapter.validate_python(error)))


async def run_stdio(server: Any) -> None:
    """Serve an MCPServer on stdin/stdout until the client closes stdin (the SDK's `run_stdio_async`, with
    the client's lines checked)."""
    import anyio
    from mcp.server.stdio import stdio_server

    # A private descriptor for the client's stream, read as UTF-8 (a byte that is not becomes U+FFFD);
    # fd 0 itself then points at /dev/null, so nothing else in the process can steal protocol bytes.
    fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    source = anyio.wrap_file(io.TextIOWrapper(io.FileIO(fd, "rb", closefd=True), encoding="utf-8",
                                              errors="replace"))
    lines = _CheckedLines(source)
    try:
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            lines.reply = write_stream
            low = server._lowlevel_server  # what MCPServer.run_stdio_async serves; it has no public name
            await low.run(read_stream, write_stream, low.create_initialization_options())
    finally:
        await source.aclose()
