"""Line vectors: a vector for every non-blank line of a memory file (sync embeds them with the chunks).

Search uses them for one thing: the places that passed min_score are put in order of their fused score
blended with the calibrated cosine of their best line, so the place whose single turn or bullet answers
the question comes first. Nothing new passes min_score that way and no window is thinned (mixed into
the ranking or the windows they did worse; bench/retrieval/conversations.md: `no-line-vectors`).
They are stored as float16 (half the bytes; the order they give is the same as float32's).
"""

from __future__ import annotations

import numpy as np

# The best line's share of a place's score when places are put in order (0.1-0.4 measured).
LINE_WEIGHT = 0.2


def to_line_blob(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype=np.float16).tobytes()


def from_line_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(bytes(blob), dtype=np.float16).astype(np.float32)


def best_cosines(blobs: dict[int, list[bytes]], query: np.ndarray, n: int) -> list[float | None]:
    """The best line cosine of each of `n` spans (None: the span has no line vector)."""
    q = np.asarray(query, dtype=np.float32)
    out: list[float | None] = [None] * n
    for k, items in blobs.items():
        if items:
            out[k] = float(np.max(np.stack([from_line_blob(b) for b in items]) @ q))
    return out

