"""`hermit memory migrate --to postgres|sqlite`: copy every agent's index to the other backend, no re-embedding."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from hermit.cli.terminal import agent_error
from hermit.errors import HermitError, StoreError

if TYPE_CHECKING:
    from hermit.cli.context import CliContext
    from hermit.config.load import AgentConfig
    from hermit.memory.store.api import MemoryStore


def register_migrate(ms: Any) -> None:
    p = ms.add_parser("migrate", help="copy the memory index to the other backend (sqlite <-> postgres) "
                                      "without re-embedding; the source is not changed")
    p.add_argument("--to", required=True, choices=("postgres", "sqlite"), help="the backend to copy into")
    p.add_argument("--agent", dest="migrate_agent", metavar="ID", help="only this agent (default: every agent)")
    p.add_argument("--replace", action="store_true", help="overwrite a target index that already holds data")
    p.add_argument("--json", action="store_true", help="print one JSON report per agent")
    p.set_defaults(func=cmd_migrate)


def _sqlite(agent: AgentConfig, *, source: bool) -> MemoryStore:
    from hermit.memory.store.sqlite import IndexStore

    if source and not agent.index_path.exists():
        raise StoreError(f"agent {agent.id} has no SQLite index at {agent.index_path}",
                         "run `hermit memory index` with store.backend: sqlite first, or leave this agent out "
                         "with --agent")
    return IndexStore(agent.index_path, readonly=source, own_dir=agent.settings.memory_search.store.owns_dir)


def _postgres(ctx: CliContext, agent: AgentConfig, *, source: bool) -> MemoryStore:
    from hermit.memory.store.migrate import has_index
    from hermit.memory.store.postgres.claim import StateId
    from hermit.memory.store.postgres.schema import dsn_from_env, schema_name
    from hermit.memory.store.postgres.store import PgStore

    pg = agent.settings.memory_search.store.postgres
    dsn = dsn_from_env(pg.dsn_env, ctx.environ)
    schema = schema_name(pg.schema_prefix, agent.id)
    # Only a schema of this state dir is read or written (memory.store.postgres.claim).
    store = PgStore(dsn, schema, pg, dsn_env=pg.dsn_env, create=not source, state=StateId.of(ctx.home))
    if source and not has_index(store):
        store.close()
        raise StoreError(f"agent {agent.id} has no index in PostgreSQL (schema {schema})",
                         "run `hermit memory index` with store.backend: postgres first, or pick the agent with --agent")
    return store


def _config_hint(to: str, dsn_env: str) -> str:
    extra = f"   # the DSN stays in ${dsn_env}" if to == "postgres" else ""
    return ("Now switch the backend in hermit.yaml (the old index stays where it was until you delete it):\n"
            "agents:\n  defaults:\n    memory_search:\n      store:\n"
            f"        backend: {to}{extra}")


def cmd_migrate(ctx: CliContext, args: argparse.Namespace) -> int:
    from hermit.memory.store.migrate import migrate_index

    wanted = args.migrate_agent or ctx.agent_id
    agents = [ctx.config().agent(wanted)] if wanted else list(ctx.config().agents)
    failed = 0
    dsn_env = agents[0].settings.memory_search.store.postgres.dsn_env
    for agent in agents:
        src: MemoryStore | None = None
        dst: MemoryStore | None = None
        try:
            src = _sqlite(agent, source=True) if args.to == "postgres" else _postgres(ctx, agent, source=True)
            dst = _postgres(ctx, agent, source=False) if args.to == "postgres" else _sqlite(agent, source=False)
            report = migrate_index(src, dst, replace=args.replace)
        except HermitError as e:
            failed += 1
            agent_error(agent.id, e)
            continue
        finally:
            for store in (src, dst):
                if store is not None:
                    store.close()
        c = report.copied
        if args.json:
            print(json.dumps({"agent": agent.id, **report.to_json()}))
        else:
            print(f"{agent.id}: copied {c.files} files, {c.chunks} chunks, {c.vectors} vectors, {c.line_vectors} line "
                  f"vectors and {c.cache_entries} cached embeddings from {report.source} to {report.target} in "
                  f"{report.seconds:.1f} s "
                  "(counts verified; nothing re-embedded)")
    if failed:
        return 1
    if not args.json:
        print(_config_hint(args.to, dsn_env))
    return 0
