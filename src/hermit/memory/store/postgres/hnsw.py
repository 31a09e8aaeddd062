"""The HNSW index over a PostgreSQL store's chunk vectors: when it is built, how wide it searches, its recall.

Below `hnsw_threshold` vectors an exact scan is as fast, so the index is built only past it (on a
rebuild's staging schema before the swap, or by `optimize`). A search asks for at least `ef_search`
candidates (and at least k); the recall against the exact scan is measured once per index generation
for `hermit memory status` (each sample query is an exact scan: seconds at a million vectors).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

EF_SEARCH_MAX = 1_000  # pgvector refuses a larger hnsw.ef_search

if TYPE_CHECKING:
    from hermit.memory.store.postgres.schema import PgConn
    from hermit.memory.store.postgres.store import PgStore

HNSW_INDEX = "chunks_vec_hnsw"


class Hnsw:
    """The HNSW side of one PgStore (its connection, schema and config)."""

    def __init__(self, store: PgStore) -> None:
        self.store = store
        self._ef: int | None = None  # hnsw.ef_search as set on the store's KNN connection

    def reset(self) -> None:
        """A new KNN connection starts at the server's ef_search."""
        self._ef = None

    def set_ef(self, conn: PgConn, k: int) -> None:
        """ef_search on `conn` (the store's KNN connection) for a top-k search; at most pgvector's 1,000 (a
        deeper search, such as a restricted reader's, gets the 1,000 nearest)."""
        ef = min(max(self.store.cfg.ef_search, k), EF_SEARCH_MAX)
        if ef != self._ef:
            conn.execute("select set_config('hnsw.ef_search', %s, false)", (str(ef),))
            self._ef = ef

    def exists(self) -> bool:
        s = self.store
        row = s.conn.execute("select to_regclass(%s) is not null", (f"{s.s}.{HNSW_INDEX}",)).fetchone()
        return bool(row) and row[0] is True

    def build(self) -> None:
        """Build the index once the vectors pass the threshold (below it an exact scan is as fast)."""
        s = self.store
        if self.exists() or s.vector_count() < s.cfg.hnsw_threshold:
            return
        s.conn.execute(f"create index if not exists {HNSW_INDEX} on {s.s}.chunks_vec using hnsw"
                       f" (embedding {s.v}.vector_cosine_ops) with (m = {int(s.cfg.hnsw_m)},"
                       f" ef_construction = {int(s.cfg.hnsw_ef_construction)})")

    def recall(self, sample: int = 50, k: int = 10) -> float | None:
        """recall@k of the HNSW path against the exact scan, the queries `sample` stored vectors."""
        if not self.exists():
            return None
        s = self.store
        with s.conn.cursor(binary=True) as cur:
            qs = [r[0].to_numpy() for r in cur.execute(
                f"select embedding from {s.s}.chunks_vec tablesample system (10) limit %s", (sample,))]
            if len(qs) < sample:
                qs += [r[0].to_numpy() for r in cur.execute(
                    f"select embedding from {s.s}.chunks_vec order by random() limit %s", (sample - len(qs),))]
        found = total = 0
        for q in qs:
            exact = {i for i, _ in s.vec_knn_exact(q, k)}
            approx = {i for i, _ in s.vec_knn(q, k)}
            found += len(exact & approx)
            total += len(exact)
        return found / total if total else None

    def recall_once(self, sample: int) -> float | None:
        """recall(), measured once per index generation and kept in the schema's meta table."""
        s = self.store
        m = s.meta()
        stamp = f"{m.get('index_id')}:{m.get('generation', '0')}:{sample}"
        try:
            kept = json.loads(m.get("hnsw_recall", "{}"))
        except ValueError:
            kept = {}
        if kept.get("stamp") == stamp:
            value = kept.get("recall")
            return float(value) if value is not None else None
        recall = self.recall(sample)
        s.set_meta({"hnsw_recall": json.dumps({"stamp": stamp, "recall": recall})})
        return recall
