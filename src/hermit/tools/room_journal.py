"""A room's merge kept whole across a crash (kill -9, power loss): written down before it is carried out.

room_merge.py plans a merge before it touches the room: a list of steps (`Op`), each of which can be done again
without harm. Before the first of them, the plan is written into the staging folder (`journal`, flushed with
everything staged there) and the staging folder renamed, in one step, to the room's carry folder
(`.<room slug>.carry`, beside the room): from then on the merge is the room's to finish. When it is done, the carry
folder is removed. So a Hermit stopped at any point leaves either a staging folder (`.incoming-…`: nothing was
touched; the next command of that agent removes it, room_unpack.sweep_staging) or a carry folder: the next use of
the room (rooms.Room.fd / locked, under the room's lock) carries the rest of the plan out, every step again from the
first (each looks at what is there: a staged file already moved in is no longer in the carry folder). Either way the
room holds the command's whole set of changes or none of them, and what happened is written for the chat
(`.<room slug>.told`), which the chat's next exec or file tool reports, once (`told`). A gateway finishes every room's
left merge when it starts, and `hermit backup` before it reads the rooms (room_sweep.py); whoever moves a room
finishes it first (`finish_held`). A plan is finished only into the room it was made for (its inode): a room moved
away and another made under its name gets none of it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import hermit.tools.rooms as rooms
from hermit.durable import fsync_dir, write_all
from hermit.errors import HermitError
from hermit.textfile import DIR_FLAGS, refusal
from hermit.tools import safe_fs

JOURNAL = "journal"  # in the carry folder: the plan; the carry folder without it is one finished but not removed
ROOM_MARK = ".room"  # in a staging folder: the room it is for (so a sweep can tell that room's chat)
# One step: [kind, rel, ...]: ["rm", rel] a deletion (a folder only when empty), ["x", rel] a link refused (removed),
# ["d", rel] a folder, ["l", rel, text] a link, ["f", rel, staged name or None (empty), mode] a file.
Op = list[object]
SHOWN = 20  # the paths named in a note


def carry_path(base: Path, slug: str) -> Path:
    return base / f".{slug}.carry"


def told_path(base: Path, slug: str) -> Path:
    return base / f".{slug}.told"


def _syncfs(fd: int) -> None:
    """Flush the whole file system holding `fd` (one call for any number of files; os.sync where libc has none)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syncfs(fd) == 0:
            return
    except (OSError, AttributeError):
        pass
    os.sync()


def mark_staging(staging_fd: int, slug: str) -> None:
    """Name the room a staging folder is for (read by room_unpack.sweep_staging when its process died)."""
    fd = os.open(ROOM_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=staging_fd)
    try:
        write_all(fd, slug.encode(), fsync=False)
    finally:
        os.close(fd)


