"""Where Hermit keeps things: the state dir ($HERMIT_HOME), config, workspaces, indexes, sessions — owner-only.

The state dir holds the index (MEMORY.md's text), transcripts and config, so whatever creates it
— `hermit init` or any command run before it — creates it 0700, and Hermit's own files in it 0600
(`ensure_private_dir`, `private_file`). The index dir and index files are tightened if an older
version left them readable to others. A folder another user makes where Hermit is about to make one (after
Hermit checked the place, before its mkdir) is refused, never used (`NotOwnFolder`).
"""

from __future__ import annotations

import errno
import functools
import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from hermit.errors import ConfigError

DEFAULT_AGENT_ID = "main"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def ensure_private_dir(path: Path, *, own: bool = False, what: str = "the folder") -> None:
    """Create `path` and any missing parents with mode 0700; existing directories keep their mode.

    A folder that appears between the look and the mkdir (EEXIST: another process made it first — another
    local user in a shared parent such as /tmp, between Hermit's check of the config and this call) is used only
    if it is what Hermit would have made, judged on a descriptor opened without following a link: `path`
    itself the user's and written by nobody else (`not_own_file`), a folder above it the user's or root's and
    safe (`not_safe_parent`). Anything else — another user's folder, a symlink, a file — raises NotOwnFolder
    (`what` names `path` in its message) and nothing is created in it. A folder Hermit made is tightened to 0700
    through its descriptor.

    With `own`, `path` is judged by the folder rule even when it already existed (`judge_own_folder`): the
    folders Hermit keeps the owner's keys and notes in (the state dir, a workspace and its memory/), which were
    judged when the config was loaded but may have been made by someone else since, when they did not exist
    then (a workspace in /tmp after a reboot)."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR_MODE)
        except FileExistsError:
            _judge_made_meanwhile(directory, path, what)
            continue
        _tighten_made(directory, path, what)
    if own:
        judge_own_folder(path, what)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _folder_stat(directory: Path, path: Path, what: str, *, own_links: bool = False) -> os.stat_result:
    """`directory`'s stat, taken on a descriptor opened without following a link — with `own_links`, a link
    the user or root made is followed and its target's taken; NotOwnFolder for any other link, or no folder."""
    try:
        fd = os.open(directory, _DIR_FLAGS)
    except PermissionError:
        return os.lstat(directory)  # a folder we may not look into: judged by its owner and mode
    except OSError as e:
        if e.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        link = os.lstat(directory)
        if not stat.S_ISLNK(link.st_mode):
            raise NotOwnFolder(what, path, directory, "is not a folder") from None
        if not own_links:
            raise NotOwnFolder(what, path, directory, "is a symlink") from None
        if link.st_uid not in (os.geteuid(), 0):
            raise NotOwnFolder(what, path, directory, f"is a symlink another user made (uid {link.st_uid})") from None
        try:
            fd = os.open(directory, _DIR_FLAGS & ~os.O_NOFOLLOW)
        except PermissionError:
            return os.stat(directory)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _judge_made_meanwhile(directory: Path, path: Path, what: str) -> None:
    st = _folder_stat(directory, path, what)
    why = not_own_file(st) if directory == path else not_safe_parent(st, group_ok=True)
    if why is not None:
        raise NotOwnFolder(what, path, directory, why)


def _tighten_made(directory: Path, path: Path, what: str) -> None:
    """The folder Hermit just made, made 0700 (mkdir's mode is filtered by the umask) through a descriptor: the
    folder made, not whatever took its name since (refused)."""
    try:
        fd = os.open(directory, _DIR_FLAGS)
    except OSError:
        _judge_made_meanwhile(directory, path, what)  # swapped already: NotOwnFolder, unless it is ours
        return
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise NotOwnFolder(what, path, directory, f"belongs to another user (uid {st.st_uid})")
        os.fchmod(fd, PRIVATE_DIR_MODE)
    finally:
        os.close(fd)


def judge_own_folder(path: Path, what: str = "the folder") -> None:
    """NotOwnFolder unless the existing folder `path` passes the folder rule (`unsafe_folder`), the folder
    itself judged on a descriptor: the user's and written by nobody else, each folder above where it resolves
    safe. A symlink is followed when the user or root made it (a ~/.hermit or a workspace kept elsewhere), its
    target judged; one another user made (in a shared folder such as /tmp) is refused."""
    if (why := not_own_file(_folder_stat(path, path, what, own_links=True))) is not None:
        raise NotOwnFolder(what, path, path, why)
    if (found := unsafe_parent(Path(os.path.realpath(path)))) is not None:
        raise NotOwnFolder(what, path, *found)


