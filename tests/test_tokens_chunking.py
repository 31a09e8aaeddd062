"""Chunk boundaries, overlap and exact line numbers (English and Chinese), and CJK-aware token counts."""

from __future__ import annotations

from hermit.memory.index.chunking import chunk_markdown
from hermit.tokens import estimate_tokens


def test_token_estimate_counts_cjk_per_character() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd" * 10) == 10
    zh = "我们决定下周三开始迁移数据库"
    assert estimate_tokens(zh) == len(zh)  # chars/4 would say 4
    assert estimate_tokens("数据库 ok") == 3 + 1


def _lines(n: int, word: str = "word") -> str:
    return "\n".join(f"L{i} " + (word + " ") * 12 for i in range(1, n + 1))


def test_chunks_are_line_aligned_with_exact_line_numbers() -> None:
    text = _lines(100)
    chunks = chunk_markdown(text, max_tokens=100, overlap_tokens=20)
    lines = text.split("\n")
    for c in chunks:
        assert c.text == "\n".join(lines[c.start_line - 1:c.end_line])
        assert estimate_tokens(c.text) <= 100 + (c.end_line - c.start_line + 1)
    assert chunks[0].start_line == 1
    assert chunks[-1].end_line == 100
    # Every line is covered and consecutive chunks overlap by whole lines.
    covered = set()
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start_line <= a.end_line, "neighbours must share at least one whole line"
        assert b.start_line > a.start_line
    for c in chunks:
        covered.update(range(c.start_line, c.end_line + 1))
    assert covered == set(range(1, 101))


def test_fact_on_boundary_is_in_both_chunks() -> None:
    text = _lines(60)
    chunks = chunk_markdown(text, max_tokens=120, overlap_tokens=30)
    boundary_line = chunks[0].end_line
    fact = text.split("\n")[boundary_line - 1]
    assert fact in chunks[0].text and fact in chunks[1].text


def test_chinese_chunks_respect_token_budget_by_characters() -> None:
    line = "今天和王伟讨论了数据库迁移的计划并决定下周三开始执行"  # 26 CJK chars ≈ 26 tokens
    text = "\n".join(f"{i}. {line}" for i in range(1, 41))
    chunks = chunk_markdown(text, max_tokens=100, overlap_tokens=30)
    # chars/4 would pack ~13 lines per chunk; a CJK-aware count packs 3.
    assert all(c.end_line - c.start_line + 1 <= 4 for c in chunks)
    assert chunks[0].start_line == 1 and chunks[0].end_line == 3
    assert chunks[1].start_line == 3  # one whole overlapping line
    assert chunks[-1].end_line == 40


def test_long_line_is_split_and_keeps_its_line_number() -> None:
    text = "intro\n" + ("x" * 3000) + "\noutro"
    chunks = chunk_markdown(text, max_tokens=100, overlap_tokens=10)
    long_pieces = [c for c in chunks if c.start_line == 2]
    assert len(long_pieces) >= 7
    assert all(c.end_line == 2 for c in long_pieces)
    assert "".join(c.text for c in long_pieces) == "x" * 3000


def test_empty_and_blank_files_have_no_chunks() -> None:
    assert chunk_markdown("") == []
    assert chunk_markdown("\n\n   \n") == []


def test_crlf_line_endings_keep_line_numbers() -> None:
    chunks = chunk_markdown("a\r\nb\r\nc\r\n", max_tokens=100, overlap_tokens=10)
    assert (chunks[0].start_line, chunks[0].end_line) == (1, 3)
    assert "\r" not in chunks[0].text
