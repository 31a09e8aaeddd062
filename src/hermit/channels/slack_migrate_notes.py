"""The notes' side of the Slack key migration (channels/slack_migrate.py): which old audiences the agent's memory
files still hold, and their origin markers renamed to the new audience, one pass over the files.

Only a plain file of one name under memory/ (never memory/private/) is read or rewritten: a symlink or a hard link
may be an owner-only file under a memory/ name, which no chat is shown (audience.memory_view); its rename written
over the link's name would be a plain copy of the owner's text, shared with every chat."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from hermit.durable import write_atomic
from hermit.memory.policy.audience import block_audience, is_private_path
from hermit.memory.policy.daily_log import memory_writes_locked
from hermit.memory.policy.provenance import MARKER, OPEN_RE, open_line, origin_blocks
from hermit.textfile import NotRegularFile, decode_text, read_regular, read_regular_stat

SLACK = "slack"


def audiences_in(workspace: Path, wanted: set[str]) -> set[str]:
    """Which of `wanted` audiences have blocks in the agent's memory files."""
    found: set[str] = set()
    for _rel, path in _memory_files(workspace):
        if found >= wanted:
            break
        try:
            text = _read_note(path)
        except (OSError, ValueError):
            continue
        if MARKER in text and SLACK in text:
            found |= {a for b in origin_blocks(text) if (a := block_audience(b.origin)) in wanted}
    return found


def _memory_files(workspace: Path) -> Iterator[tuple[str, Path]]:
    root = workspace / "memory"
    for folder, dirs, files in os.walk(root):  # symlinked folders are not entered
        rel_dir = Path(folder).relative_to(workspace).as_posix()
        dirs[:] = sorted(d for d in dirs if not is_private_path(f"{rel_dir}/{d}/"))
        for name in sorted(files):
            rel = f"{rel_dir}/{name}"
            if name.lower().endswith(".md") and not is_private_path(rel):
                yield rel, Path(folder) / name


class _Linked(OSError):
    """A memory file that is a symlink or has more than one name (see `_read_note`)."""


def _read_note(path: Path) -> str:
    """A memory file's text, read only when it is a plain file of one name: a symlink or a hard link may be an
    owner-only file (MEMORY.md, memory/private/) under a memory/ name, which no chat is shown
    (audience.memory_view). Its rename would be written over the link's name: a plain copy of the owner's text,
    its unmarked lines shared with every chat. Such a file keeps its old audiences (_Linked)."""
    try:
        data, st = read_regular_stat(path, follow=False)
    except NotRegularFile as e:
        if e.kind != "a symlink":
            raise
        raise _Linked(errno.ELOOP, "a symlink: no chat is shown it, and it may lead to an owner-only file") from None
    if st.st_nlink > 1:
        raise _Linked(errno.EMLINK, f"a file with {st.st_nlink} names (hard links): no chat is shown it, and it "
                      "may be an owner-only file")
    return decode_text(data).text


def _renamed_text(text: str, renames: Mapping[str, str]) -> str | None:
    """`text` with the open markers of blocks of an old audience naming the new one (None: none there). A block
    written before audiences existed takes it from its session: it gets the new one as an attribute."""
    if MARKER not in text or SLACK not in text:
        return None
    lines = text.split("\n")
    changed = False
    for b in origin_blocks(text):
        new = renames.get(block_audience(b.origin))
        if new is not None and OPEN_RE.match(lines[b.start - 1].strip()):
            lines[b.start - 1] = open_line(dataclasses.replace(b.origin, audience=new))
            changed = True
    return "\n".join(lines) if changed else None


def rename_notes(workspace: Path, renames: Mapping[str, str], left: list[str],
                 tell: Callable[[str], None]) -> list[str]:
    """One pass over the agent's memory files (under the memory write lock, each file rewritten atomically)."""
    changed: list[str] = []
    for rel, path in _memory_files(workspace):
        try:
            if _renamed_text(_read_note(path), renames) is None:
                continue
        except _Linked as e:  # said only when the file it leads to holds an old audience
            with contextlib.suppress(OSError, ValueError):
                if _renamed_text(decode_text(read_regular(path)).text, renames) is not None:
                    left.append(f"{path}: its notes keep their old audience: it is {e.strerror}")
            continue
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            left.append(f"{path}: its notes keep their old audience ({type(e).__name__}: {e})")
            continue
        try:
            with memory_writes_locked(workspace, path):
                out = _renamed_text(_read_note(path), renames)
                if out is None:
                    continue
                write_atomic(path, out)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            left.append(f"{path}: its notes keep their old audience ({type(e).__name__}: {e})")
            continue
        changed.append(rel)
        tell(f"notes {rel}")
    return changed