def room_of_staging(staging: Path) -> str | None:
    """The room slug a staging folder names (mark_staging), or None."""
    try:
        fd = os.open(staging / ROOM_MARK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        text = os.read(fd, 256).decode("utf-8", "replace")
    finally:
        os.close(fd)
    return text if text and "/" not in text and not text.startswith(".") else None


def tell(base: Path, slug: str, note: str) -> None:
    """Keep `note` for the room's next exec (`heard`)."""
    fd = os.open(told_path(base, slug), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, (note.replace("\n", " ") + "\n").encode(), fsync=True)
    finally:
        os.close(fd)


def heard(base: Path, slug: str) -> list[str]:
    """The notes kept for the room's chat (`tell`), removed as they are read."""
    path = told_path(base, slug)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return []
    try:
        data = b""
        while (block := os.read(fd, 1 << 16)) and len(data) < 1 << 20:
            data += block
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return [line for line in data.decode("utf-8", "replace").splitlines() if line]


def commit(staging: Path, staging_fd: int, carry: Path, ops: list[Op], summary: dict[str, object]) -> None:
    """Write the plan into the staging folder and make it the room's (the rename to `carry`): from here the merge is
    finished, now or by the room's next use. Everything staged, and the plan, reach the disk before the rename."""
    fd = os.open(JOURNAL, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=staging_fd)
    try:
        write_all(fd, json.dumps({"ops": ops, "summary": summary}).encode(), fsync=False)
    finally:
        os.close(fd)
    _syncfs(staging_fd)
    if os.path.lexists(carry):  # one finished whose removal failed (under the room's lock: none is unfinished)
        shutil.rmtree(carry, ignore_errors=True)
    os.rename(staging, carry)
    fsync_dir(carry.parent)


def done(carry: Path, carry_fd: int) -> None:
    """The plan is carried out: once the room's changes are on disk, the carry folder goes."""
    _syncfs(carry_fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(carry / JOURNAL)
    shutil.rmtree(carry, ignore_errors=True)
    fsync_dir(carry.parent)


@dataclass
class Carry:
    """Carries a plan's steps out in the room (`room_fd`), moving staged files in from `src_fd`. `was(rel, i)`: what
    is at `rel` before step i ("d", "f", "l" or None): the plan's own knowledge on a first run, a look on disk when
    a stopped merge is finished (`recover`)."""

    room_fd: int
    src_fd: int
    was: Callable[[str, int], str | None]
    _dirs: dict[str, int] = field(default_factory=dict)  # the room's folders opened while the plan is carried out

    def run(self, ops: list[Op], step: Callable[[int], None] | None = None) -> None:
        try:
            for i, op in enumerate(ops):
                if step is not None:
                    step(i)
                self._one(op, i)
        finally:
            for fd in self._dirs.values():
                os.close(fd)
            self._dirs.clear()

    def _one(self, op: Op, i: int) -> None:
        kind, rel = str(op[0]), str(op[1])
        was = self.was(rel, i)
        if kind == "rm":
            if was == "d":
                parent, _, name = rel.rpartition("/")
                with contextlib.suppress(OSError):  # not empty: something new arrived in it meanwhile
                    os.rmdir(name, dir_fd=self._dir(parent))
                self._forget(rel)
            elif was is not None:
                self._remove(rel)
            return
        if kind == "x":
            if was is not None:
                self._remove(rel)
            return
        if kind == "f" and op[2] is not None and not self._staged(str(op[2])):
            return  # moved in already (a stopped merge being finished)
        if was is not None and (was == "d") != (kind == "d"):
            self._remove(rel)
            was = None
        parent, _, name = rel.rpartition("/")
        if kind == "d":
            self._dir(rel)
        elif kind == "l":
            at = self._dir(parent)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=at)
            os.symlink(str(op[2]), name, dir_fd=at)
        else:
            self._file(rel, None if op[2] is None else str(op[2]), int(str(op[3])), was)

    def _staged(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.src_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def _dir(self, rel: str) -> int:
        """The room's folder `rel`, made if missing (0700), opened once; never through a link."""
        if not rel:
            return self.room_fd
        if rel not in self._dirs:
            parent, _, name = rel.rpartition("/")
            at = self._dir(parent)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=at)
            try:
                self._dirs[rel] = os.open(name, DIR_FLAGS, dir_fd=at)
            except OSError as e:
                raise refusal(rel, e) from None
        return self._dirs[rel]

    def _forget(self, rel: str) -> None:
        """`rel` was removed or replaced: its folder, and those below it, are opened anew when next needed."""
        for d in [d for d in self._dirs if d == rel or d.startswith(rel + "/")]:
            os.close(self._dirs.pop(d))

    def _remove(self, rel: str) -> None:
        parent, _, name = rel.rpartition("/")
        safe_fs.remove_beneath(self._dir(parent), name)
        self._forget(rel)

    def _file(self, rel: str, staged: str | None, mode: int, was: str | None) -> None:
        """Put a file in the room: its staged copy moved in by one rename in the room's folder's descriptor (an empty
        one made there, exclusively, where nothing is)."""
        parent, _, name = rel.rpartition("/")
        at = self._dir(parent)
        if staged is None:
            if was is None:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=at)
                try:
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
            else:
                safe_fs.write_beneath(self.room_fd, rel, b"", mode=mode, fsync=False)
            return
        os.chmod(staged, mode, dir_fd=self.src_fd)  # staged by Hermit: a regular file
        try:
            os.rename(staged, name, src_dir_fd=self.src_fd, dst_dir_fd=at)
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise
            data = safe_fs.read_beneath(self.src_fd, staged, 1 << 62).data
            safe_fs.write_beneath(self.room_fd, rel, data, mode=mode, fsync=False)
            os.unlink(staged, dir_fd=self.src_fd)


