"""What counts as a copy of a deleted message (`Verbatim`), decided so that a user can predict it and ordinary words
survive (sessions/scrub.py scrubs the copies):
- a run of the deleted text of at least MIN_RUN characters, compared with whitespace collapsed and case
  ignored, that starts at the beginning of a word and ends at the end of one and holds at least one word that
  is not a common one (STOPWORDS) or holds a digit: "my password is correcthorse" makes "correcthorse battery"
  in a reply a copy, "can you tell me" never is;
- wherever it stands, a word of the deleted text that looks like a secret or an identifier: at least
  MIN_TOKEN characters mixing letters and digits (hunter22, A1B2C3, a booking code), or a number of at least
  MIN_TOKEN digits however it is grouped (a card or phone number, "4111 1111 1111 1111" = "4111-1111-1111-1111").
  A short number on its own (a 4-digit PIN, a year, a time) is not one: it would take every "2026" with it; it
  goes only inside a longer run.

A copy is only what the deleted message brought into its session: a word, number or run that another sender's
message in the session holds (the owner's, another member's — before or after it) or that the session held before
it (a reply, a tool result, a summary, its sender's own earlier message) is not one (`kept`). A group member who quoted
the owner, or guessed a code the owner later said, and deleted that message, took the owner's words out of every
later reply and the flush's notes; their message took back only what it alone said.

`Candidates` finds, for a text, which of many rules may hold a copy in it (a batch of deletes: one pass over each
text, not one per rule).
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import InitVar, dataclass, field

MARK = "[deleted]"
MIN_RUN = 12  # characters (whitespace collapsed) of a run of the deleted text that make a copy
MIN_TOKEN = 6  # characters of a letters+digits word, or digits of a number, that make one on their own
MIN_PIN = 4  # digits of a short number that is a copy on its own when the deleted message names it a secret...
PIN_WORDS = 5  # ...by one of SECRET_WORDS within this many words of it, no other number between
_SECRET_WORD_TEXT = """pin pins pincode code codes passcode password passwords passwort kennwort pass pw pwd otp tan cvv
cvc cvv2 combination combo geheimzahl"""
SECRET_WORDS = frozenset(_SECRET_WORD_TEXT.split())
MAX_DELETED = 20_000  # characters of the deleted text looked for (a longer message: its start)
_STOPWORD_TEXT = """
a about above after again all also am an and any are as at be because been before being below between both but by
can could did do does doing done down during each else even few for from further get got had has have having he
her here hers him his how i if in into is it its just let like me more most my no nor not now of off on once only
or other our ours out over own please same she should so some such than thank thanks that the their them then
there these they this those through to too under until up us very was we well were what when where which while
who whom why will with would yes yet you your yours hello hi okay ok sure want need know think make one two new
maybe really good great right see look tell said says
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_WORD = re.compile(r"\w+")
_ALNUM = re.compile(r"[^\W_]+")
_SPACE = re.compile(r"\s")
_SPACES = re.compile(r" {2,}")
_PIN_WORD = re.compile(r"[^\W_]+")
_CLAUSE_END = re.compile(r"[.,;!?\n]")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[ \-./]\d+)*(?![\w])")
_PUNCT = "\"'`.,;:!?()[]{}<>*_~"


def _fold(c: str) -> str:
    low = c.lower()
    return low if len(low) == 1 else c  # one character for one: positions map back to the original


class _Normalized:
    """A text with whitespace as single spaces and case folded (`text`), and where each of its characters came
    from (`origin`): the runs of whitespace collapsed are kept as (position in `text`, in the original)."""

    def __init__(self, text: str) -> None:
        low = text.lower()
        if len(low) != len(text):  # a character that lowers to two (İ): one by one
            low = "".join(map(_fold, text))
        low = _SPACE.sub(" ", low)  # every whitespace character a space: positions unchanged
        pieces: list[str] = []
        self._origin: list[int] = [0]  # where each piece kept (up to a run's first space) starts in the original
        pos = 0
        for m in _SPACES.finditer(low):
            pieces.append(low[pos:m.start() + 1])
            pos = m.end()
            self._origin.append(pos)
        pieces.append(low[pos:])
        self.text = "".join(pieces)
        self._marks: list[int] = list(itertools.accumulate((len(p) for p in pieces[:-1]), initial=0))  # in `text`

    def origin(self, at: int) -> int:
        """The position in the original text of the character at `at`."""
        k = bisect.bisect_right(self._marks, at) - 1
        return self._origin[k] + (at - self._marks[k])


