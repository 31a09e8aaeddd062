"""A `hermit restore` that was killed half-way: found, and finished or rolled back, before the folder is used.

How a restore writes into a folder that exists (`--force` over a state dir, or an empty external folder;
backup_restore.py): it stages the whole archive in `.hermit-restore-<16 hex>` inside that folder, held by its
process from its making to its removal (locks.hold_made); once every file is staged (and fsynced) and the dry
run of the move found no conflict, it writes `.hermit-restore-<hex>.ready` next to it — the point of no
return — and only then moves the staged entries over what is there, one rename each, then removes the
emptied stage and the marker last.

A restore killed there (SIGKILL, an OOM kill, a power cut) leaves a stage that no process holds:
- no marker: it was still staging and nothing else in the folder had changed. The stage is removed — rolled
  back: the folder is as it was before that restore.
- a marker: some entries may have moved and the rest not. What is left in the stage is exactly what had not
  moved yet (each move is one rename), so the move is run again over it — finished: the folder is what the
  restore would have left (the archive's files over the old ones; the old files the archive does not hold
  stay, as with any `--force`). The archive is not needed for that.
A line on stderr says which. A stage that a live restore holds is waited for, never touched.

`finish_interrupted_restores` runs at the start of every command that opens the state dir (cli/main.py), before
it reads anything there: a gateway, a chat or a backup must never run on a mix of two snapshots, and finishing
needs only what is on disk. `hermit restore` runs `recover` on each folder it is about to restore into (the
state dir after checking it is the user's, external folders too). When the move cannot be finished (a file
now stands where the archive has a folder), every command stops with an error naming it: never a silent mix.
A fresh restore (into a folder that did not exist) is one rename of its stage and needs none of this; a stage
such a restore left in the parent folder (killed before that rename) is removed by the next restore there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
from pathlib import Path

from hermit.config.paths import not_own_private_dir, not_safe_parent
from hermit.errors import HermitError
from hermit.locks import hold_made, lock_fd

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
STAGE_PREFIX = ".hermit-restore-"
STAGE = re.compile(r"\.hermit-restore-[0-9a-f]{16}")
READY = ".ready"


class RestoreConflict(HermitError):
    """The staged tree cannot be moved over what is in the folder."""


def ready_name(stage: str) -> str:
    return stage + READY


def make_stage(where_fd: int, where: Path) -> tuple[str, int]:
    """A new stage folder in `where` (0700, the user's) and its descriptor, held until closed."""
    while True:
        name = f"{STAGE_PREFIX}{secrets.token_hex(8)}"
        os.mkdir(name, 0o700, dir_fd=where_fd)
        fd = os.open(name, DIR_FLAGS, dir_fd=where_fd)
        try:
            if not hold_made(fd, name, dir_fd=where_fd):
                os.close(fd)
                continue  # a sweep took it for a dead restore's: another name
            if os.fstat(fd).st_uid != os.geteuid():
                raise RestoreConflict(f"{where / name} is not the folder this restore made", "restore into a folder "
                                      "only you can write")
            os.fchmod(fd, 0o700)
            return name, fd
        except BaseException:
            os.close(fd)
            raise


def mark_ready(where_fd: int, stage: str, *, private: bool) -> None:
    """The point of no return: the stage is whole; from here a killed restore is finished, not rolled back."""
    fd = os.open(ready_name(stage), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                 dir_fd=where_fd)
    try:
        os.write(fd, json.dumps({"private": private}).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.fsync(where_fd)


def remove_stage(where_fd: int, stage: str) -> None:
    """The emptied (or abandoned) stage, then its marker: a marker left alone means the move was done."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(stage, dir_fd=where_fd)
    _unlink_marker(where_fd, ready_name(stage))
    with contextlib.suppress(OSError):
        os.fsync(where_fd)


def _ours(st: os.stat_result) -> bool:
    """A marker this user's restore wrote (mark_ready): a regular file of ours with one name. Anything else under
    a marker's name — another user's file, a link, a folder — was put there by someone else (in a shared parent
    such as /tmp, where a stage can be) and says nothing: it neither turns a rollback into a move nor is removed."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink == 1


def _unlink_marker(where_fd: int, name: str) -> None:
    try:
        if _ours(os.stat(name, dir_fd=where_fd, follow_symlinks=False)):
            os.unlink(name, dir_fd=where_fd)
    except OSError:
        pass  # gone, or not ours to remove: a marker without its stage says nothing


def move_staged(stage_fd: int, where_fd: int, where: Path, private: bool) -> int:
    """Move the staged tree over the folder (merge: see `merge`); the entries moved."""
    moved = merge(stage_fd, where_fd, where, private, dry=False)
    if private:
        os.fchmod(where_fd, 0o700)
    return moved


def move(name: str, src_fd: int, dst_fd: int, *, replace: bool) -> None:
    """One entry of the stage into place: a single rename (what a killed restore leaves is whole)."""
    if replace:
        os.replace(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
    else:
        os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def merge(src_fd: int, dst_fd: int, where: Path, private: bool, *, dry: bool) -> int:
    """Move the staged tree `src_fd` over the existing folder `dst_fd` (--force): files replace files; folders
    merge, each the user's, opened without following a link and made 0700 under the state dir. `dry` only checks,
    so a conflict is found before anything moves. Returns the entries moved."""
    moved = 0
    for name in sorted(os.listdir(src_fd)):
        st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        try:
            old: os.stat_result | None = os.stat(name, dir_fd=dst_fd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        shown = where / name
        hint = "move it away, or restore into an empty state dir"
        if old is not None and stat.S_ISLNK(old.st_mode):
            raise RestoreConflict(f"{shown} is a symlink", "remove it, or restore into an empty state dir")
        if not stat.S_ISDIR(st.st_mode):
            if old is not None and stat.S_ISDIR(old.st_mode):
                raise RestoreConflict(f"{shown} is a folder; the archive has a file there", hint)
            if not dry:
                move(name, src_fd, dst_fd, replace=True)
                moved += 1
            continue
        if old is None:
            if not dry:
                move(name, src_fd, dst_fd, replace=False)
                moved += 1
            continue
        if not stat.S_ISDIR(old.st_mode):
            raise RestoreConflict(f"{shown} is a file; the archive has a folder there", hint)
        sub_src = os.open(name, DIR_FLAGS, dir_fd=src_fd)
        try:
            sub_dst = os.open(name, DIR_FLAGS, dir_fd=dst_fd)
            try:
                now = os.fstat(sub_dst)
                if now.st_uid != os.geteuid():
                    raise RestoreConflict(f"{shown} belongs to another user (uid {now.st_uid})", hint)
                if not dry:
                    os.fchmod(sub_dst, 0o700 if private else stat.S_IMODE(now.st_mode) & ~0o022)
                moved += merge(sub_src, sub_dst, shown, private, dry=dry)
            finally:
                os.close(sub_dst)
        finally:
            os.close(sub_src)
    return moved


def _private(where_fd: int, stage: str) -> bool | None:
    """The marker's word (None: no marker of ours, the restore was still staging)."""
    try:
        fd = os.open(ready_name(stage), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=where_fd)
    except OSError:
        return None  # none, or a link named so: not one a restore of ours wrote
    if not _ours(os.fstat(fd)):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            value = json.loads(fh.read(4096)).get("private", True)
        except (ValueError, AttributeError):
            value = True  # torn by a power cut: the stricter modes
    return value is not False


def _say(text: str) -> None:
    print(f"hermit: {text}", file=sys.stderr)


def recover(folder: Path, *, wait: bool = True) -> None:
    """Finish or roll back every restore into `folder` that was killed (see the module's docstring). A stage a
    live restore holds is waited for, or with `wait` off left to it. Only in a folder nobody else can rename or
    plant entries in (`not_safe_parent`, judged on its descriptor: the user's or root's, and not writable by others
    unless sticky, like /tmp): elsewhere another user could give any folder of the user's a stage's name, and it
    would be removed or moved here."""
    try:
        folder_fd = os.open(folder, DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError:
        return
    try:
        if not_safe_parent(os.fstat(folder_fd)) is not None:
            return
        names = sorted(n for n in os.listdir(folder_fd) if n.startswith(STAGE_PREFIX))
        for name in names:
            if STAGE.fullmatch(name):
                _recover_stage(folder_fd, folder, name, wait)
        for name in names:  # a marker whose stage is gone: that restore had moved everything
            stage = name.removesuffix(READY)
            if name != stage and STAGE.fullmatch(stage) and not _lexists(folder_fd, stage):
                _unlink_marker(folder_fd, name)
    finally:
        os.close(folder_fd)


def _lexists(folder_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _recover_stage(folder_fd: int, folder: Path, name: str, wait: bool) -> None:
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=folder_fd)
    except OSError:
        return  # gone, a link or not a folder: nothing a restore of ours made
    try:
        own = os.fstat(fd)
        if own.st_uid != os.geteuid():
            return
        if not lock_fd(fd, wait=False):
            if not wait:
                return
            _say(f"waiting for the `hermit restore` running in {folder} to finish…")
            lock_fd(fd)
        try:
            now = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
        except FileNotFoundError:
            return  # that restore finished meanwhile
        if (now.st_dev, now.st_ino) != (own.st_dev, own.st_ino):
            return
        private = _private(folder_fd, name)
        if private is None:
            try:
                remove_stage(folder_fd, name)
            except OSError as e:  # a read-only folder: the copy stays, and nothing else there was changed
                _say(f"a `hermit restore` into {folder} was interrupted before it changed anything there; its "
                     f"unfinished copy {name} could not be removed ({e.strerror or e}): {folder} is as it was "
                     f"before that restore, the copy is removed once it can be")
                return
            _say(f"a `hermit restore` into {folder} was interrupted before it changed anything there; rolled back "
                 f"(removed its unfinished copy {name}): {folder} is as it was before that restore")
            return
        try:
            merge(fd, folder_fd, folder, private, dry=True)  # what stands in the way, before anything more moves
            moved = move_staged(fd, folder_fd, folder, private)
        except (RestoreConflict, OSError) as e:
            why, hint = (e.message, e.hint) if isinstance(e, RestoreConflict) else (str(e), "make it possible")
            raise RestoreConflict(
                f"a `hermit restore` into {folder} was interrupted half-way and cannot be finished: {why}. "
                f"{folder} holds part of what was there before and part of the archive; the rest of the archive "
                f"waits in {folder / name}", f"{hint}; then any hermit command finishes the restore") from None
        remove_stage(folder_fd, name)
        _say(f"a `hermit restore` into {folder} was interrupted half-way; finished it (moved the {moved} files and "
             f"folders it had not put in place yet): {folder} now holds the restored archive")
    finally:
        os.close(fd)


def finish_interrupted_restores(home: Path) -> None:
    """At the start of a command: the state dir's interrupted restores, when it is the user's own folder."""
    try:
        st = os.lstat(home)
    except OSError:
        return
    if not_own_private_dir(st) is None:
        recover(home)
