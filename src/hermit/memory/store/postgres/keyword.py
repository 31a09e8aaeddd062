"""FTS5's keyword search, reproduced on PostgreSQL: the same tokens, the same MATCH subset, the same BM25.

A tsvector built by a PostgreSQL text-search configuration would not match FTS5 (its stemmer differs,
and with the C locale its parser drops CJK). So each chunk is tokenised at index time by FTS5 itself
(`porter unicode61 remove_diacritics 2` over fts.index_text, via an in-memory SQLite) and stored as a
tsvector literal of exactly those tokens with their positions, plus the token count. A MATCH
expression (quoted phrases joined by OR / AND, parentheses; what memory.search.fts builds) becomes a tsquery
of the same tokens (`<->` for a phrase), answered by a GIN index. BM25 is FTS5's formula — its idf
(document counts per phrase over the whole index), k1 = 1.2, b = 0.75, document lengths in tokens —
with term frequencies counted from the stored positions of the matching rows only (in the server, from
ts_rank's value for each token when every phrase is one token: TF_SQL).

Known difference: a tsvector keeps at most 256 positions per token and positions up to 16383, so a
token repeated more than 256 times in one chunk counts as 256 (FTS5 counts them all).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermit.errors import IndexError_
from hermit.memory.search.fts import bm25_idf, index_text
from hermit.memory.search.keyword import K1, B, FtsTokens
from hermit.memory.store.postgres.rows import ROW_COLUMNS

if TYPE_CHECKING:
    from hermit.memory.store.postgres.store import PgStore

MAX_POSITION = 16383  # tsvector positions stop here
MAX_POSITIONS = 256  # positions a tsvector keeps per token


def _tf_bounds() -> list[float]:
    """Thresholds that turn ts_rank's value for one token (all weights 1) back into its count f.

    That value is Σ_{j=1..f} 1/j² / 1.64493406685 (tsrank.c, calc_rank_or, one query item): strictly
    increasing in f, consecutive values ≥ 9e-6 apart up to f = 256 where float4 rounding is ~1e-7, so
    width_bucket over the midpoints between them (below the first: half of it, for f = 0) is exact."""
    values, acc = [], 0.0
    for j in range(1, MAX_POSITIONS + 1):
        acc += 1.0 / (j * j)
        values.append(acc / 1.64493406685)
    return [values[0] / 2] + [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)]


TF_BOUNDS = _tf_bounds()
TF_BOUNDS_TEXT = "{" + ",".join(repr(x) for x in TF_BOUNDS) + "}"  # sent as text: no per-query list adaptation
# A row's count of one token (its positions in c.tsv, as FTS5 counts the term), 0 when absent: a scalar in
# C per token, where unnest(ts_filter(...)) plus a join and a group cost ~3× as much per matching row.
# `tf.b`: TF_BOUNDS, joined once per statement.
TF_SQL = "width_bucket(ts_rank('{1,1,1,1}', c.tsv, %s::tsquery)::float8, tf.b)"


@dataclass(frozen=True)
class Phrase:
    tokens: tuple[str, ...]


@dataclass(frozen=True)
class Node:
    op: str  # "or" | "and"
    parts: tuple[Node | Phrase, ...]


Expr = Node | Phrase
_LEX = re.compile(r'\s*(?:"((?:[^"]|"")*)"|(\()|(\))|(OR|AND)\b)')


def _quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


class Tokenizer:
    """FTS5's own tokens for documents and query phrases (shares memory.search.keyword's tokenizer)."""

    def __init__(self) -> None:
        self.fts = FtsTokens()

    def documents(self, texts: Sequence[str]) -> list[tuple[str, int]]:
        """(tsvector literal, token count) of each chunk text, as FTS5 indexes `index_text(text)`."""
        out: list[tuple[str, int]] = []
        for where, n in self.fts.positions([index_text(t) for t in texts]):
            # tsvector positions are 1-based; PostgreSQL keeps 256 per token, clamped to 16383.
            literal = " ".join(
                f"{_quote(tok)}:{','.join(str(min(p + 1, MAX_POSITION)) for p in sorted(ps)[:256])}"
                for tok, ps in where.items())
            out.append((literal, n))
        return out

    def parse(self, match: str) -> Expr | None:
        """Parse the MATCH subset memory.search.fts emits; None when no phrase has a token (matches nothing)."""
        items: list[str | tuple[str]] = []  # operators and parentheses as str, phrases as 1-tuples
        pos = 0
        while pos < len(match):
            if not match[pos:].strip():
                break
            m = _LEX.match(match, pos)
            if m is None:
                raise IndexError_(f"unsupported keyword query syntax at {match[pos:pos + 20]!r}",
                                  "only quoted phrases joined by OR / AND are supported")
            if m.group(1) is not None:
                items.append((m.group(1).replace('""', '"'),))
            else:
                items.append(m.group(2) or m.group(3) or m.group(4))
            pos = m.end()
        phrases = [i[0] for i in items if isinstance(i, tuple)]
        toks = dict(zip(phrases, self.fts.tokens(phrases), strict=True))
        expr, rest = _or(items, toks)
        if rest:
            raise IndexError_("unbalanced keyword query", "only quoted phrases joined by OR / AND are supported")
        return expr


def _or(items: list[str | tuple[str]], toks: dict[str, tuple[str, ...]]) -> tuple[Expr | None, list[str | tuple[str]]]:
    parts: list[Expr | None] = []
    left, items = _and(items, toks)
    parts.append(left)
    while items and items[0] == "OR":
        right, items = _and(items[1:], toks)
        parts.append(right)
    live = tuple(p for p in parts if p is not None)
    if not live:
        return None, items
    return (live[0] if len(live) == 1 else Node("or", live)), items


def _and(items: list[str | tuple[str]], toks: dict[str, tuple[str, ...]]) -> tuple[Expr | None, list[str | tuple[str]]]:
    parts: list[Expr | None] = []
    first, items = _primary(items, toks)
    parts.append(first)
    # FTS5: `a AND b`, and `a b` (implicit AND).
    while items and (items[0] == "AND" or items[0] == "(" or isinstance(items[0], tuple)):
        if items[0] == "AND":
            items = items[1:]
        nxt, items = _primary(items, toks)
        parts.append(nxt)
    if any(p is None for p in parts):
        return None, items  # a phrase with no token matches nothing, so neither does the AND
    live = tuple(p for p in parts if p is not None)
    return (live[0] if len(live) == 1 else Node("and", live)), items


def _primary(items: list[str | tuple[str]], toks: dict[str, tuple[str, ...]]) -> tuple[Expr | None, list[str | tuple[str]]]:
    if not items:
        raise IndexError_("incomplete keyword query", "only quoted phrases joined by OR / AND are supported")
    head = items[0]
    if isinstance(head, tuple):
        t = toks.get(head[0], ())
        return (Phrase(t) if t else None), items[1:]
    if head == "(":
        expr, rest = _or(items[1:], toks)
        if not rest or rest[0] != ")":
            raise IndexError_("unbalanced keyword query", "only quoted phrases joined by OR / AND are supported")
        return expr, rest[1:]
    raise IndexError_(f"unexpected {head!r} in keyword query", "only quoted phrases joined by OR / AND are supported")


def to_tsquery(expr: Expr) -> str:
    if isinstance(expr, Phrase):
        return "(" + " <-> ".join(_quote(t) for t in expr.tokens) + ")"
    joiner = " | " if expr.op == "or" else " & "
    return "(" + joiner.join(to_tsquery(p) for p in expr.parts) + ")"


def phrases(expr: Expr) -> list[Phrase]:
    """Every phrase instance in order (FTS5 scores each instance, duplicates included)."""
    if isinstance(expr, Phrase):
        return [expr]
    return [p for part in expr.parts for p in phrases(part)]


def phrase_count(phrase: Phrase, positions: Mapping[str, Sequence[int]]) -> int:
    """Occurrences of `phrase` in one document, from its tokens' positions."""
    first = positions.get(phrase.tokens[0])
    if not first:
        return 0
    if len(phrase.tokens) == 1:
        return len(first)
    rest = [set(positions.get(t, ())) for t in phrase.tokens[1:]]
    return sum(1 for p in first if all(p + k + 1 in s for k, s in enumerate(rest)))


