"""Editing a config file's text in place without losing what the user wrote: append agents to
`agents.list` (`hermit agents add`), set or remove single keys (`hermit setup`).

Agents are appended textually where the layout is plain block style (the new lines are inserted, every
existing line — comments, quoting, flow maps, indentation — stays byte for byte), and through a
round-trip YAML library (ruamel.yaml, which keeps comments) otherwise; keys are set through ruamel.
Either way the result is parsed back and must equal the intended data, or nothing is returned. JSON has
no comments to keep.
"""

from __future__ import annotations

import copy
import io
import json
import re
from collections.abc import Sequence
from typing import Any

import yaml

from hermit.errors import ConfigError

_RESERVED = {"null", "Null", "NULL", "~", "true", "True", "TRUE", "false", "False", "FALSE", "yes", "no", "on", "off"}


def _scalar(v: Any) -> str:
    plain = isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_/~][A-Za-z0-9_./~-]*", v) and v not in _RESERVED
    return str(v) if plain else json.dumps(v, ensure_ascii=False)


def _entry_lines(entry: dict[str, Any], dash_col: int) -> list[str]:
    lines = []
    for n, (k, v) in enumerate(entry.items()):
        lead = " " * dash_col + "- " if n == 0 else " " * (dash_col + 2)
        lines.append(f"{lead}{k}: {_scalar(v)}\n")
    return lines


def _end_line(lines: list[str], mark: yaml.Mark) -> int:
    """Exclusive end line of a block node: its end mark sits on the first token after it."""
    if mark.line >= len(lines):
        return len(lines)
    text = lines[mark.line]
    return mark.line + (1 if mark.column > len(text) - len(text.lstrip()) else 0)


def _block_end(lines: list[str], start: int, end: int, min_col: int) -> int:
    """Index just past the last line of a block spanning [start, end) whose content sits at column >=
    min_col: trailing blank lines and comments outdented below the block belong to what follows."""
    last = start
    for i in range(start, min(end, len(lines))):
        text = lines[i]
        stripped = text.lstrip()
        if not stripped.strip():
            continue
        if stripped.startswith("#") and len(text) - len(stripped) < min_col:
            continue
        last = i
    return last + 1


def _indent_step(root: yaml.MappingNode) -> int:
    for _, v in root.value:
        if isinstance(v, yaml.MappingNode) and v.value:
            return max(1, v.value[0][0].start_mark.column)
    return 2


def _textual_append(text: str, entries: list[dict[str, Any]]) -> str | None:
    """Insert `entries` as new lines; None when the layout is not plain block style."""
    root = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if root is None:
        step = 2
        block = ["agents:\n", " " * step + "list:\n"] + [ln for e in entries for ln in _entry_lines(e, step)]
        return "".join(lines + block)
    if not isinstance(root, yaml.MappingNode) or root.flow_style:
        return None
    step = _indent_step(root)
    agents = next((v for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "agents"), None)
    if agents is None:
        block = ["agents:\n", " " * step + "list:\n"] + [ln for e in entries for ln in _entry_lines(e, step)]
        sep = ["\n"] if lines and lines[-1].strip() else []
        return "".join(lines + sep + block)
    if not isinstance(agents, yaml.MappingNode) or agents.flow_style or not agents.value:
        return None
    key_col = agents.value[0][0].start_mark.column
    seq = next((v for k, v in agents.value if isinstance(k, yaml.ScalarNode) and k.value == "list"), None)
    if seq is None:
        at = _block_end(lines, agents.start_mark.line, _end_line(lines, agents.end_mark), key_col)
        block = [" " * key_col + "list:\n"] + [ln for e in entries for ln in _entry_lines(e, key_col + step)]
        return "".join(lines[:at] + block + lines[at:])
    if not isinstance(seq, yaml.SequenceNode) or seq.flow_style or not seq.value:
        return None
    first = seq.value[0].start_mark
    dash_col = lines[first.line].rfind("-", 0, first.column)
    if dash_col < 0:
        return None
    at = _block_end(lines, seq.start_mark.line, _end_line(lines, seq.end_mark), dash_col)
    block = [ln for e in entries for ln in _entry_lines(e, dash_col)]
    return "".join(lines[:at] + block + lines[at:])


def _roundtrip_append(text: str, entries: list[dict[str, Any]]) -> str:
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.util import load_yaml_guess_indent

    _, indent, seq_offset = load_yaml_guess_indent(text) if text.strip() else (None, 2, 0)
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096
    rt.indent(mapping=indent or 2, sequence=(indent or 2) + (seq_offset or 0), offset=seq_offset or 0)
    data = rt.load(text) or CommentedMap()
    agents = data.get("agents")
    if agents is None:
        agents = data["agents"] = CommentedMap()
    if agents.get("list") is None:
        agents["list"] = CommentedSeq()
    agents["list"].extend(entries)
    out = io.StringIO()
    rt.dump(data, out)
    return out.getvalue()


