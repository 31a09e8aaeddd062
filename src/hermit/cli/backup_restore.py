"""`hermit restore FILE [--force] [--external]`: an archive of `hermit backup` back onto a state dir.

The archive itself must be a regular file of the user's that nobody else can write (the rule for
hermit.yaml): whoever could write it would choose the restored owners, keys and notes. Restore trusts
nothing in the archive: every member must be a regular file or a directory under the archive's
top folder, with no absolute path and no `..`; links, devices and FIFOs are refused (our own checks: tarfile's
extraction filters exist only from Python 3.11.4). The modes it carries are not taken as they are: under the
state dir every file is 0600 (0700 when its owner could run it) and every folder 0700; elsewhere they are
capped at 0755 and 0644 — never writable by group or others.

Where it writes: the state dir, and each external folder, is either missing — then the archive is unpacked
into a private staging folder (a random name made 0700 in the parent, which must be the user's or root's and
not writable by others unless sticky, like /tmp) and renamed into place whole, born 0700 — or a folder of the
user's that only they can write: another user's folder, or one its group or others may write, is refused
before anything is written (they could plant a file under a name restore uses and read the keys through it).
An empty one is replaced the same way (one rename over it) when its parent is such a place. Every file is
made by durable.NewFile inside the staging folder; with --force the staged tree is moved over what is there,
never through a symlink, after all of it passed. A restore killed during those moves is finished, and one killed
before them rolled back, by the next command that opens the state dir (or the next restore into that folder),
with a line saying which (restore_journal.py). The staging and the moves are restore_stage.py's.

External trees (workspaces and session stores that lived outside the state dir) come back only with
--external, each destination printed, and only to where the restored config puts that agent's workspace or
session store — never into a folder that exists and is not empty (even with --force), the home folder, the
root, a folder holding the state dir, or a hidden folder of the home folder (~/.ssh, ~/.config…): the
archive's own hermit.yaml names those paths.

What a folder gets is counted before anything is written there, against the free space of its disk (a
member's size is what it expands to: a gzip bomb or a sparse member is refused up front, and so is a real
archive too large for the disk); no member is refused for its size alone, since backup stores any file.

A name that comes more than once (a file `hermit backup` stored again because it changed in place meanwhile,
backup_copy.py) is restored from its last member, as `tar -x` does. An archive holding no Hermit state (no
config, no workspace file: a backup of a mistyped HERMIT_HOME) is refused. A `.hermit-watch/` folder at a
workspace's top (an older backup's: other chats' notes copied while an owner's command ran) is never restored.

Hard links (backup_walk.py): the manifest's `links` are recreated with link(2) inside the same restored
folder; one that cannot be is left out with a warning, never written as a separate file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import stat
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO

from hermit.cli.backup import FORMAT, TOP, BackupError, _inside
from hermit.cli.backup_copy import DAMAGED
from hermit.cli.backup_walk import TRANSIENT_STATE
from hermit.cli.context import CliContext
from hermit.cli.restore_journal import (
    RestoreConflict,
)
from hermit.cli.restore_stage import Item, restore_into
from hermit.config.paths import (
    StatePaths,
    not_own_file,
    not_own_private_dir,
)
from hermit.memory.policy.added_notes import WATCH_DIR

if TYPE_CHECKING:
    from hermit.gateway.state import GatewayLock

CONFIG_NAMES = tuple(p.name for p in StatePaths(Path("/")).config_candidates)
Links = dict[tuple[str, ...], list[tuple[PurePosixPath, PurePosixPath]]]  # per folder: (name, the file it names)
NOT_EMPTY_HOME = ("restore into a new one (--home DIR or HERMIT_HOME), or pass --force to put the archive's files "
                  "over what is there")


def restore(ctx: CliContext, args: argparse.Namespace) -> int:
    home = ctx.home
    raw = _open_archive(args.file)
    try:
        tar = tarfile.open(fileobj=raw, mode="r:*")  # noqa: SIM115 - closed by the with below
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:  # a gzip file cut short, or corrupted
        raw.close()
        raise _damaged(args.file, e, "nothing was restored") from None
    except (OSError, tarfile.TarError) as e:
        raw.close()
        raise BackupError(f"cannot read {args.file}: {e}", "pass an archive written by `hermit backup`") from e
    with raw, tar:
        try:
            members = _checked_members(tar)
            while tar.fileobj is not None and tar.fileobj.read(1 << 20):
                pass  # to its end: a gzip checksum that does not match is found before anything is written
        except DAMAGED as e:
            raise _damaged(args.file, e, "nothing was restored") from None
        manifest = _manifest(tar, members, args.file)
        links = _links(manifest)
        watch = _watch_folders(manifest, members)
        last = {m.name: m for m in members}  # a name stored again (it changed during the backup): the last wins
        mine: list[Item] = []
        later: dict[tuple[str, str], list[Item]] = {}
        transient = 0
        for m in members:
            if last[m.name] is not m:
                continue
            if _transient(m, watch):
                transient += m.isfile()
                continue
            rel = PurePosixPath(m.name).relative_to(TOP)
            if rel.parts[:1] == ("home",) and len(rel.parts) > 1:
                mine.append((m, PurePosixPath(*rel.parts[1:])))
            elif rel.parts[:1] == ("external",) and len(rel.parts) > 2:
                later.setdefault((rel.parts[1], rel.parts[2]), []).append((m, PurePosixPath(*rel.parts[3:])))
        if not _holds_state(mine, later):
            raise BackupError(f"{args.file} holds no Hermit state (no hermit.yaml, no workspace file); nothing was "
                              "restored", "it was written from a state dir that did not exist or was empty (a "
                              "mistyped HERMIT_HOME?); back up the right one (HERMIT_HOME or --home) and restore that")
        if transient:
            print(f"left out {transient} transient file{'s' if transient > 1 else ''} an older backup stored "
                  f"({WATCH_DIR}/: what other chats added while a command of the owner's ran; sign-in tickets)")
        done = "nothing was restored"
        gateway = hold_gateway_lock(home) if args.force else None
        try:
            count = restore_into(home, tar, mine, links.get(("home",), []), private=True, fill=bool(args.force),
                                 what="the state dir", not_empty=NOT_EMPTY_HOME)
            done = f"the state dir {home} was restored, the folders outside it may not have been"
            restored, problems = _restore_external(ctx, tar, later, links, bool(args.external))
        except DAMAGED as e:
            raise _damaged(args.file, e, done) from None
        finally:
            if gateway is not None:
                gateway.release()
    print(f"restored {count + restored} files into {home}")
    print("the memory index is rebuilt on the first search (or run `hermit memory index` now); "
          "`hermit doctor` checks the rest")
    if problems:
        raise BackupError("not restored: " + "; ".join(problems), "the state dir is restored; make room (move "
                          "those folders away) and run `hermit restore FILE --force --external` again, or copy "
                          "them by hand from the archive's external/ folder")
    return 0


def _open_archive(name: str) -> BinaryIO:
    """The archive, opened once and judged on that descriptor: a regular file of the user's that nobody else
    can write (config.paths.not_own_file, the rule for hermit.yaml). Whoever can write the archive chooses the
    restored config (the owners of every channel), keys and notes."""
    try:
        fd = os.open(Path(name).expanduser(), os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise BackupError(f"cannot read {name}: {e.strerror or e}", "pass an archive written by `hermit backup`") \
            from None
    st = os.fstat(fd)
    problem = not_own_file(st) if stat.S_ISREG(st.st_mode) else "is not a regular file"
    if problem:
        os.close(fd)
        raise BackupError(f"{name} {problem}; nothing was restored", "restore only an archive nobody else could "
                          "have written: whoever can write it chooses the restored config (the owners), keys and "
                          "notes. Once you know where it came from, copy it to a file of your own (cp) and "
                          "restore that")
    return os.fdopen(fd, "rb")


def hold_gateway_lock(home: Path) -> GatewayLock | None:
    """The gateway's lock on the existing state dir `home`, held while --force restores over it: a gateway
    running there keeps the keys and accounts it started with while their files change, and its turns in flight
    write into files the restore replaces, so one that runs is refused and none starts meanwhile. None for a
    state dir that does not exist yet (or that restore_into refuses anyway: nothing is made in it)."""
    from hermit.gateway.state import GatewayLock, GatewayLocked, HowRun

    try:
        st = os.lstat(home)
    except FileNotFoundError:
        return None
    if not_own_private_dir(st) is not None:
        return None
    try:
        return GatewayLock.acquire(home)
    except GatewayLocked as e:
        from hermit.cli.running_gateway import running_gateway

        gw = running_gateway(home)  # how it runs: a kill under a service manager stops the service until next login
        how = HowRun(gw.pid, gw.service, gw.launchd) if gw is not None else HowRun(None)
        again = f", and start it again after: {how.start()}" if how.managed else ""
        raise BackupError(f"{e.message}; nothing was restored", f"stop the gateway first ({how.stop()}), then run "
                          f"`hermit restore` again{again}") from None


def _holds_state(mine: list[Item], later: dict[tuple[str, str], list[Item]]) -> bool:
    """The archive has a config, or a file of a workspace (the state dir's, or one that lived outside it)."""
    if any(m.isfile() and (rel.as_posix() in CONFIG_NAMES or rel.parts[0].startswith("workspace"))
           for m, rel in mine):
        return True
    return any(m.isfile() for (_, kind), items in later.items() if kind == "workspace" for m, _ in items)


def _damaged(name: str, e: BaseException, done: str) -> BackupError:
    """An archive cut short (a copy that stopped, a full disk) or corrupted, said plainly."""
    return BackupError(f"{name} is damaged or incomplete: {e or type(e).__name__} ({done})", "restore from another "
                       "copy of the backup, or make a new one with `hermit backup`; `tar -tzf FILE` lists what "
                       "can still be read of this one")


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
        members.append(m)
    return members


def _manifest(tar: tarfile.TarFile, members: list[tarfile.TarInfo], name: str) -> dict[str, object]:
    member = next((m for m in members if m.name == f"{TOP}/manifest.json"), None)
    if member is None:
        raise BackupError(f"{name} has no {TOP}/manifest.json", "it was not written by `hermit backup`")
    raw = tar.extractfile(member)
    try:
        manifest = json.loads(raw.read() if raw else b"{}")
    except ValueError as e:
        raise BackupError(f"{name} has an unreadable manifest ({e})", "it was not written by `hermit backup`") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        raise BackupError(f"unknown backup format {got!r}", "restore it with the Hermit version that wrote it")
    return manifest


def _watch_folders(manifest: dict[str, object], members: list[tarfile.TarInfo]) -> set[str]:
    """The archive names of the `.hermit-watch/` folders at the workspaces' tops (added_notes.py), which a
    restore never brings back (an older `hermit backup` stored them): the workspaces the manifest names; only for
    an archive whose manifest names none, any folder holding MEMORY.md or memory/. The manifest's list is the
    whole answer when there is one: a user's own `.hermit-watch/` deeper in a workspace, next to an old
    MEMORY.md or a project's memory/ folder, is theirs (the backup stored it) and is restored."""
    named = manifest.get("workspaces")
    tops = {f"{TOP}/{w}" for w in named if isinstance(w, str)} if isinstance(named, list) else set()
    for m in members if not isinstance(named, list) else ():
        p = PurePosixPath(m.name)
        if (p.name == "MEMORY.md" and m.isfile()) or (p.name == "memory" and m.isdir()):
            tops.add(str(p.parent))
    return {f"{t}/{WATCH_DIR}" for t in tops}


def _transient(m: tarfile.TarInfo, watch: set[str]) -> bool:
    """A member an older `hermit backup` stored that a restore leaves out: in a `.hermit-watch/` folder
    (`watch`), or a sign-in ticket or launcher page of the state dir's gateway/ (a key for a gateway process
    that will not run again)."""
    if m.name in watch or any(m.name.startswith(w + "/") for w in watch):
        return True
    rel = PurePosixPath(m.name).relative_to(TOP)
    return rel.parts[:1] == ("home",) and TRANSIENT_STATE.fullmatch(PurePosixPath(*rel.parts[1:]).as_posix()) is not None


def _folder_of(p: PurePosixPath) -> tuple[str, ...]:
    return p.parts[:1] if p.parts[:1] == ("home",) else p.parts[:3]


def _links(manifest: dict[str, object]) -> Links:
    """The manifest's second names of files, per restored folder; a malformed list refuses the archive."""
    raw = manifest.get("links", [])
    if not isinstance(raw, list) or not all(isinstance(x, list) and len(x) == 2 and all(isinstance(s, str) for s in x)
                                            for x in raw):
        raise BackupError("the archive's manifest has a malformed list of links", "it was not written by "
                          "`hermit backup`, or was tampered with")
    out: Links = {}
    for name, target in raw:
        a, b = PurePosixPath(name), PurePosixPath(target)
        if any(p.is_absolute() or ".." in p.parts or "\\" in str(p) or p.parts[:1] not in (("home",), ("external",))
               for p in (a, b)):
            raise BackupError(f"the archive links an unsafe path {name!r} -> {target!r}", "restore only archives "
                              "written by `hermit backup`")
        folder = _folder_of(a)
        if folder != _folder_of(b) or len(a.parts) <= len(folder) or len(b.parts) <= len(folder):
            print(f"left out {name}: a second name (hard link) of {target}, in another restored folder; it is "
                  "never restored as a separate file")
            continue
        out.setdefault(folder, []).append((PurePosixPath(*a.parts[len(folder):]), PurePosixPath(*b.parts[len(folder):])))
    return out


def _external_problem(dest: Path, home: Path) -> str | None:
    """Why an external folder the restored config names is no place to restore into."""
    try:
        user_home: Path | None = Path(os.path.realpath(Path.home()))
    except (RuntimeError, KeyError):
        user_home = None
    if dest == Path(dest.anchor) or dest == user_home:
        return "is the root or your home folder"
    if _inside(home, dest):
        return "holds the state dir"
    hidden = user_home is not None and _inside(dest, user_home) and not _inside(dest, home) and any(
        part.startswith(".") for part in dest.relative_to(user_home).parts)
    if hidden:
        return "is inside a hidden folder of your home folder (like ~/.ssh or ~/.config)"
    return None


def _restore_external(ctx: CliContext, tar: tarfile.TarFile, groups: dict[tuple[str, str], list[Item]],
                      links: Links, allowed: bool) -> tuple[int, list[str]]:
    """Workspaces and session stores that lived outside the state dir, to where the restored config puts them
    (only with --external). Returns the files written and what was refused."""
    if not groups:
        return 0, []
    loaded = ctx.config()
    places = {(a.id, "workspace"): a.workspace for a in loaded.agents}
    places.update({(a.id, "sessions"): a.sessions_dir for a in loaded.agents})
    home = Path(os.path.realpath(ctx.home))
    count, problems = 0, []
    for (agent, kind), items in groups.items():
        files = sum(m.isfile() for m, _ in items)
        place = places.get((agent, kind))
        if place is None:
            print(f"skipped agent {agent}'s {kind} ({files} files): no such agent in the restored config")
            continue
        dest = Path(os.path.realpath(place.parent)) / place.name
        if not allowed:
            print(f"not restored: agent {agent}'s {kind} ({files} files), which lived outside the state dir; "
                  f"`hermit restore FILE --external` restores it to {dest}")
            continue
        what = f"agent {agent}'s {kind}"
        problem = _external_problem(dest, home)
        if problem:
            problems.append(f"{what} at {dest} {problem}")
            continue
        print(f"restoring {what} to {dest}")
        try:
            count += restore_into(dest, tar, items, links.get(("external", agent, kind), []),
                                  private=_inside(dest, home), fill=False, what=what,
                                  not_empty="an external folder is restored only into a new or empty one")
        except (BackupError, RestoreConflict) as e:
            problems.append(e.message)
    return count, problems
