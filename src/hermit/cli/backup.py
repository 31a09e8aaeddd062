"""`hermit backup [FILE]` and `hermit restore FILE`: the whole of a Hermit in one owner-only archive, and
back onto a fresh state dir (another machine, a new disk) where it finds the same notes.

What goes in: the config, the env file (keys, tokens), every agent's workspace, sessions and transcripts,
cron jobs and their run logs, pairing approvals and other credentials, the gateway token. What stays
out: Hermit's own derived data at its own places (memory indexes, caches, logs, locks, files waiting in the
inbox, files it is still writing, the `.hermit-watch/` journal of a running command) — searches rebuild the index on first use; nothing in a workspace is left
out for its name (backup_walk.py). What is left out is counted and named; symlinks and special files are
skipped and named. A second name (hard link) of MEMORY.md or of a note is kept as a link in the manifest.
Workspaces and session stores configured outside the state dir go under `external/<agent>/`; `restore
--external` brings them back to where the restored config puts them (backup_restore.py).

The archive is written into a file only this process made (unnamed, or a random name created exclusively)
and linked to its name, which must not exist — not even as a symlink: writing one into /tmp cannot be
taken over by another local user who plants the name first. Before it gets its name it is read back whole
(every member and the gzip checksum): an archive that would not restore is never left behind.

A backup taken while Hermit runs holds every file, each as one whole version, old or new: a file is read
whole before its member is written, read again when it changed meanwhile, and its new version stored when
Hermit replaced it (by rename) since it was listed; once all are written, every file changed since its read
(an editor's save in place caught between its truncate and its write) is stored again as a later member of
its name, which restore takes (backup_copy.py). A file that cannot be stored so is named and the command
exits 1; the archive holds everything else.

A state dir that does not exist, or holds no config and no workspace (a mistyped HERMIT_HOME), is refused
with the path looked at: an archive of nothing, kept with exit 0, is a backup its owner thinks they have.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import stat
import tarfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO

from hermit.cli.backup_copy import NotStored, Stored, add_dir, add_file, settle, verify
from hermit.cli.backup_walk import DERIVED_DIRS, Tree, plan
from hermit.cli.context import CliContext
from hermit.durable import NewFile, TempReplaced
from hermit.errors import HermitError

if TYPE_CHECKING:
    from hermit.config.load import LoadedConfig

TOP = "hermit-backup"
FORMAT = 1
# gzip(1)'s and zlib's own default: on notes and transcripts within 1 % of level 9's size, for about a
# quarter less time (tarfile's default is 9).
LEVEL = 6


def configure_backup(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit backup` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("file", nargs="?", help="the archive to write (default: ./hermit-backup-<date>.tar.gz)")
    p.add_argument("--level", type=int, choices=range(10), default=LEVEL, metavar="0-9",
                   help=f"gzip level (default {LEVEL}, as gzip's; 1 is faster and its archive larger, 9 the smallest "
                   "and slowest)")
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


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _check_ours(fd: int, where: Path) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink > 1:
        raise BackupError(f"the temporary file for {where} is not a new file of ours", "write the backup into a "
                          "directory only you can write to")
    return st


def _read_back(f: NewFile, out: Path) -> BinaryIO:
    """The file being written as `f`, opened again for reading (it was opened write-only)."""
    if f.tmp is None:  # unnamed: its descriptor's /proc link opens it
        fd = os.open(f"/proc/self/fd/{f.fd}", os.O_RDONLY | os.O_CLOEXEC)
    else:
        fd = os.open(f.tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=f.folder)
    st, ours = os.fstat(fd), os.fstat(f.fd)
    if (st.st_dev, st.st_ino) != (ours.st_dev, ours.st_ino):
        os.close(fd)
        raise BackupError(f"the temporary file for {out} was replaced while it was written", "write the backup "
                          "into a directory only you can write to")
    return os.fdopen(fd, "rb")


def write_new_file(out: Path, write: Callable[[BinaryIO], None],
                   check: Callable[[BinaryIO], str | None] | None = None) -> None:
    """`write` into a file this process created (0600 from the first byte), then give it the name `out`, never
    replacing anything there (durable.NewFile: unnamed or a random exclusive name, linked into place). `check`
    reads the written file back and says what is wrong with it: then it never gets the name."""
    with NewFile(out) as f:
        _check_ours(f.fd, out)
        with os.fdopen(f.fd, "wb", closefd=False) as raw:
            write(raw)
            raw.flush()
            os.fsync(f.fd)
        if check is not None:
            with _read_back(f, out) as written:
                problem = check(written)
            if problem:
                raise BackupError(f"the archive written for {out} is damaged: {problem}; it was not kept",
                                  "check the disk it was written to (space, errors) and run `hermit backup` "
                                  "again")
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


def where_from(ctx: CliContext, args: argparse.Namespace) -> str:
    """How the state dir was chosen, for an error that says which path was looked at."""
    if getattr(args, "home", None):
        return "given with --home"
    if ctx.environ.get("HERMIT_HOME"):
        return f"from HERMIT_HOME={ctx.environ['HERMIT_HOME']}, which may be mistyped"
    return "the default state dir (HERMIT_HOME is not set)"


def _no_state(ctx: CliContext, args: argparse.Namespace, why: str) -> BackupError:
    return BackupError(f"nothing to back up: {ctx.home} {why} ({where_from(ctx, args)})",
                       "point HERMIT_HOME (or --home) at the state dir to back up (without either: ~/.hermit)")


def _whole_state_only(ctx: CliContext, command: str) -> None:
    """`--agent`/`--workspace` do not narrow a backup or a restore: refused, not ignored. `hermit --agent family
    backup`, typed to hand a relative their agent's notes, wrote every agent's notes and the keys."""
    given = [f for f, v in (("--agent", ctx.agent_id), ("--workspace", ctx.workspace)) if v is not None]
    if given:
        raise BackupError(f"`hermit {command}` takes the whole state dir — every agent's workspace and sessions, "
                          f"the config, hermit.env's keys, channel tokens — and {' and '.join(given)} would not "
                          "narrow it; nothing was written", "run it without that flag; to give someone one agent's "
                          "notes, copy its workspace folder (`cp -r` of the path `hermit agents list` shows) or its "
                          "memory/ folder, never a backup")


def cmd_backup(ctx: CliContext, args: argparse.Namespace) -> int:
    _whole_state_only(ctx, "backup")
    if not ctx.home.is_dir():
        raise _no_state(ctx, args, "does not exist" if not os.path.lexists(ctx.home) else "is not a folder")
    loaded = ctx.config()
    if ctx.paths.config_file() is None and not any(a.workspace.is_dir() for a in loaded.agents):
        raise _no_state(ctx, args, "holds no Hermit state (no hermit.yaml, no workspace)")
    home = ctx.home.resolve()
    given = Path(args.file or f"hermit-backup-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz").expanduser()
    out = given.parent.resolve() / given.name  # the name itself is never followed: a planted link is refused
    if os.path.lexists(out):
        raise BackupError(f"{out} exists", "give another file name; a backup never overwrites one (nor a link)")
    if _inside(out, home):
        raise BackupError(f"{out} is inside the state dir being backed up", "write the archive somewhere else")
    from hermit.tools.room_sweep import finish_agents

    finish_agents([a.sessions_dir.parent / "rooms" for a in loaded.agents])  # no room half-merged in the archive
    trees, external = _trees(loaded, home)
    todo = plan(trees, [a.index_path.resolve() for a in loaded.agents])
    files: Stored = {}  # every file stored, with the version stored (settle() stores it again when it changed)
    written: list[tuple[str, int]] = []  # (name, size) of every member, for the read-back
    not_stored: list[str] = []
    unsettled: list[str] = []

    def write(raw: BinaryIO) -> None:
        with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT, compresslevel=args.level) as tar:
            links = [[name[len(TOP) + 1:], to[len(TOP) + 1:]] for name, to in todo.links.items()]
            manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "home": str(home),
                        "agents": [a.id for a in loaded.agents], "external": external, "links": links,
                        "workspaces": [w[len(TOP) + 1:] for w in todo.workspaces]}
            data = json.dumps(manifest, indent=2).encode()
            info = tarfile.TarInfo(f"{TOP}/manifest.json")
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
            written.append((info.name, info.size))
            for entry in todo.entries:
                try:
                    if stat.S_ISDIR(entry.st.st_mode):
                        if add_dir(tar, entry) is not None:
                            written.append((entry.arc, 0))
                        continue
                    st = add_file(tar, entry, out.parent)
                except NotStored as e:
                    not_stored.append(f"{entry.shown} ({e.why})")
                    continue
                if st is None:  # deleted since it was listed
                    todo.skipped.append(f"{entry.shown} (deleted while the backup was written)")
                    continue
                written.append((entry.arc, st.st_size))
                files[entry.arc] = (entry, st)
            again, still = settle(tar, files, out.parent)
            written.extend(again)
            unsettled.extend(still)

    write_new_file(out, write, check=lambda raw: verify(raw, written))
    size = sum(st.st_size for _, st in files.values())
    print(f"wrote {out} (owner-only): {len(files)} files, {size / 1e6:.1f} MB — config, keys, "
          "workspaces, sessions, cron jobs, credentials; indexes and caches rebuild after a restore")
    if todo.links:
        print(f"kept {len(todo.links)} hard links as links (a second name of MEMORY.md or of a note stays one)")
    for line in todo.summary():
        print(line)
    _fail_on(out, not_stored, unsettled)
    return 0


def _fail_on(out: Path, not_stored: list[str], unsettled: list[str]) -> None:
    """The files left out of the archive, or maybe not whole in it, named: `hermit backup` exits 1."""
    problems = []
    if not_stored:
        problems.append(f"{len(not_stored)} file{'s' if len(not_stored) > 1 else ''} could not be backed up and "
                        f"{'are' if len(not_stored) > 1 else 'is'} not in {out}: " + "; ".join(not_stored))
    if unsettled:
        problems.append(f"{len(unsettled)} file{'s' if len(unsettled) > 1 else ''} may not be stored whole in "
                        f"{out}: " + "; ".join(unsettled))
    if problems:
        raise BackupError(". ".join(problems), "the archive holds everything else. Stop what writes them "
                          "(the gateway: Ctrl-C where it runs or kill its pid; an editor), fix what is named, and "
                          "run `hermit backup` again into a new file")


def cmd_restore(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.cli.backup_restore import restore

    _whole_state_only(ctx, "restore")
    return restore(ctx, args)
