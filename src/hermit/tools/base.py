"""Typed tools: a Python function's signature becomes the JSON schema the model sees, and a runner that
validates arguments and turns every failure into an error tool result instead of crashing the loop.

A tool is an ordinary function with annotated parameters. Descriptions and wire names come from
`Annotated[..., Field(description=..., alias=...)]`, so a Python parameter `from_line` can be called
`from` on the wire (the SPEC §4 contract keeps the original's camelCase names). The schema is cleaned
for the model: no pydantic titles, and `X | None = None` becomes an optional `X` rather than an
`anyOf` with null, which keeps the fixed prompt small and is accepted by every provider.

The runner is a supervision boundary (ARCHITECTURE convention 6): it catches every `Exception` a
tool raises, logs it, and answers the model with the error text; only KeyboardInterrupt / SystemExit
pass through, so Ctrl-C still cancels a turn. Every result's text is masked (hermit.redaction: API keys,
channel tokens, the gateway token become `***`) before the transcript or the provider sees it.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from hermit.errors import HermitError
from hermit.messages import INVALID_ARGUMENTS_KEY, ToolCallPart, ToolResultMessage
from hermit.models.base import ToolSchema
from hermit.redaction import mask

log = logging.getLogger("hermit.tools")

DEFAULT_MAX_RESULT_CHARS = 60_000


@dataclass(frozen=True)
class ToolOutput:
    """What a tool may return instead of a plain value when it must flag its result as an error
    while still handing text to the model (e.g. a timed-out command with its partial output)."""

    text: str
    is_error: bool = False


ToolReturn = str | Mapping[str, Any] | Sequence[Any] | ToolOutput


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    function: Callable[..., ToolReturn]
    arguments: type[BaseModel]

    @property
    def schema(self) -> ToolSchema:
        raw = self.arguments.model_json_schema(by_alias=True)
        return ToolSchema(self.name, self.description, clean_schema(raw))

    def parameter_names(self) -> list[str]:
        return [f.alias or n for n, f in self.arguments.model_fields.items()]


def make_tool(function: Callable[..., ToolReturn], *, name: str | None = None,
              description: str | None = None) -> Tool:
    """A Tool from a typed function; the description defaults to the docstring's first paragraph."""
    tool_name = name or function.__name__
    hints = get_type_hints(function, include_extras=True)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(function).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name}: *args/**kwargs cannot become a schema")
        if pname not in hints:
            raise TypeError(f"tool {tool_name}: parameter {pname!r} needs a type annotation")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (hints[pname], default)
    model = create_model(
        f"{tool_name}_arguments",
        __config__=ConfigDict(extra="forbid", populate_by_name=False),
        **fields,
    )
    doc = description if description is not None else inspect.getdoc(function) or ""
    return Tool(tool_name, doc.split("\n\n", 1)[0].replace("\n", " ").strip(), function, model)


def clean_schema(schema: Any) -> Any:
    """Drop titles and null defaults; turn `anyOf: [X, null]` into X (the field is simply optional)."""
    if isinstance(schema, list):
        return [clean_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    any_of = schema.get("anyOf")
    if isinstance(any_of, list):
        non_null = [s for s in any_of if not (isinstance(s, dict) and s.get("type") == "null")]
        if len(non_null) == 1 and len(non_null) < len(any_of):
            merged = {k: v for k, v in schema.items() if k != "anyOf"}
            merged.update(non_null[0])
            schema = merged
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and value is None:
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {k: clean_schema(v) for k, v in value.items()}
        else:
            out[key] = clean_schema(value)
    return out


def format_error(exc: BaseException) -> str:
    if isinstance(exc, HermitError):
        return f"error: {exc.message}" + (f"\nhint: {exc.hint}" if exc.hint else "")
    return f"error: {type(exc).__name__}: {exc}"


def describe_validation(tool: Tool, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        if err["type"] == "extra_forbidden":
            problems.append(f"unexpected argument {where!r}")
        elif err["type"] == "missing":
            problems.append(f"missing required argument {where!r}")
        else:
            got = err.get("input")
            shown = json.dumps(got, ensure_ascii=False, default=str)[:80]
            problems.append(f"{where}: {err['msg']} (got {shown})")
    expected = ", ".join(tool.parameter_names())
    return (f"error: invalid arguments for tool {tool.name!r}: " + "; ".join(problems)
            + f"\nhint: {tool.name} takes: {expected}; fix the call and try again")


def render(value: ToolReturn) -> tuple[str, bool]:
    if isinstance(value, ToolOutput):
        return value.text, value.is_error
    if isinstance(value, str):
        return value, False
    return json.dumps(value, ensure_ascii=False, default=str), False


def cap_result(text: str, max_chars: int) -> str:
    """Keep the head and tail of an over-long result, saying how much was cut."""
    if len(text) <= max_chars:
        return text
    head = int(max_chars * 0.7)
    tail = int(max_chars * 0.25)
    cut = len(text) - head - tail
    return f"{text[:head]}\n\n[… {cut:,} of {len(text):,} chars omitted …]\n\n{text[-tail:]}"


@dataclass(frozen=True)
class ToolRun:
    """One executed call, for the loop's events and the turn result."""

    call: ToolCallPart
    result: ToolResultMessage
    seconds: float


class ToolRunner:
    """Runs tool calls by name; never raises for a tool's failure (only for KeyboardInterrupt)."""

    def __init__(self, tools: Sequence[Tool], *, max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
                 clock: Callable[[], float] = time.monotonic,
                 errors_shown: Callable[[str, Sequence[str]], str] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        # A chat's errors as it may see them (views.RoomView.hide_host): no host path, no agent id, whatever failed.
        self._errors_shown = errors_shown
        for t in tools:
            if t.name in self._tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self._tools[t.name] = t
        self.max_result_chars = max_result_chars
        self._clock = clock

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tuple(self._tools.values())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def schemas(self) -> tuple[ToolSchema, ...]:
        return tuple(t.schema for t in self._tools.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def run(self, call: ToolCallPart) -> ToolRun:
        start = self._clock()
        text, is_error = self._execute(call)
        if is_error and self._errors_shown is not None:
            text = self._errors_shown(text, [v for v in call.arguments.values() if isinstance(v, str)])
        # A key a command printed or a file held would otherwise be stored in the transcript and sent to the
        # provider: every result passes the process's secret masker (the logs' and errors' one) before the cap.
        result = ToolResultMessage(call.id, call.name, cap_result(mask(text), self.max_result_chars), is_error)
        return ToolRun(call, result, self._clock() - start)

    def _execute(self, call: ToolCallPart) -> tuple[str, bool]:
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools) or "(none)"
            return f"error: unknown tool {call.name!r}\nhint: the available tools are: {known}", True
        args = dict(call.arguments)
        if INVALID_ARGUMENTS_KEY in args:
            raw = str(args[INVALID_ARGUMENTS_KEY])[:200]
            return (f"error: the arguments of this {call.name} call were not a valid JSON object: {raw}\n"
                    f"hint: send the arguments as a JSON object with keys: "
                    f"{', '.join(tool.parameter_names())}"), True
        try:
            parsed = tool.arguments.model_validate(args)
        except ValidationError as e:
            return describe_validation(tool, e), True
        kwargs = {name: getattr(parsed, name) for name in tool.arguments.model_fields}
        try:
            return render(tool.function(**kwargs))
        except HermitError as e:
            return format_error(e), True
        except Exception as e:  # supervision boundary: a tool bug must not end the run
            log.warning("tool %s failed", call.name, exc_info=True)
            return format_error(e), True
