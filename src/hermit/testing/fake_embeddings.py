"""A fake embeddings HTTP server on 127.0.0.1 speaking the OpenAI and Gemini APIs, for tests and demos.

Vectors are deterministic: a hashed bag of words (CJK characters count as words), L2-normalised, so
texts sharing words score higher than texts that do not. Faults can be queued (429 with Retry-After,
500, 401, garbage, a dropped connection, a wrong vector count, a stall) and every request is recorded.

Requests can also be held until the test lets them through one by one (`hold`, `wait_held`, `release`):
a test that must act while a client is in the middle of its work (search during an index, kill an
indexer half-way) steps it request by request instead of racing a clock.

    with FakeEmbeddingServer(dims=64) as srv:
        cfg = MemorySearchConfig(provider="openai", remote={"base_url": srv.openai_base_url, ...})
        srv.fail(429, times=2, retry_after=0)
        ...
        assert len(srv.requests) == 3
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import numpy as np

FaultKind = Literal["status", "garbage", "drop", "short", "stall"]
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|[^\W_]+", re.UNICODE)
GEMINI_MAX_BATCH = 100
_OPENAI_PATH = re.compile(r"(/[\w.-]+)*/v1/embeddings")
_GEMINI_PATH = re.compile(r"(/[\w.-]+)*/v1(beta)?/models/[\w.-]+:batchEmbedContents")


def fake_vector(text: str, dims: int) -> list[float]:
    """The deterministic unit vector the fake server returns for `text`."""
    v = np.zeros(dims, dtype=np.float64)
    for word in _WORD.findall(text.lower()):
        h = hashlib.blake2b(word.encode(), digest_size=8).digest()
        v[int.from_bytes(h[:4], "little") % dims] += 1.0 if h[4] & 1 else -1.0
    norm = float(np.linalg.norm(v))
    if norm == 0.0:
        v[0], norm = 1.0, 1.0
    return [float(x) for x in v / norm]


@dataclass
class Fault:
    kind: FaultKind
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or None when the body was not JSON
    inputs: int  # texts in the request (0 when unparseable)
    answered: int  # the HTTP status sent (0 when the connection was dropped)


class FakeEmbeddingServer:
    """Serves POST …/v1/embeddings (OpenAI) and POST …/v1beta/models/M:batchEmbedContents (Gemini).

    `api_key`: when set, requests must carry it (`Authorization: Bearer` or `x-goog-api-key`), else 401.
    `dims` may be changed while running (to test a model whose size changes).
    """

    def __init__(self, dims: int = 64, api_key: str | None = None, host: str = "127.0.0.1") -> None:
        if not host.startswith("127.") and host != "localhost":
            raise ValueError("the fake embeddings server only listens on loopback")
        self.dims = dims
        self.api_key = api_key
        self._host = host
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        # Holding: requests whose texts match wait for a permit; `arrivals` counts every request held.
        self._gate = threading.Condition(self._lock)
        self._hold: Callable[[list[str]], bool] | None = None
        self._permits = 0
        self._waiting = 0
        self.arrivals = 0
        self.requests: list[RecordedRequest] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> FakeEmbeddingServer:
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer((self._host, 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-embeddings", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeEmbeddingServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """http://127.0.0.1:PORT (no path); the API roots are `openai_base_url` and `gemini_base_url`."""
        if self._httpd is None:
            raise RuntimeError("the fake embeddings server is not running")
        host, port = self._httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def gemini_base_url(self) -> str:
        return f"{self.base_url}/v1beta"

    # -- faults -----------------------------------------------------------------------------------------

    def _queue(self, fault: Fault, times: int) -> None:
        with self._lock:
            self._faults.extend(fault for _ in range(times))

    def fail(self, status: int, times: int = 1, retry_after: float | str | None = None,
             message: str = "injected failure") -> None:
        """The next `times` requests get HTTP `status` with an API-style error body."""
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        body = json.dumps({"error": {"message": message, "code": status}}).encode()
        self._queue(Fault("status", status=status, body=body, headers=headers), times)

    def garbage(self, times: int = 1, body: bytes = b"<html>502 Bad Gateway</html>", status: int = 200) -> None:
        """The next `times` requests get `body` (not the API's JSON) with `status`."""
        self._queue(Fault("garbage", status=status, body=body), times)

    def drop(self, times: int = 1) -> None:
        """The next `times` requests see the connection closed without an answer."""
        self._queue(Fault("drop"), times)

    def short(self, times: int = 1) -> None:
        """The next `times` requests get one vector fewer than they asked for."""
        self._queue(Fault("short"), times)

    def stall(self, seconds: float, times: int = 1) -> None:
        """The next `times` requests are answered normally after `seconds` (to trip client timeouts)."""
        self._queue(Fault("stall", seconds=min(seconds, 30.0)), times)

    # -- holding requests ---------------------------------------------------------------------------------

    def hold(self, match: Callable[[list[str]], bool] | None = None) -> None:
        """From now on, requests whose texts `match` (all when None) wait until `release` lets them through."""
        with self._gate:
            self._hold = match or (lambda texts: True)
            self._permits = 0

    def release(self, n: int = 1) -> None:
        """Let `n` held (or future held) requests through."""
        with self._gate:
            self._permits += n
            self._gate.notify_all()

    def release_all(self) -> None:
        """Stop holding: every waiting request and every later one goes through."""
        with self._gate:
            self._hold = None
            self._gate.notify_all()

    def wait_held(self, arrivals: int, timeout: float) -> bool:
        """Wait until `arrivals` requests in all have been held (see `arrivals`) and one is waiting now;
        False after `timeout` seconds. Callers poll in short timeouts to also watch their client process."""
        with self._gate:
            return self._gate.wait_for(lambda: self.arrivals >= arrivals and self._waiting > 0, timeout)

    def _pass_gate(self, texts: list[str] | None) -> None:
        with self._gate:
            if self._hold is None or not texts or not self._hold(texts):
                return
            self._waiting += 1
            self.arrivals += 1
            self._gate.notify_all()
            self._gate.wait_for(lambda: self._hold is None or self._permits > 0)
            if self._hold is not None:
                self._permits -= 1
            self._waiting -= 1
            self._gate.notify_all()

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    # -- request handling -------------------------------------------------------------------------------

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes
               ) -> tuple[int, dict[str, str], bytes] | None:
        """(status, headers, body) for one request, or None to drop the connection."""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        api = "gemini" if _GEMINI_PATH.fullmatch(path) else "openai" if _OPENAI_PATH.fullmatch(path) else ""
        texts = _texts(api, body)
        self._pass_gate(texts)
        fault = self._next_fault()
        result = self._answer(method, api, path, headers, body, texts, fault)
        self._record(RecordedRequest(method, path, headers, body, len(texts or []),
                                     result[0] if result else 0))
        return result

    def _answer(self, method: str, api: str, path: str, headers: dict[str, str], body: Any,
                texts: list[str] | None, fault: Fault | None) -> tuple[int, dict[str, str], bytes] | None:
        if fault is not None:
            if fault.kind == "drop":
                return None
            if fault.kind in ("status", "garbage"):
                return fault.status, fault.headers, fault.body
            if fault.kind == "stall":
                time.sleep(fault.seconds)
        if method != "POST" or not api:
            return _error(404, f"no route for {method} {path}")
        if self.api_key is not None:
            sent = headers.get("x-goog-api-key") if api == "gemini" else \
                headers.get("authorization", "").removeprefix("Bearer ")
            if sent != self.api_key:
                return _error(401 if api == "openai" else 403, "Incorrect API key provided")
        if texts is None:
            return _error(400, "malformed request body")
        if api == "gemini":
            model = path.rsplit("/models/", 1)[-1].removesuffix(":batchEmbedContents")
            if len(texts) > GEMINI_MAX_BATCH:
                return _error(400, f"at most {GEMINI_MAX_BATCH} requests can be in one batch")
            if any(r.get("model") != f"models/{model}" for r in body["requests"]):
                return _error(400, "model in each request must match the URL")
        if not texts or any(t == "" for t in texts):
            return _error(400, "input cannot be an empty string")
        vectors = [fake_vector(t, self.dims) for t in texts]
        if fault is not None and fault.kind == "short":
            vectors = vectors[:-1]
        if api == "gemini":
            out: dict[str, Any] = {"embeddings": [{"values": v} for v in vectors]}
        else:
            out = {"object": "list", "model": body.get("model"),
                   "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                   "usage": {"prompt_tokens": 0, "total_tokens": 0}}
        return 200, {"Content-Type": "application/json"}, json.dumps(out).encode()


def _texts(api: str, body: Any) -> list[str] | None:
    """The texts of a well-formed request, or None."""
    try:
        if api == "openai":
            inp = body["input"]
            if not isinstance(body.get("model"), str):
                return None
            texts = [inp] if isinstance(inp, str) else inp
        elif api == "gemini":
            texts = [r["content"]["parts"][0]["text"] for r in body["requests"]]
        else:
            return []
    except (KeyError, TypeError, IndexError):
        return None
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return None
    return texts


def _error(status: int, message: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(
        {"error": {"message": message, "code": status}}).encode()


def _make_handler(server: FakeEmbeddingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10  # idle keep-alive connections end by themselves

        def setup(self) -> None:
            super().setup()
            # Headers and body are two writes: with Nagle on, the body waits for the client's delayed ACK
            # of the headers, 40 ms per request on a kept-alive connection.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            result = server.handle(self.command, self.path, headers, raw)
            if result is None:
                self.close_connection = True
                return
            status, extra, body = result
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = _serve
        do_GET = _serve

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature is the stdlib's
            pass

    return Handler


@contextmanager
def serve_fake_embeddings(dims: int = 64, api_key: str | None = None) -> Iterator[str]:
    """Run a FakeEmbeddingServer for the block and yield its base URL (http://127.0.0.1:PORT)."""
    with FakeEmbeddingServer(dims=dims, api_key=api_key) as srv:
        yield srv.base_url
