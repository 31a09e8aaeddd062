"""Indexing progress: files scanned, keyword search ready, then chunks embedded with rate and time left.

On a terminal, a bar (rich), transient (it disappears when done). Without one (cron, `ssh -T`, output piped to a
log), plain lines: one per tenth of the chunks embedded, no bar, no carriage return (`LogProgress`). Both go to
stderr, never stdout, and both say the same notices and, when stopped, what the index keeps. With --json neither
is used, so captured output stays clean.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

from hermit.cli.terminal import unfiltered

if TYPE_CHECKING:  # rich loads only when a bar is drawn
    from rich.console import Console
    from rich.progress import Progress, TaskID

# Below this many chunks indexing is quick enough that no warning (and, in a log, no progress line) is needed.
SLOW_NOTICE_CHUNKS = 100
CHUNKS_TASK = "embedding chunks"
LOG_STEPS = 10  # in a log, a line per tenth of the chunks


def ready_line(files: int, chunks: int) -> str:
    return (f"  keyword search is ready for {files:,} files; embedding {chunks:,} chunks, newest notes first "
            "(`hermit memory search` works meanwhile)")


def slow_line(chunks: int) -> str:
    return (f"  embedding {chunks:,} chunks with the local model on CPU: a first index of a large memory takes a "
            "while (later runs embed only what changed)")


def stopped_line(ready: int | None, done: int | None, total: int | None) -> str:
    """The line after a stop. Every embedded batch is committed as it goes, so with keyword search stored first
    the counts are what the index holds; otherwise (a small or a --force run) the index keeps its committed
    state, the one before this run at worst."""
    if ready is not None and done is not None:
        return (f"  stopped: keyword search covers all {ready:,} files and {done:,} of {total or 0:,} chunks are "
                "embedded (your notes are untouched); `hermit memory index` embeds the rest; `hermit memory "
                "search` answers meanwhile, by keyword for those not embedded")
    return ("  stopped: your notes are untouched and the index keeps what was finished; `hermit memory index` "
            "goes on from there")


def _seconds(s: float) -> str:
    s = round(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class LogProgress:
    """Indexing progress for a log: plain lines to stderr, flushed as they are written. A line per tenth of the
    chunks embedded — by count, not by time, so a log reads the same however fast the machine (a first index of
    300 notes, 901 chunks, 20 s on 2 cores: ten lines) — with the rate and the time left; none below
    SLOW_NOTICE_CHUNKS chunks (seconds: the summary says it). The notices and the stop line are the terminal's."""

    def __init__(self, stream: TextIO | None = None, *, local_model: bool = True,
                 slow_notice_chunks: int = SLOW_NOTICE_CHUNKS, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.local_model = local_model
        self.slow_notice_chunks = slow_notice_chunks
        self._clock = clock
        self._ready: int | None = None
        self._done: int | None = None
        self._total: int | None = None
        self._step = 0
        self._started = 0.0

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if et is KeyboardInterrupt:
            self._say(stopped_line(self._ready, self._done, self._total))

    def _say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def files(self, done: int, total: int, name: str) -> None:
        """Reading files takes seconds: no line (the chunks to embed are the slow part)."""

    def ready(self, files: int, chunks: int) -> None:
        self._ready = files
        self._say(ready_line(files, chunks))

    def chunks(self, done: int, total: int) -> None:
        if self._total is None:
            self._total, self._started = total, self._clock()
            if total >= self.slow_notice_chunks and self.local_model:
                self._say(slow_line(total))
        self._done, self._total = done, total
        step = done * LOG_STEPS // total if total else LOG_STEPS
        if total < self.slow_notice_chunks or step <= self._step:
            return
        self._step = step
        elapsed = self._clock() - self._started
        rate = done / elapsed if elapsed > 0 else 0.0
        how = (f", in {_seconds(elapsed)}" if done >= total else
               f", {rate:.1f} chunks/s, about {_seconds((total - done) / rate)} left" if rate else "")
        self._say(f"  embedded {done:,} of {total:,} chunks ({done * 100 // total}%){how}")


class IndexProgress:
    """Context manager handing `files`, `ready` and `chunks` callbacks to MemoryService.sync."""

    def __init__(self, stream: TextIO | None = None, *, local_model: bool = True,
                 slow_notice_chunks: int = SLOW_NOTICE_CHUNKS, force_terminal: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.local_model = local_model
        self.slow_notice_chunks = slow_notice_chunks
        self.force_terminal = force_terminal
        self._console: Console | None = None
        self._progress: Progress | None = None
        self._files: TaskID | None = None
        self._chunks: TaskID | None = None
        self._ready: int | None = None  # files stored keyword-first (the `ready` callback)

    def __enter__(self) -> IndexProgress:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._console = Console(file=unfiltered(self.stream), force_terminal=self.force_terminal)
        self._progress = Progress(
            TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("·"), TimeRemainingColumn(),
            TextColumn("left"),
            console=self._console, transient=True,
        )
        self._progress.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
        if et is KeyboardInterrupt and self._console is not None:  # Ctrl-C: what is kept, and how to go on
            self._console.print(self._stopped(), soft_wrap=True, highlight=False)

    def _stopped(self) -> str:
        # By its name, not self._chunks: a Ctrl-C can land between the task's making (shown) and that assignment.
        task = next((t for t in self._progress.tasks if t.description == CHUNKS_TASK), None) if self._progress else None
        return stopped_line(self._ready, int(task.completed) if task else None, int(task.total or 0) if task else None)

    def files(self, done: int, total: int, name: str) -> None:
        assert self._progress is not None
        if self._files is None:
            self._files = self._progress.add_task("reading files", total=total, rate="")
        self._progress.update(self._files, completed=done, total=total)

    def ready(self, files: int, chunks: int) -> None:
        """A large index stored every file keyword-only first: say that search already works."""
        assert self._progress is not None
        self._ready = files
        self._progress.console.print(ready_line(files, chunks), soft_wrap=True, highlight=False)

    def chunks(self, done: int, total: int) -> None:
        assert self._progress is not None
        if self._chunks is None:
            if self._files is not None:
                self._progress.remove_task(self._files)
            if total >= self.slow_notice_chunks and self.local_model:
                self._progress.console.print(slow_line(total), soft_wrap=True, highlight=False)
            self._chunks = self._progress.add_task(CHUNKS_TASK, total=total, rate="")
        self._progress.update(self._chunks, completed=done, total=total)
        task = self._progress.tasks[-1]
        self._progress.update(self._chunks, rate=f"{task.speed:.1f} chunks/s" if task.speed else "")
        self._progress.refresh()  # once per embedded batch: cheap, and every step is shown
