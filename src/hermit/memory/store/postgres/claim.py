"""Which Hermit state dirs an agent's PostgreSQL schema belongs to: its claim, kept in the schema and checked
at every open.

Every Hermit that reaches a schema reads and searches its rows as its own memory, and a DSN and a
`schema_prefix` are easy to share by mistake: two people's installs, or two state dirs of one person (a test
install, a second profile), on one database and role would each search the other's notes as their own. So
each state dir has an id of its own (`state-id`, a random 128-bit hex made at first use, kept in the state
dir and so carried by `hermit backup`/`restore` and by a move of the folder), and each schema records the
ids it belongs to (`meta.claimed_by`). The first state dir to open a schema that has no claim claims it (a
new schema, or one an older Hermit made); any other is refused before it reads or writes a row, with what
to change. A state dir is added on purpose with `hermit memory claim` (several hosts serving one memory;
a state dir that lost its id), and `--only` makes it the only one. A rebuild's staging schema takes the live
schema's claim in the swap's transaction (schema.swap_schema).

The claim is not a secret: any process with the role's password can read every row anyway. It guards
against mistakes, and fails closed: an unreadable or damaged id file is an error, never a new id.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermit.durable import create_new
from hermit.errors import StoreError
from hermit.textfile import read_regular

CLAIM_KEY = "claimed_by"  # meta: the ids of the state dirs the schema belongs to, space-separated
STATE_ID_FILE = "state-id"
_ID = re.compile(r"[0-9a-f]{32}")
PREFIX_SETTING = "agents.defaults.memory_search.store.postgres.schema_prefix"
FOREIGN_HINT = (f"use another {PREFIX_SETTING}, or drop the schema if it is not meant to be there (as its owner); "
                "hosts that share an index connect as the same role")


class ClaimRefused(StoreError):
    """The schema belongs to other Hermit state dirs than this one."""


@dataclass(frozen=True)
class StateId:
    """This state dir's id, and the file it is kept in."""

    value: str
    path: Path

    @classmethod
    def of(cls, folder: Path) -> StateId:
        """The id kept in `folder` (the state dir), made at first use."""
        path = folder / STATE_ID_FILE
        if not os.path.lexists(path):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            create_new(path, secrets.token_hex(16) + "\n")  # False: another process made it first, read that
        try:
            text = read_regular(path, 4096, follow=False).decode("ascii", "replace").strip()
        except OSError as e:
            raise StoreError(f"cannot read this state dir's id {path}: {e.strerror or e}",
                             "it is made at first use and kept with the state dir; if it was removed, run "
                             "`hermit memory claim` to give this state dir the PostgreSQL memory again") from None
        if not _ID.fullmatch(text):
            raise StoreError(f"this state dir's id {path} is damaged (not 32 hex digits)",
                             f"restore it from a backup, or remove it (rm {path}) and run `hermit memory claim`")
        return cls(text, path)

    @classmethod
    def existing(cls, folder: Path) -> StateId | None:
        """The id kept in `folder`, None when it has none yet or it cannot be read (`hermit doctor`: no writes)."""
        try:
            return cls.of(folder) if os.path.lexists(folder / STATE_ID_FILE) else None
        except StoreError:
            return None

    @property
    def short(self) -> str:
        return self.value[:8]


def _holders(conn: Any, s: str) -> list[str] | None:
    """The ids the schema (quoted `s`) belongs to; None when it has no meta table yet. Its meta is read only when
    it is a plain table of the connecting role in a schema of that role: another role's `meta` may be a view
    calling a function of its, which a read would run with Hermit's privileges (every note copied out)."""
    found = conn.execute(
        "select c.relkind = 'r' and pg_catalog.pg_get_userbyid(c.relowner) = current_user"
        " and pg_catalog.pg_get_userbyid(n.nspowner) = current_user, pg_catalog.pg_get_userbyid(c.relowner)"
        " from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace"
        " where c.oid = pg_catalog.to_regclass(%s)", (f"{s}.meta",)).fetchone()
    if found is None:
        return None
    if not found[0]:
        raise StoreError(f"the memory schema {s} (or its meta table) belongs to another role than the one Hermit "
                         f"connects as (meta: role {found[1]}): it is not read", FOREIGN_HINT)
    row = conn.execute(f"select value from {s}.meta where key = %s", (CLAIM_KEY,)).fetchone()
    return str(row[0]).split() if row else []


def _put(conn: Any, s: str, ids: list[str]) -> None:
    conn.execute(f"insert into {s}.meta(key, value) values (%s, %s) on conflict(key) do update set value=excluded.value",
                 (CLAIM_KEY, " ".join(ids)))


def refusal(schema: str, where: str, state: StateId, holders: list[str]) -> ClaimRefused:
    whose = (f"other Hermit state dirs (ids {', '.join(h[:8] + '…' for h in holders)})" if len(holders) > 1 else
             f"another Hermit state dir (id {holders[0][:8]}…)") if holders else "no Hermit state dir yet"
    return ClaimRefused(
        f"the memory schema {schema} at {where} belongs to {whose}, not to this one (id {state.short}…, kept in "
        f"{state.path}): its notes would show in this state dir's searches as its own",
        f"give this state dir a schema of its own: another {PREFIX_SETTING} (e.g. hermit_{state.short}_) or "
        "another database in the DSN; if it is meant to share that memory (another host of the same notes, or "
        "this state dir restored or moved without its state-id file), run `hermit memory claim` here "
        "(`--only`: the other state dirs lose it)")


def doctor_problem(conn: Any, schema: str, state: StateId | None) -> str | None:
    """Why this state dir would be refused `schema` (`hermit doctor`), None when it would not."""
    try:
        holders = _holders(conn, f'"{schema}"')
    except StoreError as e:
        return e.message
    if not holders or (state is not None and state.value in holders):
        return None
    whose = f"{len(holders)} other state dirs" if len(holders) > 1 else f"another state dir (id {holders[0][:8]}…)"
    mine = f"id {state.short}…" if state is not None else "no id yet"
    return f"the schema belongs to {whose}, not to this one ({mine}): this state dir's searches are refused"


def enforce(conn: Any, schema: str, s: str, where: str, state: StateId, *, create: bool) -> None:
    """Refuse `state` unless `schema` (quoted `s`) belongs to it; a schema without a claim is claimed for it when
    `create` (the caller's transaction, under the schema's migration lock), else refused too."""
    holders = _holders(conn, s)
    if holders is None and not create:
        return  # no index there: nothing to read (the caller says so)
    if holders and state.value in holders:
        return
    if not holders and create:
        _put(conn, s, [state.value])
        return
    raise refusal(schema, where, state, holders or [])


def claim(conn: Any, schema: str, s: str, state: StateId, *, only: bool) -> list[str] | None:
    """`hermit memory claim`: add `state` to the schema's holders (`only`: make it the only one); the holders
    before, or None when the schema has no index yet (the first index claims it)."""
    with conn.transaction():
        from hermit.memory.store.postgres.schema import lock_key

        conn.execute("select pg_advisory_xact_lock(%s)", (lock_key("migrate:" + schema),))
        before = _holders(conn, s)
        if before is None:
            return None
        _put(conn, s, [state.value] if only else [*before, *([] if state.value in before else [state.value])])
        return before


def copy_claim(conn: Any, live: str, staging: str) -> None:
    """Give a rebuild's staging schema (quoted) the live one's claim, in the swap's transaction."""
    conn.execute(f"delete from {staging}.meta where key = %s", (CLAIM_KEY,))
    conn.execute(f"insert into {staging}.meta(key, value) select key, value from {live}.meta where key = %s",
                 (CLAIM_KEY,))