def append_agents(text: str, entries: list[dict[str, Any]], *, is_yaml: bool, source: str) -> str:
    """`text` with `entries` appended to agents.list, everything else kept; raises if that cannot be done."""
    before = (yaml.safe_load(text) if is_yaml else json.loads(text)) if text.strip() else {}
    before = before or {}
    agents = dict(before.get("agents") or {})
    agents["list"] = [*(agents.get("list") or []), *entries]
    want = {**before, "agents": agents}
    if not is_yaml:
        return json.dumps(want, indent=2, ensure_ascii=False) + "\n"
    for attempt in (_textual_append, _roundtrip_append):
        new = attempt(text, entries)
        if new is not None and yaml.safe_load(new) == want:
            return new
    raise ConfigError(f"{source}: could not add the agent without changing other settings",
                      "add it by hand under agents.list (e.g. `- id: work`)")


class _Delete:
    """The value that removes a key (`set_values`)."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE: Any = _Delete()
Update = tuple[Sequence[str], Any]  # (key path, value or DELETE)


def _put(node: Any, key: str, value: Any, at_front: bool) -> None:
    """Set node[key]; a new key of an existing nested ruamel mapping goes first in it (at its end it
    would land after comment lines that follow the mapping's last key)."""
    if at_front and key not in node and hasattr(node, "insert"):
        node.insert(0, key, value)
    else:
        node[key] = value


def _apply(data: dict[str, Any], updates: Sequence[Update], new_map: Any) -> None:
    fresh: set[int] = set()  # mappings created here keep the order the keys are given in
    for path, value in updates:
        node = data
        for depth, key in enumerate(path[:-1]):
            child = node.get(key)
            if not isinstance(child, dict):
                if value is DELETE:
                    break
                child = new_map()
                fresh.add(id(child))
                _put(node, key, child, depth > 0 and id(node) not in fresh)
            node = child
        else:
            if value is DELETE:
                node.pop(path[-1], None)
            else:
                _put(node, path[-1], value, len(path) > 1 and id(node) not in fresh)


def _yaml_rt() -> Any:
    from ruamel.yaml import YAML

    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096
    return rt


_KEY_ONLY = re.compile(r"^(\s*)[^\s#-][^#]*:\s*(#.*)?$")


def guess_indent(text: str) -> tuple[int, int, int]:
    """(mapping, sequence, offset) for ruamel's `indent()`, as the file is written. ruamel's guess returns the
    indent of the first block sequence's items when the file has one (4 for `list:` then `    - id: main`, as
    `hermit agents add` writes it), which set as the mapping indent re-indented every other line of the file."""
    from ruamel.yaml.util import load_yaml_guess_indent

    if not text.strip():
        return 2, 2, 0
    mapping, parent = 0, None
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        col = len(line) - len(stripped)
        if parent is not None and col > parent and not stripped.startswith("- "):
            mapping = col - parent
            break
        key_only = _KEY_ONLY.match(line)
        parent = len(key_only.group(1)) if key_only else None
    mapping = mapping or 2
    _, seq_indent, seq_offset = load_yaml_guess_indent(text)
    if seq_offset is None:  # no block sequence: new ones are written in flow style anyway
        return mapping, mapping, 0
    return mapping, seq_indent or mapping, seq_offset


def set_values(text: str, updates: Sequence[Update], *, is_yaml: bool, source: str) -> str:
    """`text` with each key path set to its value (mappings created on the way) or removed (DELETE);
    every other key, comment and the layout kept. Raises ConfigError if that cannot be done exactly."""
    before = (yaml.safe_load(text) if is_yaml else json.loads(text)) if text.strip() else {}
    if not isinstance(before or {}, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys", "start with `agents:`")
    want = copy.deepcopy(before or {})
    _apply(want, updates, dict)
    if not is_yaml:
        return json.dumps(want, indent=2, ensure_ascii=False) + "\n"
    from ruamel.yaml.comments import CommentedMap

    rt = _yaml_rt()
    mapping, sequence, offset = guess_indent(text)
    rt.indent(mapping=mapping, sequence=sequence, offset=offset)
    data = rt.load(text) if text.strip() else None
    if data is None:
        data = CommentedMap()
    had = list(data)
    _apply(data, [(p, _plain_to_rt(v)) for p, v in updates], CommentedMap)
    # A new top-level section goes after the file's closing comments, as if typed at its end: ruamel keeps those
    # comments last, so they came after the new section's lines, the indented ones (the template's `# list:` of
    # agents) reading as part of it. The rest is written as it was, the new sections after it.
    added = CommentedMap((k, data.pop(k)) for k in list(data) if k not in had) if had else CommentedMap()
    out = io.StringIO()
    rt.dump(data, out)
    new = out.getvalue()
    if added:
        out = io.StringIO()
        rt.dump(added, out)
        new = (new if new.endswith("\n") else new + "\n") + out.getvalue()
    if (yaml.safe_load(new) or {}) != want:
        raise ConfigError(f"{source}: could not change {', '.join('.'.join(p) for p, _ in updates)} without "
                          "changing other settings", "make the change by hand (see docs/guide.md, 'Configuration')")
    return new


def _plain_to_rt(value: Any) -> Any:
    """Plain dicts and lists as ruamel's commented types, so they are written in block style."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if value is DELETE:
        return value
    if isinstance(value, dict):
        m = CommentedMap()
        for k, v in value.items():
            m[k] = _plain_to_rt(v)
        return m
    if isinstance(value, list):
        seq = CommentedSeq(_plain_to_rt(v) for v in value)
        seq.fa.set_flow_style()  # a short list of ids reads best on one line: [123, 456]
        return seq
    return value
