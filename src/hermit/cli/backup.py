"""`hermit backup [FILE]` and `hermit restore FILE`: the whole of a Hermit in one owner-only archive, and
back onto a fresh state dir (another machine, a new disk) where it finds the same notes.

What goes in: the config, the env file (keys, tokens), every agent's workspace, sessions and transcripts,
cron jobs and their run logs, pairing approvals and other credentials, the gateway token. What stays
out: derived data that rebuilds (memory indexes, caches, logs, locks, files waiting in the inbox) —
searches rebuild the index on first use. Symlinks and special files are skipped and counted. Workspaces
and session stores configured outside the state dir go under `external/<agent>/` and come back to where
the restored config puts them.

Restore trusts nothing in the archive: every member must be a regular file or a directory under the
archive's top folder, with no absolute path and no `..`; links, devices and FIFOs are refused; nothing is
written through a symlink. These checks are our own, since tarfile's extraction filters exist only from
Python 3.11.4. A non-empty state dir is refused unless --force.

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
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from hermit.cli.context import CliContext
from hermit.durable import NewFile, TempReplaced
from hermit.errors import ConfigError, HermitError

TOP = "hermit-backup"
FORMAT = 1
# Derived or transient parts of the state dir, left out (relative to it).
SKIP_DIRS = {"memory", "cache", "logs", "inbox", "channels/status"}
SKIP_SUFFIXES = (".sqlite", ".sqlite-wal", ".sqlite-shm", ".sqlite-journal", ".lock")
MAX_MEMBER_BYTES = 4 << 30


def configure_backup(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit backup` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("file", nargs="?", help="the archive to write (default: ./hermit-backup-<date>.tar.gz)")
    p.set_defaults(func=cmd_backup)


def configure_restore(p: argparse.ArgumentParser) -> None:
    """The arguments and handler of `hermit restore` (its name and help are in the table of cli/commands.py)."""
    p.add_argument("file", help="the archive written by `hermit backup`")
    p.add_argument("--force", action="store_true", help="restore into a state dir that is not empty (files in "
                   "the archive replace the ones there)")
    p.set_defaults(func=cmd_restore)


class BackupError(HermitError):
    """An archive that cannot be written or restored safely."""


@dataclass
class Report:
    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)


def _skipped(rel: PurePosixPath, extra: set[str]) -> bool:
    text = rel.as_posix()
    if any(text == d or text.startswith(d + "/") for d in SKIP_DIRS | extra):
        return True
    name = rel.name
    return name.endswith(SKIP_SUFFIXES) or name == ".lock" or ".tmp-" in name or name.endswith(".tmp")


def _add_tree(tar: tarfile.TarFile, root: Path, arc: str, report: Report, skip: set[str]) -> None:
    """Every regular file and directory under `root` as `arc/…`, without following links."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = PurePosixPath(here.relative_to(root).as_posix()) if here != root else PurePosixPath(".")
        kept = []
        for d in sorted(dirnames):
            rel = rel_dir / d if rel_dir.name else PurePosixPath(d)
            if (here / d).is_symlink():
                report.skipped.append(f"{arc}/{rel} (a symlink)")
            elif not _skipped(rel, skip):
                kept.append(d)
                tar.add(here / d, f"{arc}/{rel}", recursive=False)
        dirnames[:] = kept
        for name in sorted(filenames):
            path = here / name
            rel = rel_dir / name if rel_dir.name else PurePosixPath(name)
            if _skipped(rel, skip):
                continue
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                report.skipped.append(f"{arc}/{rel} ({'a symlink' if stat.S_ISLNK(st.st_mode) else 'not a file'})")
                continue
            try:
                size = _add_file(tar, path, f"{arc}/{rel}")
            except OSError as e:  # gone, or swapped for something else, since it was listed
                report.skipped.append(f"{arc}/{rel} ({e.strerror or e})")
                continue
            report.files += 1
            report.bytes += size