def bm25(instances: list[Phrase], df: dict[Phrase, int], n_docs: int, avgdl: float,
         doc_len: int, positions: Mapping[str, Sequence[int]]) -> float:
    """FTS5's bm25() for one document, sign-corrected (higher = better)."""
    if n_docs <= 0 or avgdl <= 0:
        return 0.0
    norm = K1 * (1 - B + B * doc_len / avgdl)
    score = 0.0
    for ph in instances:
        f = phrase_count(ph, positions)
        if not f:
            continue
        d = df.get(ph, 0)
        score += bm25_idf(n_docs, d) * f * (K1 + 1) / (f + norm)
    return score


class PgKeyword:
    """The keyword leg on one PgStore's schema (its fts_* methods): MATCH → tsquery over the GIN index,
    ranked by FTS5's BM25 — in the server when every phrase is one token, else here from the positions."""

    def __init__(self, store: PgStore) -> None:
        self.store = store
        # Documents holding each phrase (FTS5's nHit), for one (index id, generation).
        self._df: tuple[tuple[str | None, int], dict[Phrase, int]] = ((None, -1), {})

    def reset(self) -> None:
        """Forget the document counts (a rebuild swapped the schema in)."""
        self._df = ((None, -1), {})

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.store.conn.execute(sql, params).fetchone()
        return row[0] if row else None

    def count(self, match: str) -> int:
        return self.counts([match])[0]

    def counts(self, matches: Sequence[str]) -> list[int]:
        """Chunks matching each expression; the one-phrase ones through the per-generation cache (ranked()
        needs the same counts for its idfs), their one-token lookups in one statement."""
        exprs = [self.store.tok.parse(m) for m in matches]
        phrases_ = [e for e in exprs if isinstance(e, Phrase)]
        df = self._doc_freqs(phrases_) if phrases_ else {}
        return [0 if e is None else df[e] if isinstance(e, Phrase) else int(self._one(
            f"select count(*) from {self.store.s}.chunks where tsv @@ %s::tsquery", (to_tsquery(e),))) for e in exprs]

    def _phrase_count(self, ph: Phrase) -> int:
        """Chunks holding the phrase: token_df for one token (a key lookup), else a count through the GIN index."""
        s = self.store.s
        if len(ph.tokens) == 1:
            return int(self._one(f"select coalesce((select df from {s}.token_df where lexeme = %s), 0)",
                                 (ph.tokens[0],)))
        return int(self._one(f"select count(*) from {s}.chunks where tsv @@ %s::tsquery", (to_tsquery(ph),)))

    def _doc_freqs(self, instances: list[Phrase]) -> dict[Phrase, int]:
        """Documents holding each phrase (FTS5's nHit), remembered per index generation."""
        m = self.store.meta()
        stamp = (m.get("index_id"), int(m.get("generation", "0")))
        if self._df[0] != stamp:
            self._df = (stamp, {})
        df = self._df[1]
        missing = [ph for ph in dict.fromkeys(instances) if ph not in df]
        words = [ph for ph in missing if len(ph.tokens) == 1]
        if len(words) > 1:  # one key lookup for all the one-token phrases
            got = {str(t): int(n) for t, n in self.store.conn.execute(
                f"select lexeme, df from {self.store.s}.token_df where lexeme = any(%s)",
                ([ph.tokens[0] for ph in words],))}
            df.update((ph, got.get(ph.tokens[0], 0)) for ph in words)
        for ph in missing:
            if ph not in df:
                df[ph] = self._phrase_count(ph)
        return df

    def ranked(self, match: str, where: str, params: Sequence[Any],
               limit: int | None = None, min_rowid: int | None = None) -> list[tuple[int, float]]:
        """(chunk id, BM25) of the chunks matching `match` and the SQL condition `where` (and, with
        `min_rowid`, an id of at least that: the keyword planner's newest rows), best first."""
        expr = self.store.tok.parse(match)
        if expr is None:
            return []
        instances = phrases(expr)
        gin = False
        if min_rowid is not None:
            where, params = f"{where} and c.id >= %s", (*params, int(min_rowid))
            gin = self._gin_pays(instances, min_rowid)
        if all(len(ph.tokens) == 1 for ph in instances):
            return self._ranked_in_sql(expr, instances, where, params, limit, gin)
        lexemes = sorted({t for ph in instances for t in ph.tokens})
        docs: dict[int, tuple[int, dict[str, list[int]]]] = {}
        for cid, ntok, lexeme, pos in self._rows(
            # setweight + ts_filter keep only the query's lexemes in C, so unnest yields a few rows per
            # document rather than every token it holds (3× faster at 2,500 matching chunks).
            f"select c.id, c.ntok, u.lexeme, u.positions from {self.store.s}.chunks c cross join lateral"
            f" unnest(ts_filter(setweight(c.tsv, 'A', %s), '{{a}}')) u where c.tsv @@ %s::tsquery {where}",
            (lexemes, to_tsquery(expr), *params), gin,
        ):
            docs.setdefault(int(cid), (int(ntok), {}))[1][str(lexeme)] = list(pos)
        if not docs:
            return []
        n_docs, avgdl = self.stats()
        df = self._doc_freqs(instances)
        out = [(cid, bm25(instances, df, n_docs, avgdl, ntok, pos)) for cid, (ntok, pos) in docs.items()]
        out.sort(key=lambda x: (-x[1], x[0]))
        return out

    def _gin_pays(self, instances: list[Phrase], min_rowid: int) -> bool:
        """Whether the GIN index should find the rows of an id-bounded query rather than the primary key.

        Given `c.id >= n`, the planner may walk the primary key over every id from n and test each row's
        tsvector: it prices that test like an integer comparison, and misjudges how many rows a tsquery
        matches. At 1M chunks a common word's newest 4,000 of 64,000 took 44-47 ms that way against 13-23
        ms through the GIN index's bitmap (ANDed with the key's), while for a word in 19 % of the chunks
        with a bound over 2 % of them the key walk was best (10 vs 33 ms). Measured there, a key walk costs
        ~0.7 µs a row in the range and the GIN bitmap ~0.15 µs a matching row, so the key walk pays
        only when the range is under a quarter of the rows the query's phrases match (exact counts here,
        from token_df)."""
        lo, hi = self.store.max_chunk_id()
        span = max(0, hi - max(lo, int(min_rowid)) + 1)
        df = self._doc_freqs(instances)
        return span * 4 >= sum(df.get(ph, 0) for ph in dict.fromkeys(instances))

    def _rows(self, sql: str, args: Sequence[Any], gin: bool) -> list[Any]:
        """The statement's rows; with `gin`, planned without plain index scans (the primary-key walk
        _gin_pays rules out), the setting limited to this statement."""
        conn = self.store.conn
        if not gin:
            return conn.execute(sql, args).fetchall()
        if not self.store.in_view:
            with conn.transaction():
                conn.execute("set local enable_indexscan = off")
                return conn.execute(sql, args).fetchall()
        # Inside a search's transaction: set, run and reset in one round trip.
        with conn.pipeline():
            conn.execute("set local enable_indexscan = off")
            cur = conn.execute(sql, args)
            conn.execute("set local enable_indexscan to default")
        return cur.fetchall()

    def _ranked_in_sql(self, expr: Expr, instances: list[Phrase], where: str, params: Sequence[Any],
                       limit: int | None, gin: bool = False) -> list[tuple[int, float]]:
        """The same BM25, summed and sorted in the server, when every phrase is one token (most queries):
        each row's count of each query token comes from TF_SQL (a scalar per token, no set-returning
        unnest per row), so only the best `limit` rows travel."""
        n_docs, avgdl = self.stats()
        if n_docs <= 0 or avgdl <= 0:
            return []
        df = self._doc_freqs(instances)
        weight: dict[str, float] = {}
        for ph in instances:  # a phrase listed twice counts twice, as in FTS5
            d = df.get(ph, 0)
            weight[ph.tokens[0]] = weight.get(ph.tokens[0], 0.0) + bm25_idf(n_docs, d)
        lexemes = list(weight)
        # idf · f · (k1 + 1) / (f + norm), f this row's count of the token (0 when absent); the inner
        # query (kept apart by offset 0) counts each token once per row.
        score = " + ".join(f"%s::float8 * f{k} * %s::float8 / (f{k} + norm)" for k in range(len(lexemes)))
        counts = ", ".join(f"{TF_SQL} as f{k}" for k in range(len(lexemes)))
        sql = (f"select id, {score} as r from (select c.id, %s::float8 * (1 - %s::float8 + %s::float8 * c.ntok"
               f" / %s::float8) as norm, {counts} from {self.store.s}.chunks c, (select %s::float8[] as b) tf"
               f" where c.tsv @@ %s::tsquery {where} offset 0) s order by r desc, id"
               + (" limit %s" if limit is not None else ""))
        args = (*[a for x in lexemes for a in (weight[x], K1 + 1)], K1, B, B, avgdl,
                *[_quote(x) for x in lexemes], TF_BOUNDS_TEXT, to_tsquery(expr), *params,
                *((int(limit),) if limit is not None else ()))
        if limit is None or not self.store.in_view:
            return [(int(i), float(r)) for i, r in self._rows(sql, args, gin)]
        # Inside a search the best rows come with their text (the search reads them next: BM25 terms
        # of the words not ranked here, then the candidates' rows), kept in its view.
        got = self._rows(
            f"select k.r, c.id, {', '.join('c.' + x for x in ROW_COLUMNS.split(', '))} from ({sql}) k join"
            f" {self.store.s}.chunks c on c.id = k.id order by k.r desc, k.id", args, gin)
        self.store.keep_in_view([r[1:] for r in got])
        return [(int(r[1]), float(r[0])) for r in got]

    def stats(self) -> tuple[int, float]:
        """(documents, mean document length in tokens), as FTS5 keeps them."""
        m = self.store.meta()
        n, total = int(m.get("fts_docs", "0")), int(m.get("fts_tokens", "0"))
        return n, (total / n if n else 0.0)
