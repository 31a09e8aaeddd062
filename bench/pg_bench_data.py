"""Synthetic corpora for the PostgreSQL benchmark: e5-shaped clustered vectors, template texts, and their loaders.

Vectors are synthetic but live in the real e5 space: a pool of template sentences is embedded ONCE with the
real multilingual-e5-small model; each chunk's text holds three pool sentences (the second and third among
the 16 nearest pool neighbours of the first, so chunks cluster by topic) plus three more template lines, and
its vector is a Dirichlet-weighted mix of the three sentences' real embeddings plus Gaussian noise
confined to the pool's top NOISE_RANK principal directions (low-rank, as real variation between texts is;
norm ≈ NOISE_NORM, ≈ cos 0.96 to the mix), L2-normalised. So queries embedded by the real model land among
the documents as they would on a real memory, and HNSW recall is measured on that geometry, not on isotropic
noise in all 384 dimensions (a far harder, unrealistic case for any graph index).

Everything is cached under bench/out/pg/ and reused by later runs.
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from memory_world import SEED, _line  # noqa: E402 - the memory bench's seeded template generator

OUT = Path(os.environ.get("HERMIT_PG_BENCH_OUT") or BENCH_DIR / "out" / "pg")  # another dir: a scratch run
POOL_SIZE = 1536
NEIGHBOURS = 16
NOISE_RANK = 48
NOISE_NORM = 0.25
DIMS = 384
LINES_PER_FILE = 50  # synthetic files of 50 chunks each (paths only matter for the files table)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pool(e5: Any) -> tuple[list[str], np.ndarray]:
    """POOL_SIZE distinct template sentences and their real e5 passage embeddings (cached)."""
    OUT.mkdir(parents=True, exist_ok=True)
    texts_p, vecs_p = OUT / "pool.json", OUT / "pool.npy"
    if texts_p.exists() and vecs_p.exists():
        return json.loads(texts_p.read_text()), np.load(vecs_p)
    r = random.Random(f"{SEED}-pg-pool")
    seen: dict[str, None] = {}
    while len(seen) < POOL_SIZE:
        seen.setdefault(_line(r), None)
    texts = list(seen)
    t0 = time.perf_counter()
    vecs = np.asarray(e5.embed_documents(texts), dtype=np.float32)
    log(f"embedded the {len(texts)}-sentence pool with e5 in {time.perf_counter() - t0:.1f} s")
    np.save(vecs_p, vecs)
    texts_p.write_text(json.dumps(texts, ensure_ascii=False))
    return texts, vecs


def data_dir(n: int) -> Path:
    return OUT / f"data-{n}"


def generate(n: int, e5: Any) -> dict[str, Any]:
    """Write texts.jsonl and vectors.npy for n chunks (seeded; cached)."""
    d = data_dir(n)
    meta_p = d / "meta.json"
    if meta_p.exists():
        return dict(json.loads(meta_p.read_text()))
    d.mkdir(parents=True, exist_ok=True)
    texts, pvecs = pool(e5)
    t0 = time.perf_counter()
    sims = pvecs @ pvecs.T
    np.fill_diagonal(sims, -1)
    near = np.argsort(-sims, axis=1)[:, :NEIGHBOURS]
    rng = np.random.default_rng(SEED)
    centred = pvecs - pvecs.mean(axis=0)
    basis = np.linalg.svd(centred, full_matrices=False)[2][:NOISE_RANK].astype(np.float32)  # (rank, dims)
    r = random.Random(f"{SEED}-pg-extra")
    extra = [_line(r) for _ in range(20_000)]
    vecs = np.lib.format.open_memmap(d / "vectors.npy", mode="w+", dtype=np.float32, shape=(n, DIMS))
    with (d / "texts.jsonl").open("w", encoding="utf-8") as f:
        for lo in range(0, n, 100_000):
            b = min(n, lo + 100_000) - lo
            first = rng.integers(0, len(texts), b)
            pick = near[first[:, None], rng.integers(0, NEIGHBOURS, (b, 2))]
            idx = np.concatenate([first[:, None], pick], axis=1)
            w = rng.dirichlet((1.0, 1.0, 1.0), b).astype(np.float32)
            mix = np.einsum("bk,bkd->bd", w, pvecs[idx])
            mix += (rng.standard_normal((b, NOISE_RANK), dtype=np.float32) @ basis) * (NOISE_NORM / NOISE_RANK ** 0.5)
            mix /= np.linalg.norm(mix, axis=1, keepdims=True)
            vecs[lo:lo + b] = mix
            ex = rng.integers(0, len(extra), (b, 3))
            for i in range(b):
                lines = [texts[idx[i, 0]], extra[ex[i, 0]], texts[idx[i, 1]], extra[ex[i, 1]],
                         texts[idx[i, 2]], extra[ex[i, 2]]]
                f.write(json.dumps("\n".join(lines), ensure_ascii=False) + "\n")
            log(f"generated {lo + b}/{n} chunks")
    vecs.flush()
    del vecs
    meta = {"chunks": n, "pool": len(texts), "neighbours": NEIGHBOURS, "noise_rank": NOISE_RANK,
            "noise_norm": NOISE_NORM, "generator": 2,
            "seconds": round(time.perf_counter() - t0, 1)}
    meta_p.write_text(json.dumps(meta))
    return meta


def vectors(n: int) -> np.ndarray:
    return np.load(data_dir(n) / "vectors.npy", mmap_mode="r")


def iter_rows(n: int) -> Iterator[tuple[int, str, int, int, str]]:
    """(id, path, start_line, end_line, text) for chunk ids 1..n."""
    with (data_dir(n) / "texts.jsonl").open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            k = i % LINES_PER_FILE
            yield i + 1, f"memory/bench-{i // LINES_PER_FILE:06d}.md", k * 6 + 1, k * 6 + 6, json.loads(line)


def copy_binary_header() -> bytes:
    return b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)


def copy_binary_row(cid: int, path: str, start: int, end: int, text: str, kw: str, vec: np.ndarray) -> bytes:
    """One row of PostgreSQL's binary COPY format: int8, text, int4, int4, text, text, vector."""
    def t(s: str) -> bytes:
        b = s.encode("utf-8")
        return struct.pack(">i", len(b)) + b
    vb = struct.pack(">hh", DIMS, 0) + np.asarray(vec, dtype=">f4").tobytes()
    return b"".join((struct.pack(">hiq", 7, 8, cid), t(path), struct.pack(">ii", 4, start),
                     struct.pack(">ii", 4, end), t(text), t(kw), struct.pack(">i", len(vb)), vb))
