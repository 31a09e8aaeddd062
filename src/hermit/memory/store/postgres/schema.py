"""PostgreSQL for the memory store: opening a connection from a DSN held in an environment variable,
naming each agent's schema, and the schema's numbered migrations.

The DSN carries a password, so it never reaches a log, an error or a status line: every failure is
reported with the variable's NAME and the server's host/port/database only (`mask_dsn`). psycopg and
pgvector's adapters are imported here lazily: only a postgres store needs them.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from hermit.config.load import pg_schema_name
from hermit.errors import StoreError
from hermit.memory.store.postgres.claim import StateId, copy_claim, enforce

# psycopg's Connection; typed loosely so that nothing imports psycopg before a postgres store opens.
PgConn = Any

# An agent's schema name (`hermit_main`): the rule lives with the config, which refuses two agents whose
# schemas would be one.
schema_name = pg_schema_name


def lock_key(schema: str) -> int:
    """The advisory-lock key (a signed 64-bit int) of one agent's schema: its writer lock."""
    return int.from_bytes(hashlib.blake2b(b"hermit-writer:" + schema.encode(), digest_size=8).digest(), "big",
                          signed=True)


def qi(name: str) -> str:
    """A quoted identifier (schema names are sanitised already; quoting keeps them exact)."""
    return '"' + name.replace('"', '""') + '"'


def mask_dsn(dsn: str) -> str:
    """host:port/dbname of a DSN, nothing else (no user, no password): safe for humans and logs."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        d = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - an unparsable DSN is reported without any of its text
        return "(unparsable DSN)"
    host = str(d.get("host") or d.get("hostaddr") or "localhost")
    return f"{host}:{d.get('port') or 5432}/{d.get('dbname') or '?'}"


def scrub(text: str, dsn: str) -> str:
    """The first line of an error message from libpq with the DSN, its password and any `password=…` removed
    (libpq may echo parts of the connection string)."""
    out = text.replace(dsn, "<dsn>") if dsn else text
    try:
        from psycopg.conninfo import conninfo_to_dict

        pw = conninfo_to_dict(dsn).get("password") if dsn else None
    except Exception:  # noqa: BLE001
        pw = None
        # libpq quotes the piece of a DSN it cannot parse, which may be the password itself (a bare `%` or a
        # space in it: `invalid percent-encoded token: "50%off"`): no quoted piece of such a DSN is shown.
        out = re.sub(r'"([^"]*)"', lambda m: '"***"' if m.group(1) and m.group(1) in dsn else m.group(0), out)
    if pw:
        out = out.replace(str(pw), "***")
    out = re.sub(r"(password\s*=\s*)\S+", r"\1***", out, flags=re.IGNORECASE)
    return out.strip().splitlines()[0] if out.strip() else "unknown error"


def dsn_from_env(dsn_env: str, environ: Mapping[str, str]) -> str:
    dsn = environ.get(dsn_env, "").strip()
    if not dsn:
        raise StoreError(f"the memory store is postgres but ${dsn_env} is not set",
                         f"export {dsn_env}=postgresql://USER:PASSWORD@HOST:5432/DBNAME (the variable's name is "
                         "agents.defaults.memory_search.store.postgres.dsn_env), or set store.backend: sqlite")
    return dsn


def connect(dsn: str, *, timeout_s: int = 10, dsn_env: str = "the DSN") -> PgConn:
    """An autocommit connection with pgvector's numpy adapters; a clear StoreError when it cannot be had."""
    try:
        import psycopg
    except ImportError:
        raise StoreError("the postgres memory store needs psycopg",
                         "pip install 'hermit-assistant[postgres]' (psycopg 3 and pgvector)") from None
    from hermit.memory.store.postgres.guard import (
        CLEARTEXT_HINT,
        HolderRefused,
        cleartext_refused,
        open_connection,
    )

    where = mask_dsn(dsn)
    try:
        # prepare_threshold=None: no server-side prepared statements, so a rebuild that swaps the
        # agent's schema is seen by the next statement of every open connection.
        conn = open_connection(dsn, timeout_s=timeout_s, autocommit=True, prepare_threshold=None,
                               application_name="hermit")
    except HolderRefused as e:
        raise HolderRefused(f"cannot connect to PostgreSQL at {where} (DSN from ${dsn_env}): {e.message}",
                            e.hint) from None
    except psycopg.Error as e:
        raise StoreError(f"cannot connect to PostgreSQL at {where} (DSN from ${dsn_env}): {scrub(str(e), dsn)}",
                         CLEARTEXT_HINT if cleartext_refused(e) else
                         "check that the server runs and accepts this user; the DSN itself is never shown") from None
    try:
        ensure_vector_extension(conn, where)
        pin_search_path(conn)
    except ImportError:
        conn.close()
        raise StoreError("the postgres memory store needs the pgvector package",
                         "pip install 'hermit-assistant[postgres]'") from None
    except BaseException:
        conn.close()
        raise
    return conn


