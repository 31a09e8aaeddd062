"""Line-aligned chunking of Markdown: ~N tokens per chunk with whole-line overlap, exact line numbers.

A fact on a chunk boundary lands in both neighbouring chunks because the overlap is made of whole
trailing lines. A single line longer than a chunk is split into pieces that all carry that line number.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from hermit.tokens import estimate_tokens


@dataclass(frozen=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str
    hash: str


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _make(lines: list[tuple[int, str]]) -> Chunk:
    text = "\n".join(t for _, t in lines)
    return Chunk(lines[0][0], lines[-1][0], text, text_hash(text))


def _split_long_line(lineno: int, line: str, max_tokens: int) -> list[Chunk]:
    pieces: list[Chunk] = []
    start = 0
    while start < len(line):
        # Grow the piece by characters until its estimate reaches the budget.
        lo, hi = start + 1, len(line)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if estimate_tokens(line[start:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        end = max(lo, start + 1)
        # Prefer to cut at whitespace when one is near the end of the piece.
        if end < len(line):
            space = line.rfind(" ", start + (end - start) // 2, end)
            if space > start:
                end = space + 1
        piece = line[start:end]
        if piece.strip():
            pieces.append(Chunk(lineno, lineno, piece, text_hash(piece)))
        start = end
    return pieces


def chunk_markdown(text: str, max_tokens: int = 400, overlap_tokens: int = 80) -> list[Chunk]:
    """Split `text` into line-aligned chunks of about `max_tokens` with `overlap_tokens` of overlap."""
    if overlap_tokens >= max_tokens:
        raise ValueError("overlap_tokens must be smaller than max_tokens")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    chunks: list[Chunk] = []
    cur: list[tuple[int, str, int]] = []  # (lineno, text, tokens)
    cur_tokens = 0

    def emit() -> None:
        nonlocal cur, cur_tokens
        if any(t.strip() for _, t, _ in cur):
            chunks.append(_make([(n, t) for n, t, _ in cur]))
        # Carry whole trailing lines into the next chunk as overlap.
        carry: list[tuple[int, str, int]] = []
        total = 0
        for item in reversed(cur):
            if total + item[2] > overlap_tokens:
                break
            carry.insert(0, item)
            total += item[2]
        # With overlap on, at least the last line is shared, even when it alone exceeds the budget
        # (but not past half a chunk), so a fact on the boundary is in both chunks.
        if not carry and overlap_tokens > 0 and cur and cur[-1][2] <= max_tokens // 2:
            carry, total = [cur[-1]], cur[-1][2]
        if len(carry) == len(cur):  # never carry a whole chunk: that would not progress
            carry = carry[1:]
            total = sum(i[2] for i in carry)
        cur, cur_tokens = carry, total

    for idx, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        tok = estimate_tokens(line) + 1  # +1 for the newline
        if tok > max_tokens:
            if cur:
                emit()
                cur, cur_tokens = [], 0
            chunks.extend(_split_long_line(idx, line, max_tokens))
            continue
        is_heading = line.startswith("#")
        if cur and (cur_tokens + tok > max_tokens or (is_heading and cur_tokens >= max_tokens // 2)):
            emit()
            # A carried tail that, with this line, would overflow again is dropped.
            while cur and cur_tokens + tok > max_tokens:
                cur_tokens -= cur[0][2]
                cur = cur[1:]
        cur.append((idx, line, tok))
        cur_tokens += tok
    # The last chunk: skip it when it is only overlap already present in the previous chunk.
    if cur and any(t.strip() for _, t, _ in cur) and (not chunks or cur[-1][0] > chunks[-1].end_line):
        chunks.append(_make([(n, t) for n, t, _ in cur]))
    return chunks


def line_texts(text: str, max_tokens: int = 400) -> dict[int, str]:
    """The lines that get a vector of their own (line number → text): every non-blank line short
    enough to be one chunk's line. A longer line is split into several chunks, whose vectors it has."""
    out: dict[int, str] = {}
    for n, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if line.strip() and estimate_tokens(line) + 1 <= max_tokens:
            out[n] = line
    return out
