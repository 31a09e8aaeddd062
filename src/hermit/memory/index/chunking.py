"""Line-aligned chunking of Markdown: ~N tokens per chunk with whole-line overlap, exact line numbers.

A fact on a chunk boundary lands in both neighbouring chunks because the overlap is made of whole
trailing lines. A single line longer than a chunk is split into pieces that all carry that line number,
and every piece starts with the labels that say whose words it holds (`_split_long_line`).

A file with origin blocks (memory/policy/provenance.py) is chunked run by run: a run is a stretch of lines of
one audience (blocks of the same audience next to each other, blank lines between them included), so
no chunk and no overlap holds lines of two audiences and search can withhold a chunk whole
(memory/policy/audience.py). The marker lines themselves are indexed as blank lines: they would otherwise put
"origin session agent main audience owner" into every note's words and vector.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from hermit.memory.policy.provenance import CLOSE_LINE, origin_blocks
from hermit.messages import label_spans, line_label
from hermit.tokens import estimate_tokens

MARKER = "<!-- origin"
# Part of the index identity (memory.index.sync): an index chunked by an older chunker is rebuilt once, so
# no chunk straddles two audiences (search would withhold it whole) and every piece of a long line carries
# the line's labels (an older index returns a forwarded message's tail bare). Unchanged chunks come from
# the embedding cache, so the rebuild embeds only what changed: files with origin blocks, long lines.
CHUNKER_ID = "audience-runs-1+labelled-pieces"


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
    """The pieces of a line longer than a chunk. Each piece after the first starts with the labels in force
    where it starts (messages.line_label: the line's speaker, a forward header, the quote marker), so a
    stranger's words in the tail of a long line are still marked as theirs when the piece is found alone.
    A piece is cut at a space near its end where there is one, never inside a label, and is at most
    `max_tokens` with its label, unless the label alone is over half of that (a chunk size under ~120
    tokens): then the label is kept whole and the piece gets half a chunk of text after it."""
    spans = label_spans(line)
    pieces: list[Chunk] = []
    start = 0
    while start < len(line):
        label = line_label(line, start)
        budget = max(max_tokens, estimate_tokens(label) + max_tokens // 2)
        # Grow the piece by characters until its estimate reaches the budget.
        lo, hi = start + 1, len(line)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if estimate_tokens(label + line[start:mid]) <= budget:
                lo = mid
            else:
                hi = mid - 1
        end = max(lo, start + 1)
        # Prefer to cut at whitespace when one is near the end of the piece.
        if end < len(line):
            space = line.rfind(" ", start + (end - start) // 2, end)
            if space > start:
                end = space + 1
        for a, b in spans:
            if a < end < b:  # inside a label: cut before it, or after it when the piece starts with it
                end = a if a > start else b
        piece = label + line[start:end]
        if line[start:end].strip():
            pieces.append(Chunk(lineno, lineno, piece, text_hash(piece)))
        start = end
    return pieces


def index_lines(text: str) -> list[str]:
    """The lines of `text` as the index holds them: a trailing '\\r' dropped, origin markers blank."""
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    if MARKER in text:
        for n in _marker_lines(lines):
            lines[n - 1] = ""
    return lines


def _marker_lines(lines: list[str]) -> list[int]:
    """1-based numbers of the opening and closing marker lines of the blocks in `lines`."""
    out: list[int] = []
    for b in origin_blocks("\n".join(lines)):
        out.append(b.start)
        if b.end != b.start and lines[b.end - 1].strip() == CLOSE_LINE:
            out.append(b.end)
    return out


def _runs(text: str, lines: list[str]) -> list[list[tuple[int, str]]]:
    """`lines` (index form) numbered and cut into runs of one audience label (None outside blocks);
    a blank line outside blocks joins the run it is in."""
    label: list[str | None] = [None] * len(lines)
    for b in origin_blocks(text):
        aud = b.origin.audience if b.origin.audience is not None else f"session={b.origin.session}"
        for n in range(b.start, min(b.end, len(lines)) + 1):
            label[n - 1] = aud
    runs: list[list[tuple[int, str]]] = []
    current: str | None = None
    for n, line in enumerate(lines, start=1):
        mine = label[n - 1]
        blank_outside = mine is None and not line.strip()
        if not runs or (not blank_outside and mine != current):
            runs.append([])
            current = mine
        runs[-1].append((n, line))
    return runs


def chunk_markdown(text: str, max_tokens: int = 400, overlap_tokens: int = 80) -> list[Chunk]:
    """Split `text` into line-aligned chunks of about `max_tokens` with `overlap_tokens` of overlap."""
    if overlap_tokens >= max_tokens:
        raise ValueError("overlap_tokens must be smaller than max_tokens")
    if MARKER not in text:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return _chunk_lines(list(enumerate(lines, start=1)), max_tokens, overlap_tokens)
    lines = index_lines(text)
    if lines and lines[-1] == "":
        lines.pop()
    out: list[Chunk] = []
    for run in _runs(text, lines):
        out.extend(_chunk_lines(run, max_tokens, overlap_tokens))
    return out


def _chunk_lines(numbered: list[tuple[int, str]], max_tokens: int, overlap_tokens: int) -> list[Chunk]:
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

    for idx, raw in numbered:
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
    for n, raw in enumerate(index_lines(text) if MARKER in text else text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if line.strip() and estimate_tokens(line) + 1 <= max_tokens:
            out[n] = line
    return out
