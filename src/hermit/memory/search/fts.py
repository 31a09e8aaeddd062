"""Keyword search text: CJK-aware index text and safe FTS5 OR-queries built from any user input.

FTS5's unicode61 tokenizer turns a run of Chinese characters into one giant token, so a Chinese query
never matches (SPEC §14.4). Hermit indexes each CJK run as overlapping bigrams plus unigrams (the
classic CJK retrieval unit, as Lucene's CJK analyzer does) and queries with bigrams, or a unigram for
a one-character term. Queries are OR-joined content words with stopwords dropped (§14.3); every term
is emitted as a quoted FTS5 string, so quotes, `*`, `AND`, `NEAR(`, `-` and `:` in user text are
plain characters, never syntax.
"""

from __future__ import annotations

import math
import re

CJK_LETTERS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{CJK_LETTERS}]+")
# A word: letters/digits (no CJK); identifiers keep inner separators so they become phrases.
_TOKEN = re.compile(f"[{CJK_LETTERS}]+|[^\\W_{CJK_LETTERS}](?:[\\w.\\-/:@#]*[^\\W{CJK_LETTERS}])?|_+\\w+")
_WORD = re.compile(f"[^\\W_{CJK_LETTERS}]+")

FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
# Bumped when the index text transform changes, so an old index is rebuilt.
FTS_VERSION = "cjk-bigram-1"


def bm25_idf(n_docs: int, df: int) -> float:
    """FTS5's idf: log((N - n + 0.5) / (n + 0.5)), at least 1e-6. The count of chunks holding a phrase can
    exceed the count of chunks when the two are read while another process indexes: that is an everyday
    word (1e-6), not a math domain error."""
    ratio = (n_docs - df + 0.5) / (df + 0.5)
    return math.log(ratio) if ratio > 1.0 else 1e-6

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not now of off on once only or other our ours ourselves out over own same she should
    so some such than that the their theirs them themselves then there these they this those through to
    too under until up very was we were what when where which while who whom why will with would you
    your yours yourself yourselves s t don didn doesn isn wasn weren won ll ve re d m o y
    tell remember recall know think said say says please anything something thing things stuff
    ever also get got us let lets like one""".split()  # noqa: SIM905 - a word list reads best as text
)
# Chinese function characters that carry no topic on their own.
ZH_STOP_CHARS = frozenset("的了是在我你他她它们这那有和与也就都而及吗呢吧啊么什怎哪个些把被给对说")


def _cjk_terms(run: str, with_unigrams: bool) -> list[str]:
    if len(run) == 1:
        return [run]
    terms = [run[i:i + 2] for i in range(len(run) - 1)]
    if with_unigrams:
        terms = list(run) + terms
    return terms


def index_text(text: str) -> str:
    """The text stored in FTS5: unchanged, except CJK runs become space-separated unigrams + bigrams."""
    if not _CJK_RUN.search(text):
        return text
    return _CJK_RUN.sub(lambda m: " " + " ".join(_cjk_terms(m.group(0), True)) + " ", text)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def query_terms(query: str) -> list[str]:
    """Content terms of `query`: words minus stopwords, identifiers as phrases, CJK as bigrams."""
    out: list[str] = []
    seen: set[str] = set()

    def add(term: str) -> None:
        key = term.lower()
        if key and key not in seen:
            seen.add(key)
            out.append(term)

    for m in _TOKEN.finditer(query):
        tok = m.group(0)
        if _CJK_RUN.fullmatch(tok):
            for t in _cjk_terms(tok, False):
                if not all(c in ZH_STOP_CHARS for c in t):
                    add(t)
            continue
        parts = _WORD.findall(tok)
        if not parts:
            continue
        if len(parts) > 1:
            # An identifier like POSTGRES_URL or TICKET-4821: the parts as an adjacent phrase.
            add(" ".join(parts))
            continue
        word = parts[0]
        if word.lower() in STOPWORDS or (len(word) == 1 and not word.isdigit()):
            continue
        add(word)
    return out[:64]


def translated_phrases(terms: list[str]) -> list[str]:
    """FTS5 phrases for already-chosen terms (a CJK word becomes the phrase of its bigrams)."""
    out: list[str] = []
    for term in terms:
        if _CJK_RUN.fullmatch(term):
            # A word's bigrams are adjacent tokens in the index text, so the word is a phrase of them.
            out.append(" ".join(_cjk_terms(term, False)))
        else:
            out.extend(query_terms(term))
    return list(dict.fromkeys(t for t in out if t.strip()))


def or_match(phrases: list[str]) -> str | None:
    """An FTS5 MATCH expression: the phrases quoted (never syntax) and OR-joined."""
    return " OR ".join(_quote(t) for t in phrases) if phrases else None


def build_match(query: str) -> str | None:
    """An FTS5 MATCH expression (OR of quoted terms), or None when the query has no content terms."""
    return or_match(query_terms(query))

