"""The Model interface the agent loop talks to: request, response, stream events and model profile.

Every adapter (Anthropic, OpenAI-compatible, the scripted test model) implements `Model`. Provider facts
the rest of Hermit needs (context window, prompt caching and its TTL, tool-call style) are data on the
`ModelProfile`, so no code outside `models/` ever branches on a provider name.

Calls are synchronous and every network call has an idle timeout and an overall deadline; the async
gateway runs them in a worker thread and cancels them through `ModelRequest.cancel`. `stream()` yields
`TextDelta` / `ToolCallDelta` events as they arrive and always ends with one `ResponseDone` carrying the
same `ModelResponse` that `complete()` would have returned.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from hermit.errors import ProviderError
from hermit.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    StopReason,
    ToolCallPart,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from hermit.models.cancel import CancelToken

ToolCallStyle: TypeAlias = Literal["anthropic", "openai"]


@dataclass(frozen=True)
class ModelProfile:
    """What the rest of Hermit may know about a model.

    `cache_ttl_seconds` is the life of the provider's prompt cache when the adapter marks cache
    breakpoints (Anthropic: 5 minutes); tool-output pruning waits for it to expire before trimming.
    """

    provider: str
    model_id: str
    context_window: int = 128_000
    max_output_tokens: int = 8192
    supports_prompt_caching: bool = False
    cache_ttl_seconds: float | None = None
    tool_call_style: ToolCallStyle = "openai"
    # Whether the model reads images (config `input: [text, image]`, else the known-model table): only then
    # are photos sent to the assistant attached to its messages, and images in a request sent at all.
    supports_images: bool = False

    @property
    def ref(self) -> str:
        """The "<provider>/<model>" name agents use in config."""
        return f"{self.provider}/{self.model_id}"


@dataclass(frozen=True)
class ToolSchema:
    """A tool as the model sees it: name, description and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True)
class ModelRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    # None: the profile's max_output_tokens.
    max_tokens: int | None = None
    temperature: float | None = None
    # Cancels the call from another thread (the gateway's shutdown); adapters hand it to the transport.
    cancel: CancelToken | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ModelResponse:
    message: AssistantMessage
    # The images the provider refused, the reply made without them (`complete_or_without_images`): the agent
    # records them with the session, so they are never sent again.
    refused_images: tuple[ImagePart, ...] = field(default=(), compare=False, repr=False)

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return self.message.tool_calls

    @property
    def usage(self) -> Usage:
        return self.message.usage

    @property
    def stop_reason(self) -> StopReason:
        return self.message.stop_reason


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of tool call number `index`; `id` and `name` are set on its first delta (else "")."""

    index: int
    id: str
    name: str
    arguments_delta: str


@dataclass(frozen=True)
class ResponseDone:
    response: ModelResponse


StreamEvent: TypeAlias = TextDelta | ToolCallDelta | ResponseDone


@runtime_checkable
class Model(Protocol):
    @property
    def profile(self) -> ModelProfile: ...

    def complete(self, request: ModelRequest) -> ModelResponse:
        """One full reply. Raises AuthError, RateLimitError, ContextOverflowError or ProviderError."""
        ...

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        """The reply as it is produced, ending with ResponseDone. Raises like `complete`."""
        ...


@runtime_checkable
class ClosableModel(Protocol):
    """A model that holds connections (the HTTP providers' pool): whoever built it closes it when done."""

    def close(self) -> None: ...


def final_response(events: Iterator[StreamEvent]) -> ModelResponse:
    """Drain a stream and return its final response (for callers that do not render deltas)."""
    for event in events:
        if isinstance(event, ResponseDone):
            return event.response
    raise ProviderError(
        "the model stream ended without a final response", "retry; if it persists, report a bug"
    )


# The images one request carries, newest first: Anthropic refuses a request over 32 MB or with over 100 images
# (over 20, each is held to 2000 px), OpenAI one over 50 MB. Every earlier turn's images are sent again with
# the history, so a long chat with photos would soon be refused for good; the oldest are left out instead.
MAX_REQUEST_IMAGES = 20
MAX_REQUEST_IMAGE_CHARS = 20_000_000  # of base64


def sendable_images(messages: Sequence[Message], profile: ModelProfile) -> tuple[Message, ...]:
    """The messages as an adapter sends them: for a model that reads no images, each image is replaced by a
    note saying it is not shown (an image sent to a text-only server is a 400); for one that does, the newest
    images within MAX_REQUEST_IMAGES / MAX_REQUEST_IMAGE_CHARS are kept and older ones noted as not sent
    again. The transcript is not touched: only this request leaves them out."""
    if not any(isinstance(m, UserMessage | ToolResultMessage) and m.images for m in messages):
        return tuple(messages)
    count, chars = (MAX_REQUEST_IMAGES, MAX_REQUEST_IMAGE_CHARS) if profile.supports_images else (0, 0)
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        m = out[i]
        if not isinstance(m, UserMessage | ToolResultMessage) or not m.images:
            continue
        kept: list[ImagePart] = []
        for img in m.images:
            if count > 0 and len(img.data) <= chars:
                kept.append(img)
                count, chars = count - 1, chars - len(img.data)
        left_out = len(m.images) - len(kept)
        if not left_out:
            continue
        note = (f"[{left_out} image(s) not shown: the model answering reads text only]"
                if not profile.supports_images else
                f"[{left_out} earlier image(s) not sent again: a request carries at most {MAX_REQUEST_IMAGES} "
                "images, the newest]")
        if isinstance(m, UserMessage):
            out[i] = dataclasses.replace(m, text=f"{m.text}\n{note}" if m.text else note, images=tuple(kept))
        else:
            out[i] = dataclasses.replace(m, content=f"{m.content}\n{note}" if m.content else note,
                                         images=tuple(kept))
    return tuple(out)


log = logging.getLogger("hermit.models")


class ImageRefused(ProviderError):
    """The provider refused a request for an image it carried (HTTP 400 naming an image: not a valid image of its
    type, too many pixels, or a server that takes no images)."""


_IMAGE_WORD = re.compile(r"\bimage", re.IGNORECASE)


def names_an_image(message: str) -> bool:
    """Whether a provider's 400 is about an image (`messages.0.content.1.image.source…`, "Invalid image",
    "image_url is not supported")."""
    return bool(_IMAGE_WORD.search(message))


def without_images(request: ModelRequest) -> ModelRequest | None:
    """The request with every image left out, each message saying how many of its own were and why; None when
    it carries none. The transcript keeps them: only this request goes without."""
    if not any(isinstance(m, UserMessage | ToolResultMessage) and m.images for m in request.messages):
        return None
    out: list[Message] = []
    for m in request.messages:
        if isinstance(m, UserMessage | ToolResultMessage) and m.images:
            note = f"[{len(m.images)} image(s) not sent: the provider refused this conversation's images]"
            m = (dataclasses.replace(m, text=f"{m.text}\n{note}" if m.text else note, images=())
                 if isinstance(m, UserMessage) else
                 dataclasses.replace(m, content=f"{m.content}\n{note}" if m.content else note, images=()))
        out.append(m)
    return dataclasses.replace(request, messages=tuple(out))


def refused_suspects(request: ModelRequest) -> tuple[ImagePart, ...]:
    """The images a refused request is blamed for: those new in it — after its last assistant message (the turn's
    own message, or the results of the tools it just called): each earlier one went out with an earlier request
    that was not refused. All of its images when none is new (another model answers now, or a restart)."""
    last = max((i for i, m in enumerate(request.messages) if isinstance(m, AssistantMessage)), default=-1)
    images = [(i, img) for i, m in enumerate(request.messages)
              if isinstance(m, UserMessage | ToolResultMessage) for img in m.images]
    new = tuple(dict.fromkeys(img for i, img in images if i > last))
    return new or tuple(dict.fromkeys(img for _, img in images))


def leave_out_images(messages: Sequence[Message], refused: Collection[ImagePart]) -> list[Message]:
    """`messages` with each image in `refused` replaced by a note in its message's text: what the session's
    transcript records of a refused image (sessions/entries.py), for the requests of the turn that found it."""
    out: list[Message] = []
    for m in messages:
        if isinstance(m, UserMessage | ToolResultMessage) and any(img in refused for img in m.images):
            kept = tuple(img for img in m.images if img not in refused)
            note = f"[{len(m.images) - len(kept)} image(s) not sent: the provider refused them]"
            m = (dataclasses.replace(m, text=f"{m.text}\n{note}" if m.text else note, images=kept)
                 if isinstance(m, UserMessage) else
                 dataclasses.replace(m, content=f"{m.content}\n{note}" if m.content else note, images=kept))
        out.append(m)
    return out


def complete_or_without_images(call: Callable[[ModelRequest], ModelResponse], request: ModelRequest) -> ModelResponse:
    """`call(request)`, made again without its images when the provider refuses one (`without_images`). An image
    is sent again with every later request of its session, so one the provider cannot read (a member's file
    that starts like a JPEG) would otherwise have every later turn of the session refused until /new. The reply
    names the images blamed (`refused_suspects`), which the agent records so that later turns leave them out."""
    try:
        return call(request)
    except ImageRefused as e:
        bare = without_images(request)
        if bare is None:
            raise
        log.warning("%s; sending the request again without its images", e.message)
        return dataclasses.replace(call(bare), refused_images=refused_suspects(request))


def stream_or_without_images(call: Callable[[ModelRequest], Iterator[StreamEvent]],
                             request: ModelRequest) -> Iterator[StreamEvent]:
    """`complete_or_without_images` for a stream: ImageRefused comes with the HTTP status, before any event."""
    try:
        yield from call(request)
    except ImageRefused as e:
        bare = without_images(request)
        if bare is None:
            raise
        log.warning("%s; sending the request again without its images", e.message)
        blamed = refused_suspects(request)
        for event in call(bare):
            yield (ResponseDone(dataclasses.replace(event.response, refused_images=blamed))
                   if isinstance(event, ResponseDone) else event)
