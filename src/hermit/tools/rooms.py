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
import stat
import weakref
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


MOVED = ("this chat's room was moved away while this turn used it (a re-aimed job's room is retired, a migrated "
         "channel's renamed): nothing of this turn goes into the room now under its name")


class RoomMoved(PathPolicyError):
    """The folder a turn's room was is no longer under its name (Room.for_turn)."""

    @classmethod
    def now(cls) -> RoomMoved:
        return cls(MOVED, "send the message again: the next turn uses the room as it is now")


@dataclass(frozen=True)
class Room:
    """One audience's folder. `quota_bytes` bounds what it may hold (allocated blocks, every entry counted
    as at least ENTRY_BYTES: the quota bounds inodes too).

    A turn's room (`for_turn`) is the folder its first use opened: once that folder is moved away (a re-aimed job's
    room retired, scheduler/reaim.py; a Slack migration's rename), every later use refuses (MOVED) rather than open a
    new one made under its name — another audience's, perhaps — so an exec in flight, or a later file tool of that
    turn, never carries what it read there into the next room."""

    base: Path  # <agent dir>/rooms
    audience: str
    quota_bytes: int
    # for_turn: [(st_dev, st_ino)] of the folder this turn's first use opened; None: any folder of the name
    held: list[tuple[int, int]] | None = field(default=None, compare=False, repr=False)

    def for_turn(self) -> Room:
        """This room as one turn uses it: held to the folder it is now (made if missing; see the class), which stays open
        until the hold is dropped, so its (dev, inode) is never another folder's meanwhile. A room that cannot be opened
        now is held at its first use, which says why."""
        room = Room(self.base, self.audience, self.quota_bytes, [])
        with contextlib.suppress(OSError, PathPolicyError):
            # Kept open while the hold lives: a folder deleted after it was moved away (the owner clearing
            # rooms/retired/) would free its inode, and ext4 gives a just-freed number to the next mkdir — the next
            # room of the name, which this turn would then take for its own (t13).
            weakref.finalize(room, os.close, room.open())
        return room

    @contextlib.contextmanager
    def still_held(self) -> Iterator[None]:
        """Under the room's lock, while it is still the folder this turn holds (RoomMoved otherwise): what this turn
        adds to memory goes in only then. The room is moved (retired) under its lock before the notes of its audience
        are made owner-only (scheduler/reaim.py): a note added before the move is retired with the others, one after
        it is refused."""
        with self.locked():
            yield

    @property
    def path(self) -> Path:
        return self.base / room_slug(self.audience)

    def open(self) -> int:
        """An O_PATH descriptor of the room, created (0700) on first use. The caller closes it."""
        ensure_private_dir(self.base)
        if not self.held:  # a turn's room once opened is never made again under its name (for_turn)
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.path, 0o700)
        try:
            fd = os.open(self.path, safe_fs._DIR_FLAGS)  # created by Hermit above: never a symlink
        except FileNotFoundError:
            if not self.held:
                raise
            raise RoomMoved.now() from None
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            raise PathPolicyError(f"the room folder {self.path} is not a folder owned by this user",
                                  "move it away; Hermit creates a new one")
        if self.held is not None:
            if not self.held:
                self.held.append((st.st_dev, st.st_ino))
            elif self.held[0] != (st.st_dev, st.st_ino):
                os.close(fd)
                raise RoomMoved.now()
        return fd

    @contextlib.contextmanager
    def fd(self) -> Iterator[int]:
        """The room's descriptor (closed after the block). A merge a stopped Hermit left part-way is finished first
        (`locked`), so no use of the room sees it half-merged."""
        if self.pending():
            with self.locked():
                pass
        fd = self.open()
        try:
            yield fd
        finally:
            os.close(fd)

    def pending(self) -> bool:
        """A merge into this room was written down and not finished (room_journal.py: its carry folder is there)."""
        return os.path.lexists(self.base / f".{room_slug(self.audience)}.carry" / "journal")

    @contextlib.contextmanager
    def locked(self) -> Iterator[int]:
        """The room's descriptor, held with an exclusive lock: file tools and the merge after an exec take
        turns, so neither loses the other's change. A merge a stopped Hermit left part-way is finished first, and
        what happened kept for the chat (room_journal.recover)."""
        ensure_private_dir(self.base)
        with locked(self.base / f".{room_slug(self.audience)}.lock"):
            fd = self.open()
            try:
                if self.pending():
                    from hermit.tools import room_journal  # noqa: PLC0415 - room_journal builds on this module

                    if note := room_journal.recover(fd, self.base, room_slug(self.audience)):
                        room_journal.tell(self.base, room_slug(self.audience), note)
                yield fd
            finally:
                os.close(fd)

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


MAX_LINK_HOPS = 40  # as the kernel's limit on symlinks followed in one lookup
# The parts of link texts followed to judge one link, over all its hops. A path in a room has at most
# room_unpack.MAX_DEPTH (100) parts, so a link needs no more than about twice that to reach any of it; one that
# takes more is judged as leaving (removed, and the chat told). Without it a room's links were judged at a cost
# of their text's parts squared, times their hops: 200 links of 2,048 parts each took 3.4 s of CPU on every merge,
# even one with nothing to do, past the merge's time (audit 19, t10).
MAX_LINK_STEPS = 256


def _resolve(links: dict[str, str], start: list[str], target: str, hops: list[int]) -> list[str] | None:
    """Where `target` (a link's text) leads from the room folder `start` (its components), following the
    room's own links (`links`: relative path -> text) as the kernel would; a name that is not a link is
    taken as a folder (what it may become later). None when it leaves the room (an absolute target, a
    `..` above the room's top), follows more than MAX_LINK_HOPS links, or more than MAX_LINK_STEPS parts in all
    (`hops`: [links followed, parts followed], shared by the whole lookup)."""
    if target.startswith("/"):
        return None
    out = list(start)
    paths = _prefixes(out)
    for comp in target.split("/"):
        if comp in ("", "."):
            continue
        hops[1] += 1
        if hops[1] > MAX_LINK_STEPS:
            return None
        if comp == "..":
            if not out:
                return None
            out.pop()
            paths.pop()
            continue
        path = f"{paths[-1]}/{comp}" if paths else comp
        if path in links:
            hops[0] += 1
            if hops[0] > MAX_LINK_HOPS:
                return None
            resolved = _resolve(links, out, links[path], hops)
            if resolved is None:
                return None
            out = resolved
            paths = _prefixes(out)
        else:
            out.append(comp)
            paths.append(path)
    return out


def _prefixes(parts: list[str]) -> list[str]:
    """The room paths of `parts`' leading parts: [a, a/b, a/b/c] (built once, so a lookup costs no join per part)."""
    out: list[str] = []
    for part in parts:
        out.append(f"{out[-1]}/{part}" if out else part)
    return out


def links_leaving(links: dict[str, str]) -> list[str]:
    """The links (relative path -> text) that lead out of the room, or loop, when followed together with
    the room's other links (`ln -s . b; ln -s b/.. esc`: each stays inside by its own text, `esc` is the
    room's parent). What stays is checked again without them, until none is left that leaves."""
    links = dict(links)
    leaving: list[str] = []
    while True:
        now = sorted(rel for rel, target in links.items()
                     if _resolve(links, safe_fs.parts_of(rel)[:-1], target, [0, 0]) is None)
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
    """Merge what a sandboxed command left (extracted into `extracted`) into the room: room_merge.apply_incoming."""
    from hermit.tools.room_merge import apply_incoming as merge  # noqa: PLC0415 - room_merge builds on this module

    return merge(room_fd, extracted, seed, quota_bytes)
