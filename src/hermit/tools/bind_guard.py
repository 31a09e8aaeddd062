"""What a bind-mode command (`sandbox.mode: all`) may not leave at the names Hermit reads outside the sandbox.

The workspace is bound read-write; the instruction files, MEMORY.md and memory/ that exist are bound read-only.
Three things stay open to the command, and are undone when it ends (`LinkGuard.undo`):

- a link made (or re-pointed) at a guarded name — an instruction file, MEMORY.md, inbox/ — points at nothing
  inside, but Hermit follows it outside: the next prompt read another agent's MEMORY.md through BOOTSTRAP.md.
  It is removed;
- a file made at an instruction file's name that was free when the command started (BOOTSTRAP.md, once the
  first-run ritual is over) cannot be bound, and would be read into every later prompt. It is moved aside to
  `NAME.made-by-a-command-<random>`, its text kept;
- an owner's link at a guarded name (SOUL.md kept as a link into a dotfiles folder) is no file, so it cannot be
  bound read-only: the command could remove it and write its own SOUL.md, read into every later prompt. What it
  left there is moved aside the same way and the owner's link made again.

A Hermit killed or restarted while the command ran (the gateway restarted under a `sleep 3600`) never got to
undo it, and the link or the file stayed for good. So the guard is also written, before the command starts, to
a journal in the state dir (`<agent>/sandbox/bind-guard-<random>.json`, 0600), held locked by the process that
runs the command (locks.hold_made) and removed once it is undone; `recover` undoes what a dead process's
journal names. It runs as the next turn of the agent's sandboxed main session builds its tools, before its
prompt is read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from hermit.locks import left_unheld, lock_fd, make_held

log = logging.getLogger("hermit.sandbox")

JOURNAL_PREFIX = "bind-guard-"
MAX_JOURNAL_BYTES = 1 << 20

# (st_dev, st_ino, target, st_ctime_ns) of a symlink; None: no symlink there. The ctime (which no one can set):
# a link removed and made again to the same place often gets the inode just freed.
LinkIdentity = tuple[int, int, str, int] | None


def _link_identity(path: Path) -> LinkIdentity:
    try:
        st = os.lstat(path)
        return (st.st_dev, st.st_ino, os.readlink(path), st.st_ctime_ns) if stat.S_ISLNK(st.st_mode) else None
    except OSError:
        return None


@dataclass(frozen=True)
class LinkGuard:
    """The guarded names of a bind-mode sandbox as they were before a command (see OsSandbox.guarded)."""

    before: Mapping[Path, LinkIdentity]
    absent: frozenset[Path] = frozenset()  # kept-out names (OsSandbox.kept_out) nothing was at before
    journal: tuple[int, Path] | None = None  # the held journal's descriptor and path, while the command runs
    # Whether a link `before` names is the owner's, to put back: no other command of the agent ran when it was
    # taken (a link at a guarded name then may be that command's own, which its guard removes).
    restore: bool = True

    @classmethod
    def take(cls, guarded: Iterable[Path], kept_out: Iterable[Path], journal_dir: Path | None) -> LinkGuard:
        """The guard of `guarded` and `kept_out` as they are now; journaled in `journal_dir` when given."""
        alone = journal_dir is None or not _running(journal_dir)  # first: another command's links are seen after
        guard = cls({p: _link_identity(p) for p in guarded},
                    frozenset(p for p in kept_out if not os.path.lexists(p)), restore=alone)
        return guard if journal_dir is None else guard._journaled(journal_dir)

    def _journaled(self, folder: Path) -> LinkGuard:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        body = json.dumps({"before": {str(p): list(i) if i is not None else None for p, i in self.before.items()},
                           "absent": sorted(str(p) for p in self.absent), "restore": self.restore}).encode()

        def make() -> tuple[int, Path]:
            path = folder / f"{JOURNAL_PREFIX}{secrets.token_hex(8)}.json"
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), path

        fd, path = make_held(make)
        try:
            os.write(fd, body)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        return replace(self, journal=(fd, path))

    def undo(self) -> list[str]:
        """Remove every guarded name that is now a symlink it was not before the command (every process of it
        is gone by then: the sandbox has a pid namespace of its own), and move aside whatever is now at a
        kept-out name that was free before; one line for the tool result each. Then the journal goes."""
        notes = self._unlink_new_links()
        for path in sorted(self.absent):
            if os.path.lexists(path):
                notes.append(_move_aside(path))
        if self.journal is not None:
            fd, path = self.journal
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)
        return notes

    def _unlink_new_links(self) -> list[str]:
        notes: list[str] = []
        for path, was in self.before.items():
            now = _link_identity(path)
            if _same(now, was):
                continue
            if now is not None:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    continue
                notes.append(f"[removed {path.name}: the command made it a link (to {now[2]}); Hermit reads it "
                             "outside the sandbox, so a sandboxed command may not point it anywhere]")
            if was is not None:
                notes += _put_back(path, was[2]) if self.restore else _not_put_back(path, was[2])
        return notes


def _same(now: LinkIdentity, was: LinkIdentity) -> bool:
    """Whether the link `now` is the one recorded `was` (an earlier version's journal recorded no ctime: -1)."""
    if now is None or was is None or was[3] != -1:
        return now == was
    return now[:3] == was[:3]


def _running(folder: Path) -> bool:
    """Whether a command of the agent runs now: a journal in `folder` its process holds."""
    try:
        names = [e.path for e in os.scandir(folder) if e.name.startswith(JOURNAL_PREFIX)]
    except OSError:
        return False
    for name in names:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not lock_fd(fd, wait=False):
                return True
        finally:
            os.close(fd)  # a lock taken here goes with it
    return False


def recover(folder: Path, guarded: Iterable[Path], kept_out: Iterable[Path]) -> list[str]:
    """Undo what the commands of processes that died before undoing it left (their journals in `folder`) at the
    names the sandbox guards now (`guarded`, `kept_out`: a journal naming anything else is not Hermit's, and
    would have the next turn move, unlink or link whatever it names); what was undone, one line each (also
    logged). A journal that cannot be read is kept, and logged."""
    notes: list[str] = []
    guarded, kept_out = frozenset(guarded), frozenset(kept_out)
    for name in left_unheld(folder, JOURNAL_PREFIX):
        path = Path(name)
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read(MAX_JOURNAL_BYTES))
            before = {Path(p): (int(i[0]), int(i[1]), str(i[2]), int(i[3]) if len(i) > 3 else -1)
                      if i is not None else None for p, i in data["before"].items()}
            absent = frozenset(Path(p) for p in data["absent"])
            strange = sorted(str(p) for p in (before.keys() - guarded) | (absent - kept_out))
            if strange:
                log.warning("a sandboxed command's guard journal %s names %s, which the sandbox does not guard: "
                            "those are left as they are", path, ", ".join(strange))
            before = {p: was for p, was in before.items() if p in guarded}
            # A link to the same place counts as the one recorded (a journal restored from a backup onto another
            # disk names other inode numbers for the owner's own links) — when the recorded ones are the owner's:
            # with another command running then, one may be that command's, and a new link to its place is not.
            restore = data.get("restore") is True
            before = {p: now if restore and was is not None and (now := _link_identity(p)) is not None
                      and now[2] == was[2] else was for p, was in before.items()}
            guard = LinkGuard(before, absent & kept_out, restore=restore)
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            log.warning("a sandboxed command's guard journal %s cannot be read (%s): check the instruction files, "
                        "MEMORY.md and inbox/ of the workspace for links and files it may have left, then remove "
                        "the journal", path, e)
            continue
        done = guard.undo()
        with contextlib.suppress(OSError):
            path.unlink()
        for line in done:
            log.warning("after a sandboxed command a killed Hermit did not see end: %s", line)
        notes += done
    return notes


