"""FTS5's keyword search, reproduced on PostgreSQL: the same tokens, the same MATCH subset, the same BM25.

A tsvector built by a PostgreSQL text-search configuration would not match FTS5 (its stemmer differs,
and with the C locale its parser drops CJK). So each chunk is tokenised at index time by FTS5 itself
(`porter unicode61 remove_diacritics 2` over fts.index_text, via an in-memory SQLite) and stored as a
tsvector literal of exactly those tokens with their positions, plus the token count. A MATCH
expression (quoted phrases joined by OR / AND, parentheses; what memory.search.fts builds) becomes a tsquery
of the same tokens (`<->` for a phrase), answered by a GIN index. BM25 is FTS5's formula — its idf
(document counts per phrase over the whole index), k1 = 1.2, b = 0.75, document lengths in tokens —
with term frequencies counted from the stored positions of the matching rows only.

Known difference: a tsvector keeps at most 256 positions per token and positions up to 16383, so a
token repeated more than 256 times in one chunk counts as 256 (FTS5 counts them all).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hermit.errors import IndexError_
from hermit.memory.search.fts import index_text
from hermit.memory.search.keyword import K1, B, FtsTokens

MAX_POSITION = 16383  # tsvector positions stop here


@dataclass(frozen=True)
class Phrase:
    tokens: tuple[str, ...]


@dataclass(frozen=True)
class Node:
    op: str  # "or" | "and"
    parts: tuple[Node | Phrase, ...]


Expr = Node | Phrase
_LEX = re.compile(r'\s*(?:"((?:[^"]|"")*)"|(\()|(\))|(OR|AND)\b)')


def _quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


class Tokenizer:
    """FTS5's own tokens for documents and query phrases (shares memory.search.keyword's tokenizer)."""

    def __init__(self) -> None:
        self.fts = FtsTokens()

    def documents(self, texts: Sequence[str]) -> list[tuple[str, int]]:
        """(tsvector literal, token count) of each chunk text, as FTS5 indexes `index_text(text)`."""
        out: list[tuple[str, int]] = []
        for where, n in self.fts.positions([index_text(t) for t in texts]):
            # tsvector positions are 1-based; PostgreSQL keeps 256 per token, clamped to 16383.
            literal = " ".join(
                f"{_quote(tok)}:{','.join(str(min(p + 1, MAX_POSITION)) for p in sorted(ps)[:256])}"
                for tok, ps in where.items())
            out.append((literal, n))
        return out

    def parse(self, match: str) -> Expr | None:
        """Parse the MATCH subset memory.search.fts emits; None when no phrase has a token (matches nothing)."""
        items: list[str | tuple[str]] = []  # operators and parentheses as str, phrases as 1-tuples
        pos = 0
        while pos < len(match):
            if not match[pos:].strip():
                break
            m = _LEX.match(match, pos)
            if m is None:
                raise IndexError_(f"unsupported keyword query syntax at {match[pos:pos + 20]!r}",
                                  "only quoted phrases joined by OR / AND are supported")
            if m.group(1) is not None:
                items.append((m.group(1).replace('""', '"'),))
            else:
                items.append(m.group(2) or m.group(3) or m.group(4))
            pos = m.end()
        phrases = [i[0] for i in items if isinstance(i, tuple)]
        toks = dict(zip(phrases, self.fts.tokens(phrases), strict=True))
        expr, rest = _or(items, toks)
        if rest:
            raise IndexError_("unbalanced keyword query", "only quoted phrases joined by OR / AND are supported")
        return expr


def _or(items: list[str | tuple[str]], toks: dict[str, tuple[str, ...]]) -> tuple[Expr | None, list[str | tuple[str]]]:
    parts: list[Expr | None] = []
    left, items = _and(items, toks)
    parts.append(left)
    while items and items[0] == "OR":
        right, items = _and(items[1:], toks)
        parts.append(right)
    live = tuple(p for p in parts if p is not None)
    if not live:
        return None, items
    return (live[0] if len(live) == 1 else Node("or", live)), items


def _and(items: list[str | tuple[str]], toks: dict[str, tuple[str, ...]]) -> tuple[Expr | None, list[str | tuple[str]]]:
    parts: list[Expr | None] = []
    first, items = _primary(items, toks)
    parts.append(first)
    # FTS5: `a AND b`, and `a b` (implicit AND).
    while items and (items[0] == "AND" or items[0] == "(" or isinstance(items[0], tuple)):
        if items[0] == "AND":
            items = items[1:]
        nxt, items = _primary(items, toks)
        parts.append(nxt)
    if any(p is None for p in parts):
        return None, items  # a phrase with no token matches nothing, so neither does the AND
    live = tuple(p for p in parts if p is not None)
    return (live[0] if len(live) == 1 else Node("and", live)), items


def _primary(items: list[str | tuple[str]], toks: dict[str, tuple[str, ...]]) -> tuple[Expr | None, list[str | tuple[str]]]:
    if not items:
        raise IndexError_("incomplete keyword query", "only quoted phrases joined by OR / AND are supported")
    head = items[0]
    if isinstance(head, tuple):
        t = toks.get(head[0], ())
        return (Phrase(t) if t else None), items[1:]
    if head == "(":
        expr, rest = _or(items[1:], toks)
        if not rest or rest[0] != ")":
            raise IndexError_("unbalanced keyword query", "only quoted phrases joined by OR / AND are supported")
        return expr, rest[1:]
    raise IndexError_(f"unexpected {head!r} in keyword query", "only quoted phrases joined by OR / AND are supported")


def to_tsquery(expr: Expr) -> str:
    if isinstance(expr, Phrase):
        return "(" + " <-> ".join(_quote(t) for t in expr.tokens) + ")"
    joiner = " | " if expr.op == "or" else " & "
    return "(" + joiner.join(to_tsquery(p) for p in expr.parts) + ")"


def phrases(expr: Expr) -> list[Phrase]:
    """Every phrase instance in order (FTS5 scores each instance, duplicates included)."""
    if isinstance(expr, Phrase):
        return [expr]
    return [p for part in expr.parts for p in phrases(part)]


def phrase_count(phrase: Phrase, positions: Mapping[str, Sequence[int]]) -> int:
    """Occurrences of `phrase` in one document, from its tokens' positions."""
    first = positions.get(phrase.tokens[0])
    if not first:
        return 0
    if len(phrase.tokens) == 1:
        return len(first)
    rest = [set(positions.get(t, ())) for t in phrase.tokens[1:]]
    return sum(1 for p in first if all(p + k + 1 in s for k, s in enumerate(rest)))


def bm25(instances: list[Phrase], df: dict[Phrase, int], n_docs: int, avgdl: float,
         doc_len: int, positions: Mapping[str, Sequence[int]]) -> float:
    """FTS5's bm25() for one document, sign-corrected (higher = better)."""
    if n_docs <= 0 or avgdl <= 0:
        return 0.0
    norm = K1 * (1 - B + B * doc_len / avgdl)
    score = 0.0
    for ph in instances:
        f = phrase_count(ph, positions)
        if not f:
            continue
        d = df.get(ph, 0)
        idf = math.log((n_docs - d + 0.5) / (d + 0.5))
        if idf <= 0:
            idf = 1e-6
        score += idf * f * (K1 + 1) / (f + norm)
    return score
