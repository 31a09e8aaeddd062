"""The model ↔ tools loop of one turn: ask the model, run the tools it calls, repeat until it answers.

Every message is handed to `record` the moment it exists (user message first, then each assistant
reply and each tool result), so the transcript is complete even if the process dies mid-turn. Each
request is made by the `build_request` callable from the messages so far (the runtime prunes there).
A context-overflow error is given once to `on_overflow`, which may make room (flush, compact) and
return the messages to retry the same request with; it is then not recorded as a failed turn. A
failed or cancelled model call is recorded as an assistant message with `stopReason: "error"`
(adapters leave such empty turns out of later requests); a cancelled tool batch gets "cancelled"
results for the calls that did not run, so the history stays a valid call/result sequence.

Cancellation: a `cancel` token (models.cancel.CancelToken, cancelled by the gateway at shutdown) is
checked before each model call, between streamed deltas and before each tool call; once cancelled, the
turn stops the same way a Ctrl-C does (partial text recorded as a failed assistant message, unrun calls
get "cancelled" results) and `TurnCancelled` is raised. A model call blocked waiting for the provider is
ended by the transport (the token shuts its socket), and that too surfaces as `TurnCancelled`.

Streaming: text deltas are forwarded as TextChunk events, except that text which could still turn
out to be the silent token NO_REPLY is held back until it cannot (or is dropped if it is).

Secrets: the model's text is masked (hermit.redaction) at the one point every face gets it from. The finished
assistant message is masked before it is recorded (the transcript), returned (the CLI, a channel's reply) or
put in a ModelReplied event, and so is the partial text of a failed call. Streamed deltas pass a
StreamMasker first: it holds back the last (longest secret − 1) characters, so a key split across deltas is
never sent piece by piece; the web chat sees the reply that much later, and at once when the stream ends.
Tool-call arguments are not masked: a call runs with the value the model wrote.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hermit.agent.context import INTERRUPTED_RESULT, SILENT_TOKEN
from hermit.errors import Cancelled, ContextOverflowError, HermitError
from hermit.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from hermit.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    TextDelta,
    ToolCallDelta,
    leave_out_images,
)
from hermit.models.cancel import CancelToken
from hermit.redaction import StreamMasker, mask
from hermit.tools.base import ToolRun, ToolRunner

CANCELLED_RESULT = "error: cancelled by the user before this tool ran to completion"
# A turn continued after a crash (see `unfinished_turn`): what the model is told about the calls whose
# results never reached the transcript. Hermit never re-runs them itself.
UNKNOWN_RESULT = ("error: Hermit stopped (the process died) while this tool call was running, so its outcome is "
                  "unknown: it may have completed fully, partly or not at all. Check its effects before running it "
                  "again.")
NOT_STARTED_RESULT = ("error: not run: Hermit stopped before this tool call started. Run it again if it is still "
                      "needed.")


class TurnCancelled(HermitError):
    """The turn was stopped through its cancel event (gateway shutdown) before it finished."""


def _check_cancel(cancel: CancelToken | None) -> None:
    if cancel is not None and cancel.cancelled:
        raise TurnCancelled("the turn was interrupted before it finished", "send the message again")


@dataclass(frozen=True)
class TextChunk:
    text: str


@dataclass(frozen=True)
class ToolStarted:
    name: str
    arguments: dict[str, object]
    call_id: str


@dataclass(frozen=True)
class ToolFinished:
    run: ToolRun


@dataclass(frozen=True)
class ModelReplied:
    """After each model response: the assistant message (text, tool calls, usage)."""

    message: AssistantMessage


@dataclass(frozen=True)
class Notice:
    """Session news for the user around a turn: "info" (auto-compaction done — shown in verbose mode)
    or "warning" (a compaction failed — always shown)."""

    text: str
    level: Literal["info", "warning"] = "info"


AgentEvent = TextChunk | ToolStarted | ToolFinished | ModelReplied | Notice
EventSink = Callable[[AgentEvent], None]
RequestBuilder = Callable[[Sequence[Message]], ModelRequest]
# Given the messages of a request that overflowed the window: the messages to retry with, or None.
OverflowHandler = Callable[[Sequence[Message]], Sequence[Message] | None]


@dataclass
class LoopResult:
    reply: str
    new_messages: list[Message] = field(default_factory=list)
    tool_runs: list[ToolRun] = field(default_factory=list)
    usage: Usage = Usage()
    iterations: int = 0
    stopped: Literal["done", "max_iterations"] = "done"


class _SilenceFilter:
    """Holds streamed text back while it could still be the start of NO_REPLY."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._held = ""
        self._open = False  # True once the text can no longer be NO_REPLY: pass through

    def feed(self, text: str) -> None:
        if self._open:
            self._emit(text)
            return
        self._held += text
        probe = self._held.lstrip()
        if SILENT_TOKEN.startswith(probe) or probe.startswith(SILENT_TOKEN):
            return
        self._open = True
        self._emit(self._held)
        self._held = ""

    def finish(self) -> None:
        probe = self._held.lstrip()
        if probe and not probe.startswith(SILENT_TOKEN):
            self._emit(self._held)  # a reply that was a strict prefix of the token, e.g. "NO"
        self._held = ""


