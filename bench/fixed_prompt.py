"""Measure the fixed prompt: system prompt + tool schemas for a one-line question, default workspace.

Usage: python bench/fixed_prompt.py [--json]

Builds a throwaway state dir with the default workspace templates, the standard tools (read, write,
edit, exec, memory_search, memory_get, and cron, which the main session gets) and the main session — the largest case, since
MEMORY.md is injected there — and prints the same block-by-block report as `/context` in
`hermit chat`. The target is ≤ 4,000 tokens (CJK-aware estimate, hermit.tokens).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hermit.agent.runtime import AgentRuntime
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.memory.service import MemoryKey, MemoryService
from hermit.scheduler import CronJobs
from hermit.testing import ScriptedModel

QUESTION = "What did we decide about the database migration last week?"
TARGET = 4000


def measure() -> tuple[str, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        loaded = build_config({"agents": {"defaults": {"memory_search": {"provider": "none"}}}},
                              StatePaths(Path(tmp)))
        agent = loaded.agent()
        memory = MemoryService(MemoryKey(agent.id, agent.workspace), agent.index_path,
                               agent.settings.memory_search, None)
        runtime = AgentRuntime(agent, ScriptedModel([]), memory=memory, fsync=False,
                               clock=lambda: datetime(2026, 1, 20, 13, 5, tzinfo=UTC),
                               cron=CronJobs(Path(tmp), loaded))
        try:
            report = runtime.context_report("agent:main:main", QUESTION)
        finally:
            memory.close()
        return report.render(200_000), report.fixed_tokens, report.total_tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rendered, fixed, total = measure()
    if args.json:
        print(json.dumps({"fixed_tokens": fixed, "total_tokens": total, "target": TARGET}))
    else:
        print(f"question: {QUESTION}\n")
        print(rendered)
        print(f"\nfixed prompt: {fixed:,} tokens (target ≤ {TARGET:,}) — {'OK' if fixed <= TARGET else 'OVER'}")
    return 0 if fixed <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