def pin_search_path(conn: PgConn) -> None:
    """Resolve every unqualified name of this connection in pg_catalog only, and pgvector's type, operator and
    operator class through the schema its extension is in (`conn.vector_schema`, quoted: the store writes
    `OPERATOR(<it>.<=>)`, `<it>.vector(n)`, `<it>.vector_cosine_ops`).

    The server's default search_path is `"$user", public`: a schema named like the role Hermit connects as comes
    first. Another role allowed to create schemas in the database (each person sharing one has that right)
    could create that schema, grant its use, and put in it an operator `<=>` for two vectors, a type `vector`
    or a function shadowing one the store calls: every search would run it with Hermit's privileges over the
    agent's tables, and one `insert into <its table> select text from hermit_main.chunks` copies every note,
    owner-only ones too, or its distances reorder what a search returns. pg_temp is named last so that it is
    never searched before pg_catalog; no function or operator is looked up there."""
    from pgvector.psycopg.vector import register_vector_info
    from psycopg.types import TypeInfo

    conn.execute("set search_path = pg_catalog, pg_temp")
    row = conn.execute("select n.nspname from pg_catalog.pg_extension e join pg_catalog.pg_namespace n"
                       " on n.oid = e.extnamespace where e.extname = 'vector'").fetchone()
    ext = qi(str(row[0])) if row else "public"
    conn.vector_schema = ext
    register_vector_info(conn, TypeInfo.fetch(conn, f"{ext}.vector"))  # the one pgvector type the store uses


# A rebuild's staging schema is marked in its meta table when it is created (`staging_of`), and the live
# schema it replaces inside the swap, before its rename (`retired_of`); both name the live schema. Only a
# schema so marked is ever dropped as a leftover: a name like `<schema>_old20240101` may be another agent's
# live index (agent `work_old20240101` next to `work`).
STAGING_OF, RETIRED_OF = "staging_of", "retired_of"


def staging_names(schema: str) -> tuple[str, str]:
    """Fresh names for a rebuild of `schema`: its staging schema and the old live one's name at the swap."""
    tag = uuid.uuid4().hex
    return f"{schema}_rb{tag[:8]}", f"{schema}_old{tag[8:16]}"


def drop_stale_rebuilds(conn: PgConn, schema: str) -> int:
    """Drop what killed rebuilds of `schema` left (`<schema>_rb…` staging, `<schema>_old…`), only schemas
    Hermit marked as such (module note above); how many. The caller holds `schema`'s writer lock, which a
    rebuild holds from its start to its swap, so none of them is in use."""
    pat = re.compile(re.escape(schema) + r"_(rb|old)[0-9a-f]{8}")
    # Only schemas of the role Hermit connects as, with a `meta` that is its own plain table: another role may name
    # a schema of its like a leftover, and its `meta` may be a view calling a function of its, which the read of the
    # mark below would run with Hermit's privileges (a copy of every note into a table of its), at every start.
    names = [str(r[0]) for r in conn.execute(
        "select n.nspname from pg_catalog.pg_namespace n join pg_catalog.pg_class c on c.relnamespace = n.oid"
        " where n.nspname like %s and pg_catalog.pg_get_userbyid(n.nspowner) = current_user and c.relname = 'meta'"
        " and c.relkind = 'r' and pg_catalog.pg_get_userbyid(c.relowner) = current_user",
        (schema.replace("_", r"\_") + r"\_%",))]
    stale = [n for n in names if pat.fullmatch(n) and _marked_copy_of(conn, n, schema)]
    for n in stale:
        conn.execute(f"drop schema if exists {qi(n)} cascade")
    return len(stale)


def _marked_copy_of(conn: PgConn, name: str, schema: str) -> bool:
    """Whether schema `name` says it is a staging or retired copy of `schema` (no meta table, a meta table
    without the mark, or one this user may not read: it is not)."""
    import psycopg

    try:
        with conn.transaction():  # a savepoint when the caller's transaction is open: a refusal stays here
            row = conn.execute(f"select 1 from {qi(name)}.meta where key in (%s, %s) and value = %s limit 1",
                               (STAGING_OF, RETIRED_OF, schema)).fetchone()
    except psycopg.Error:
        return False
    return row is not None


