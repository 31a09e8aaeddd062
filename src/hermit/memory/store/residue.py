"""Delete means delete on disk: what the SQLite index does so removed text leaves no bytes in its files.

When a note's text is removed (edited out, a deleted chat message scrubbed from a flush note, a file deleted),
the sync that stops search finding it also takes its bytes out of `<agent>.sqlite` and its `-wal`:

- FTS5 `secure-delete` (set on chunks_fts by migration 8, persistent per table): a removed chunk's tokens
  leave the segments at once instead of waiting beside a delete marker for a merge;
- `pragma secure_delete = on` on the writer's connection: a deleted row's cell and every freed page are
  zeroed (FAST zeroes cells but leaves freed pages as they were, and the chunks' text lives in whole pages);
- the embedding cache: a write notes the hashes of the chunks it removed (table cache_unused, in its own
  transaction, so a kill loses none); at the end of the sync (cache_prune) their rows that no chunk uses
  any more are dropped. They hold a vector per chunk, and an embedding can be partly inverted to its text.
  Not at once: a renamed or moved note is deleted before its new path is indexed, and its chunks come from
  the cache. An edit undone in a later sync embeds its chunk again (~tens of ms on the local model);
- the WAL: SQLite keeps old page images in `-wal` until a checkpoint; a sync that removed text ends with
  a TRUNCATE checkpoint, or a PASSIVE one when a reader's snapshot holds the WAL (the next such sync, or
  the last connection to close, finishes it).

An index written by an older Hermit is vacuumed once after migration 8 (old freed pages and in-page leftovers),
its temporary database in memory: SQLite writes it past its page cache to a file of its own in /var/tmp (or
$SQLITE_TMPDIR, $TMPDIR, /tmp) — a whole copy of the index, outside the state dir, perhaps on another (an
unencrypted) file system whose freed blocks keep it after the file is gone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from hermit.db import BUSY_TIMEOUT_MS, Connection, DatabaseError, transaction

VACUUM_KEY = "residue_vacuum"


def secure(conn: Connection) -> None:
    """Zero deleted content on this (writing) connection."""
    conn.execute("pragma secure_delete = on")


def fts_secure_delete(conn: Connection, on: bool) -> None:
    """Inside a write's transaction: FTS5 secure-delete on chunks_fts (a table setting, on since migration 8;
    off only around the deletion of chunks put back unchanged, and the transaction ends with it on)."""
    conn.execute("insert into chunks_fts(chunks_fts, rank) values ('secure-delete', ?)", (int(on),))


def removed(conn: Connection, hashes: Iterable[str]) -> None:
    """Inside a write's transaction: the hashes of the chunks it removed (their text is gone from the index)."""
    conn.executemany("insert or ignore into cache_unused(hash) values (?)", [(h,) for h in hashes])


def settle(conn: Connection) -> int:
    """After a sync: drop the cache rows of the removed chunks' hashes that no chunk uses now, and when any
    text was removed empty the WAL. Both lookups go through an index on the hash (migration 8). Returns how
    many hashes were noted."""
    (n,) = conn.execute("select count(*) from cache_unused").fetchone()
    if not n:
        return 0
    with transaction(conn):
        conn.execute("delete from embedding_cache where hash in (select hash from cache_unused)"
                     " and hash not in (select c.hash from chunks c join cache_unused u on c.hash = u.hash)")
        conn.execute("delete from cache_unused")
    checkpoint(conn)
    return int(n)


def drop_all_unused_cache(conn: Connection) -> None:
    """Every cache row no chunk uses (a rebuild's copy of the old cache, before it replaces the live file)."""
    conn.execute("delete from embedding_cache where hash not in (select hash from chunks)")


def checkpoint(conn: Connection) -> bool:
    """Copy the WAL into the file and empty it, without waiting for readers: TRUNCATE when none holds an old
    snapshot, else PASSIVE (what it can). True when the WAL was emptied."""
    if conn.in_transaction:
        return False
    conn.execute("pragma busy_timeout = 0")
    try:
        busy = conn.execute("pragma wal_checkpoint(truncate)").fetchone()[0]
        if busy:
            conn.execute("pragma wal_checkpoint(passive)")
        return not busy
    except DatabaseError:
        return False  # a lock held elsewhere: the next write that removes text, or the last close, checkpoints
    finally:
        conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")


def _room_to_vacuum(conn: Connection) -> bool:
    """VACUUM builds the new file in memory (vacuum_once) and writes the whole of it through the WAL (~2.6 s,
    220 MB of each at 10k chunks with vectors): without that room on the index's disk and in memory it is left
    for a later open."""
    (size,) = conn.execute("select page_count * page_size from pragma_page_count, pragma_page_size").fetchone()
    (path,) = [r[2] for r in conn.execute("pragma database_list") if r[1] == "main"]
    try:
        here = os.statvfs(os.path.dirname(path) or ".")
    except OSError:
        return False
    margin = 16 * 1024 * 1024
    memory = _memory_available()
    return bool(here.f_bavail * here.f_frsize >= size + margin and (memory is None or memory >= size + 4 * margin))


def _memory_available() -> int | None:
    """Bytes of memory the system can give without swapping (Linux MemAvailable), None when unknown."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def vacuum_once(conn: Connection) -> None:
    """After migration 8, rewrite the file once: pages freed and rows deleted by an older Hermit kept their
    bytes. Its temporary database is in memory (every index connection's temp_store, db.connect): in a file
    it would be a copy of the index outside its folder. Tried again on the next open when a reader kept it
    from finishing, or the disk or memory had no room."""
    row = conn.execute("select value from meta where key = ?", (VACUUM_KEY,)).fetchone()
    if row is None or not _room_to_vacuum(conn):
        return
    try:
        conn.execute("vacuum")
    except DatabaseError:
        return
    conn.execute("delete from meta where key = ?", (VACUUM_KEY,))
    checkpoint(conn)