def _token_pattern(tokens: list[str], flags: int = re.IGNORECASE) -> re.Pattern[str] | None:
    return re.compile("(?<!\\w)(?:" + "|".join(map(re.escape, tokens)) + ")(?!\\w)", flags) if tokens else None


def _longest(norm: str, i: int, hay: str) -> int:
    """The length of the longest run from `norm[i]` that `hay` holds (at least MIN_RUN: its first gram is in it)."""
    lo, hi = MIN_RUN, min(len(norm) - i, len(hay))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if norm[i:i + mid] in hay:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _folded(texts: Iterable[str]) -> str:
    """`texts` joined by NUL, case folded and whitespace collapsed as _Normalized does (positions not kept)."""
    joined = "\x00".join(texts)
    low = joined.lower()
    if len(low) != len(joined):
        low = "".join(map(_fold, joined))
    return " ".join(low.split())


def _unshared(hay: str, other: str) -> str:
    """`hay` (the deleted text, normalized) with what `other` (the kept text, `_folded`) holds of it too — runs of
    at least MIN_RUN characters from a word's start — blanked (NUL), so that no run found later reaches into it.
    Looked for from the deleted text's word starts in the kept text as a whole (a C search each): the kept text
    may be a whole transcript."""
    shared = bytearray(len(hay))
    n, done, absent = len(hay), 0, set()
    for word in _ALNUM.finditer(hay):
        i = word.start()
        if i < done or i > n - MIN_RUN or (gram := hay[i:i + MIN_RUN]) in absent:
            continue
        if gram not in other:
            absent.add(gram)
            continue
        stop = hay.find("\x00", i)
        length = _longest(hay[:stop] if stop >= 0 else hay, i, other)
        shared[i:i + length] = b"\x01" * length
        done = i + length
    if not any(shared):
        return hay
    return "".join("\x00" if mark else c for c, mark in zip(hay, shared, strict=True))


def _named_secret(text: str, m: re.Match[str], digits: str) -> bool:
    """A short number (MIN_PIN digits up to a token's) that `text` names as a secret: one of SECRET_WORDS stands
    within PIN_WORDS words before it ("my PIN is 4711", "the door code for the garage: 4711") or after it ("4711 is
    my PIN"), in the same clause (no . , ; ! ? or line break between) and with no other number between."""
    if not MIN_PIN <= len(digits) < MIN_TOKEN:
        return False
    before = _CLAUSE_END.split(text[max(0, m.start() - 80):m.start()])[-1]
    after = _CLAUSE_END.split(text[m.end():m.end() + 80])[0]
    for words in (_PIN_WORD.findall(before)[::-1], _PIN_WORD.findall(after)):
        for w in words[:PIN_WORDS]:
            if w[0].isdigit():
                break
            if w.lower() in SECRET_WORDS:
                return True
    return False


def _secretish(word: str) -> bool:
    return len(word) >= MIN_TOKEN and any(c.isdigit() for c in word) and any(c.isalpha() for c in word)


