"""Words as a reader sees them, not as their code points spell them: the one normalisation the untrusted-words guard
(untrusted_words.py) and the forwarded-words guard (forwarded_words.py) compare copies by.

Re-audit 21 found a copy with an invisible character inside each word, accents or combining marks added, full-width
or Cyrillic/Greek look-alike letters, words joined by underscores, or markup inside a word (ev**ery**, ev<b>ery</b>)
reads the same to the model that follows it later, and must match the text it copies. Audit 22 (t2): the forward
guard compared plain `\\w+` words, so a forward's rule copied with a zero-width space in each word, or in Cyrillic
look-alikes, was a new text to it — it now reads words here too.
"""

from __future__ import annotations

import re
import unicodedata

_TAG = re.compile(r"</?[A-Za-z][^<>\n]{0,80}>|<!--|-->")
INVISIBLE = re.compile("[\u00ad\u034f\u061c\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufe00-\ufe0f"
                       "\ufeff\ufff9-\ufffb\U000e0000-\U000e0fff*~`]"
                       "|[\u0300-\u036f\u0483-\u0489\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_BLANK = re.compile("[\u115f\u1160\u3164\uffa0\u2800]")  # letters (\\w) that show as a space
_WORD = re.compile(r"[^\W_]+")
_LOOKALIKE = str.maketrans(  # Cyrillic and Greek letters (case-folded) that look like Latin ones
    "авсԁеһіјкӏмнорԛѕтуԝхүѡɑαβεζηικμνορτυχωϲϳ",
    "abcdehijklmhopqstywxywaabezhikmvoptuxwcj")


def normal(text: str) -> str:
    text = _BLANK.sub(" ", _TAG.sub("", text))
    text = INVISIBLE.sub("", unicodedata.normalize("NFKD", INVISIBLE.sub("", text)))
    return text.casefold().translate(_LOOKALIKE)


def words(text: str) -> list[str]:
    return _WORD.findall(normal(text))


def fold(text: str) -> str:
    """`text` as a reader sees it, one space between words: where a marker ("quoted from") is looked for — the
    page's own "quoted\u200b from", or "quoted" and "from" a line apart, is still its own."""
    return " ".join(normal(text).split())
