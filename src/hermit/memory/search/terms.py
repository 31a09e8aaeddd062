"""Which of a query's terms a chunk holds: the exact-match rescue's test (words by crude stem, CJK by substring)."""

from __future__ import annotations

import re

from hermit.tokens import count_cjk


def _stem(word: str) -> str:
    for suffix in ("ing", "ies", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def term_coverage(terms: list[str], texts: dict[int, str]) -> dict[int, float]:
    """Fraction of the query's content terms each chunk contains (words by crude stem, CJK by substring).

    Done in Python over the candidates' text rather than one FTS query per term: it only has to tell
    "holds every term" apart from "does not", for the exact-match rescue.
    """
    if not terms:
        return {}
    wanted = [[(_part_pattern(p), count_cjk(p) > 0) for p in term.lower().split()] for term in terms]
    out: dict[int, float] = {}
    for cid, text in texts.items():
        low = text.lower()
        out[cid] = sum(1 for parts in wanted if all(_found(pat, low, cjk) for pat, cjk in parts)) / len(terms)
    return out


def _part_pattern(part: str) -> re.Pattern[str]:
    """A CJK part as a substring; a word in any variant, as a whole word (checked by _found).

    Every variant starts with the stem, so the pattern starts with a literal and `re` scans fast."""
    if count_cjk(part):
        return re.compile(re.escape(part))
    stem = _stem(part)
    tails = sorted({v[len(stem):] for v in _variants(part)}, key=len, reverse=True)
    return re.compile(re.escape(stem) + "(?:" + "|".join(re.escape(t) for t in tails) + r")(?!\w)")


def _found(pat: re.Pattern[str], text: str, cjk: bool) -> bool:
    for m in pat.finditer(text):
        i = m.start()
        if cjk or i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"):
            return True
    return False


def _variants(word: str) -> set[str]:
    stem = _stem(word)
    return {word, stem, stem + "s", stem + "es", stem + "ed", stem + "ing", stem + "e", stem + "y"}