def kind_on_disk(room_fd: int, rel: str) -> str | None:
    """What is at `rel` in the room now: "d", "l", "f" (anything else), or None (nothing, or not reachable)."""
    try:
        st = safe_fs.lstat_beneath(room_fd, rel)
    except (OSError, HermitError):
        return None
    if st is None:
        return None
    return "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"


STOPPED = "Hermit stopped while it kept an earlier command's files in this chat's room"
NOT_KEPT = "[an earlier command's files were not kept: Hermit stopped before they were merged"


def recover(room_fd: int, base: Path, slug: str, cause: str = STOPPED) -> str:
    """Finish the room's merge a stopped Hermit (or an error part-way, `cause`) left in its carry folder, under the
    room's lock. Returns what the chat is to be told ("" when there was nothing to finish). A carry folder without
    its plan was finished already: it is removed."""
    carry = carry_path(base, slug)
    try:
        carry_fd = os.open(carry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    try:
        st = os.fstat(carry_fd)
        if st.st_uid != os.geteuid():
            return ""  # not Hermit's: left alone (the rooms folder is this user's, 0700)
        try:
            with open(os.open(JOURNAL, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=carry_fd), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            shutil.rmtree(carry, ignore_errors=True)
            return ""
        try:
            plan = json.loads(data)  # written whole and flushed before the carry folder got its name
            ops: list[Op] = plan["ops"]
            summary: dict[str, object] = plan["summary"]
            if summary.get("room", os.fstat(room_fd).st_ino) != os.fstat(room_fd).st_ino:
                # Not the room this merge was for: that one was moved away (a re-aimed job's room retired, a
                # Slack migration) and another made under its name, perhaps for other people. None of it goes here.
                done(carry, carry_fd)
                return ""
            Carry(room_fd, carry_fd, lambda rel, i: kind_on_disk(room_fd, rel)).run(ops)
            dropped = rooms._drop_links_leaving(room_fd) if summary.get("judge") else []
        except (OSError, HermitError, ValueError, KeyError, TypeError, RecursionError) as e:
            # It cannot be finished (the disk full, say): what was carried out stays, and the chat is told so.
            done(carry, carry_fd)
            why = os.strerror(e.errno) if isinstance(e, OSError) and e.errno else type(e).__name__
            return (f"[{cause}; the rest could not be kept ({why}): the room holds part of that command's "
                    "changes — check its files, and run the command again]")
        done(carry, carry_fd)
    finally:
        os.close(carry_fd)
    raw = summary.get("changed")
    changed = [str(c) for c in raw] if isinstance(raw, list) else []
    shown = ", ".join(c.lstrip("-") + (" (deleted)" if c.startswith("-") else "") for c in changed[:SHOWN])
    more = f" and {len(changed) - SHOWN:,} more" if len(changed) > SHOWN else ""
    links = f"; links removed (they led out of the room): {', '.join(dropped[:5])}" if dropped else ""
    return f"[{cause}; that was finished now, all of it: {shown or 'nothing'}{more}{links}]"


def tell_not_kept(base: Path, staging: Path) -> None:
    """A staging folder whose process died before its merge began (room_unpack.sweep_staging): tell its room."""
    slug = room_of_staging(staging)
    if slug is not None and (base / slug).is_dir():
        tell(base, slug, f"{NOT_KEPT} into this chat's room — what the room held before is unchanged; run that "
                         "command again]")


def told(room: rooms.Room) -> list[str]:
    """What the room's chat is to be told (`tell`) — read and removed under the room's lock, so it is said once —
    for the next tool result of that chat that uses the room: an exec's, or a file tool's."""
    if not os.path.lexists(told_path(room.base, room.path.name)):
        return []
    with room.locked():
        return heard(room.base, room.path.name)


# What a turn's prompt says of the notes kept for its chat (`news`): fixed words, never the notes' paths — those are
# what a command of the chat named its files, and a prompt's words weigh more than a tool result's.
PLAINLY = {
    "finished": "Hermit was stopped while it kept an earlier command's files in this chat's room; that has been "
                "finished since, all of it. The room's files may differ from what this conversation last showed: "
                "look (ls, read) before saying what they hold.",
    "part": "Hermit was stopped while it kept an earlier command's files in this chat's room, and only part of them "
            "could be kept: the room holds part of that command's changes. Look before saying what its files hold; "
            "the command may need to run again.",
    "none": "An earlier command's files were not kept in this chat's room (Hermit stopped before they were merged): "
            "the room holds what it held before that command, which may need to run again.",
}


def news(room: rooms.Room) -> list[str]:
    """What the room's chat is to be told (`tell`), left in place: a turn's prompt says it in fixed words (`plainly`)
    whether or not the turn uses a tool, and the turn's end removes it (`said`). A merge a stopped Hermit left is
    finished first (the room's next use would: this turn's prompt is about to speak of the room)."""
    if room.pending():
        with room.locked():
            pass
    path = told_path(room.base, room.path.name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return []
    try:
        data = os.read(fd, 1 << 20)
    finally:
        os.close(fd)
    return [line for line in data.decode("utf-8", "replace").splitlines() if line]


def plainly(notes: list[str]) -> str:
    """`notes` (kept for a chat) in the fixed words of PLAINLY, each kind once."""
    kinds = ["none" if n.startswith(NOT_KEPT) else "part" if "the rest could not be kept" in n else "finished"
             for n in notes]
    return " ".join(PLAINLY[k] for k in PLAINLY if k in kinds)


def said(room: rooms.Room, notes: list[str]) -> None:
    """`notes` were said (a turn's prompt): removed from what the chat is to be told, the rest kept."""
    if not notes or not os.path.lexists(told_path(room.base, room.path.name)):
        return
    with room.locked():
        left = heard(room.base, room.path.name)
        for note in [n for n in left if n not in notes]:
            tell(room.base, room.path.name, note)


def finish_held(base: Path, slug: str, moving_to: str | None = "") -> bool:
    """Finish the merge a stopped Hermit left for room `slug` (its lock held by the caller: a sweep, or whoever moves
    the room). Returns whether one was finished (its chat is told on the room's next use). A carry folder whose room
    is gone has nothing to go into: it is removed.

    `moving_to`: the room is about to be moved — to the slug given (a Slack migration: what its chat was to be told
    goes with it), or, None, out of every chat's reach (a re-aimed job's room, retired): what was kept for its chat
    is dropped, never told to whoever gets the name next."""
    carry = carry_path(base, slug)
    finished = False
    if os.path.lexists(carry):
        try:
            fd = os.open(base / slug, DIR_FLAGS)
        except OSError:  # gone (moved, retired) or not a folder: nothing to carry the plan into
            shutil.rmtree(carry, ignore_errors=True)
            fsync_dir(base)
            fd = -1
        if fd >= 0:
            try:
                note = recover(fd, base, slug) if os.fstat(fd).st_uid == os.geteuid() else ""
            finally:
                os.close(fd)
            if note:
                tell(base, slug, note)
                finished = True
    if moving_to is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(told_path(base, slug))
    elif moving_to:
        for note in heard(base, slug):
            tell(base, moving_to, note)
    return finished