def swap_schema(conn: PgConn, live: str, staging: str, old: str) -> None:
    """A rebuild's staging schema takes the live one's name in one transaction (names unquoted)."""
    lq, sq, oq = qi(live), qi(staging), qi(old)
    with conn.transaction():
        # Searches in flight finish first (each holds meta from its start, see PgStore.reading()); the
        # ones that start meanwhile wait here and then resolve the names to the new schema.
        conn.execute(f"lock table {lq}.meta in access exclusive mode")
        # The old index is marked before it takes its `_old…` name, so that it is only ever taken for a
        # leftover of this schema; the staging schema becomes the live index, nobody's staging copy.
        _put_mark(conn, lq, RETIRED_OF, live)
        conn.execute(f"delete from {sq}.meta where key = %s", (STAGING_OF,))
        copy_claim(conn, lq, sq)  # the state dirs it belongs to, as they are now
        conn.execute(f"alter schema {lq} rename to {oq}")
        conn.execute(f"alter schema {sq} rename to {lq}")
        # Waits for readers of the old tables to finish; later statements see the new schema.
        conn.execute(f"drop schema {oq} cascade")


def _put_mark(conn: PgConn, s: str, key: str, value: str) -> None:
    conn.execute(f"insert into {s}.meta(key, value) values (%s, %s) on conflict(key) do update set value=excluded.value",
                 (key, value))


def ensure_vector_extension(conn: PgConn, where: str) -> None:
    import psycopg

    if conn.execute("select 1 from pg_extension where extname='vector'").fetchone():
        return
    try:
        conn.execute("create extension if not exists vector")
    except psycopg.Error as e:
        raise StoreError(f"the pgvector extension is not installed in the database at {where}: "
                         f"{str(e).strip().splitlines()[0]}",
                         "as a superuser run `CREATE EXTENSION vector;` in that database "
                         "(PostgreSQL ≥ 15 with pgvector ≥ 0.8)") from None


def server_facts(conn: PgConn) -> dict[str, str]:
    version = conn.execute("show server_version").fetchone()
    vec = conn.execute("select extversion from pg_extension where extname='vector'").fetchone()
    return {"server_version": str(version[0]) if version else "?", "pgvector": str(vec[0]) if vec else "missing"}


# -- migrations (numbered like SQLite's; each runs in one transaction under an advisory lock) ------
def _m1(conn: PgConn, s: str) -> None:
    for stmt in (
        f"create table {s}.meta(key text primary key, value text not null)",
        f"""create table {s}.files(
            path text primary key, source text not null, hash text not null, mtime bigint not null,
            size bigint not null, embedded boolean not null default true, indexed_at bigint not null,
            messages integer not null default 0)""",
        # tsv: the exact FTS5 tokens of the chunk (porter unicode61 over fts.index_text) with their
        # positions; ntok: how many tokens FTS5 would count (BM25's document length).
        f"""create table {s}.chunks(
            id bigserial primary key, path text not null, source text not null, start_line integer not null,
            end_line integer not null, hash text not null, model text, text text not null,
            updated_at bigint not null, gen bigint not null default 0, cjk smallint not null default 0,
            tsv tsvector not null, ntok integer not null)""",
        f"create index chunks_path on {s}.chunks(path)",
        f"create index chunks_gen on {s}.chunks(gen)",
        f"create index chunks_tsv on {s}.chunks using gin(tsv)",
        f"""create table {s}.embedding_cache(
            provider text not null, model text not null, provider_key text not null, hash text not null,
            embedding bytea not null, dims integer not null, updated_at bigint not null,
            primary key(provider, model, provider_key, hash))""",
        f"create index embedding_cache_age on {s}.embedding_cache(updated_at)",
    ):
        conn.execute(stmt)


def _m2(conn: PgConn, s: str) -> None:
    """token_df: how many chunks hold each token (FTS5's nHit of a one-token phrase), kept by every write.

    The keyword planner asks it for each query word; a count(*) through the GIN index cost 100-500 ms
    per common word at 1M chunks, this is one primary-key lookup."""
    conn.execute(f"create table {s}.token_df(lexeme text primary key, df integer not null)")
    conn.execute(f"insert into {s}.token_df select u.lexeme, count(*) from {s}.chunks c"
                 " cross join lateral unnest(c.tsv) u group by u.lexeme")


