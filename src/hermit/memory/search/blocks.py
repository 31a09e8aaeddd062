"""Blocks of a matrix pass that any thread may take, and the moment every one of them is finished."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator


class Blocks:
    """Rows [0, n) in blocks of `size`: a worker starts a pass, the search thread helps with what is left,
    and whoever reads the result waits until every block is written, not only taken (memory.search.vectors
    .MatrixPass, vector_int8.Int8Pass)."""

    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size
        self.starts = list(range(0, n, size))
        self._next = itertools.count()  # next() on a count is atomic under the GIL
        self._done = 0
        self._lock = threading.Lock()
        self._all_done = threading.Event()
        if not self.starts:
            self._all_done.set()

    def take(self) -> Iterator[tuple[int, int]]:
        """(start, end) of each block this thread takes; a block counts as finished when the caller asks for
        the next one (or ends the loop)."""
        while (i := next(self._next)) < len(self.starts):
            a = self.starts[i]
            yield a, min(a + self.size, self.n)
            with self._lock:
                self._done += 1
                if self._done == len(self.starts):
                    self._all_done.set()

    def wait(self) -> None:
        self._all_done.wait()