def _emit(on_event: EventSink | None, event: AgentEvent) -> None:
    if on_event is not None:
        on_event(event)


def _call_model(model: Model, request: ModelRequest, stream: bool, on_event: EventSink | None,
                partial: list[str], cancel: CancelToken | None = None) -> ModelResponse:
    if not stream:
        return model.complete(request)  # a finished response is kept; the next step checks `cancel`
    filt = _SilenceFilter(lambda t: _emit(on_event, TextChunk(t)))
    masker = StreamMasker()
    for event in model.stream(request):
        _check_cancel(cancel)
        if isinstance(event, TextDelta):
            partial.append(event.text)
            if shown := masker.feed(event.text):
                filt.feed(shown)
        elif isinstance(event, ToolCallDelta):
            continue  # the adapter assembles the arguments; the call is shown when it runs
        elif isinstance(event, ResponseDone):
            if rest := masker.finish():
                filt.feed(rest)
            filt.finish()
            return event.response
    raise HermitError("the model stream ended without a final response", "retry the message")


def masked_reply(message: AssistantMessage) -> AssistantMessage:
    """The assistant message with every registered secret masked in its text (the same message when none is)."""
    parts = tuple(TextPart(mask(p.text)) if isinstance(p, TextPart) else p for p in message.content)
    return message if parts == message.content else dataclasses.replace(message, content=parts)


def unfinished_turn(history: Sequence[Message], user: UserMessage) -> int | None:
    """Where `user` starts the last turn of `history` when that turn is the same message, cut off before it
    was answered (the process died): only tool calls and their results follow it, no reply and no error.
    None otherwise (a new message, or an answered, failed or cancelled-by-model-error turn).

    The message is recognised by its content: a message the user re-sends because the crash left it
    unanswered continues the turn too, which is what they want. A turn that ended in any way, even with
    an error, is never continued."""
    for start in range(len(history) - 1, -1, -1):
        if isinstance(history[start], UserMessage):
            break
    else:
        return None
    if history[start].to_dict() != user.to_dict():
        return None
    for m in history[start + 1:]:
        if isinstance(m, AssistantMessage) and (not m.tool_calls or m.stop_reason == "error"):
            return None
    return start


def _settle_unrecorded(messages: Sequence[Message], start: int) -> list[tuple[int, ToolResultMessage]]:
    """The results to record for tool calls of a cut-off turn that have none: the history gives them the
    generic "interrupted" stand-in (context.repair_tool_pairs). Calls run in order and each result is
    recorded as it exists, so the first call without one was running when the process died (outcome
    unknown) and the calls after it never started."""
    out: list[tuple[int, ToolResultMessage]] = []
    for i in range(start + 1, len(messages)):
        m = messages[i]
        if isinstance(m, ToolResultMessage) and m.content == INTERRUPTED_RESULT and m.is_error:
            text = UNKNOWN_RESULT if not out else NOT_STARTED_RESULT
            out.append((i, ToolResultMessage(m.tool_call_id, m.tool_name, text, is_error=True)))
    return out