def _add_file(tar: tarfile.TarFile, path: Path, arcname: str) -> int:
    """One regular file as a plain file member, never a hard-link member (restore refuses links, and a
    `git clone` in a workspace makes hard links): opened without following a link, described by fstat.
    Returns the bytes stored."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a file")
        info = tar.gettarinfo(arcname=arcname, fileobj=f)
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


def cmd_backup(ctx: CliContext, args: argparse.Namespace) -> int:
    loaded = ctx.config()
    home = ctx.home.resolve()
    given = Path(args.file or f"hermit-backup-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz").expanduser()
    out = given.parent.resolve() / given.name  # the name itself is never followed: a planted link is refused
    if os.path.lexists(out):
        raise BackupError(f"{out} exists", "give another file name; a backup never overwrites one (nor a link)")
    if _inside(out, home):
        raise BackupError(f"{out} is inside the state dir being backed up", "write the archive somewhere else")
    skip = {p.relative_to(home).as_posix() for a in loaded.agents
            for p in [a.index_path.resolve()] if _inside(p, home)}
    external: dict[str, dict[str, str]] = {}
    for a in loaded.agents:
        for kind, path in (("workspace", a.workspace.resolve()), ("sessions", a.sessions_dir.resolve())):
            if not _inside(path, home) and path.is_dir():
                external.setdefault(a.id, {})[kind] = str(path)
    report = Report()

    def write(raw: BinaryIO) -> None:
        with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "home": str(home),
                        "agents": [a.id for a in loaded.agents], "external": external}
            data = json.dumps(manifest, indent=2).encode()
            info = tarfile.TarInfo(f"{TOP}/manifest.json")
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
            _add_tree(tar, home, f"{TOP}/home", report, skip)
            for agent_id, paths in external.items():
                for kind, where in paths.items():
                    _add_tree(tar, Path(where), f"{TOP}/external/{agent_id}/{kind}", report, set())

    write_new_file(out, write)
    print(f"wrote {out} (owner-only): {report.files} files, {report.bytes / 1e6:.1f} MB — config, keys, "
          "workspaces, sessions, cron jobs, credentials; indexes and caches rebuild after a restore")
    for s in report.skipped:
        print(f"skipped {s}")
    return 0


def _checked_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = []
    for m in tar.getmembers():
        p = PurePosixPath(m.name)
        if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] != TOP or "\\" in m.name:
            raise BackupError(f"the archive holds an unsafe path {m.name!r}", "restore only archives written by "
                              "`hermit backup`; this one was not, or was tampered with")
        if not (m.isfile() or m.isdir()):
            what = "a link" if (m.issym() or m.islnk()) else "a device or FIFO"
            raise BackupError(f"the archive holds {what}: {m.name!r}", "`hermit backup` writes only files and "
                              "folders; refusing the whole archive")
        if m.size > MAX_MEMBER_BYTES:
            raise BackupError(f"{m.name!r} is {m.size:,} bytes", "refusing an archive member this large")
        members.append(m)
    return members


def _safe_target(root: Path, rel: PurePosixPath) -> Path:
    """root/rel, refusing any existing symlink on the way (nothing is written through a link)."""
    current = root
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            raise BackupError(f"{current} is a symlink", "remove it, or restore into an empty state dir")
    return current


def _extract(tar: tarfile.TarFile, m: tarfile.TarInfo, root: Path, rel: PurePosixPath) -> None:
    from hermit.config.paths import ensure_private_dir

    target = _safe_target(root, rel)
    if m.isdir():
        ensure_private_dir(target)
        os.chmod(target, (m.mode & 0o777) | 0o700)
        return
    ensure_private_dir(target.parent)
    src = tar.extractfile(m)
    assert src is not None
    tmp = target.with_name(f".{target.name}.restore-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        while chunk := src.read(1 << 20):
            f.write(chunk)
    os.chmod(tmp, (m.mode & 0o777) | 0o600)
    os.replace(tmp, target)
    os.utime(target, (m.mtime, m.mtime))


def cmd_restore(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.config.paths import ensure_private_dir

    home = ctx.home
    if home.exists() and any(home.iterdir()) and not args.force:
        raise BackupError(f"the state dir {home} is not empty", "restore into a new one (--home DIR or "
                          "HERMIT_HOME), or pass --force to put the archive's files over what is there")
    try:
        tar = tarfile.open(Path(args.file).expanduser(), mode="r:*")  # noqa: SIM115 - closed by the with below
    except (OSError, tarfile.TarError) as e:
        raise BackupError(f"cannot read {args.file}: {e}", "pass an archive written by `hermit backup`") from e
    with tar:
        members = _checked_members(tar)
        manifest_member = next((m for m in members if m.name == f"{TOP}/manifest.json"), None)
        if manifest_member is None:
            raise BackupError(f"{args.file} has no {TOP}/manifest.json", "it was not written by `hermit backup`")
        raw = tar.extractfile(manifest_member)
        manifest = json.loads(raw.read() if raw else b"{}")
        if manifest.get("format") != FORMAT:
            raise BackupError(f"unknown backup format {manifest.get('format')!r}", "restore it with the Hermit "
                              "version that wrote it")
        ensure_private_dir(home)
        count = 0
        later = []
        for m in members:
            rel = PurePosixPath(m.name).relative_to(TOP)
            if rel.parts[:1] == ("home",) and len(rel.parts) > 1:
                _extract(tar, m, home, PurePosixPath(*rel.parts[1:]))
                count += m.isfile()
            elif rel.parts[:1] == ("external",):
                later.append((m, rel))
        restored = _restore_external(ctx, tar, later, bool(args.force))
    print(f"restored {count + restored} files into {home}")
    print("the memory index is rebuilt on the first search (or run `hermit memory index` now); "
          "`hermit doctor` checks the rest")
    return 0


def _restore_external(ctx: CliContext, tar: tarfile.TarFile, items: list[tuple[tarfile.TarInfo, PurePosixPath]],
                      force: bool) -> int:
    """Workspaces and session stores that lived outside the state dir, to where the restored config puts them."""
    if not items:
        return 0
    loaded = ctx.config()
    places = {(a.id, "workspace"): a.workspace for a in loaded.agents}
    places.update({(a.id, "sessions"): a.sessions_dir for a in loaded.agents})
    checked: set[Path] = set()
    count = 0
    for m, rel in items:
        if len(rel.parts) < 3 or (rel.parts[1], rel.parts[2]) not in places:
            print(f"skipped {m.name}: no such agent in the restored config")
            continue
        root = places[(rel.parts[1], rel.parts[2])]
        if root not in checked:
            if root.exists() and any(root.iterdir()) and not force:
                raise ConfigError(f"{root} (agent {rel.parts[1]}'s {rel.parts[2]}) is not empty",
                                  "move it away, or pass --force")
            checked.add(root)
        if len(rel.parts) > 3:
            _extract(tar, m, root, PurePosixPath(*rel.parts[3:]))
            count += m.isfile()
    return count
