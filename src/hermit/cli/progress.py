"""Indexing progress on a terminal: files scanned, keyword search ready, then chunks embedded with rate and
time left (rich).

Only for a terminal: with a pipe or --json nothing is drawn, so captured output stays clean. The bar is
transient (it disappears when done) and goes to stderr, never stdout.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

from hermit.cli.terminal import unfiltered

if TYPE_CHECKING:  # rich loads only when a bar is drawn
    from rich.console import Console
    from rich.progress import Progress, TaskID

# Below this many chunks indexing is quick enough that no warning is needed.
SLOW_NOTICE_CHUNKS = 100
CHUNKS_TASK = "embedding chunks"


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
        """The line after Ctrl-C. Every embedded batch is committed as it goes, so with keyword search stored first
        the counts are what the index holds; otherwise (a small or a --force run) the index keeps its committed
        state, the one before this run at worst."""
        # By its name, not self._chunks: a Ctrl-C can land between the task's making (shown) and that assignment.
        task = next((t for t in self._progress.tasks if t.description == CHUNKS_TASK), None) if self._progress else None
        if self._ready is not None and task is not None:
            return (f"  stopped: keyword search covers all {self._ready:,} files and {int(task.completed):,} of "
                    f"{int(task.total or 0):,} chunks are embedded (your notes are untouched); `hermit memory index` "
                    "embeds the rest; `hermit memory search` answers meanwhile, by keyword for those not embedded")
        return ("  stopped: your notes are untouched and the index keeps what was finished; `hermit memory index` "
                "goes on from there")

    def files(self, done: int, total: int, name: str) -> None:
        assert self._progress is not None
        if self._files is None:
            self._files = self._progress.add_task("reading files", total=total, rate="")
        self._progress.update(self._files, completed=done, total=total)

    def ready(self, files: int, chunks: int) -> None:
        """A large index stored every file keyword-only first: say that search already works."""
        assert self._progress is not None
        self._ready = files
        self._progress.console.print(
            f"  keyword search is ready for {files:,} files; embedding {chunks:,} chunks, newest notes first "
            "(`hermit memory search` works meanwhile)", soft_wrap=True, highlight=False)

    def chunks(self, done: int, total: int) -> None:
        assert self._progress is not None
        if self._chunks is None:
            if self._files is not None:
                self._progress.remove_task(self._files)
            if total >= self.slow_notice_chunks and self.local_model:
                self._progress.console.print(f"  embedding {total:,} chunks with the local model on CPU: a first index of "
                                    "a large memory takes a while (later runs embed only what changed)", soft_wrap=True,
                                             highlight=False)
            self._chunks = self._progress.add_task(CHUNKS_TASK, total=total, rate="")
        self._progress.update(self._chunks, completed=done, total=total)
        task = self._progress.tasks[-1]
        self._progress.update(self._chunks, rate=f"{task.speed:.1f} chunks/s" if task.speed else "")
        self._progress.refresh()  # once per embedded batch: cheap, and every step is shown