def run_loop(
    model: Model,
    runner: ToolRunner,
    build_request: RequestBuilder,
    history: Sequence[Message],
    user: UserMessage,
    *,
    record: Callable[[Message], None],
    max_iterations: int,
    stream: bool = False,
    on_event: EventSink | None = None,
    on_usage: Callable[[AssistantMessage], None] | None = None,
    on_overflow: OverflowHandler | None = None,
    cancel: CancelToken | None = None,
    on_images_refused: Callable[[tuple[ImagePart, ...]], None] | None = None,
) -> LoopResult:
    """Run one turn. Model errors (HermitError), TurnCancelled and KeyboardInterrupt propagate after
    being recorded."""
    result = LoopResult(reply="")
    overflow_handled = False
    resume = unfinished_turn(history, user)
    if resume is None:
        messages: list[Message] = [*history, user]
        record(user)
        result.new_messages.append(user)
    else:
        # The same message again, its turn cut off by a crash (a channel's journal replays what was not
        # answered): continue it instead of starting over, so the tools it already ran run only once.
        messages = list(history)
        for i, settled in _settle_unrecorded(messages, resume):
            messages[i] = settled
            record(settled)
            result.new_messages.append(settled)
        _emit(on_event, Notice("continuing the turn a restart interrupted (tools that already ran are not run "
                               "again)"))

    def add(message: Message) -> None:
        record(message)
        messages.append(message)
        result.new_messages.append(message)

    while True:
        if result.iterations >= max_iterations:
            note = (f"I stopped after {max_iterations} rounds of tool calls without finishing "
                    f"(the max_tool_iterations limit). Say 'continue' if you want me to keep going.")
            add(AssistantMessage((TextPart(note),), "end_turn", Usage(), provider="hermit"))
            if stream:
                _emit(on_event, TextChunk(note))
            result.reply, result.stopped = note, "max_iterations"
            return result
        result.iterations += 1
        partial: list[str] = []
        try:
            _check_cancel(cancel)
            try:
                response = _call_model(model, build_request(messages), stream, on_event, partial, cancel)
            except Cancelled as e:  # the transport ended the call because `cancel` was cancelled
                raise TurnCancelled("the turn was interrupted before it finished", "send the message again") from e
        except (HermitError, KeyboardInterrupt) as e:
            recoverable = isinstance(e, ContextOverflowError) and not partial and not overflow_handled
            if recoverable and on_overflow is not None:
                overflow_handled = True  # compact once and retry; a second overflow is an error
                replacement = on_overflow(tuple(messages))
                if replacement is not None:
                    messages[:] = replacement
                    result.iterations -= 1
                    continue
            why = ("cancelled by the user" if isinstance(e, KeyboardInterrupt)
                   else "interrupted: the gateway stopped" if isinstance(e, TurnCancelled) else mask(e.message))
            text = mask("".join(partial))
            add(AssistantMessage((TextPart(text),) if text else (), "error", Usage(),
                                 model.profile.model_id, model.profile.provider, why))
            raise
        if response.refused_images:  # recorded with the session, and left out of this turn's next requests
            if on_images_refused is not None:
                on_images_refused(response.refused_images)
            messages[:] = leave_out_images(messages, response.refused_images)
        assistant = masked_reply(response.message)
        add(assistant)
        result.usage = result.usage + assistant.usage
        if on_usage is not None:
            on_usage(assistant)
        _emit(on_event, ModelReplied(assistant))
        if not assistant.tool_calls:
            result.reply = assistant.text
            return result
        result.tool_runs += _run_tools(runner, list(assistant.tool_calls), add, on_event, cancel)


def _run_tools(runner: ToolRunner, calls: list[ToolCallPart], add: Callable[[Message], None],
               on_event: EventSink | None, cancel: CancelToken | None) -> list[ToolRun]:
    """Run one reply's tool calls in order, recording each result; on a cancel, the calls not run yet get a
    cancelled result (every call must have one) before the cancel propagates."""
    runs: list[ToolRun] = []
    for index, call in enumerate(calls):
        try:
            _check_cancel(cancel)
            _emit(on_event, ToolStarted(call.name, dict(call.arguments), call.id))
            run = runner.run(call)
        except (KeyboardInterrupt, TurnCancelled):
            for rest in calls[index:]:
                add(ToolResultMessage(rest.id, rest.name, CANCELLED_RESULT, is_error=True))
            raise
        add(run.result)
        runs.append(run)
        _emit(on_event, ToolFinished(run))
    return runs