class NotOwnFolder(ConfigError, PermissionError):
    """A folder Hermit was about to keep private files in (`path`, or `folder` above it) is another user's, open
    to others, a symlink or no folder — found so, or made by someone else between Hermit's look and its mkdir.
    A HermitError, so every command says it plainly; a PermissionError too, so what lets an unusable folder
    pass (a cache, the chat's line history) writes nothing there either."""

    def __init__(self, what: str, path: Path, folder: Path, why: str) -> None:
        self.path, self.folder, self.why = path, folder, why
        if folder == path:
            message = f"{what} {path} {why}: Hermit keeps private files there, so it must be yours"
            hint = ("if you did not make it, another user did (perhaps just now): look at what is in it, move it "
                    f"away and run the command again; if it is yours: chown -R $(id -u) {path} && chmod go-w {path}")
        else:
            message = f"{what} {path} is inside {folder}, which {why}: they could swap it for their own"
            hint = f"move it to a folder only you and root can write (or make {folder} yours, after checking it)"
        super().__init__(message, hint)


def not_own_private_dir(st: os.stat_result) -> str | None:
    """Why an existing directory (`st` from lstat) cannot receive owner-only files as it is — a symlink or not a
    folder, another uid's, or one its group or others may write (they could plant a name in it first, or swap
    one). None when it is the current user's and only they write into it. `ensure_private_dir` leaves existing
    directories alone; a command about to write secrets into one it did not create (`hermit restore`) asks this."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    return not_own_file(st, group_ok=False)


def _written_by_others(st: os.stat_result, group_ok: bool) -> str | None:
    """Who besides the owner may write `st` ("its group or by others" / "every user" / "its group staff, which
    other users are in…"), as an error's text. With `group_ok`, group write is accepted only for a group nobody
    but the current user (and root) can be in (`group_others`)."""
    mode = stat.S_IMODE(st.st_mode)
    if st.st_mode & (0o002 if group_ok else 0o022):
        who = "every user" if group_ok else "its group or by others"
        return f"can be written by {who} (mode {mode:o})"
    if st.st_mode & 0o020 and (others := group_others(st.st_gid)) is not None:
        return (f"can be written by {others} (mode {mode:o}): remove the group's write (chmod g-w), or chgrp it "
                "to a group only you are in")
    return None


def group_others(gid: int) -> str | None:
    """Who besides the current user and root can be in group `gid`, in words ("its group staff, which other users
    are in: ann, bob"), or None when nobody else can: no other user is listed as a member (gr_mem) or has it as
    their primary group. A group the group database does not know fails closed (who is in it cannot be told).
    Where users come from a directory (LDAP) that does not enumerate, a user whose primary group it is may be
    missed: the members listed are still judged. Asked once per group in a process."""
    return _group_others(gid, os.geteuid())


@functools.cache
def _group_others(gid: int, euid: int) -> str | None:
    try:
        group = grp.getgrgid(gid)
    except (KeyError, OSError):
        return f"its group (gid {gid}), which the group database does not know: who else is in it cannot be told"
    others = set()
    for name in group.gr_mem:
        try:
            uid: int | None = pwd.getpwnam(name).pw_uid
        except (KeyError, OSError):
            uid = None  # a member with no user entry: someone else
        if uid not in (euid, 0):
            others.add(name)
    try:
        users = pwd.getpwall()
    except OSError:
        users = []
    others.update(u.pw_name for u in users if u.pw_gid == gid and u.pw_uid not in (euid, 0))
    if not others:
        return None
    names = sorted(others)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"its group {group.gr_name} (gid {gid}), which other users are in: {shown}"


def not_safe_parent(st: os.stat_result, *, group_ok: bool = False) -> str | None:
    """Why a directory is no place to keep (or create and rename into place) a private folder: owned by a user
    other than the current one or root, or writable by its group or others (with `group_ok`: by every user, or
    by a group other users are in) without the sticky bit (they could rename the folder away, or put their own
    in its place). /tmp (root's, sticky) is a safe parent."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"belongs to another user (uid {st.st_uid})"
    return None if st.st_mode & stat.S_ISVTX else _written_by_others(st, group_ok)


def not_own_file(st: os.stat_result, *, group_ok: bool = True) -> str | None:
    """Why a file or folder Hermit keeps its keys, config or notes in (`st` from stat: a symlinked dotfile is
    judged by what it names) cannot be trusted: another user's, or one every user may write (they would
    choose the model server, the proxy, the commands). None when it is the current user's. Group write is
    accepted (unless not `group_ok`) for a group nobody else can be in (`group_others`): with a umask of 002
    each user's files are group-writable for their own one-member group; a shared group (`users`, `staff`, a
    team's) is as good as another user."""
    if st.st_uid != os.geteuid():
        return f"belongs to another user (uid {st.st_uid})"
    return _written_by_others(st, group_ok)


def unsafe_folder(path: Path) -> tuple[Path, str] | None:
    """The one rule for a folder that holds the owner's keys or notes (the state dir, each workspace and its
    memory/, a memory index's folder): (the folder at fault, why) when another user could plant, read or swap
    what is kept there, else None. The folder, judged where it resolves to, must be the current user's and not
    writable by every user (`not_own_file`; group write is accepted, as with a umask of 002, only for a group no
    other user is in: `group_others`); each folder above it the user's or root's and not writable by every user
    (or such a group) unless sticky (`not_safe_parent`: /tmp is fine, a folder another user made in it is not).
    A folder that does not exist yet is judged by those above it."""
    real = path.resolve()
    try:
        why = not_own_file(os.stat(real)) if real.exists() else None
    except OSError:
        why = None
    if why is not None:
        return real, why
    return unsafe_parent(real)


def unsafe_parent(real: Path) -> tuple[Path, str] | None:
    """The first folder above `real` (a resolved path) through which another user could rename or swap it
    (`not_safe_parent`, group write accepted for a group no other user is in), with why; None when every
    folder above is safe."""
    for parent in real.parents:
        try:
            why = not_safe_parent(os.stat(parent), group_ok=True)
        except OSError:
            continue
        if why is not None:
            return parent, why
    return None


def not_own_note(st: os.stat_result) -> str | None:
    """Why a file read into the owner's prompt from their workspace (AGENTS.md, SOUL.md…, MEMORY.md; `st` from
    fstat on the open descriptor) is not the owner's word: another user's (root's is accepted: only root and
    the user could have made it), or one every user, or a group others are in, may write. A folder of the
    user's can still hold one: made before it was handed over, or copied in with its owner kept."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"belongs to another user (uid {st.st_uid})"
    return _written_by_others(st, True)


def not_own_opened(st: os.stat_result) -> str | None:
    """Why a file Hermit opened (without following a link) to keep private data in — an index, a lock file — is
    not its own: a symlink (its target would be written), not a regular file, or another user's (they made it
    first: they keep reading what is written to it). Root's is accepted (`sudo hermit` once): only root and the
    user could have made it."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid not in (os.geteuid(), 0):
        return f"belongs to another user (uid {st.st_uid})"
    return None


class NotOwnFile(PermissionError):
    """A file Hermit was about to keep private data in is a link, not a file, or another user's."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} {why}")
        self.path = path
        self.why = why


def private_file(path: Path) -> None:
    """Make sure `path` exists as an owner-only file (created 0600; an existing one tightened to 0600). An
    existing symlink, non-file or another user's file raises NotOwnFile and is left as it is.

    An existing file is never opened for reading or writing: closing such a descriptor would drop the POSIX
    locks SQLite holds on it in this process. It is judged through an O_PATH descriptor (whose close drops no
    lock) opened without following a link, and changed through that descriptor's /proc name."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        _tighten_existing(path)
        return
    os.close(fd)


def _tighten_existing(path: Path) -> None:
    o_path = getattr(os, "O_PATH", 0)
    if not o_path or not os.path.isdir("/proc/self/fd"):  # no O_PATH (macOS): judged by lstat, changed by path
        st = os.lstat(path)
        if (why := not_own_opened(st)) is not None:
            raise NotOwnFile(path, why)
        if st.st_mode & 0o077:
            os.chmod(path, PRIVATE_FILE_MODE)
        return
    fd = os.open(path, o_path | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if (why := not_own_opened(st)) is not None:
            raise NotOwnFile(path, why)
        if st.st_mode & 0o077:
            os.chmod(f"/proc/self/fd/{fd}", PRIVATE_FILE_MODE)
    finally:
        os.close(fd)


def tighten_dir(path: Path) -> None:
    """An existing directory Hermit owns (the index dir, logs/) made owner-only.

    Never a directory shared on purpose or someone else's: one with the sticky bit (/tmp, /var/tmp: as
    root, 0700 there breaks every other user's temporary files), one owned by another uid (root running
    Hermit on a user's files), the home directory or /. Those keep their mode; Hermit's files in them
    are still 0600."""
    # Judged and changed through one descriptor: a directory swapped for another (or for a link) between
    # the check and the chmod is not the one changed.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077 and _may_tighten(path, st):
            os.fchmod(fd, PRIVATE_DIR_MODE)
    finally:
        os.close(fd)


def _may_tighten(path: Path, st: os.stat_result) -> bool:
    """Whether Hermit may change this existing directory's mode (see tighten_dir)."""
    if st.st_mode & stat.S_ISVTX or st.st_uid != os.geteuid():
        return False
    real = path.resolve()
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):  # no $HOME and no passwd entry (a bare container's uid)
        home = None
    return real != real.parent and real != home


def default_home(environ: dict[str, str] | None = None) -> Path:
    """$HERMIT_HOME, else ~/.hermit. Only composition roots should call this."""
    env = os.environ if environ is None else environ
    raw = env.get("HERMIT_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".hermit"


@dataclass(frozen=True)
class StatePaths:
    home: Path

    @property
    def config_candidates(self) -> tuple[Path, Path, Path]:
        return (self.home / "hermit.yaml", self.home / "hermit.yml", self.home / "hermit.json")

    def config_file(self) -> Path | None:
        for p in self.config_candidates:
            if p.exists():
                return p
        return None

    def default_workspace(self, agent_id: str) -> Path:
        name = "workspace" if agent_id == DEFAULT_AGENT_ID else f"workspace-{agent_id}"
        return self.home / name

    def index_path(self, agent_id: str) -> Path:
        return self.home / "memory" / f"{agent_id}.sqlite"

    def sessions_dir(self, agent_id: str) -> Path:
        return self.home / "agents" / agent_id / "sessions"

    def agent_dir(self, agent_id: str) -> Path:
        return self.home / "agents" / agent_id
