"""`hermit doctor` checks of the PostgreSQL server behind the memory index (when the postgres backend is configured).

The DSN comes from the environment variable the config names (`store.postgres.dsn_env`) and is never printed:
reports name the variable and, at most, host, port and database. Each step needs the one before it, so an
unset variable or an unreachable server is reported once instead of as five failures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermit.cli.checks import Check, CheckFn, check
from hermit.errors import HermitError
from hermit.memory.store.postgres.claim import StateId
from hermit.memory.store.postgres.schema import mask_dsn, scrub

if TYPE_CHECKING:
    from hermit.cli.context import CliContext

MIN_SERVER = 150000  # PostgreSQL 15: the oldest a distribution's server may be (the SQL stays within it)
MIN_PGVECTOR = (0, 8, 0)
CONNECT_TIMEOUT_S = 5


@dataclass(frozen=True)
class ServerFacts:
    version: str  # "18.6"
    version_num: int
    extensions: dict[str, str]  # installed in the database: name -> version
    available: dict[str, str]  # installable on the server: name -> default version


def connect(dsn: str, timeout: float = CONNECT_TIMEOUT_S) -> Any:
    """A psycopg connection (the store's guarded connect: never to another user's server, never a cleartext
    password unless the DSN says so), or a HermitError naming where it failed (never the DSN itself)."""
    import psycopg

    from hermit.memory.store.postgres.guard import (
        CLEARTEXT_HINT,
        HolderRefused,
        cleartext_refused,
        open_connection,
    )

    try:
        return open_connection(dsn, timeout_s=timeout, autocommit=True)
    except HolderRefused as e:
        raise HermitError(f"cannot reach PostgreSQL at {mask_dsn(dsn)}: {e.message}", e.hint) from None
    except psycopg.Error as e:
        raise HermitError(f"cannot reach PostgreSQL at {mask_dsn(dsn)}: {scrub(str(e), dsn)}",
                          CLEARTEXT_HINT if cleartext_refused(e) else
                          "start the server or fix host/port/credentials in the DSN; check that it accepts "
                          "TCP connections from this host (listen_addresses, pg_hba.conf)") from None


def server_facts(conn: Any) -> ServerFacts:
    version = str(conn.execute("show server_version").fetchone()[0]).split()[0]
    num = int(conn.execute("show server_version_num").fetchone()[0])
    installed = {str(n): str(v) for n, v in conn.execute("select extname, extversion from pg_extension")}
    available = {str(n): str(v or "") for n, v in conn.execute(
        "select name, default_version from pg_available_extensions where name in ('vector', 'pg_trgm')")}
    return ServerFacts(version, num, installed, available)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def extension_check(facts: ServerFacts, name: str, minimum: tuple[int, ...] = ()) -> Check:
    label = {"vector": "pgvector", "pg_trgm": "pg_trgm"}[name]
    need = f" ≥ {'.'.join(map(str, minimum))}" if minimum else ""
    have = facts.extensions.get(name)
    if have is None:
        if name in facts.available:
            return Check(label, "fail", f"{label} is available on the server (version {facts.available[name]}) but "
                         "not created in this database",
                         f"run `create extension {name};` in the database as its owner or a superuser")
        return Check(label, "fail", f"{label} is not installed on the server",
                     f"install {label}{need} on the PostgreSQL server (e.g. the postgresql-NN-pgvector package), "
                     f"then `create extension {name};`")
    if minimum and version_tuple(have) < minimum:
        return Check(label, "fail", f"{label} {have} is too old (Hermit needs{need})",
                     f"upgrade {label} on the server, then `alter extension {name} update;`")
    return Check(label, "ok", f"{label} {have}")


def version_check(facts: ServerFacts) -> Check:
    if facts.version_num < MIN_SERVER:
        return Check("postgres", "fail", f"PostgreSQL {facts.version} is too old (Hermit needs 15 or newer)",
                     "upgrade the server to PostgreSQL 15+")
    return Check("postgres", "ok", f"PostgreSQL {facts.version}")


def probe(dsn_env: str, environ: Mapping[str, str],
          schema_checks: Callable[[Any], Iterable[Check]] | None = None) -> list[Check]:
    """Every server check for the DSN in `environ[dsn_env]`, in order; later ones skipped when an earlier fails."""
    dsn = environ.get(dsn_env, "")
    if not dsn.strip():
        return [Check("postgres dsn", "fail", f"the environment variable {dsn_env} is not set",
                      f"export {dsn_env}='postgresql://USER:PASSWORD@HOST:5432/DBNAME' in the environment that "
                      "runs hermit (the config names the variable, never the DSN)")]
    out = [Check("postgres dsn", "ok", f"{dsn_env} is set ({mask_dsn(dsn)})")]
    try:
        conn = connect(dsn)
    except HermitError as e:
        return [*out, Check("postgres", "fail", e.message, e.hint)]
    with conn:
        facts = server_facts(conn)
        out += [version_check(facts), extension_check(facts, "vector", MIN_PGVECTOR),
                extension_check(facts, "pg_trgm")]
        if schema_checks is not None and all(c.ok for c in out):
            out += list(schema_checks(conn))
    return out


def schema_checks(agents: list[tuple[str, str, int]], state: StateId | None = None) -> Callable[[Any], list[Check]]:
    """Checks of each agent's schema — (agent id, schema, HNSW threshold) — on an open connection; `state`: this
    state dir's id, which the schema must belong to (memory.store.postgres.claim)."""
    from hermit.errors import StoreError
    from hermit.memory.store.postgres.claim import PREFIX_SETTING, doctor_problem
    from hermit.memory.store.postgres.hnsw import HNSW_INDEX
    from hermit.memory.store.postgres.schema import MIGRATIONS, refuse_foreign

    def run(conn: Any) -> list[Check]:
        out = []
        for agent_id, schema, threshold in agents:
            name = f"schema {schema}"
            try:  # nothing in a schema of another role is read: a view there runs its owner's functions as us
                refuse_foreign(conn, schema)
            except StoreError as e:
                out.append(Check(name, "fail", e.message, e.hint or ""))
                continue
            if conn.execute("select to_regclass(%s) is null", (f'"{schema}".migrations',)).fetchone()[0]:
                out.append(Check(name, "warn", f"agent {agent_id} has no index on this server yet",
                                 f"run `hermit --agent {agent_id} memory index` (or `hermit memory migrate --to "
                                 "postgres` to copy the SQLite index)"))
                continue
            have = int(conn.execute(f'select coalesce(max(version), 0) from "{schema}".migrations').fetchone()[0])
            if have != len(MIGRATIONS):
                newer = have > len(MIGRATIONS)
                out.append(Check(name, "fail", f"schema version {have}, this Hermit expects {len(MIGRATIONS)}",
                                 "upgrade Hermit on this host" if newer else
                                 f"run `hermit --agent {agent_id} memory index` (it migrates the schema)"))
                continue
            problem = doctor_problem(conn, schema, state)
            if problem is not None:
                out.append(Check(name, "fail", problem, f"give this state dir its own schema (another {PREFIX_SETTING} "
                                 "or database), or, to share that memory on purpose, run "
                                 f"`hermit memory claim --agent {agent_id}`"))
                continue
            indexes = {str(r[0]) for r in conn.execute("select indexname from pg_indexes where schemaname=%s",
                                                       (schema,))}
            if "chunks_tsv" not in indexes:
                out.append(Check(name, "fail", "the keyword index (GIN on chunks.tsv) is missing",
                                 f"run `hermit --agent {agent_id} memory index --force` to rebuild the schema"))
                continue
            has_vec = conn.execute("select to_regclass(%s) is not null", (f'"{schema}".chunks_vec',)).fetchone()[0]
            vectors = int(conn.execute(f'select count(*) from "{schema}".chunks_vec').fetchone()[0]) if has_vec else 0
            if vectors >= threshold and HNSW_INDEX not in indexes:
                out.append(Check(name, "warn", f"{vectors} vectors but no HNSW index (threshold {threshold}): "
                                 "searches scan every vector", f"run `hermit --agent {agent_id} memory index`"))
                continue
            hnsw = "HNSW index" if HNSW_INDEX in indexes else f"exact scan below {threshold} vectors"
            out.append(Check(name, "ok", f"agent {agent_id}: schema v{have}, GIN keyword index, {vectors} "
                                         f"vectors ({hnsw})"))
        return out

    return run


