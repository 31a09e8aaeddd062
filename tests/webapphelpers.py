"""A demo home for the web app's browser tests and screenshots: the demo memory (English and 中文), a few
sessions of different kinds, a cron job and a pending pairing request, answered by a FakeProvider script.

Everything is written with Hermit's own stores (SessionStore, CronJobs, PairingStore), so the gateway reads
what a real install would hold. Chat turns are matched by unique words, so one gateway can serve the
steps of several tests in any order; a turn containing "please fail" gets a 503 (the provider is down).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hermit.channels.pairing import PairingRequest, PairingStore
from hermit.config.load import load_config
from hermit.config.paths import StatePaths
from hermit.messages import AssistantMessage, TextPart, UserMessage
from hermit.scheduler import CronJobs
from hermit.sessions.store import SessionStore

ROOT = Path(__file__).resolve().parents[1]
DEMO_MEMORY = ROOT / "examples" / "demo-memory"
GROUP_KEY = "agent:main:telegram:group:-100123"
CLI_KEY = "test2"
JOB_ID = "morning-brief"
CJK_LOG = "memory/2026-11-21.md"


def chat_steps(tag: str) -> list[dict[str, Any]]:
    """One streamed turn with a memory_search call (matched by `coffee-<tag>`), one failing turn (`please
    fail <tag>`)."""
    return [
        {"match": {"contains": f"coffee-{tag}"},
         "tool_calls": [{"name": "memory_search", "arguments": {"query": "coffee"}}]},
        {"match": {"contains": f"coffee-{tag}"},
         "text": "You take an **oat-milk flat white**, no sugar — it's in `MEMORY.md`.\n\n"
                 "- tea after 3pm\n- meetings never before 10:00"},
        {"match": {"contains": f"please fail {tag}"}, "error": 503, "message": "upstream overloaded"},
    ]


JOB_STEP = {"match": {"contains": "[Scheduled job"}, "repeat": True,
            "text": "Morning brief: mobile release train on Thursday; renew the passport before Lisbon."}


def write_demo_config(home: Path, base_url: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "hermit.yaml").write_text(
        "agents:\n  defaults:\n    model: fake/test-model\n    timezone: Europe/Paris\n"
        "    memory_search: {provider: none}\n    heartbeat: {every_minutes: 30}\n"
        f"models:\n  providers:\n    fake: {{type: openai-compatible, base_url: \"{base_url}\", max_retries: 0}}\n"
        "gateway:\n  shutdown_grace_seconds: 5\n", encoding="utf-8")


def _session(store: SessionStore, key: str, exchanges: list[tuple[str, str]], origin: str | None = None) -> None:
    opened = store.get_or_create(key, origin_channel=origin)
    transcript = store.open_transcript(opened.record)
    for user, reply in exchanges:
        transcript.append_message(UserMessage(user).to_dict())
        transcript.append_message(AssistantMessage((TextPart(reply),), model="test-model", provider="fake").to_dict())


def build_demo_home(home: Path, base_url: str) -> PairingRequest:
    """The demo state dir; returns the pending pairing request."""
    write_demo_config(home, base_url)
    ws = home / "workspace"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    shutil.copy(DEMO_MEMORY / "MEMORY.md", ws / "MEMORY.md")
    for f in (DEMO_MEMORY / "memory").glob("*.md"):
        shutil.copy(f, ws / "memory" / f.name)
    store = SessionStore(home / "agents" / "main" / "sessions", cwd=ws, fsync=False)
    _session(store, CLI_KEY, [("Draft the release notes outline", "1. Highlights\n2. Fixes\n3. Known issues")])
    _session(store, GROUP_KEY, [("@hermit when is the next release train?",
                                 "Every second Thursday — the first one is on Dec 3.")], origin="telegram")
    loaded = load_config(StatePaths(home))
    CronJobs(home, loaded).add({"id": JOB_ID, "name": "Morning brief", "message": "Summarise today's plan",
                                "schedule": {"kind": "cron", "expr": "0 8 * * 1-5"}})
    req = PairingStore(home).request("telegram", "default", "5550123", "Dana Smith", "dana")
    assert req is not None
    return req
