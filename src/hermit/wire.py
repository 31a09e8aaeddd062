"""Untrusted JSON at an edge (webhooks, web chat frames, MCP lines): parsed within a depth cap, made valid Unicode.

`json.loads` raises RecursionError (not ValueError) on deeply nested input such as 200 KB of `[[[[…`,
which escaped every `except ValueError` and became a traceback or a dropped connection; and a lone
surrogate escape (`"\\ud800"`) parses fine but then fails every UTF-8 write (journal, transcript, index,
socket). Every edge parses through here and gets one `WireError` with a short reason for all three.
"""

from __future__ import annotations

import json
from typing import Any

from hermit.messages import valid_json

MAX_DEPTH = 64  # far deeper than any platform event or protocol frame nests; shallow enough to walk cheaply


class WireError(ValueError):
    """Input that is not usable JSON: `reason` is short enough to send back to the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _depth_over(value: Any, limit: int) -> bool:
    """Whether `value` nests containers deeper than `limit` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def load_json(raw: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """`raw` parsed, at most `max_depth` containers deep, every string (keys too) valid Unicode."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise WireError(f"JSON nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError:
        raise WireError("not UTF-8 text") from None
    except ValueError as e:
        raise WireError(f"not valid JSON ({e})") from None
    if _depth_over(value, max_depth):
        raise WireError(f"JSON nested deeper than {max_depth} levels")
    return valid_json(value)


def load_object(raw: str | bytes, *, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """Like `load_json`, and the top level must be an object (what every platform event and frame is)."""
    value = load_json(raw, max_depth=max_depth)
    if not isinstance(value, dict):
        raise WireError(f"the JSON is {_kind(value)}, not an object")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return "a number"
