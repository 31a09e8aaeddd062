"""`hermit backup [FILE]` and `hermit restore FILE`: the whole of a Hermit in one owner-only archive, and
back onto a fresh state dir (another machine, a new disk) where it finds the same notes.

What goes in: the config, the env file (keys, tokens), every agent's workspace, sessions and transcripts,
cron jobs and their run logs, pairing approvals and other credentials, the gateway token. What stays
out: Hermit's own derived data at its own places (memory indexes, caches, logs, locks, files waiting in the
inbox, files it is still writing) — searches rebuild the index on first use; nothing in a workspace is left
out for its name (backup_walk.py). What is left out is counted and named; symlinks and special files are
skipped and named. A second name (hard link) of MEMORY.md or of a note is kept as a link in the manifest.
Workspaces and session stores configured outside the state dir go under `external/<agent>/`; `restore
--external` brings them back to where the restored config puts them (backup_restore.py).

The archive is written into a file only this process made (unnamed, or a random name created exclusively)
and linked to its name, which must not exist — not even as a symlink: writing one into /tmp cannot be
taken over by another local user who plants the name first.
"""

from __future__ import annotations

import argparse
import errno
import io
import json
import os
import stat
import tarfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO

from hermit.cli.backup_walk import DERIVED_DIRS, Entry, Tree, plan
from hermit.cli.context import CliContext
from hermit.durable import NewFile, TempReplaced
from hermit.errors import HermitError

if TYPE_CHECKING:
    from hermit.config.load import LoadedConfig

TOP = "hermit-backup"
FORMAT = 1


def configure_backup(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit backup` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("file", nargs="?", help="the archive to write (default: ./hermit-backup-<date>.tar.gz)")
    p.set_defaults(func=cmd_backup)


def configure_restore(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit restore` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("file", help="the archive written by `hermit backup`")
    p.add_argument("--force", action="store_true", help="restore into a state dir that is not empty (files in "
                   "the archive replace the ones there)")
    p.add_argument("--external", action="store_true", help="also restore the workspaces and session stores that "
                   "lived outside the state dir, to where the restored config puts them (each must be missing or "
                   "an empty folder of yours; each is printed)")
    p.set_defaults(func=cmd_restore)


class BackupError(HermitError):
    """An archive that cannot be written or restored safely."""


def _add_file(tar: tarfile.TarFile, entry: Entry) -> int:
    """One regular file as a plain file member, never a hard-link member (restore refuses links; the names of a
    file that must stay one file are in the manifest instead): opened without following a link, described by
    fstat, and still the file that was planned. Returns the bytes stored."""
    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (entry.st.st_dev, entry.st.st_ino):
            raise OSError(errno.EINVAL, "replaced while the backup was written")
        info = tar.gettarinfo(arcname=entry.arc, fileobj=f)
        info.type = tarfile.REGTYPE  # gettarinfo makes a second name of a file a LNKTYPE member
        info.linkname = ""
        info.size = st.st_size
        tar.addfile(info, f)
        return st.st_size


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _check_ours(fd: int, where: Path) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink > 1:
        raise BackupError(f"the temporary file for {where} is not a new file of ours", "write the backup into a "
                          "directory only you can write to")
    return st


def write_new_file(out: Path, write: Callable[[BinaryIO], None]) -> None:
    """`write` into a file this process created (0600 from the first byte), then give it the name `out`, never
    replacing anything there (durable.NewFile: unnamed or a random exclusive name, linked into place)."""
    with NewFile(out) as f:
        _check_ours(f.fd, out)
        with os.fdopen(f.fd, "wb", closefd=False) as raw:
            write(raw)
            raw.flush()
            os.fsync(f.fd)
        _check_ours(f.fd, out)
        try:
            f.link()
        except FileExistsError:
            raise BackupError(f"{out} appeared while the backup was written", "give another file name; a backup "
                              "never overwrites one (nor a link)") from None
        except TempReplaced as e:
            raise BackupError(f"the temporary file {e.strerror}", "write the backup into a directory only you "
                              "can write to") from None


def _trees(loaded: LoadedConfig, home: Path) -> tuple[list[Tree], dict[str, dict[str, str]]]:
    """The state dir, and every workspace and session store configured outside it (as `external/<agent>/…`)."""
    inside = tuple(PurePosixPath(w.relative_to(home).as_posix()) for a in loaded.agents
                   for w in [a.workspace.resolve()] if _inside(w, home))
    trees = [Tree(home, f"{TOP}/home", own=True, workspaces=inside, derived=DERIVED_DIRS)]
    external: dict[str, dict[str, str]] = {}
    for a in loaded.agents:
        for kind, path in (("workspace", a.workspace.resolve()), ("sessions", a.sessions_dir.resolve())):
            if not _inside(path, home) and path.is_dir():
                external.setdefault(a.id, {})[kind] = str(path)
                trees.append(Tree(path, f"{TOP}/external/{a.id}/{kind}", own=kind == "sessions",
                                  workspaces=(PurePosixPath("."),) if kind == "workspace" else (), shown=f"{path}/"))
    return trees, external


def cmd_backup(ctx: CliContext, args: argparse.Namespace) -> int:
    loaded = ctx.config()
    home = ctx.home.resolve()
    given = Path(args.file or f"hermit-backup-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz").expanduser()
    out = given.parent.resolve() / given.name  # the name itself is never followed: a planted link is refused
    if os.path.lexists(out):
        raise BackupError(f"{out} exists", "give another file name; a backup never overwrites one (nor a link)")
    if _inside(out, home):
        raise BackupError(f"{out} is inside the state dir being backed up", "write the archive somewhere else")
    trees, external = _trees(loaded, home)
    todo = plan(trees, [a.index_path.resolve() for a in loaded.agents])
    stored = {"files": 0, "bytes": 0}

    def write(raw: BinaryIO) -> None:
        with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            links = [[name[len(TOP) + 1:], to[len(TOP) + 1:]] for name, to in todo.links.items()]
            manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "home": str(home),
                        "agents": [a.id for a in loaded.agents], "external": external, "links": links}
            data = json.dumps(manifest, indent=2).encode()
            info = tarfile.TarInfo(f"{TOP}/manifest.json")
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
            for entry in todo.entries:
                if stat.S_ISDIR(entry.st.st_mode):
                    tar.add(entry.path, entry.arc, recursive=False)
                    continue
                try:
                    stored["bytes"] += _add_file(tar, entry)
                except OSError as e:  # gone, or swapped for something else, since it was listed
                    todo.skipped.append(f"{entry.shown} ({e.strerror or e})")
                    continue
                stored["files"] += 1

    write_new_file(out, write)
    print(f"wrote {out} (owner-only): {stored['files']} files, {stored['bytes'] / 1e6:.1f} MB — config, keys, "
          "workspaces, sessions, cron jobs, credentials; indexes and caches rebuild after a restore")
    if todo.links:
        print(f"kept {len(todo.links)} hard links as links (a second name of MEMORY.md or of a note stays one)")
    for line in todo.summary():
        print(line)
    return 0


def cmd_restore(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.backup_restore import restore

    return restore(ctx, args)
