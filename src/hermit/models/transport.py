"""HTTP for model adapters: POST with timeout and retries, SSE reading, and mapping failures to errors.

Retried (hermit.retry's policy: exponential backoff, `Retry-After`/`retry-after-ms` honoured): 408, 409, 425, 429, 5xx, 529
and connection errors/timeouts. A stream is retried only until its first event has been yielded; after
that a failure raises, since half a reply cannot be taken back. A `Retry-After` longer than
`max_retry_after` is not waited for: the RateLimitError carries it instead. Invalid JSON from a
successful response is not retried (a misconfigured base_url answers the same every time).

Two clocks bound every call. The idle timeout (`timeout_seconds`) ends a connection that sends
nothing; the deadline (`deadline_seconds`, 600 s by default: the Anthropic and OpenAI SDKs' own request
timeout, and longer than a full 32k-token reply takes at their output speeds) ends the whole call,
retries and backoff included, even when the server keeps it alive with SSE comments. At the deadline,
or when the request's CancelToken is cancelled, a watchdog shuts the socket down under the blocked
read, which returns at once; the call raises ProviderError (deadline) or Cancelled. So that the
watchdog always knows the socket, connections are not kept alive between calls (one TCP/TLS handshake
per model call, small next to the call itself).

A refused connection to a loopback host is not retried: nothing listens there, and waiting will not
start the local model server (the error says so). Nor is a connection whose other end is a socket on
this machine held by another login user: it is refused before the request is sent (models.loopback).
A proxy from the environment (HTTP_PROXY, ALL_PROXY) carries no request to this machine (hermit.direct_http):
a local model's prompts went to it in plain text. Redirects are not followed: a key header would go to the new host.
Retry notices go to `notify` ("retrying in 2 s (1/3): …"); the CLI prints them on stderr, elsewhere they
are logged.

What the bodies say (SSE events, error messages, a context overflow) is read by models/provider_wire.py.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from hermit.direct_http import DirectHereClient
from hermit.errors import (
    AuthError,
    Cancelled,
    ContextOverflowError,
    HermitError,
    ProviderError,
    RateLimitError,
)
from hermit.messages import valid_json
from hermit.models.base import ImageRefused, names_an_image
from hermit.models.cancel import CancelToken
from hermit.models.loopback import HINT, Holder, guard_stream
from hermit.models.provider_wire import SseEvent, error_message, is_context_overflow, iter_sse
from hermit.redaction import KNOWN, SecretMasker, header_secret, register
from hermit.retry import RetryPolicy, retry_after_seconds

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})



@dataclass
class _Failure:
    error: HermitError
    retryable: bool
    retry_after: float | None = None


class _Watchdog:
    """Shuts the call's socket down at the deadline or on cancel, so a blocked read returns at once."""

    def __init__(self, seconds: float, cancel: CancelToken | None, refuse: Callable[[Holder], Exception]) -> None:
        self.fired: str | None = None  # "deadline" | "cancel"
        self._refuse = refuse
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._timer = threading.Timer(max(seconds, 0.0), self._fire, args=("deadline",))
        self._timer.daemon = True
        self._timer.start()
        self._unregister = cancel.on_cancel(lambda: self._fire("cancel")) if cancel is not None else None

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpcore's trace hook: remember the socket of each new connection as soon as it exists, and
        refuse it, before a byte is sent, when another login user's program holds its other end."""
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            with self._lock:
                self._sock = sock
                if self.fired and sock is not None:
                    _shutdown(sock)
            guard_stream(stream, self._refuse)

    def _fire(self, why: str) -> None:
        with self._lock:
            if self.fired is None:
                self.fired = why
            if self._sock is not None:
                _shutdown(self._sock)

    def close(self) -> None:
        self._timer.cancel()
        if self._unregister is not None:
            self._unregister()


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class ProviderHttp:
    """One provider endpoint's HTTP client: headers, timeouts, deadline, retries and error mapping.

    `key_hint` is the hint an AuthError carries ("set ANTHROPIC_API_KEY or ..."); `sleep` and `clock`
    are injectable so tests of the backoff do not wait; `notify` receives retry notices.
    """

    def __init__(
        self,
        provider: str,
        headers: Mapping[str, str],
        *,
        key_hint: str,
        timeout_seconds: float = 120.0,
        deadline_seconds: float = 600.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        notify: Callable[[str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.provider = provider
        self.key_hint = key_hint
        self.timeout_seconds = timeout_seconds
        self.deadline_seconds = deadline_seconds
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._clock = clock
        self._notify = notify or (lambda text: log.warning("%s", text))
        # The key this client sends, masked out of every error it raises (a provider may echo it back),
        # and registered for the process so the CLI, the logs and stored errors mask it too.
        keys = [header_secret(name, value) for name, value in headers.items()]
        self._masker = SecretMasker(k for k in keys if k)
        register(*keys)
        self._headers = dict(headers)
        self._transport = transport
        # Built here: its TLS setup must not eat a call's deadline. A proxy from the environment carries nothing to
        # this machine (hermit.direct_http: it got every prompt of a local model, in plain text); other hosts keep it.
        self._client = DirectHereClient(
            headers=self._headers,
            timeout=httpx.Timeout(self.timeout_seconds, connect=min(self.timeout_seconds, 15.0)),
            transport=self._transport,
            follow_redirects=False,
            limits=httpx.Limits(max_keepalive_connections=0),  # the watchdog needs each call's socket
        )

    def close(self) -> None:
        self._client.close()

    def post_json(self, url: str, body: Mapping[str, Any], cancel: CancelToken | None = None) -> Any:
        """POST and parse the JSON reply, retrying what can be retried, within the deadline."""
        try:
            return self._post_json(url, body, cancel)
        except HermitError as e:
            raise self._mask(e)  # noqa: B904 - the same exception, its text masked

    def post_sse(self, url: str, body: Mapping[str, Any], cancel: CancelToken | None = None) -> Iterator[SseEvent]:
        """POST and yield the server-sent events of the reply (retrying until the first one)."""
        try:
            yield from self._post_sse(url, body, cancel)
        except HermitError as e:
            raise self._mask(e)  # noqa: B904 - the same exception, its text masked

    def _mask(self, e: HermitError) -> HermitError:
        """This client's key and every secret the process registered (a channel token quoted back)."""
        return KNOWN.mask_error(self._masker.mask_error(e))

    def _post_json(self, url: str, body: Mapping[str, Any], cancel: CancelToken | None) -> Any:
        content = _encode(body)
        ends = self._clock() + self.deadline_seconds
        attempt = 0
        while True:
            watch = self._watch(ends, cancel)
            failure: _Failure
            try:
                with self._client.stream("POST", url, content=content, headers=_JSON,
                                      extensions={"trace": watch.trace}) as resp:
                    data = resp.read()
                    self._check(watch)
                    if resp.status_code < 400:
                        return self._parse_json(data, url)
                    failure = self._status_failure(resp.status_code, resp.text, resp.headers)
            except httpx.TransportError as e:
                self._check(watch)
                failure = self._transport_failure(url, e)
            finally:
                watch.close()
            attempt = self._wait_or_raise(failure, attempt, ends, cancel)

    def _post_sse(self, url: str, body: Mapping[str, Any], cancel: CancelToken | None) -> Iterator[SseEvent]:
        content = _encode(body)
        ends = self._clock() + self.deadline_seconds
        attempt = 0
        while True:
            started = False
            failure: _Failure | None = None
            watch = self._watch(ends, cancel)
            try:
                with self._client.stream("POST", url, content=content, headers=_JSON,
                                      extensions={"trace": watch.trace}) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        self._check(watch)
                        failure = self._status_failure(resp.status_code, resp.text, resp.headers)
                    elif "text/event-stream" not in resp.headers.get("content-type", ""):
                        # A server that ignored stream=true (or an error page with status 200).
                        resp.read()
                        self._check(watch)
                        parsed = self._parse_json(resp.content, url)
                        if isinstance(parsed, dict) and parsed.get("error"):
                            raise self.map_error(0, parsed)
                        msg = error_message(parsed)
                        raise ProviderError(
                            f"{self.provider}: expected an event stream from {url}, got: {msg[:200]}",
                            "check base_url points at the provider's API",
                        )
                    else:
                        for event in iter_sse(resp.iter_lines()):
                            self._check(watch)
                            started = True
                            yield event
                        self._check(watch)  # a shut-down socket can also look like a clean end
                        return
            except httpx.TransportError as e:
                self._check(watch)
                if started:
                    raise ProviderError(
                        f"{self.provider}: the reply stream broke off ({type(e).__name__}: {e})",
                        "retry the message; if it keeps happening, raise timeout_seconds for this provider",
                    ) from e
                failure = self._transport_failure(url, e)
            finally:
                watch.close()
            assert failure is not None
            attempt = self._wait_or_raise(failure, attempt, ends, cancel)

    def _watch(self, ends: float, cancel: CancelToken | None) -> _Watchdog:
        if cancel is not None and cancel.cancelled:
            raise self._cancelled()
        remaining = ends - self._clock()
        if remaining <= 0:
            raise self._deadline_error()
        return _Watchdog(remaining, cancel, self._foreign)

    def _check(self, watch: _Watchdog) -> None:
        if watch.fired == "cancel":
            raise self._cancelled()
        if watch.fired == "deadline":
            raise self._deadline_error()

    def _foreign(self, holder: Holder) -> ProviderError:
        return ProviderError(f"{self.provider}: {holder.describe()}",
                             f"{HINT}; or change models.providers.{self.provider}.base_url")

    def _cancelled(self) -> Cancelled:
        return Cancelled(f"{self.provider}: the model call was cancelled", "nothing to do; send the message again")

    def _deadline_error(self) -> ProviderError:
        return ProviderError(
            f"{self.provider}: no complete answer within {self.deadline_seconds:g}s (the deadline for one "
            "model call)",
            f"try again; if the model is just slow (a local model on CPU), raise "
            f"models.providers.{self.provider}.deadline_seconds",
        )

    def _wait_or_raise(self, failure: _Failure, attempt: int, ends: float, cancel: CancelToken | None) -> int:
        # A Retry-After past the policy's max_retry_after gives up (long_wait "give_up"): the RateLimitError
        # carries the wait, and the user decides rather than a model call hanging for minutes.
        delay = self.retry.delay(attempt, failure.retry_after) if failure.retryable else None
        if delay is None:
            raise failure.error
        if self._clock() + delay >= ends:
            raise failure.error  # waiting would pass the deadline: the last failure says more
        self._notify(KNOWN.mask(self._masker.mask(
            f"retrying in {delay:g} s ({attempt + 1}/{self.retry.max_retries}): {failure.error.message}")))
        if self._sleep is not None:
            self._sleep(delay)
        elif cancel is not None:
            if cancel.wait(delay):
                raise self._cancelled()
        else:
            time.sleep(delay)
        return attempt + 1

    def _parse_json(self, content: bytes, url: str) -> Any:
        try:
            return valid_json(json.loads(content))
        except ValueError as e:
            snippet = content[:120].decode("utf-8", "replace")
            raise ProviderError(
                f"{self.provider}: the reply from {url} is not valid JSON: {snippet!r}",
                "check base_url points at the provider's API (for OpenAI-compatible servers it "
                "usually ends in /v1)",
            ) from e

    def _transport_failure(self, url: str, e: httpx.TransportError) -> _Failure:
        if isinstance(e, httpx.TimeoutException):
            err = ProviderError(
                f"{self.provider}: no answer from {url} within {self.timeout_seconds:g}s",
                f"raise models.providers.{self.provider}.timeout_seconds or try again later",
            )
            return _Failure(err, retryable=True)
        host, port = _host_port(url)
        if isinstance(e, httpx.ConnectError) and _refused(e) and _is_loopback(host):
            # Nothing listens on this machine's port; retrying for 11 s will not start the server.
            where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            return _Failure(ProviderError(
                f"{self.provider}: nothing listens on {where} — is your local model server running?",
                f"start it (e.g. `ollama serve`), or fix models.providers.{self.provider}.base_url",
            ), retryable=False)
        err = ProviderError(
            f"{self.provider}: cannot reach {url} ({type(e).__name__}: {e})",
            "check the network and that base_url is right and the server is running",
        )
        return _Failure(err, retryable=True)

    def _status_failure(self, status: int, text: str, headers: httpx.Headers) -> _Failure:
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = text
        retry_after = retry_after_seconds(headers)
        err = self.map_error(status, body, retry_after)
        # A 429 that is really "quota exhausted" will not get better by waiting.
        retryable = (
            status in RETRYABLE_STATUS
            and not isinstance(err, ContextOverflowError)
            and (status != 429 or isinstance(err, RateLimitError))
        )
        return _Failure(err, retryable, retry_after)

    def map_error(self, status: int, body: Any, retry_after: float | None = None) -> HermitError:
        """The Hermit error for an HTTP status and error body; status 0 means an in-stream error event.
        The provider's message is masked: some echo the key they were sent."""
        return self._mask(self._map_error(status, body, retry_after))

    def _map_error(self, status: int, body: Any, retry_after: float | None) -> HermitError:
        msg = error_message(body)
        where = f"{self.provider} (HTTP {status})" if status else self.provider
        raw = body if isinstance(body, str) else json.dumps(body)
        if status in (401, 403):
            return AuthError(f"{where} rejected the credentials: {msg}", self.key_hint)
        if status == 413 or (status in (0, 400, 422) and is_context_overflow(raw)):
            return ContextOverflowError(
                f"{where}: the request is larger than the model's context window: {msg}",
                "compact the session (/compact) or start a new one (/new)",
            )
        if status == 429 or (status == 0 and "rate_limit" in raw):
            if "quota" in raw.lower() or "billing" in raw.lower():
                return ProviderError(
                    f"{where}: quota exhausted: {msg}", "check the account's plan and billing"
                )
            return RateLimitError(
                f"{where}: rate limited: {msg}",
                "wait a minute and retry, or lower the request rate",
                retry_after=retry_after,
            )
        if status == 404:
            return ProviderError(f"{where}: not found: {msg}", "check the model id and base_url")
        if status >= 500 or status == 0:
            return ProviderError(
                f"{where}: provider error: {msg}", "the provider is having trouble; try again later"
            )
        if "fake provider: script exhausted" in msg:  # hermit.testing's server, not a real provider
            return ProviderError(
                f"{where}: the fake provider's script ran out of replies ({msg})",
                "give it more: add steps to the script file it was started with (--script, e.g. "
                "<state>/fake-provider.json; a step with \"repeat\": true answers every later request), "
                "then restart it",
            )
        if status in (400, 422) and names_an_image(msg):  # an HTTP answer: before any event of a stream
            return ImageRefused(f"{where}: an image was refused: {msg}",
                                "start a new session (/new) if it keeps happening; the images stay in the transcript")
        return ProviderError(
            f"{where}: request rejected: {msg}", "this is likely a Hermit bug; please report it"
        )


_JSON = {"content-type": "application/json"}
def _encode(body: Mapping[str, Any]) -> bytes:
    """The JSON request body; a lone surrogate that reached a request is replaced, not fatal."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(valid_json(body), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _host_port(url: str) -> tuple[str, int]:
    u = httpx.URL(url)
    return u.host, u.port or (443 if u.scheme == "https" else 80)


def _is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _refused(e: BaseException) -> bool:
    """Whether a connect error was ECONNREFUSED (httpx wraps the OSError twice)."""
    seen: BaseException | None = e
    for _ in range(6):
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError) or getattr(seen, "errno", None) == errno.ECONNREFUSED:
            return True
        seen = seen.__cause__ or seen.__context__
    return "connection refused" in str(e).lower()
