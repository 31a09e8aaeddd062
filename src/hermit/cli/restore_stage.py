"""`hermit restore`'s writing of one folder: the checked members of an archive staged in a private folder next to
it (or inside it), then put in place whole.

A missing or empty folder gets the stage renamed over it (one rename, all or nothing); one that is not empty (--force)
gets the staged tree moved over it entry by entry after a ready marker (restore_journal.py: a restore killed before
the marker is rolled back, after it finished, by the next command). What a folder gets is counted against its disk's
free space first. Modes are capped (0600/0700 under the state dir, at most 0644/0755 elsewhere), a run of zeros is
left a hole (sparse files stay sparse) and second names are made hard links again, never copies. Split from
backup_restore.py, which checks the archive and decides what goes where.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from hermit.cli.backup import BackupError
from hermit.cli.restore_journal import (
    DIR_FLAGS,
    RestoreConflict,
    make_stage,
    mark_ready,
    merge,
    move_staged,
    recover,
    remove_stage,
)
from hermit.config.paths import ensure_private_dir, not_own_private_dir, not_safe_parent
from hermit.durable import NewFile

ZERO_BLOCK = bytes(1 << 20)
Item = tuple[tarfile.TarInfo, PurePosixPath]  # a member, and its path inside the folder it restores into


def _dir_mode(mode: int, private: bool) -> int:
    return 0o700 if private else (mode & 0o755) | 0o700


def _file_mode(mode: int, private: bool) -> int:
    return 0o600 | (mode & 0o100) if private else (mode & 0o755) | 0o600


def _fd_path(fd: int, fallback: Path) -> Path:
    """The directory open as `fd`, as a path that cannot be redirected by renaming its ancestors (Linux)."""
    proc = Path(f"/proc/self/fd/{fd}")
    return proc if proc.is_dir() else fallback


def restore_into(path: Path, tar: tarfile.TarFile, items: list[Item], links: list[tuple[PurePosixPath, PurePosixPath]],
                 *, private: bool, fill: bool, what: str, not_empty: str) -> int:
    """Restore `items` into the folder `path` (see the module's docstring); returns the files written."""
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        problem = not_own_private_dir(st)
        if problem:
            raise BackupError(f"{what} {path} {problem}", "restore into a new folder (one that does not exist yet) "
                              "or an empty one of yours that only you can write; nothing was written")
        recover(path)  # a restore into it that was killed: finished or rolled back first
        with os.scandir(path) as entries:
            empty = not any(entries)
        if not (empty or fill):
            raise BackupError(f"{what} {path} is not empty", not_empty)
        # An empty folder is replaced by the staged one in a single rename (all or nothing), when its parent is a
        # safe place to stage in; a folder that is not empty gets the staged tree moved over it, entry by entry.
        replace = empty and not_safe_parent(os.stat(path.parent)) is None
    else:
        ensure_private_dir(path.parent)
        replace = True
    where = path.parent if replace else path
    if replace:
        recover(where, wait=False)  # the stage a killed restore of a new (or empty) folder left there
    need = sum(m.size for m, _ in items if m.isfile())
    if need > (free := free_bytes(where)):
        raise BackupError(f"{what} needs {need:,} bytes and {where} has {free:,} free", "make room on that disk or "
                          "restore somewhere else; nothing was written")
    where_fd = os.open(where, DIR_FLAGS & ~os.O_NOFOLLOW if replace else DIR_FLAGS)
    try:
        wst = os.fstat(where_fd)
        if st is not None and not replace and (wst.st_dev, wst.st_ino) != (st.st_dev, st.st_ino):
            problem = "was replaced while it was checked"
        else:
            problem = not_safe_parent(wst) if replace else not_own_private_dir(wst)
        if problem:
            raise BackupError(f"{where} {problem}", f"restore {what} into a folder whose parent is yours (or root's) "
                              "and that others cannot write; nothing was written")
        return _stage_and_move(where_fd, where, path, replace, tar, items, links, private)
    finally:
        os.close(where_fd)


def free_bytes(path: Path) -> int:
    """Room for an unprivileged writer on the filesystem of `path`. What an archive would write is counted
    before anything is: a member's size is what it expands to (a gzip bomb, a sparse member), and a restore
    that fills the disk fails everything else writing there too."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _stage_and_move(where_fd: int, where: Path, path: Path, fresh: bool, tar: tarfile.TarFile, items: list[Item],
                    links: list[tuple[PurePosixPath, PurePosixPath]], private: bool) -> int:
    """Stage the whole archive next to (fresh: `path` is missing or empty) or inside `path`, then put it in place:
    one rename of the stage, or — over a folder that is not empty — the ready marker, then the move of each entry (restore_journal.py: a
    restore killed before the marker is rolled back, after it finished, by the next command)."""
    name, stage_fd = make_stage(where_fd, where)
    keep = False  # past the ready marker the stage is the rest of the restore: never thrown away
    try:
        stage = _fd_path(stage_fd, where / name)
        count = _stage(tar, items, stage, private)
        _relink(links, stage, path)
        if fresh:
            try:
                os.rename(name, path.name, src_dir_fd=where_fd, dst_dir_fd=where_fd)
            except OSError as e:
                raise BackupError(f"{path} appeared, or got files, while the archive was restored ({e.strerror})",
                                  "restore into a folder only you can write") from None
            return count
        merge(stage_fd, where_fd, path, private, dry=True)
        mark_ready(where_fd, name, private=private)
        keep = True
        try:
            move_staged(stage_fd, where_fd, path, private)
        except (OSError, RestoreConflict) as e:
            raise BackupError(f"the restore into {path} stopped half-way: {e}", "the next hermit command finishes "
                              f"it from {path / name} (or says what stands in its way)") from None
        keep = False
        return count
    finally:
        if not keep:
            remove_stage(where_fd, name)
        os.close(stage_fd)


def _mkdirs(stage: Path, rel: PurePosixPath, mode: int | None) -> None:
    current = stage
    for part in rel.parts:
        current = current / part
        with contextlib.suppress(FileExistsError):
            os.mkdir(current, 0o700)
        if not stat.S_ISDIR(os.lstat(current).st_mode):
            raise BackupError(f"the archive holds {rel} both as a file and as a folder", "restore only archives "
                              "written by `hermit backup`")
    if mode is not None and rel.parts:
        os.chmod(current, mode)


def _stage(tar: tarfile.TarFile, items: list[Item], stage: Path, private: bool) -> int:
    count = 0
    for m, rel in items:
        if not rel.parts:
            continue  # the folder itself: made 0700
        if m.isdir():
            _mkdirs(stage, rel, _dir_mode(m.mode, private))
            continue
        _mkdirs(stage, rel.parent, None)
        src = tar.extractfile(m)
        assert src is not None
        try:
            with NewFile(stage / rel) as f:
                st = os.fstat(f.fd)
                if st.st_uid != os.geteuid() or st.st_nlink > 1:
                    raise BackupError(f"the new file for {m.name!r} is not only ours", "restore into a folder only "
                                      "you can write")
                os.fchmod(f.fd, _file_mode(m.mode, private))
                with os.fdopen(f.fd, "wb", closefd=False) as out:
                    _copy_sparse(src, out)
                os.utime(f.fd, (m.mtime, m.mtime))
                os.fsync(f.fd)  # whole on disk before the ready marker can say so (restore_journal.py)
                f.link()
        except FileExistsError:
            raise BackupError(f"the archive holds {m.name!r} twice, or as a file and a folder", "restore only "
                              "archives written by `hermit backup`") from None
        count += 1
    return count


def _copy_sparse(src: IO[bytes], out: IO[bytes]) -> None:
    """`src` copied into `out`, a block of zeros left as a hole (a seek past it): a sparse file (a disk image, an
    export's preallocated space) is restored sparse, and gigabytes of zeros are neither written nor synced. The
    size is the member's whatever the last block is."""
    while block := src.read(len(ZERO_BLOCK)):
        if block == ZERO_BLOCK[:len(block)]:  # the whole block: no copy
            out.seek(len(block), os.SEEK_CUR)
        else:
            out.write(block)
    out.truncate()


def _relink(links: list[tuple[PurePosixPath, PurePosixPath]], stage: Path, shown: Path) -> None:
    """Second names of restored files, as hard links; one that cannot be made is left out, never copied."""
    for name, target in links:
        try:
            if not stat.S_ISREG(os.lstat(stage / target).st_mode):
                raise FileNotFoundError(2, "not a restored file")
            _mkdirs(stage, name.parent, None)
            os.link(stage / target, stage / name, follow_symlinks=False)
        except OSError as e:
            print(f"left out {shown / name}: a second name (hard link) of {shown / target}, which could not be "
                  f"linked ({e.strerror or e}); it is never restored as a separate file")
