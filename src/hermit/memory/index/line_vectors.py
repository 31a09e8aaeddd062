"""Line vectors: a vector for every non-blank line of a memory file (sync embeds them with the chunks).

Search uses them for one thing: the places that passed min_score are put in order of their fused score
blended with the calibrated cosine of their best line, so the place whose single turn or bullet answers
the question comes first. Nothing new passes min_score that way and no window is thinned (mixed into
the ranking or the windows they did worse; bench/retrieval/conversations.md: `no-line-vectors`).
They are stored as float16 (half the bytes; the order they give is the same as float32's).
"""

from __future__ import annotations

from collections.abc import Iterable

from hermit.memory.index.chunking import Chunk, text_hash
from hermit.memory.lazy_numpy import numpy as np


def to_line_blob(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype=np.float16).tobytes()


def from_line_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(bytes(blob), dtype=np.float16).astype(np.float32)


def best_cosines(blobs: dict[int, bytes], query: np.ndarray, n: int) -> list[float | None]:
    """The best line cosine of each of `n` spans, from each span's line vectors as one run of float16
    bytes (None: the span has none). One decode and one product for all spans."""
    q = np.asarray(query, dtype=np.float32)
    width = 2 * q.shape[0]
    keys = [k for k in range(n) if blobs.get(k)]
    out: list[float | None] = [None] * n
    if not keys:
        return out
    sizes = [len(blobs[k]) // width for k in keys]
    sims = from_line_blob(b"".join(blobs[k] for k in keys)).reshape(-1, q.shape[0]) @ q
    for k, best in zip(keys, np.maximum.reduceat(sims, np.cumsum([0, *sizes[:-1]])), strict=True):
        out[k] = float(best)
    return out


def by_line_text(chunks: Iterable[tuple[int, str]], blobs: dict[int, bytes]) -> dict[str, np.ndarray]:
    """A file's stored line vectors keyed by the text hash of their line, the lines read back from the
    file's chunks ((first line, text) pairs): what a new version of the file can reuse."""
    texts: dict[int, str] = {}
    for start, text in chunks:
        for k, line in enumerate(text.split("\n")):
            texts.setdefault(start + k, line)
    return {text_hash(texts[n]): from_line_blob(b) for n, b in blobs.items() if n in texts}


def lines_from_chunks(chunks: Iterable[Chunk], per_chunk: dict[str, list[np.ndarray | None]],
                      wanted: Iterable[int]) -> dict[int, np.ndarray]:
    """A file's line vectors from its chunks' token states: line `start_line + k` of a chunk is line k
    of its text. A line in two chunks (the overlap) gets the mean of both, seen in either context."""
    want = set(wanted)
    sums: dict[int, np.ndarray] = {}
    for c in chunks:
        vecs = per_chunk.get(c.hash)
        if vecs is None:
            continue
        for k, v in enumerate(vecs):
            n = c.start_line + k
            if v is not None and n in want:
                sums[n] = sums[n] + v if n in sums else v.astype(np.float32, copy=True)
    out: dict[int, np.ndarray] = {}
    for n, v in sums.items():
        out[n] = (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)
    return out