def _postgres_agents(ctx: CliContext) -> list[Any]:
    """Agents whose memory is configured on PostgreSQL."""
    return [a for a in ctx.config().agents if a.settings.memory_search.store.backend == "postgres"]


def _summary(checks: list[Check]) -> Check:
    worst = next((c for c in checks if c.status == "fail"), None) or next(
        (c for c in checks if c.status == "warn"), None)
    detail = "; ".join(f"{c.name}: {c.detail}" for c in checks)
    if worst is None:
        return Check("postgres", "ok", detail)
    return Check("postgres", worst.status, detail, worst.fix)


@check("postgres", fix="see `hermit doctor --json` for each server check", needs=("config",))
def postgres_check(ctx: CliContext) -> str | Check:
    from hermit.memory.store.postgres.schema import schema_name

    agents = _postgres_agents(ctx)
    if not agents:
        return Check("postgres", "skip", "not used (memory_search.store.backend: sqlite)")
    pg = agents[0].settings.memory_search.store.postgres
    per_agent = [(a.id, schema_name(a.settings.memory_search.store.postgres.schema_prefix, a.id),
                  a.settings.memory_search.store.postgres.hnsw_threshold) for a in agents]
    state = StateId.existing(ctx.home)
    return _summary(probe(pg.dsn_env, ctx.environ, schema_checks=schema_checks(per_agent, state)))


DOCTOR_CHECKS: tuple[CheckFn, ...] = (postgres_check,)
