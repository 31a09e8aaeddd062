"""Which files are memory: MEMORY.md, memory/**/*.md and configured extra paths — and how to read them.

Reading is defensive: a binary file, a huge file, an unreadable file or something that is not a regular
file at all (a FIFO named x.md would block a plain open() forever) becomes a warning, never a crash or a
hang; a note that is not UTF-8 is decoded in its detected encoding (hermit.textfile), and only when no
encoding fits are bytes replaced, which the warning says.

No symlink is followed below the workspace or an extra path, neither when listing nor when reading: another
user who may write a memory folder could otherwise swap a folder for a link to one the owner keeps private
between the listing and the read, and have its notes indexed under the shared folder's name. So folders are
listed through descriptors opened O_NOFOLLOW from their parent's, and each file is read beneath the
descriptor of the root it was listed under (`SourceFile.base`; hermit.textfile.read_regular_beneath), every
component opened without following a link; the index keeps the fstat of the descriptor it read.

A file that is listed but cannot be indexed becomes a `Skip` (its path, a short reason, what to do): the
sync records it, so it is not taken for a change the index still has to catch up with.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from hermit.memory.policy.paths import unsafe_extra_path
from hermit.textfile import FileTooLarge, NotRegularFile, decode_text, file_kind, read_regular_beneath

MEMORY_FILE = "MEMORY.md"
MEMORY_DIR = "memory"


@dataclass(frozen=True)
class SourceFile:
    rel: str  # workspace-relative posix path, or an absolute path for extra paths outside the workspace
    path: str  # absolute (a string: the dirty check lists thousands of files before each search)
    source: str  # "memory" | "sessions"
    # The folder a memory file is read beneath (`path` is base + "/" + the rest): the workspace, an extra
    # folder outside it, or the real folder of an extra file outside it. "" for session transcripts.
    base: str = ""

    @property
    def abs(self) -> Path:
        return Path(self.path)


SYMLINK_FIX = ("memory files may not be symlinks: put the note itself here, or name the folder it lives in "
               "under memory_search.extra_paths")
REGULAR_FIX = "memory files must be regular files: remove it, or rename it so it no longer ends in .md"
BINARY_FIX = "memory files must be text: move it out of the memory folder, or rename it so it no longer ends in .md"
LARGE_FIX = "split it into smaller notes, or raise memory_search.max_file_bytes"
UNREADABLE_FIX = "make it readable by the user Hermit runs as (check its permissions and owner)"


@dataclass(frozen=True)
class Skip:
    """A memory file the index leaves out: recorded by the sync, listed by `memory status`, doctor and the
    web app until it is fixed or removed."""

    path: str  # as SourceFile.rel
    reason: str  # short: "looks binary", "a symlink", "a FIFO", "too large (…)", "cannot read (…)"
    fix: str  # what the user can do about it
    detail: str  # the warning's words after "skipped, "

    @property
    def warning(self) -> str:
        return f"{self.path}: skipped, {self.detail}"


def symlink_skip(rel: str) -> Skip:
    return Skip(rel, "a symlink", SYMLINK_FIX, "memory files may not be symlinks")


def unreadable_skip(rel: str, error: object) -> Skip:
    why = f"cannot read ({error})"
    return Skip(rel, why, UNREADABLE_FIX, why)


def not_regular_skip(rel: str, kind: str) -> Skip:
    return Skip(rel, kind, REGULAR_FIX, f"it is {kind}; memory files must be regular files")


def _is_md(name: str) -> bool:
    return name.lower().endswith(".md")


def rel_path(workspace: Path, p: Path) -> str:
    try:
        return p.relative_to(workspace).as_posix()
    except ValueError:
        return p.as_posix()


_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _walk_md(root: str, base: str, workspace: Path, warnings: list[str], skips: list[Skip]) -> list[SourceFile]:
    """Markdown files under the folder `root`, each directory's files (sorted) before its subdirectories.

    Each folder is opened O_NOFOLLOW from its parent's descriptor and listed through it: one swapped for a
    symlink after its parent was listed is refused, not listed through. os.scandir's entries know whether
    they are symlinks or directories without another system call, and paths stay strings until the end:
    listing 9k daily logs took 0.65 s with pathlib, ~0.05 s so."""
    out: list[SourceFile] = []
    prefix = str(workspace) + os.sep

    def rel(path: str) -> str:
        return path[len(prefix):].replace(os.sep, "/") if path.startswith(prefix) else Path(path).as_posix()

    def visit(fd: int, directory: str) -> None:
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:
            warnings.append(f"{rel(directory)}: cannot be listed ({err.strerror or err})")
            return
        subdirs: list[str] = []
        for ent in entries:
            if ent.name.startswith("."):
                continue
            path = directory + os.sep + ent.name
            if ent.is_symlink():
                if _is_md(ent.name):
                    skips.append(symlink_skip(rel(path)))
                continue
            if ent.is_dir():
                subdirs.append(ent.name)
            elif _is_md(ent.name):
                if ent.is_file():
                    out.append(SourceFile(rel(path), path, "memory", base))
                else:
                    skips.append(_not_regular(rel(path), path))
        for name in subdirs:
            opened(name, directory + os.sep + name, fd)

    def opened(name: str, directory: str, parent: int | None) -> None:
        try:
            fd = os.open(name, _DIR_OPEN, dir_fd=parent)
        except OSError as err:
            if err.errno != errno.ENOENT:  # gone since its parent was listed: nothing to list
                what = "it was swapped for a symlink" if err.errno in (errno.ELOOP, errno.ENOTDIR) else \
                    err.strerror or err
                warnings.append(f"{rel(directory)}: cannot be listed ({what})")
            return
        try:
            visit(fd, directory)
        finally:
            os.close(fd)

    opened(root, root, None)
    return out


def _not_regular(rel: str, path: str) -> Skip:
    try:
        kind = file_kind(os.lstat(path).st_mode)
    except OSError:
        kind = "not a regular file"
    return not_regular_skip(rel, kind)


def _base(workspace: Path, p: Path) -> str:
    """The folder an extra folder `p`'s files are read beneath: the workspace when `p` is inside it (so no
    folder between them is followed either), else `p` itself."""
    ws = str(workspace)
    return ws if str(p).startswith(ws + os.sep) and ".." not in p.parts else str(p)


def _extra_file(workspace: Path, p: Path) -> SourceFile:
    """An extra path naming one file: read beneath the workspace when inside it, else beneath the real
    folder the config names (its links followed here, once; the file itself never)."""
    rel, base = rel_path(workspace, p), _base(workspace, p)
    if base == str(workspace):
        return SourceFile(rel, str(p), "memory", base)
    base = str(p.parent.resolve())
    return SourceFile(rel, base + os.sep + p.name, "memory", base)


@dataclass(frozen=True)
class Listing:
    files: list[SourceFile]  # sorted by rel
    skips: list[Skip]  # Markdown names that are not regular files (symlinks, FIFOs…): never read
    warnings: list[str]  # what else could not be listed: folders, extra paths


def list_memory_files(workspace: Path, extra_paths: list[str]) -> tuple[list[SourceFile], list[str]]:
    """The memory files, and a warning for each thing left out (skipped names first)."""
    found = scan_memory_files(workspace, extra_paths)
    return found.files, [s.warning for s in found.skips] + found.warnings


def scan_memory_files(workspace: Path, extra_paths: list[str]) -> Listing:
    warnings: list[str] = []
    skips: list[Skip] = []
    files: dict[str, SourceFile] = {}
    ws = str(workspace)
    top = workspace / MEMORY_FILE
    if top.is_symlink():
        skips.append(symlink_skip(MEMORY_FILE))
    elif top.is_file():
        files[MEMORY_FILE] = SourceFile(MEMORY_FILE, str(top), "memory", ws)
    elif top.exists():
        skips.append(_not_regular(MEMORY_FILE, str(top)))
    mem = workspace / MEMORY_DIR
    if mem.is_dir() and not mem.is_symlink():
        for f in _walk_md(str(mem), ws, workspace, warnings, skips):
            files[f.rel] = f
    for raw in extra_paths:
        unsafe = unsafe_extra_path(workspace, raw)
        if unsafe is not None:
            warnings.append(f"extra path {raw!r}: skipped, {unsafe}; list a folder or file inside it instead "
                            "(e.g. notes/)")
            continue
        p = Path(raw).expanduser()
        if not p.is_absolute():
            p = workspace / p
        if p.is_symlink():
            warnings.append(f"extra path {raw}: skipped, symlinks are not followed")
        elif p.is_dir():
            for f in _walk_md(str(p), _base(workspace, p), workspace, warnings, skips):
                files.setdefault(f.rel, f)
        elif p.exists() and not p.is_file():
            warnings.append(_not_regular(f"extra path {raw}", str(p)).warning)
        elif p.is_file():
            if _is_md(p.name):
                f = _extra_file(workspace, p)
                files.setdefault(f.rel, f)
            else:
                warnings.append(f"extra path {raw}: skipped, only .md files are memory")
        else:
            warnings.append(f"extra path {raw}: does not exist")
    named = {s.path: s for s in skips}  # one entry per name (an extra folder may list one twice)
    return Listing(sorted(files.values(), key=lambda f: f.rel),
                   sorted((s for p, s in named.items() if p not in files), key=lambda s: s.path), warnings)


@dataclass(frozen=True)
class ReadResult:
    text: str | None
    warning: str | None
    st: os.stat_result | None = None  # fstat of the descriptor read: what the index records for the file
    skip: Skip | None = None  # why the file is left out (then `warning` is its warning)


def _skipped(skip: Skip, st: os.stat_result | None = None) -> ReadResult:
    return ReadResult(None, skip.warning, st, skip)


class MemoryReader:
    """Reads listed memory files, each beneath a descriptor of the folder it was listed under (its `base`),
    with no symlink followed at any component below it. The workspace's own path is followed (the owner's
    config may name it through a link); an extra folder, refused at listing when it is a symlink, is opened
    O_NOFOLLOW so one swapped in since is refused too. Descriptors are kept for the reader's life: use it
    as a context manager around one sync."""

    def __init__(self, workspace: Path) -> None:
        self._workspace = str(workspace)
        self._roots: dict[str, int] = {}

    def __enter__(self) -> MemoryReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._roots.values():
            os.close(fd)
        self._roots.clear()

    def _root(self, base: str) -> int:
        fd = self._roots.get(base)
        if fd is None:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if base == self._workspace else os.O_NOFOLLOW)
            try:
                fd = os.open(base, flags)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link (or a file) since the listing
                    raise NotRegularFile(base, "a symlink or under a symlinked folder") from None
                raise
            self._roots[base] = fd
        return fd

    def read(self, f: SourceFile, max_bytes: int) -> ReadResult:
        rel = f.rel
        try:
            data, st = read_regular_beneath(self._root(f.base), f.path[len(f.base) + 1:], max_bytes)
        except FileNotFoundError:
            return ReadResult(None, None)  # vanished mid-sync: the next sync removes it
        except NotRegularFile as e:
            return _skipped(not_regular_skip(rel, e.kind))
        except FileTooLarge as e:
            return _skipped(Skip(rel, f"too large ({e.size:,} bytes; the limit is {max_bytes:,})", LARGE_FIX,
                                 f"{e.size:,} bytes is over the {max_bytes:,}-byte limit "
                                 "(memory_search.max_file_bytes); split it or raise the limit"))
        except OSError as e:
            return _skipped(unreadable_skip(rel, e.strerror or e))
        if b"\x00" in data[:8192]:
            return _skipped(Skip(rel, "looks binary", BINARY_FIX, "looks binary (NUL bytes); memory files must be text"),
                            st)
        decoded = decode_text(data)
        if decoded.replaced:
            return ReadResult(decoded.text, f"{rel}: not valid UTF-8 (first bad byte on line "
                                            f"{decoded.first_bad_line}) and no other encoding fits; indexed with "
                                            "replacement characters — re-save the file as UTF-8", st)
        return ReadResult(decoded.text, None, st)
