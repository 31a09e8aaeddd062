"""`hermit memory claim [--agent ID] [--only]`: let this state dir open an agent's PostgreSQL memory that
another state dir claimed (memory.store.postgres.claim)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from hermit.cli.terminal import agent_error
from hermit.errors import HermitError

if TYPE_CHECKING:
    from hermit.cli.context import CliContext
    from hermit.config.load import AgentConfig


def register_claim(ms: Any) -> None:
    p = ms.add_parser("claim", help="let this state dir use an agent's PostgreSQL memory that another state dir "
                                    "claimed (another host of the same notes, or a state dir that lost its id)")
    p.add_argument("--agent", dest="claim_agent", metavar="ID", help="only this agent (default: every agent)")
    p.add_argument("--only", action="store_true", help="make this state dir the only one: the others lose it")
    p.add_argument("--json", action="store_true", help="print one JSON report per agent")
    p.set_defaults(func=cmd_claim)


def _claim(ctx: CliContext, agent: AgentConfig, only: bool) -> dict[str, Any]:
    from hermit.memory.store.postgres.claim import StateId, claim
    from hermit.memory.store.postgres.schema import connect, dsn_from_env, mask_dsn, qi, schema_name

    store = agent.settings.memory_search.store
    if store.backend != "postgres":
        return {"agent": agent.id, "backend": store.backend, "claimed": False,
                "text": f"{agent.id}: its memory is on {store.backend}, nothing to claim"}
    pg = store.postgres
    dsn = dsn_from_env(pg.dsn_env, ctx.environ)
    schema = schema_name(pg.schema_prefix, agent.id)
    state = StateId.of(ctx.home)
    conn = connect(dsn, timeout_s=pg.connect_timeout_s, dsn_env=pg.dsn_env)
    try:
        before = claim(conn, schema, qi(schema), state, only=only)
    finally:
        conn.close()
    where = f"schema {schema} at {mask_dsn(dsn)}"
    if before is None:
        text = f"{agent.id}: {where} holds no index yet; the first `hermit memory index` here claims it"
    else:
        others = [h for h in before if h != state.value]
        if only:
            text = (f"{agent.id}: {where} belongs to this state dir alone now (id {state.short}…)"
                    + (f"; {len(others)} other state dir(s) lost it" if others else ""))
        else:
            text = (f"{agent.id}: {where} belongs to this state dir (id {state.short}…)"
                    + (f" and {len(others)} other(s)" if others else ""))
    return {"agent": agent.id, "backend": "postgres", "schema": schema, "server": mask_dsn(dsn),
            "claimed": before is not None, "state_id": state.value, "before": before, "text": text}


def cmd_claim(ctx: CliContext, args: argparse.Namespace) -> int:
    wanted = args.claim_agent or ctx.agent_id
    agents = [ctx.config().agent(wanted)] if wanted else list(ctx.config().agents)
    failed = 0
    for agent in agents:
        try:
            report = _claim(ctx, agent, args.only)
        except HermitError as e:
            failed += 1
            agent_error(agent.id, e)
            continue
        print(json.dumps({k: v for k, v in report.items() if k != "text"}) if args.json else report["text"])
    return 1 if failed else 0
