"""A fake model provider HTTP server on 127.0.0.1 speaking the Anthropic and OpenAI wire formats.

It replays a script of replies so the real adapters (and anything built on them) can be tested end to
end over real HTTP, streaming included, with faults on demand. Every request is recorded (path,
headers with secrets redacted, JSON body) in memory and optionally to a JSONL file.

Endpoints: `POST /v1/messages` (Anthropic Messages; base_url `http://127.0.0.1:PORT`),
`POST /v1/chat/completions` (OpenAI Chat Completions; base_url `http://127.0.0.1:PORT/v1`),
`GET /health`. `"stream": true` in the body gets server-sent events in that API's format, with text
split into small deltas and tool-call arguments split into JSON fragments (Anthropic
`input_json_delta`, OpenAI `tool_calls[].function.arguments`).

Script format — a JSON list of steps (or `{"steps": [...]}`, or JSONL with one step per line); each
request is answered by the first remaining step that accepts it, which is then used up:

    "Hello"                                    a bare string is a text reply
    {"text": "Hello"}                          text reply
    {"tool_calls": [{"name": "memory_search", "arguments": {"query": "db"}, "id": "optional"}],
     "text": "optional text before the calls"}
    {"error": 429, "retry_after": 0}           HTTP error (any 400-599) in the API's error format,
                                               with a Retry-After header when retry_after is given
    {"error": 401}   {"error": 500}   {"error": 529, "message": "Overloaded"}
    {"error": "context_overflow"}              400 "prompt is too long" / context_length_exceeded
    {"error": 400, "message": "bad: {request}"}  an error quoting the request body ({request}) or the
                                               last 4 characters of the key it was sent ({key4})
    {"garbage": true}                          200 with a body (or event stream) that is not JSON

Optional keys on any step:

    "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 0, "cache_write_tokens": 0}
                 (default: estimated from the request and the reply)
    "stop_reason": "end_turn" | "tool_use" | "max_tokens"   (default: tool_use if tool calls, else end_turn)
    "match": {"api": "anthropic" | "openai", "contains": "substring of the raw request body",
              "model": "model id"}   only requests matching every field get this step
    "repeat": true                   the step is never used up (e.g. always answer summary requests)
    "delay": 0.5                     seconds to wait before answering (timeout tests)
    "keepalive": 0.2                 before answering, send a keep-alive every 0.2 s: an SSE comment
                                     (`: keep-alive`) on a stream, a space before a JSON body — an idle
                                     timeout never fires, only a deadline ends the call
    "keepalive_for": 3               ...for 3 s, then answer (default: until the client goes away)

When no step accepts a request the server answers 400 "fake provider: script exhausted". With
`api_key` set, requests with another key get 401 without using a step. Requests that break the
API's rules (Anthropic: roles must alternate, start with user, every tool_use answered by a
tool_result in the next message, no empty text blocks, max_tokens present; OpenAI: every tool call
answered by a tool message) get a 400 naming the rule, as the real APIs would.

In tests:

    with FakeProvider([{"text": "hi"}]) as fake:
        model = AnthropicModel(profile, "key", base_url=fake.base_url)
        ...
        fake.requests[0].body["system"]

From a shell: `python -m hermit.testing.fake_provider --port 8765 --script steps.json --record req.jsonl`
(prints `fake provider listening on http://127.0.0.1:PORT`; stops on SIGTERM or Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from hermit.testing.fake_wire import (
    anthropic_error,
    anthropic_reply,
    anthropic_stream,
    openai_error,
    openai_reply,
    openai_stream,
    validate_anthropic,
    validate_openai,
)
from hermit.testing.script import Step, load_script, parse_steps

_SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "cookie", "proxy-authorization", "x-goog-api-key"}


@dataclass(frozen=True)
class RecordedRequest:
    index: int
    api: str  # "anthropic", "openai" or "" (unknown path)
    path: str
    headers: dict[str, str]
    body: Any
    step: int | None  # index of the step in the original script that answered, if any

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "api": self.api,
            "path": self.path,
            "headers": self.headers,
            "body": self.body,
            "step": self.step,
        }


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for k, v in headers.items():
        key = k.lower()
        if key in _SECRET_HEADERS:
            scheme, _, rest = v.partition(" ")
            v = f"{scheme} <redacted>" if rest and key.endswith("authorization") else "<redacted>"
        out[key] = v
    return out


class FakeProvider:
    """The server; a context manager that starts it on a free port (or `port`) in a daemon thread."""

    def __init__(
        self,
        script: Iterable[Mapping[str, Any] | str | Step] | Path = (),
        *,
        record: Path | None = None,
        api_key: str | None = None,
        port: int = 0,
    ) -> None:
        steps = load_script(script) if isinstance(script, Path) else parse_steps(script)
        self._steps: list[tuple[int, Step]] = list(enumerate(steps))
        self._next_index = len(steps)
        self.record_path = record
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._server.daemon_threads = True
        self._server.fake = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None
        self._gate = threading.Event()
        self._gate.set()
        self.waiting = threading.Event()  # set when a request reached the closed gate (see `hold`)

    def hold(self) -> None:
        """Hold every answer until `release()`: a test can run something while a call is in flight, waiting on
        `waiting` (set once a request is held) instead of on a clock."""
        self.waiting.clear()
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """Base URL for Anthropic (the adapter adds /v1/messages)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Base URL for OpenAI-compatible clients (they add /chat/completions)."""
        return f"{self.base_url}/v1"

    @property
    def remaining(self) -> int:
        with self._lock:
            return sum(1 for _, s in self._steps if not s.repeat)

    def add(self, *steps: Mapping[str, Any] | str | Step) -> None:
        parsed = parse_steps(steps)
        with self._lock:
            for s in parsed:
                self._steps.append((self._next_index, s))
                self._next_index += 1

    def start(self) -> FakeProvider:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.02,), name="fake-provider", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _take_step(self, api: str, raw: str, model: str) -> tuple[int, Step] | None:
        with self._lock:
            for pos, (index, step) in enumerate(self._steps):
                if step.match is None or step.match.accepts(api, raw, model):
                    if not step.repeat:
                        del self._steps[pos]
                    return index, step
        return None

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)
            if self.record_path is not None:
                with self.record_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(req.to_dict(), ensure_ascii=False) + "\n")
                    f.flush()


class _Handler(BaseHTTPRequestHandler):
    server_version = "HermitFakeProvider/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # tests read recorded requests, not access logs

    @property
    def fake(self) -> FakeProvider:
        return self.server.fake  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/health":
            self._send(200, b"ok", "text/plain")
        else:
            self._send_json(404, {"error": {"message": f"no route GET {self.path}"}})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        api = {
            "/v1/messages": "anthropic",
            "/v1/chat/completions": "openai",
            "/chat/completions": "openai",
        }.get(path, "")
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace")
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        fake = self.fake
        headers = redact_headers(dict(self.headers.items()))
        index = len(fake.requests)
        if not api:
            fake._record(RecordedRequest(index, api, path, headers, body, None))
            self._send_json(404, {"error": {"message": f"no route POST {path}"}})
            return
        error = _error_for(api)
        if fake.api_key is not None and not self._key_ok(api, fake.api_key):
            fake._record(RecordedRequest(index, api, path, headers, body, None))
            self._send_json(401, error(401, "invalid api key"))
            return
        problem = (validate_anthropic if api == "anthropic" else validate_openai)(body, dict(headers))
        if problem:
            fake._record(RecordedRequest(index, api, path, headers, body, None))
            self._send_json(400, error(400, f"fake provider: {problem}"))
            return
        model = str(body.get("model", ""))
        taken = fake._take_step(api, raw, model)
        fake._record(RecordedRequest(index, api, path, headers, body, taken[0] if taken else None))
        if taken is None:
            msg = f"fake provider: script exhausted (request #{index}, {len(fake.requests)} requests so far)"
            self._send_json(400, error(400, msg))
            return
        step = taken[1]
        if not fake._gate.is_set():
            fake.waiting.set()
            fake._gate.wait(120)
        if step.delay:
            time.sleep(step.delay)
        if step.keepalive and step.is_reply:
            self._keepalive(api, body, raw, step, index)
            return
        self._answer(api, body, raw, step, index)

    def _keepalive(self, api: str, body: dict[str, Any], raw: str, step: Step, index: int) -> None:
        """Headers at once, then keep-alives until `keepalive_for` has passed, then the reply."""
        stream = bool(body.get("stream"))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream" if stream else "application/json")
        self.send_header("connection", "close")
        self.end_headers()
        assert step.keepalive is not None
        ends = time.monotonic() + (step.keepalive_for if step.keepalive_for is not None else 600.0)
        try:
            while time.monotonic() < ends:
                self.wfile.write(b": keep-alive\n\n" if stream else b" ")
                self.wfile.flush()
                time.sleep(step.keepalive)
            if stream:
                for chunk in (anthropic_stream if api == "anthropic" else openai_stream)(body, raw, step, index):
                    self.wfile.write(chunk)
            else:
                reply = (anthropic_reply if api == "anthropic" else openai_reply)(body, raw, step, index)
                self.wfile.write(json.dumps(reply).encode())
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its deadline, or a cancel): what the step is for
        self.close_connection = True

    def _answer(self, api: str, body: dict[str, Any], raw: str, step: Step, index: int) -> None:
        stream = bool(body.get("stream"))
        if step.error is not None:
            extra = {"retry-after": f"{step.retry_after:g}"} if step.retry_after is not None else {}
            message = self._echoing(api, step.message or "", raw)
            if step.error == "context_overflow":
                self._send_json(400, _error_for(api)(-1, message), extra)
            else:
                assert isinstance(step.error, int)
                self._send_json(step.error, _error_for(api)(step.error, message), extra)
            return
        if step.garbage:
            if stream:
                self._send(200, b"data: {this is not json\n\n", "text/event-stream")
            else:
                self._send(200, b"<html><body>502 Bad Gateway (not JSON)</body></html>", "application/json")
            return
        if not stream:
            reply = (anthropic_reply if api == "anthropic" else openai_reply)(body, raw, step, index)
            self._send_json(200, reply)
            return
        events = (anthropic_stream if api == "anthropic" else openai_stream)(body, raw, step, index)
        self._send_stream(events)

    def _echoing(self, api: str, message: str, raw: str) -> str:
        """An error message quoting the request as real providers do: `{request}` becomes the request body (a 400's
        "Invalid 'messages[3].content': '…'"), `{key4}` the last 4 characters of the key it was sent (a 401's
        "Incorrect API key provided: sk-…abcd")."""
        if "{key4}" in message:
            sent = self.headers.get("x-api-key") if api == "anthropic" else \
                (self.headers.get("authorization") or "").removeprefix("Bearer ")
            message = message.replace("{key4}", (sent or "")[-4:])
        return message.replace("{request}", raw)

    def _key_ok(self, api: str, key: str) -> bool:
        if api == "anthropic":
            return self.headers.get("x-api-key") == key
        return self.headers.get("authorization") == f"Bearer {key}"

    def _send(self, status: int, data: bytes, ctype: str, extra: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up waiting
            self.wfile.write(data)

    def _send_json(self, status: int, obj: Any, extra: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json", extra)

    def _send_stream(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        try:
            for chunk in events:
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away mid-stream; nothing to clean up
        self.close_connection = True


def _error_for(api: str) -> Any:
    return anthropic_error if api == "anthropic" else openai_error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermit.testing.fake_provider",
        description="Fake Anthropic/OpenAI provider on 127.0.0.1 replaying a script of replies.",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--script", type=Path, required=True, help="JSON or JSONL file of steps")
    parser.add_argument("--record", type=Path, help="append every request received to this JSONL file")
    parser.add_argument("--api-key", help="answer 401 to requests carrying another key")
    args = parser.parse_args(argv)
    try:
        fake = FakeProvider(args.script, record=args.record, api_key=args.api_key, port=args.port)
    except (OSError, ValueError) as e:
        print(f"fake provider: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with fake:
        print(f"fake provider listening on {fake.base_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
