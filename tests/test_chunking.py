"""Reply chunking: limits, break preference, code fences, CJK and emoji, plus property tests (hypothesis)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from hermit.channels.chunking import chunk_text
from hermit.channels.platforms import names, platform

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def fences_balanced(chunk: str) -> bool:
    open_marker: str | None = None
    for line in chunk.split("\n"):
        m = FENCE.match(line)
        if not m:
            continue
        if open_marker is None:
            open_marker = m.group(1)
        elif m.group(1)[0] == open_marker[0] and len(m.group(1)) >= len(open_marker) and not m.group(2).strip():
            open_marker = None
    return open_marker is None


def no_space(text: str) -> str:
    """The characters that must survive chunking; fence markers may be re-made, so they do not count."""
    return re.sub(r"[\s`~]+", "", text)


def test_short_text_is_one_chunk_and_empty_text_none() -> None:
    assert chunk_text("hello", 100) == ["hello"]
    assert chunk_text("\n\n  \n", 100) == []


def test_paragraphs_first_then_lines() -> None:
    a, b, c = "a" * 30, "b" * 30, "c" * 30
    assert chunk_text(f"{a}\n{b}\n\n{c}", 70) == [f"{a}\n{b}", c]
    assert chunk_text(f"{a}\n{b}\n{c}", 70) == [f"{a}\n{b}", c]


def test_sentences_then_words_then_anywhere() -> None:
    text = "One two three four five six. Seven eight nine ten eleven twelve."
    assert chunk_text(text, 40) == ["One two three four five six.", "Seven eight nine ten eleven twelve."]
    words = " ".join(["word"] * 20)
    chunks = chunk_text(words, 30)
    assert all(len(c) <= 30 for c in chunks)
    assert all(set(c.split()) == {"word"} for c in chunks)  # never inside a word
    assert chunk_text("x" * 70, 30) == ["x" * 30, "x" * 30, "x" * 10]


def test_cjk_without_spaces_is_split_within_limits_and_keeps_every_character() -> None:
    text = "记忆是纯文本的Markdown文件，用户拥有它们。" * 30 + "最后一句。"
    chunks = chunk_text(text, 100)
    assert all(len(c) <= 100 for c in chunks)
    assert "".join(chunks) == text
    assert all(c.endswith("。") for c in chunks[:-1])  # CJK sentence ends are preferred breaks


def test_emoji_and_clusters_are_never_split() -> None:
    family = "👨‍👩‍👧‍👦"
    flag = "🇩🇪"
    thumbs = "👍🏽"
    text = (family + flag + thumbs + "é") * 40
    for limit in (24, 25, 26, 31, 50):
        chunks = chunk_text(text, limit)
        assert "".join(chunks) == text
        for c in chunks:
            assert len(c) <= limit
            assert set(regex.findall(r"\X", c)) <= {family, flag, thumbs, "é"}


def chunk_for_channel(name: str, text: str) -> list[str]:
    """Chunks for a platform's limits, as the gateway cuts a reply (gateway/replies.py)."""
    caps = platform(name).capabilities
    return chunk_text(text, caps.max_chars, caps.max_lines)


