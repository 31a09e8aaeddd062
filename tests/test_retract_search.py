"""A retraction reaches memory search at once (audit H8, item 3).

With the `sessions` source on, a changed transcript is indexed again only once it grew by 100 kB or 50 messages
or was quiet for 5 minutes (session_source.QUIET_SECONDS): the text of a message its sender deleted stayed
findable, and quoted in snippets, for those minutes. Real parts: the Bus, an AgentRuntime on a FunctionModel,
real transcripts and a real memory index over them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gatewayhelpers import RecordingChannel, make_bus, runtime
from hermit.config.schema import MemorySearchConfig
from hermit.memory.service import MemoryKey, MemoryService
from memhelpers import HashEmbedder
from test_trust_deleted_messages import msg

SECRET = "my card PIN is 4711"


def test_a_retraction_reaches_memory_search_at_once_not_after_the_quiet_period(tmp_path: Path) -> None:
    """With the `sessions` source on, a transcript that changed is indexed again only once it grew by 100 kB or
    50 messages or was quiet for 5 minutes: the deleted text stayed findable (and quoted in snippets) for those
    minutes after its retraction. A `retracted` entry among what was added now has it indexed at the next check."""
    rt = runtime(tmp_path, lambda _req: "noted")
    bus = make_bus(rt, RecordingChannel())
    cfg = MemorySearchConfig.model_validate({"sources": ["memory", "sessions"], "sync": {"dirty_check_interval_ms": 0}})
    svc = MemoryService(MemoryKey("main", rt.agent.workspace), tmp_path / "idx.sqlite", cfg, HashEmbedder(),
                        sessions_dir=rt.agent.sessions_dir)

    def sessions_hits() -> str:
        return str([r for r in svc.search("card PIN 4711")["results"] if r["source"] == "sessions"])

    async def main() -> None:
        await bus.publish(msg(SECRET, "1"))
        assert await bus.drain(20)
        assert "4711" in sessions_hits()
        await bus.publish(msg("", "1", change="deleted"))
        assert await bus.drain(20)

    try:
        asyncio.run(main())
        hits = sessions_hits()
        assert "4711" not in hits, hits
    finally:
        svc.close()
