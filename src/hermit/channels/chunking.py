"""Reply chunking: split a reply into messages within a channel's character and line limits (SPEC §15).

Where to break, best first: a paragraph boundary, a line break, the end of a sentence, a space, and
only then anywhere (CJK text has no spaces) — but never inside a grapheme cluster (an emoji with skin
tone or ZWJ, a flag, an accented letter) and never inside a ``` fence: when one fenced block is longer
than a message, the chunk closes the fence at its end and the next chunk reopens it with the same info
string, so every chunk renders as valid Markdown. A chunk's length is within the limit counted in code
points and in UTF-16 code units (Telegram's count, where an emoji takes 2-4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import regex

__all__ = ["chunk_text"]


_FENCE_RE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_SENTENCE_END_RE = re.compile(r"[.!?…][\"')\]]*\s+|[。！？；]")
_GRAPHEME_RE = regex.compile(r"\X")
_MIN_CHARS = 24  # a reopened fence, one character and a closing fence must fit
_MIN_LINES = 3


@dataclass(frozen=True)
class _Fence:
    start: int  # index of the opening line in the text scanned
    marker: str  # ``` or ~~~~ … (closing needs the same character, at least as long)
    opener: str  # the opening line without indentation: marker + info string


def _fence_state(text: str) -> tuple[list[tuple[int, int]], _Fence | None]:
    """Spans (start of opening line, end of closing line) of closed fences, and the fence still open."""
    spans: list[tuple[int, int]] = []
    open_fence: _Fence | None = None
    pos = 0
    for line in text.split("\n"):
        m = _FENCE_RE.match(line)
        if m:
            marker, info = m.group(2), m.group(3)
            if open_fence is None:
                if not (marker[0] == "`" and "`" in info):  # a backtick info string cannot hold backticks
                    open_fence = _Fence(pos, marker, marker + info.rstrip())
            elif marker[0] == open_fence.marker[0] and len(marker) >= len(open_fence.marker) and not info.strip():
                spans.append((open_fence.start, pos + len(line)))
                open_fence = None
        pos += len(line) + 1
    return spans, open_fence


def _inside(spans: list[tuple[int, int]], open_fence: _Fence | None, i: int) -> bool:
    """Is a break at index i (the chunk would be text[:i]) inside a fenced block?"""
    if open_fence is not None and i > open_fence.start:
        return True
    return any(s < i < e for s, e in spans)


def _closes(line: str, fence: _Fence) -> bool:
    m = _FENCE_RE.match(line)
    return bool(m and m.group(2)[0] == fence.marker[0] and len(m.group(2)) >= len(fence.marker)
                and not m.group(3).strip())


def _grapheme_cut(text: str, limit: int) -> int:
    """The largest cut ≤ limit that does not split a grapheme cluster (at least one code point)."""
    cut = 0
    for m in _GRAPHEME_RE.finditer(text, 0, min(len(text), limit + 64)):
        if m.end() > limit:
            break
        cut = m.end()
    return cut or max(1, min(limit, len(text)))  # a cluster longer than the limit (absurd): cut it


def _starts_fence(text: str, start: int) -> bool:
    # Breaking mid-line makes the remainder a line of its own: "see ```x```" must not become a fence.
    nl = text.find("\n", start)
    return bool(_FENCE_RE.match(text[start:nl if nl >= 0 else len(text)]))


def _safe_cut(text: str, base: int, end: int) -> int:
    """A cut in (base, end] between grapheme clusters whose remainder does not start like a fence."""
    cut = base + _grapheme_cut(text[base:], end - base)
    while _starts_fence(text, cut) and cut - base > 1:  # back off before the run of backticks
        cut = base + _grapheme_cut(text[base:], cut - base - 1)
    return cut


def _window(text: str, max_chars: int, max_lines: int | None) -> int:
    """How much of `text` fits the limits, before choosing a break."""
    end = min(len(text), max_chars)
    if max_lines is not None:
        nl = -1
        for _ in range(max_lines):
            nl = text.find("\n", nl + 1, end)
            if nl < 0:
                break
        else:
            end = nl  # max_lines lines end at the max_lines-th newline
    return end


def _break(text: str, end: int, floor: int) -> tuple[int, int] | None:
    """(chunk end, next start) for a chunk within text[:end], after `floor`; None: the window ends in a fence."""
    line_end = text.find("\n", end)
    # Whole lines: a line cut by the window could look like a fence ("```js" cut to "```").
    spans, open_fence = _fence_state(text[:line_end] if line_end >= 0 else text)

    def ok(i: int) -> bool:
        return floor < i <= end and not _inside(spans, open_fence, i)

    def starts_fence(start: int) -> bool:
        return _starts_fence(text, start)

    for sep in ("\n\n", "\n"):  # paragraph, then line
        i = text.rfind(sep, floor + 1, end + len(sep))
        while i > floor:
            if ok(i):
                return i, i + len(sep)
            i = text.rfind(sep, floor + 1, i)
    if _inside(spans, open_fence, end):
        return None
    half = floor + (end - floor) // 2  # sentence and space breaks only past half, or chunks get silly
    best: tuple[int, int] | None = None
    for m in _SENTENCE_END_RE.finditer(text, half, end):
        stop = m.start() + len(m.group(0).rstrip())
        if ok(stop) and not starts_fence(m.end()):
            best = (stop, m.end())
    if best is not None:
        return best
    i = max(text.rfind(c, half, end) for c in " \t\u3000")
    if ok(i) and not starts_fence(i + 1):
        return i, i + 1
    cut = _safe_cut(text, floor, end)  # CJK, URLs: anywhere between clusters
    return cut, cut


def _split_fence(candidate: str, max_chars: int, max_lines: int | None) -> tuple[str, str, str]:
    """For a candidate that opens with a fence too long for one chunk: (chunk closed with the fence,
    the rest, the opening line to put before the rest)."""
    first, _, body = candidate.partition("\n")
    _, fence = _fence_state(first)
    if fence is None:  # not reached (a fence that starts later leaves a line break before it): cut safely
        cut = _safe_cut(candidate, 0, _window(candidate, max_chars, max_lines))
        return candidate[:cut], candidate[cut:], ""
    opener = fence.opener if len(fence.opener) + 1 <= max_chars // 2 else fence.marker
    head = opener + "\n"  # an absurd info string is dropped rather than eating the chunk
    closer = "\n" + fence.marker
    text = head + body
    end = _window(text, max_chars - len(closer), None if max_lines is None else max_lines - 1)
    nl = text.rfind("\n", len(head), end + 1)
    if nl >= len(head):
        stop, start = nl, nl + 1
    else:  # one code line longer than a message: cut it between grapheme clusters
        stop = start = _safe_cut(text, len(head), end)
    rest = text[start:]
    line, _, after = rest.partition("\n")
    if _closes(line, fence):  # the fence ends right here: nothing of it is left to reopen
        own = "\n" + line.rstrip()
        fits = stop + len(own) <= max_chars
        return text[:stop] + (own if fits else closer), after.lstrip("\n"), ""
    return text[:stop] + closer, rest, head


def chunk_text(text: str, max_chars: int, max_lines: int | None = None) -> list[str]:
    """Split `text` into chunks of at most `max_chars` characters and `max_lines` lines (see module doc)."""
    if max_chars < _MIN_CHARS:
        raise ValueError(f"max_chars must be at least {_MIN_CHARS}, got {max_chars}")
    if max_lines is not None and max_lines < _MIN_LINES:
        raise ValueError(f"max_lines must be at least {_MIN_LINES}, got {max_lines}")
    return [piece for c in _chunk(text, max_chars, max_lines) for piece in _fit_utf16(c, max_chars, max_lines)]


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", errors="surrogatepass")) // 2


def _fit_utf16(chunk: str, max_chars: int, max_lines: int | None) -> list[str]:
    """Telegram counts UTF-16 code units, in which an emoji is 2-4 long: a chunk over the limit there is
    split again with a proportionally smaller limit, so every chunk fits whichever way a platform counts."""
    units = _utf16_len(chunk)
    if units <= max_chars:
        return [chunk]
    smaller = len(chunk) * max_chars // units
    if smaller < _MIN_CHARS:
        return [chunk]  # only for limits under ~48: no real channel has one
    return [p for piece in _chunk(chunk, smaller, max_lines) for p in _fit_utf16(piece, max_chars, max_lines)]


def _chunk(text: str, max_chars: int, max_lines: int | None) -> list[str]:
    chunks: list[str] = []
    rest = text.strip("\n")
    prefix = ""  # a fence reopened at the start of the next chunk
    while rest.strip():
        candidate = prefix + rest
        if len(candidate) <= max_chars and (max_lines is None or candidate.count("\n") < max_lines):
            chunks.append(candidate.rstrip())
            break
        floor = max(0, len(prefix) - 1)  # a chunk must hold more than the reopened fence line
        end = _window(candidate, max_chars, max_lines)
        cut = _break(candidate, end, floor)
        if cut is None:
            chunk, rest, prefix = _split_fence(candidate, max_chars, max_lines)
        else:
            chunk, rest, prefix = candidate[:cut[0]], candidate[cut[1]:].lstrip("\n"), ""
        chunks.append(chunk.rstrip())
    return [c for c in chunks if c.strip()]