def test_limits_hold_in_utf16_code_units_too() -> None:
    text = "🙂" * 3000  # 3000 code points, 6000 UTF-16 code units
    chunks = chunk_for_channel("telegram", text)
    assert "".join(chunks) == text
    assert all(len(c.encode("utf-16-le")) // 2 <= 4000 for c in chunks) and len(chunks) == 2


def test_a_fence_is_never_split_when_it_fits() -> None:
    intro = "Here is the code:"
    code = "```python\n" + "\n".join(f"x{i} = {i}" for i in range(8)) + "\n```"
    chunks = chunk_text(f"{intro}\n\n{code}\n\nDone.", len(code) + 5)
    assert chunks == [intro, code, "Done."]


def test_a_long_fence_is_closed_and_reopened_with_its_info_string() -> None:
    code = "```python\n" + "\n".join(f"value_{i} = compute({i})" for i in range(40)) + "\n```"
    chunks = chunk_text(code, 200)
    assert len(chunks) > 3
    for c in chunks:
        assert len(c) <= 200
        assert c.startswith("```python\n") and c.endswith("\n```")
        assert fences_balanced(c)
    body = [line for c in chunks for line in c.split("\n")[1:-1]]
    assert body == [f"value_{i} = compute({i})" for i in range(40)]


def test_a_single_code_line_longer_than_a_chunk_is_cut_inside_the_fence() -> None:
    code = "~~~~\n" + "z" * 100 + "\n~~~~"
    chunks = chunk_text(code, 40)
    assert all(len(c) <= 40 and fences_balanced(c) and c.startswith("~~~~\n") for c in chunks)
    assert "".join(c[5:-5] for c in chunks) == "z" * 100


def test_discord_line_limit() -> None:
    text = "\n".join(f"line {i}" for i in range(50))
    chunks = chunk_for_channel("discord", text)
    assert all(c.count("\n") < 17 for c in chunks)
    assert [c.count("\n") + 1 for c in chunks] == [17, 17, 16]
    code = "```\n" + "\n".join(str(i) for i in range(40)) + "\n```"
    for c in chunk_for_channel("discord", code):
        assert c.count("\n") < 17 and fences_balanced(c)


def test_channel_limits() -> None:
    """SPEC §15: Telegram 4000 of 4096, Discord 2000 and 17 lines, Slack and WhatsApp 4000."""
    limits = {n: (platform(n).capabilities.max_chars, platform(n).capabilities.max_lines) for n in names()}
    assert limits == {"telegram": (4000, None), "discord": (2000, 17), "slack": (4000, None),
                      "whatsapp": (4000, None)}
    long = "word " * 3000
    from hermit.channels.webchat import WebchatChannel

    assert chunk_text(long, WebchatChannel.capabilities.max_chars) == [long.rstrip()]  # one message in the web chat
    assert all(len(c) <= 4000 for c in chunk_for_channel("telegram", long))
    with pytest.raises(ValueError, match="at least"):
        chunk_text("x", 10)
    with pytest.raises(ValueError, match="at least"):
        chunk_text("x", 100, max_lines=2)


PIECES = st.sampled_from(["word", "字", "。", ". ", " ", "\n", "\n\n", "```py\n", "```\n", "~~~\n", "👍🏽",
                          "👨‍👩‍👧", "🇩🇪", "é", "x" * 30, "long-identifier_name", "\t", "中文句子没有空格"])


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=80).map("".join), st.integers(24, 120), st.one_of(st.none(), st.integers(3, 12)))
def test_properties(text: str, max_chars: int, max_lines: int | None) -> None:
    chunks = chunk_text(text, max_chars, max_lines)
    clusters = set(regex.findall(r"\X", text))
    for n, c in enumerate(chunks):
        assert c.strip()
        assert len(c) <= max_chars
        # UTF-16 code units too, except under ~48 where a re-split would go below the minimum size
        assert max_chars < 48 or len(c.encode("utf-16-le")) // 2 <= max_chars
        if max_lines is not None:
            assert c.count("\n") + 1 <= max_lines
        # only a reply that itself ends inside an open fence may leave its last chunk open
        assert fences_balanced(c) or (n == len(chunks) - 1 and not fences_balanced(text))
        assert set(regex.findall(r"\X", c)) <= clusters  # no cluster split into new pieces
    # nothing is lost: every non-space character survives (added fence lines only add characters)
    joined = no_space("".join(chunks))
    it = iter(joined)
    assert all(ch in it for ch in no_space(text))


def test_the_gateway_delivers_a_long_fenced_reply_in_valid_chunks(tmp_path: Path) -> None:
    from gatewayhelpers import RecordingChannel, inbound, make_bus, runtime

    reply = "Here you go:\n\n```python\n" + "\n".join(f"print({i})" for i in range(30)) + "\n```\n\nDone."
    ch = RecordingChannel(max_chars=120)
    bus = make_bus(runtime(tmp_path, lambda req: reply), ch)

    async def main() -> None:
        await bus.publish(inbound("code please"))
        await bus.drain(10)

    asyncio.run(main())
    parts = [m.text for m in ch.messages()]
    assert parts[0] == "Here you go:" and parts[-1].endswith("```\n\nDone.")
    assert all(len(p) <= 120 and fences_balanced(p) for p in parts)
    code = [line for p in parts[1:] for line in p.split("\n") if line.startswith("print(")]
    assert code == [f"print({i})" for i in range(30)]
