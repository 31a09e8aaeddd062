"""Rooms: the folder a non-owner session's files live in, instead of the owner's workspace.

A group chat, a contact's DM or a cron job (any session that is not the owner's main one) works in a
room of its own: `<state>/agents/<agentId>/rooms/<slug>/`, one per audience (a group and its threads
share one; a contact has one). What such a session writes with the file tools or leaves behind after an
exec lands there and nowhere else, so nothing it creates can become one of the workspace's instruction
files (AGENTS.md, BOOTSTRAP.md …) or sit among the owner's files. Its view (views.py) is the room, plus
the instruction files and the memory it may see, read-only.

A room has a quota (`sandbox.room_mb`) that bounds its inodes as well as its bytes: every entry (file,
folder, link) is charged at least ENTRY_BYTES (4 KiB: an inode and a block), so a room of 256 MB holds at
most 65,536 entries however small. It is only ever written by Hermit itself — the file tools and the
merge after an exec (`apply_incoming`, which skips what would pass the quota), both under the room's lock —
never by a sandboxed process directly (exec works on a size-limited copy, room_sandbox.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hermit.config.paths import ensure_private_dir
from hermit.errors import PathPolicyError
from hermit.locks import locked
from hermit.memory.policy.audience import UNKNOWN, audience_of_session
from hermit.tools import safe_fs

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
ENTRY_BYTES = 4096  # the least any entry of a room is charged: an inode and a block


def charge(st: os.stat_result) -> int:
    """What one entry counts against a room's quota: its allocated blocks, and never less than ENTRY_BYTES
    (so an empty file, a folder or a link still costs an inode's worth)."""
    return max(st.st_blocks * 512, ENTRY_BYTES)


def charged_usage(dir_fd: int) -> int:
    """What the tree beneath `dir_fd` counts against a quota (every entry charged, see `charge`)."""
    return sum(charge(st) for _, st in safe_fs.walk_beneath(dir_fd))


def room_audience(session_key: str) -> str:
    """Who shares a room: the session's audience (memory/policy/audience.py) — a group and its threads, a
    channel, a contact, a cron job, a sub-agent run. A key that does not parse shares nothing."""
    audience = audience_of_session(session_key)
    return f"{UNKNOWN}:{session_key}" if audience == UNKNOWN else audience


def room_slug(audience: str) -> str:
    """A folder name for an audience: readable, and unique (a hash of the exact audience ends it)."""
    readable = _UNSAFE.sub("_", audience).strip("._-")[:60] or "room"
    return f"{readable}-{hashlib.sha256(audience.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


@dataclass(frozen=True)
class Room:
    """One audience's folder. `quota_bytes` bounds what it may hold (allocated blocks, every entry counted
    as at least ENTRY_BYTES: the quota bounds inodes too)."""

    base: Path  # <agent dir>/rooms
    audience: str
    quota_bytes: int

    @property
    def path(self) -> Path:
        return self.base / room_slug(self.audience)

    def open(self) -> int:
        """An O_PATH descriptor of the room, created (0700) on first use. The caller closes it."""
        ensure_private_dir(self.base)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.path, 0o700)
        fd = os.open(self.path, safe_fs._DIR_FLAGS)  # created by Hermit above: never a symlink
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            raise PathPolicyError(f"the room folder {self.path} is not a folder owned by this user",
                                  "move it away; Hermit creates a new one")
        return fd

    @contextlib.contextmanager
    def fd(self) -> Iterator[int]:
        fd = self.open()
        try:
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def locked(self) -> Iterator[int]:
        """The room's descriptor, held with an exclusive lock: file tools and the merge after an exec take
        turns, so neither loses the other's change."""
        ensure_private_dir(self.base)
        with locked(self.base / f".{room_slug(self.audience)}.lock"), self.fd() as fd:
            yield fd

    @property
    def max_entries(self) -> int:
        """The most entries the quota allows (each is charged at least ENTRY_BYTES)."""
        return self.quota_bytes // ENTRY_BYTES

    def usage(self) -> int:
        """What the room counts against its quota (see `charge`)."""
        with self.fd() as fd:
            return charged_usage(fd)

    def check_room_for(self, added: int, fd: int) -> None:
        """Refuse a write that would take the room past its quota (a new entry costs at least ENTRY_BYTES)."""
        used = charged_usage(fd)
        if used + max(added, 0) > self.quota_bytes:
            raise PathPolicyError(
                f"this chat's room would hold {_mb(used + max(added, 0))}, over its {_mb(self.quota_bytes)} quota "
                f"(every file and folder counts as at least {ENTRY_BYTES // 1024} KiB)",
                "delete files this chat no longer needs (the owner can raise sandbox.room_mb)")


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB"


# ---- the merge after an exec ------------------------------------------------------------------------

Signature = tuple[str, str]  # ("f", sha256) | ("l", link target) | ("d", "")


@dataclass(frozen=True)
class SeedEntry:
    """What the sandbox was given for one path, and how the room's entry looked then (to see whether
    a file tool changed it while the command ran)."""

    sig: Signature
    stamp: tuple[int, int, int]  # (st_ino, st_size, st_mtime_ns) of the room's entry