def _put_back(path: Path, target: str) -> list[str]:
    """The owner's link at `path` (to `target`), which the command removed or replaced: only a file can be bound
    read-only, so a link's name stayed the command's to take, and what it wrote there was read into every later
    prompt as the owner's instruction file. What it left there is moved aside (its text kept), the link made
    again."""
    notes = [_move_aside(path, "it replaced your link")] if os.path.lexists(path) else []
    try:
        os.symlink(target, path)
    except OSError as e:
        notes.append(f"[{path.name} was a link to {target}, which the command removed; it could not be made again "
                     f"({e.strerror}): make it again yourself]")
        return notes
    notes.append(f"[put back {path.name} as your link to {target}: the command removed it]")
    return notes


def _not_put_back(path: Path, target: str) -> list[str]:
    """A link at `path` when the command started that may have been another command's (one ran then): what the
    command left there is moved aside, no link made; the owner is told."""
    if not os.path.lexists(path):
        return []  # most likely the other command's link, which its own guard removed
    return [_move_aside(path, "it replaced a link"),
            f"[{path.name} was a link to {target} when the command started; another command ran then, so it is "
            "not made again: if it was yours, make it again yourself]"]


def _move_aside(path: Path, why: str = "a sandboxed command may not add an instruction file") -> str:
    """Rename what a command made at the kept-out name `path` to `NAME.made-by-a-command-<random>` beside it (a
    name Hermit never reads, and one the command could not have guessed and taken first); the tool result's line
    saying where. Where it cannot be moved it is removed: it must not reach the next prompt."""
    for _ in range(8):
        aside = path.with_name(f"{path.name}.made-by-a-command-{secrets.token_hex(4)}")
        if os.path.lexists(aside):
            continue
        try:
            os.rename(path, aside)
        except OSError:
            break
        return (f"[moved {path.name} aside to {aside.name}: the command made it, and {why}; rename it back "
                "yourself if you want it]")
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return f"[removed {path.name}: the command made it, and {why}]"