def _m3(conn: PgConn, s: str) -> None:
    """line_vectors: a float16 vector per non-blank line (memory.index.line_vectors), kept with the chunks."""
    conn.execute(f"create table {s}.line_vectors(path text not null, line integer not null,"
                 " embedding bytea not null, primary key(path, line))")


def _m4(conn: PgConn, s: str) -> None:
    """files.ident: each file's identity beside its mtime and size (memory.store.api.file_ident), so a file replaced
    by one of the same size and mtime is read again; "" for files indexed before, which the next sync checks once
    by their hash (no embedding when unchanged) and then records."""
    conn.execute(f"alter table {s}.files add column if not exists ident text not null default ''")


def _m5(conn: PgConn, s: str) -> None:
    """cache_unused: the hashes of the chunks a write removed (in its transaction), whose embedding-cache rows the
    end of the sync drops when no chunk uses them any more (memory.store.postgres.cache.settle), as SQLite's
    index does (memory.store.residue): an embedding can be partly inverted to its text. A schema written before
    keeps the rows of chunks removed earlier: they go with the next rebuild."""
    conn.execute(f"create table if not exists {s}.cache_unused(hash text primary key)")
    conn.execute(f"create index if not exists embedding_cache_hash on {s}.embedding_cache(hash)")


MIGRATIONS: list[Callable[[PgConn, str], None]] = [_m1, _m2, _m3, _m4, _m5]


def migrate(conn: PgConn, schema: str, *, staging_of: str | None = None, state: StateId | None = None,
            where: str = "") -> None:
    """Create the schema and apply pending migrations; concurrent openers wait for each other. A rebuild's
    staging schema is created with its mark (`staging_of` = the live schema) in the same transaction, so a
    rebuild killed at any point leaves nothing unmarked. `state`: the state dir opening it, refused unless the
    schema belongs to it (claim.py; a schema nobody claimed yet is claimed for it here). A staging schema takes
    the live one's claim at the swap."""
    s = qi(schema)
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (lock_key("migrate:" + schema),))
        conn.execute(f"create schema if not exists {s}")
        refuse_foreign(conn, schema)
        conn.execute(f"create table if not exists {s}.migrations(version integer primary key, applied_at "
                     "timestamptz not null default now())")
        row = conn.execute(f"select coalesce(max(version), 0) from {s}.migrations").fetchone()
        have = int(row[0]) if row else 0
        if have > len(MIGRATIONS):
            raise StoreError(f"the memory schema {schema} was written by a newer Hermit "
                             f"(schema {have} > {len(MIGRATIONS)})", "upgrade Hermit on this host")
        for n, step in enumerate(MIGRATIONS, start=1):
            if n > have:
                step(conn, s)
                conn.execute(f"insert into {s}.migrations(version) values (%s)", (n,))
        if staging_of is not None:
            _put_mark(conn, s, STAGING_OF, staging_of)
        refuse_foreign(conn, schema)
        if state is not None and staging_of is None:
            enforce(conn, schema, s, where, state, create=True)


def refuse_foreign(conn: PgConn, schema: str) -> None:
    """The schema, and every table, index, sequence or view in it, must be the connecting role's. Another
    login role that made `hermit_<agent>` first (or put a table of its own into it) and granted us its use
    would get every note this agent indexes, owner-only ones too, and could hand our searches its own text.
    Hosts that share an agent's index connect as one role."""
    row = conn.execute("select pg_get_userbyid(nspowner), current_user from pg_namespace where nspname = %s",
                       (schema,)).fetchone()
    if row is not None and row[0] != row[1]:
        raise StoreError(f"the memory schema {schema} belongs to the role {row[0]}, not to {row[1]} that Hermit "
                         "connects as: that role would read every note indexed there",
                         f"use another schema_prefix (agents.defaults.memory_search.store.postgres), or drop "
                         f"the schema if it is not meant to be there (DROP SCHEMA {schema} CASCADE as {row[0]}); "
                         "hosts that share an index connect as the same role")
    foreign = conn.execute("select c.relname, pg_get_userbyid(c.relowner) from pg_class c join pg_namespace n on "
                           "n.oid = c.relnamespace where n.nspname = %s and pg_get_userbyid(c.relowner) <> "
                           "current_user order by c.relname", (schema,)).fetchall()
    if foreign:
        names = ", ".join(f"{name} (role {owner})" for name, owner in foreign[:5])
        raise StoreError(f"the memory schema {schema} holds tables of another role: {names}; that role would read "
                         "or write what Hermit indexes there",
                         f"drop them (as their owner), revoke CREATE on {schema} from other roles, and run "
                         "`hermit memory index --force`")