Manifest = dict[str, SeedEntry]


def stamp_of(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


def file_signature(fd: int) -> Signature:
    """A regular file's signature, read from its open descriptor."""
    h = hashlib.sha256()
    while block := os.read(fd, 1 << 20):
        h.update(block)
    return "f", h.hexdigest()


def _incoming(root_fd: int) -> dict[str, tuple[Signature, os.stat_result]]:
    """Every entry of the extracted output (a private folder only Hermit writes), by relative path, read
    through descriptors (safe_fs.walk_beneath): nothing here depends on the host path's length."""
    out: dict[str, tuple[Signature, os.stat_result]] = {}
    for rel, st in safe_fs.walk_beneath(root_fd):
        if stat.S_ISLNK(st.st_mode):
            out[rel] = (("l", safe_fs.readlink_beneath(root_fd, rel)), st)
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = (("d", ""), st)
        elif stat.S_ISREG(st.st_mode):
            fd = safe_fs.open_beneath(root_fd, rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
            try:
                out[rel] = (file_signature(fd), st)
            finally:
                os.close(fd)
    return out


MAX_LINK_HOPS = 40  # as the kernel's limit on symlinks followed in one lookup


def _resolve(links: dict[str, str], start: list[str], target: str, hops: list[int]) -> list[str] | None:
    """Where `target` (a link's text) leads from the room folder `start` (its components), following the
    room's own links (`links`: relative path -> text) as the kernel would; a name that is not a link is
    taken as a folder (what it may become later). None when it leaves the room (an absolute target, a
    `..` above the room's top) or follows more than MAX_LINK_HOPS links."""
    if target.startswith("/"):
        return None
    out = list(start)
    for comp in target.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            if not out:
                return None
            out.pop()
            continue
        path = "/".join([*out, comp])
        if path in links:
            hops[0] += 1
            if hops[0] > MAX_LINK_HOPS:
                return None
            resolved = _resolve(links, out, links[path], hops)
            if resolved is None:
                return None
            out = resolved
        else:
            out.append(comp)
    return out


def links_leaving(links: dict[str, str]) -> list[str]:
    """The links (relative path -> text) that lead out of the room, or loop, when followed together with
    the room's other links (`ln -s . b; ln -s b/.. esc`: each stays inside by its own text, `esc` is the
    room's parent). What stays is checked again without them, until none is left that leaves."""
    links = dict(links)
    leaving: list[str] = []
    while True:
        now = sorted(rel for rel, target in links.items()
                     if _resolve(links, safe_fs.parts_of(rel)[:-1], target, [0]) is None)
        if not now:
            return leaving
        for rel in now:
            del links[rel]
        leaving += now


def _drop_links_leaving(room_fd: int) -> list[str]:
    """Remove the room's links that lead out of it through its other links (see `links_leaving`)."""
    links: dict[str, str] = {}
    for rel, st in safe_fs.walk_beneath(room_fd):
        if stat.S_ISLNK(st.st_mode):
            links[rel] = safe_fs.readlink_beneath(room_fd, rel)
    leaving = links_leaving(links)
    for rel in leaving:
        with contextlib.suppress(FileNotFoundError):
            safe_fs.remove_beneath(room_fd, rel)
    return leaving


@dataclass
class Merge:
    """What a merge did: `changed` (a deleted path starts with "-") and `skipped` (created or changed
    entries not kept because the room would have passed its quota), `refused` (links removed because,
    followed through the room's other links, they led out of it)."""

    changed: list[str]
    skipped: list[str]
    refused: list[str] = field(default_factory=list)  # links removed: they led out of the room (see links_leaving)
    # not kept: a file tool or another command (a group's thread shares its room) wrote that path while this
    # one ran, so the version already in the room stays
    meanwhile: list[str] = field(default_factory=list)
    too_deep: list[str] = field(default_factory=list)  # left out when unpacked: nested too deep (room_sandbox)


def apply_incoming(room_fd: int, extracted: Path, seed: Manifest, quota_bytes: int | None = None) -> Merge:
    """Merge what a sandboxed command left (extracted into `extracted`) into the room: files it deleted are
    removed, then files and folders it created or changed are written — unless a file tool changed that
    path while it ran (then the tool's version stays), or the entry would take the room past
    `quota_bytes` (then it is skipped and the room's own version, if any, stays). Last, every link of the
    room that leads out of it through its other links is removed (`refused`).

    What came back is read in full before the room is touched: an error there (OSError) leaves the room
    as it was."""
    src_fd = os.open(extracted, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        merge = _apply(room_fd, src_fd, seed, quota_bytes)
    finally:
        os.close(src_fd)
    shutil.rmtree(extracted, ignore_errors=True)
    return merge


def _apply(room_fd: int, src_fd: int, seed: Manifest, quota_bytes: int | None) -> Merge:
    incoming = _incoming(src_fd)
    changed = _remove_deleted(room_fd, seed, incoming)
    used = charged_usage(room_fd) if quota_bytes is not None else 0
    skipped: list[str] = []
    meanwhile: list[str] = []
    # Links that would leave the room are never created, not only removed at the end: a Hermit killed
    # between the two (kill -9, OOM) left `esc -> b/..` leading to the other rooms until the next merge.
    leaving = _leaving_after(room_fd, incoming)
    refused_now: list[str] = []
    for rel in sorted(incoming, key=lambda r: r.count("/")):
        sig, src_st = incoming[rel]
        before = seed.get(rel)
        if before is not None and before.sig == sig:
            continue
        # Changed, or created, by someone else while the command ran (or below such a path): keep theirs.
        if any(rel.startswith(m + "/") for m in meanwhile):
            meanwhile.append(rel)
            continue
        current = safe_fs.lstat_beneath(room_fd, rel)
        if _written_meanwhile(sig, before, current):
            meanwhile.append(rel)
            continue
        if quota_bytes is not None:
            # A folder replacing a file (or the reverse) is charged in full: the entries below it are
            # charged as they come.
            cost = charge(src_st) - (charge(current) if current is not None else 0)
            if used + cost > quota_bytes or (current is None and _parent_missing(room_fd, rel)):
                skipped.append(rel)
                continue
            used += cost
        if sig[0] == "d":
            if current is not None and not stat.S_ISDIR(current.st_mode):
                safe_fs.remove_beneath(room_fd, rel)
            os.close(safe_fs.open_dir(room_fd, rel, create=True))
            continue
        if current is not None and stat.S_ISDIR(current.st_mode):
            safe_fs.remove_beneath(room_fd, rel)
        if sig[0] == "l":
            if rel in leaving:
                refused_now.append(rel)
                if current is not None:
                    safe_fs.remove_beneath(room_fd, rel)
                continue
            _symlink_beneath(room_fd, rel, sig[1])
        else:
            data = safe_fs.read_beneath(src_fd, rel, max(src_st.st_size, 0) + (1 << 20)).data
            safe_fs.write_beneath(room_fd, rel, data, mode=stat.S_IMODE(src_st.st_mode), fsync=False)
        changed.append(rel)
    refused = refused_now + [r for r in _drop_links_leaving(room_fd) if r not in refused_now]
    return Merge([c for c in changed if c not in refused], skipped, refused, meanwhile=meanwhile)


def _leaving_after(room_fd: int, incoming: dict[str, tuple[Signature, os.stat_result]]) -> set[str]:
    """The incoming links that would lead out of the room together with the room's links as the merge leaves
    them (its own, unless the command replaced them, and the incoming ones): never created. What this cannot
    foresee (an entry kept because it was written meanwhile) is caught by `_drop_links_leaving` after."""
    links = {rel: safe_fs.readlink_beneath(room_fd, rel) for rel, st in safe_fs.walk_beneath(room_fd)
             if stat.S_ISLNK(st.st_mode) and (rel not in incoming or incoming[rel][0][0] == "l")}
    links.update({rel: sig[1] for rel, (sig, _) in incoming.items() if sig[0] == "l"})
    return {rel for rel in links_leaving(links) if rel in incoming and incoming[rel][0][0] == "l"}


def _written_meanwhile(sig: Signature, before: SeedEntry | None, current: os.stat_result | None) -> bool:
    """Whether the room's entry at a path the command changed is no longer what the command started from:
    changed since the seed, or created since (two folders of one name merge; anything else is a clash)."""
    if current is None:
        return False
    if before is None:
        return not (sig[0] == "d" and stat.S_ISDIR(current.st_mode))
    return stamp_of(current) != before.stamp


def _parent_missing(room_fd: int, rel: str) -> bool:
    """True when `rel`'s folder is not in the room (it was skipped): nothing is created below it."""
    parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
    if not parent:
        return False
    st = safe_fs.lstat_beneath(room_fd, parent)
    return st is None or not stat.S_ISDIR(st.st_mode)


def _remove_deleted(room_fd: int, seed: Manifest, incoming: dict[str, tuple[Signature, os.stat_result]]) -> list[str]:
    """Remove what the command deleted (in the seed, not in its output) unless a file tool changed it."""
    changed: list[str] = []
    for rel in sorted(set(seed) - set(incoming), key=lambda r: -r.count("/")):
        current = safe_fs.lstat_beneath(room_fd, rel)
        if current is None or stamp_of(current) != seed[rel].stamp:
            continue
        if stat.S_ISDIR(current.st_mode):
            with contextlib.suppress(OSError):  # not empty: something new arrived in it meanwhile
                parts = safe_fs.parts_of(rel)
                parent = safe_fs.open_dir(room_fd, "/".join(parts[:-1]))
                try:
                    os.rmdir(parts[-1], dir_fd=parent)
                finally:
                    os.close(parent)
        else:
            safe_fs.remove_beneath(room_fd, rel)
        changed.append(f"-{rel}")
    return changed


def _symlink_beneath(room_fd: int, rel: str, target: str) -> None:
    parts = safe_fs.parts_of(rel)
    parent = safe_fs.open_dir(room_fd, "/".join(parts[:-1]), create=True)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(parts[-1], dir_fd=parent)
        os.symlink(target, parts[-1], dir_fd=parent)
    finally:
        os.close(parent)
