"""The human face of `hermit memory search`: labelled, separated results with cut marks and highlights.

A result's label names its source and, when the result carries one, its audience (who may see it:
owner, shared or a chat's key; memory/policy/audience.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from hermit.cli.terminal import one_line
from hermit.memory.search.fts import CJK_LETTERS, query_terms
from hermit.memory.search.snippets import stem

BOLD, RESET = "\x1b[1m", "\x1b[0m"
ELLIPSIS = "…"
_WORD = re.compile(r"[^\W_]+")


def wants_colour(stream: Any) -> bool:
    """Highlight on a terminal only, and never when NO_COLOR is set (no-color.org)."""
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR")


def highlighter(query: str) -> Callable[[str], str]:
    """Bold the words of a line that match a query term (same stems as search's line scoring)."""
    words: set[str] = set()
    cjk: list[str] = []
    for term in query_terms(query):
        for part in term.lower().split():
            if _WORD.fullmatch(part) and part.isascii():
                words.add(stem(part))
            else:
                cjk.append(re.escape(part))
    # CJK terms first (longest first), then a Latin word, then one CJK character at a time.
    pattern = re.compile("|".join([*sorted(cjk, key=len, reverse=True), f"[^\\W_{CJK_LETTERS}]+", f"[{CJK_LETTERS}]"]))

    def mark(line: str) -> str:
        def sub(m: re.Match[str]) -> str:
            w = m.group(0)
            hit = (w.isascii() and stem(w) in words) or (not w.isascii() and any(re.fullmatch(c, w) for c in cjk))
            return f"{BOLD}{w}{RESET}" if hit else w
        return pattern.sub(sub, line)

    return mark


def render_results(results: list[dict[str, Any]], query: str, file_lines: Callable[[str], list[str] | None],
                   colour: bool) -> str:
    """Each result: a label with the snippet's own lines (and its audience), its text indented, "…" where the file's text
    goes on beyond what is shown, a blank line between results."""
    mark = highlighter(query) if colour else (lambda s: s)
    blocks: list[str] = []
    for r in results:
        a, b = int(r["startLine"]), int(r["endLine"])
        path = one_line(r["path"])
        where = f"{path}:{a}" if a == b else f"{path}:{a}-{b}"
        label = f"{r['source']} · {r['audience']}" if r.get("audience") else str(r["source"])
        out = [f"{r['score']:.3f}  {where}  [{label}]"]
        lines = str(r["snippet"]).split("\n")
        whole = file_lines(str(r["path"]))
        before = after = False
        if whole is not None and 1 <= a <= b <= len(whole):
            before = a > 1 and bool(whole[a - 2].strip())
            after = b < len(whole) and bool(whole[b].strip())
            # A long line cut to fit: the shown text is only part of that line.
            first, last = whole[a - 1], whole[b - 1]
            cut_head = first.find(lines[0]) > 0
            end = last.rfind(lines[-1])
            cut_tail = end >= 0 and end + len(lines[-1]) < len(last)
            if cut_head:
                lines[0] = ELLIPSIS + lines[0]
            if cut_tail:
                lines[-1] = lines[-1] + ELLIPSIS
        if before:
            out.append(f"    {ELLIPSIS}")
        out.extend(f"    {mark(ln)}" for ln in lines)
        if after:
            out.append(f"    {ELLIPSIS}")
        blocks.append("\n".join(out))
    return "\n\n".join(blocks)
