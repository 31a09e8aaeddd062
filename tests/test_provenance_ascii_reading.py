"""An ASCII line's reading (what label and marker checks match on) is a table lookup: it must read exactly as the
character-by-character reading does, whatever ASCII it holds (controls, tabs, brackets, dashes, `<!--`)."""

from __future__ import annotations

import random

from hermit.memory.policy import provenance


def test_an_ascii_line_reads_as_the_character_by_character_reading_says() -> None:
    rng = random.Random(7)
    every = "".join(map(chr, range(128)))
    lines = [every, every[::-1], "", "\t[Eve (2001)]: hi", "<!-- hermit:origin -->", "Wow!-- what a day -->",
             "a\x00b\x7fc\x1bd", *("".join(rng.choice(every) for _ in range(rng.randint(1, 80))) for _ in range(3000))]
    for line in lines:
        assert provenance._reads_as(line) == provenance._reads_as_slowly(line), repr(line)
    assert provenance._reads_as("lorem [written from") == ("lorem [written from", list(range(19)))


def test_a_line_past_ascii_still_reads_by_its_characters_names() -> None:
    seen, at = provenance._reads_as("\uff3bwritten from\u200b x")  # a fullwidth [, a zero-width space
    assert seen == "[written from x" and 13 not in at and len(seen) == len(at)
    assert provenance.defuse_labels("\uff3bEve (2001)]: hi") == "\\\uff3bEve (2001)]: hi"