@dataclass(frozen=True)
class Verbatim:
    """The rule for copies of one deleted message (see the module's rules), built from its text(s)."""

    texts: tuple[str, ...]
    # Text the session holds apart from the deleted message (see the module's rules): what of the deleted text it
    # holds too is no copy. Only used to build the rule, never kept (a rule is kept in memory for an hour).
    kept: InitVar[Iterable[str]] = ()
    _hay: str = field(init=False, repr=False)
    _grams: frozenset[str] = field(init=False, repr=False)
    # `kept` as `folded` makes it, given so by a caller that makes the rules of many deleted messages of a transcript.
    folded_kept: InitVar[str] = ""
    _tokens: re.Pattern[str] | None = field(init=False, repr=False)
    _words: frozenset[str] = field(init=False, repr=False)  # the tokens `_tokens` finds, lowered
    _numbers: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self, kept: Iterable[str], folded_kept: str) -> None:
        other = folded_kept or _folded(k for k in kept if k)
        parts = [_Normalized(t[:MAX_DELETED]).text.strip() for t in self.texts]
        hay = "\x00".join(parts)
        grams = frozenset(g for i in range(len(hay) - MIN_RUN + 1) if "\x00" not in (g := hay[i:i + MIN_RUN]))
        if other and grams:
            hay = _unshared(hay, other)
            grams = frozenset(g for i in range(len(hay) - MIN_RUN + 1) if "\x00" not in (g := hay[i:i + MIN_RUN]))
        words = {w.strip(_PUNCT) for t in self.texts for w in t[:MAX_DELETED].split()}
        tokens = sorted({w for w in words if _secretish(w)}, key=len, reverse=True)
        pattern = _token_pattern(tokens)
        if other and pattern is not None:
            folded = _token_pattern([t.lower() for t in tokens], 0)
            held = {m.group(0) for m in folded.finditer(other)} if folded is not None else set()
            tokens = [t for t in tokens if t.lower() not in held]
            pattern = _token_pattern(tokens)
        numbers = frozenset(d for t in self.texts for m in _NUMBER.finditer(t[:MAX_DELETED])
                            if len(d := re.sub(r"\D", "", m.group(0))) >= MIN_TOKEN or _named_secret(t, m, d))
        if other and numbers:
            numbers -= {re.sub(r"\D", "", m.group(0)) for m in _NUMBER.finditer(other)}
        object.__setattr__(self, "_hay", hay)
        object.__setattr__(self, "_grams", grams)
        object.__setattr__(self, "_tokens", pattern)
        object.__setattr__(self, "_words", frozenset(t.lower() for t in tokens))
        object.__setattr__(self, "_numbers", numbers)

    @property
    def empty(self) -> bool:
        return not (self._grams or self._tokens is not None or self._numbers)

    def scrub(self, text: str) -> tuple[str, int]:
        """`text` with every copy replaced by MARK, and how many were."""
        if self.empty or not text:
            return text, 0
        spans = list(self._runs(text))
        count = len(spans)
        for start, end in reversed(spans):
            text = text[:start] + MARK + text[end:]
        if self._tokens is not None:
            text, n = self._tokens.subn(MARK, text)
            count += n
        if self._numbers:
            def number(m: re.Match[str]) -> str:
                nonlocal count
                if re.sub(r"\D", "", m.group(0)) in self._numbers:
                    count += 1
                    return MARK
                return m.group(0)
            text = _NUMBER.sub(number, text)
        return text, count

    def _runs(self, text: str) -> Iterator[tuple[int, int]]:
        """Spans of `text` (original positions) that are runs of the deleted text (see the module's rules)."""
        if not self._grams:
            return
        normalized = _Normalized(text)
        norm, n, done = normalized.text, len(normalized.text), 0
        for word in _ALNUM.finditer(norm):  # a run starts where a word does
            i = word.start()
            if i < done or i > n - MIN_RUN or norm[i:i + MIN_RUN] not in self._grams:
                continue
            end = i + _longest(norm, i, self._hay)  # the longest run from i that the deleted text holds
            if end < n and norm[end - 1].isalnum() and norm[end].isalnum():
                while end > i and norm[end - 1].isalnum():  # it ends inside a word: back to that word's start
                    end -= 1
            while end > i and not norm[end - 1].isalnum():
                end -= 1
            run = norm[i:end]
            if len(run) >= MIN_RUN and any(w not in STOPWORDS or any(c.isdigit() for c in w) for w in _WORD.findall(run)):
                yield normalized.origin(i), normalized.origin(end - 1) + 1
                done = end


class Candidates:
    """Which of `rules` may hold a copy in a text: those one of whose grams starts at a word of it (its runs start
    so), one of whose tokens it holds as a word, or one of whose numbers it holds. A superset: each rule's own
    `scrub` decides. One pass over the text for all of them, instead of one per rule."""

    def __init__(self, rules: Sequence[Verbatim], refs: Iterable[str] = ()) -> None:
        self.refs = frozenset(refs)  # the deleted messages' refs, for the caller
        self._grams: dict[str, list[int]] = {}
        self._words: dict[str, list[int]] = {}
        self._numbers: dict[str, list[int]] = {}
        for n, rule in enumerate(rules):
            for key, into in ((rule._grams, self._grams), (rule._words, self._words), (rule._numbers, self._numbers)):
                for k in key:
                    into.setdefault(k, []).append(n)
        self._word = _token_pattern(sorted(self._words, key=len, reverse=True))

    def of(self, text: str) -> list[int]:
        """The indexes (into `rules`) of the rules that may hold a copy in `text`, in order."""
        found: set[int] = set()
        if self._grams:
            norm = _Normalized(text).text
            for word in _ALNUM.finditer(norm):
                found.update(self._grams.get(norm[word.start():word.start() + MIN_RUN], ()))
        if self._word is not None:
            for m in self._word.finditer(text):
                found.update(self._words.get(m.group(0).lower(), ()))
        if self._numbers:
            for m in _NUMBER.finditer(text):
                found.update(self._numbers.get(re.sub(r"\D", "", m.group(0)), ()))
        return sorted(found)
