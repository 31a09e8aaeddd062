"""Tokens sent per request over a scripted 500-turn conversation: no compaction, compaction, compaction + pruning.

Usage: OMP_WAIT_POLICY=PASSIVE python bench/conversation_bench.py [--turns 500] [--results-dir bench/results]

The same deterministic conversation (seeded generator) is run three times through the real
AgentRuntime — context assembly, transcripts, sessions.json, tools, memory flush, compaction and
pruning exactly as in a chat — against a FunctionModel with a 64k-token window and a 5-minute prompt
cache TTL (an Anthropic-like profile, so pruning mode `auto` is cache-ttl):

1. `none`: compaction and pruning off (the request grows without bound; a real 64k model would have
   refused it long before the end — the first request over the window is reported).
2. `compaction`: the defaults of agents.defaults.compaction (reserve floor 20k, keep 20k, flush at
   window − 20k − 4k), pruning off.
3. `compaction+pruning`: the same plus context_pruning with its defaults (cache-ttl, 5 min).

The conversation: user messages of 40–220 words, replies of 60–260 words; every 6th turn the assistant
reads a 6–16k-char build log first (a real `read` tool call on a generated file); the simulated clock
moves 1 minute per turn with a 20-minute break every 12 turns (the prompt cache goes cold, so pruning
can act). The model summarises when asked (a deterministic summary of ~1k tokens) and, in the memory
flush turn, appends one line to today's daily log with the real write tool and answers NO_REPLY. In
runs 2 and 3 a request larger than the window raises ContextOverflowError, like a provider would.

Token counts are Hermit's own CJK-aware estimates of each request as sent (system prompt, tool
schemas, messages after pruning). Writes `conversation.json`, `conversation.md` and
`conversation-tokens.png` (matplotlib, Agg backend) to the results directory.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hermit.agent.compaction import SUMMARY_MARKER, compaction_budget
from hermit.agent.context import request_tokens
from hermit.agent.runtime import AgentRuntime
from hermit.config.load import build_config
from hermit.config.paths import StatePaths
from hermit.config.schema import CompactionConfig
from hermit.errors import ContextOverflowError
from hermit.messages import ToolResultMessage, UserMessage
from hermit.models.base import ModelProfile, ModelRequest
from hermit.testing import FunctionModel

WINDOW = 64_000
SEED = 20260120
KEY = "agent:main:main"
START = datetime(2026, 1, 20, 7, 0, tzinfo=UTC)
_VOCABULARY = ("deploy migration postgres replica latency budget invoice vendor contract sprint backlog review "
         "incident postmortem rollout canary feature flag cache eviction index query planner vacuum "
         "kubernetes ingress certificate renewal staging production pipeline artifact release notes "
         "customer onboarding dashboard metric alert threshold retention archive backup restore drill "
         "meeting agenda decision owner deadline estimate risk dependency blocker follow-up summary")
WORDS = _VOCABULARY.split()
RUNS: dict[str, dict[str, Any]] = {
    "none": {"compaction": {"enabled": False}, "context_pruning": {"mode": "off"}},
    "compaction": {"context_pruning": {"mode": "off"}},
    "compaction+pruning": {"context_pruning": {"mode": "auto"}},
}


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def paragraph(rng: random.Random, words: int) -> str:
    out: list[str] = []
    while sum(len(s.split()) for s in out) < words:
        out.append(sentence(rng, rng.randint(6, 18)))
    return " ".join(out)


@dataclass(frozen=True)
class Turn:
    index: int
    user: str
    reply: str
    log: str | None  # workspace-relative log file the assistant reads first


def script(turns: int, workspace: Path) -> list[Turn]:
    """The conversation; identical for every run (the log files are written into each workspace)."""
    rng = random.Random(SEED)
    out: list[Turn] = []
    for i in range(1, turns + 1):
        user = f"(turn {i}) " + paragraph(rng, rng.randint(40, 220))
        reply = paragraph(rng, rng.randint(60, 260))
        log = None
        if i % 6 == 0:
            log = f"logs/build-{i:03d}.log"
            size = rng.randint(6000, 16000)
            lines = []
            while sum(len(x) + 1 for x in lines) < size:
                lines.append(f"{len(lines):05d} [{rng.choice(['INFO', 'WARN', 'DEBUG'])}] {sentence(rng, 8)}")
            path = workspace / log
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append(Turn(i, user, reply, log))
    return out


@dataclass
class Recorder:
    """What the model saw: every request's estimated tokens, by kind."""

    window: int
    enforce_window: bool
    workspace: Path
    turns: dict[int, Turn]
    requests: list[dict[str, Any]] = field(default_factory=list)
    current_turn: int = 0
    summaries: int = 0
    overflows: int = 0

    def reply(self, request: ModelRequest) -> Any:
        tokens = request_tokens(request.system, request.tools, request.messages)
        last = request.messages[-1]
        if SUMMARY_MARKER in request.system:
            kind = "summary"
        elif "Pre-compaction memory flush" in request.system:
            kind = "flush"
        else:
            kind = "turn"
        self.requests.append({"turn": self.current_turn, "kind": kind, "tokens": tokens})
        if self.enforce_window and tokens > self.window:
            self.overflows += 1
            raise ContextOverflowError(f"bench: prompt is too long: {tokens} tokens > {self.window} maximum")
        if kind == "summary":
            self.summaries += 1
            return self.summary()
        if kind == "flush":
            return self.flush(last)
        turn = self.turns[self.current_turn]
        if turn.log and not isinstance(last, ToolResultMessage):
            return {"tool_calls": [{"name": "read", "arguments": {"path": turn.log}}]}
        return turn.reply

    def summary(self) -> str:
        rng = random.Random(self.summaries)
        body = "\n".join(f"- {sentence(rng, 14)}" for _ in range(45))
        return f"## Goals\n{body}\n## Identifiers\n- logs/build-{self.current_turn:03d}.log"

    def flush(self, last: Any) -> Any:
        if isinstance(last, ToolResultMessage):
            return "NO_REPLY"
        assert isinstance(last, UserMessage)
        found = re.search(r"memory/\d{4}-\d{2}-\d{2}\.md", last.text)  # the prompt names today's log
        assert found, last.text
        today = found.group(0)
        path = self.workspace / today
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        note = f"- (turn {self.current_turn}) decisions and follow-ups captured before compaction.\n"
        return {"tool_calls": [{"name": "write", "arguments": {"path": today, "content": old + note}}]}


class SimClock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def run(name: str, overrides: dict[str, Any], turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        defaults = {"timezone": "UTC", "memory_search": {"enabled": False}, "session": {"reset": {"mode": "off"}},
                    **overrides}
        loaded = build_config({"agents": {"defaults": defaults}}, StatePaths(home))
        agent = loaded.agent()
        convo = script(turns, agent.workspace)
        recorder = Recorder(WINDOW, name != "none", agent.workspace, {t.index: t for t in convo})
        profile = ModelProfile("bench", "sim-64k", context_window=WINDOW, max_output_tokens=4096,
                               supports_prompt_caching=True, cache_ttl_seconds=300)
        clock = SimClock()
        rt = AgentRuntime(agent, FunctionModel(recorder.reply, profile=profile), clock=clock, fsync=False)
        started = time.perf_counter()
        compactions = flushes = 0
        for t in convo:
            recorder.current_turn = t.index
            result = rt.run_turn(KEY, t.user)
            compactions += result.compactions
            flushes += result.flushes
            clock.now += timedelta(minutes=1)
            if t.index % 12 == 0:
                clock.now += timedelta(minutes=20)
        seconds = time.perf_counter() - started
        turn_tokens = [r["tokens"] for r in recorder.requests if r["kind"] == "turn"]
        over = next((r["turn"] for r in recorder.requests if r["kind"] == "turn" and r["tokens"] > WINDOW), None)
        daily = sorted(p.name for p in (agent.workspace / "memory").glob("*.md"))
        return {
            "name": name,
            "config": overrides,
            "seconds": round(seconds, 1),
            "turns": turns,
            "requests": recorder.requests,
            "turn_requests": len(turn_tokens),
            "max_tokens": max(turn_tokens),
            "median_tokens": int(statistics.median(turn_tokens)),
            "mean_tokens": int(statistics.fmean(turn_tokens)),
            "total_tokens_sent": sum(r["tokens"] for r in recorder.requests),
            "compactions": compactions,
            "flushes": flushes,
            "summary_requests": recorder.summaries,
            "overflow_errors": recorder.overflows,
            "first_turn_over_window": over,
            "daily_logs_written": daily,
        }


def plot(results: list[dict[str, Any]], path: Path, budget_line: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 5.5))
    colors = {"none": "#c0392b", "compaction": "#2471a3", "compaction+pruning": "#229954"}
    for res in results:
        reqs = [r for r in res["requests"] if r["kind"] == "turn"]
        ax.plot([r["turn"] for r in reqs], [r["tokens"] / 1000 for r in reqs], label=res["name"],
                color=colors.get(res["name"]), linewidth=1.1)
    ax.axhline(WINDOW / 1000, color="black", linestyle="--", linewidth=0.9, label="context window (64k)")
    ax.axhline(budget_line / 1000, color="gray", linestyle=":", linewidth=0.9, label="compaction threshold")
    ax.set_xlabel("turn")
    ax.set_ylabel("tokens sent per request (thousands)")
    top = max(r["max_tokens"] for r in results if r["name"] != "none")
    ceiling = max(WINDOW, top) / 1000 * 1.6
    ax.set_ylim(0, ceiling)
    for res in results:
        if res["max_tokens"] / 1000 > ceiling:
            ax.annotate(f"{res['name']}: {res['max_tokens'] / 1000:,.0f}k by turn {res['turns']} (off the chart)",
                        xy=(0.99, 0.97), xycoords="axes fraction", ha="right", va="top",
                        color=colors.get(res["name"]), fontsize=9)
    ax.set_title(f"Hermit: tokens per request over a scripted {results[0]['turns']}-turn conversation")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(results: list[dict[str, Any]], threshold: int) -> str:
    lines = [
        "# Conversation benchmark — tokens sent per request",
        "",
        f"A scripted {results[0]['turns']}-turn conversation (seed {SEED}) through the real AgentRuntime with a "
        f"{WINDOW // 1000}k-token window; compaction threshold {threshold:,} tokens. "
        "Produced by `bench/conversation_bench.py`; plot: `conversation-tokens.png`.",
        "",
        "| run | max tokens/request | median | mean | total sent | compactions | flushes | "
        "overflow errors | first turn over the window |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        over = r["first_turn_over_window"] or "—"
        lines.append(f"| {r['name']} | {r['max_tokens']:,} | {r['median_tokens']:,} | {r['mean_tokens']:,} | "
                     f"{r['total_tokens_sent'] / 1e6:.2f}M | {r['compactions']} | {r['flushes']} | "
                     f"{r['overflow_errors']} | {over} |")
    lines += ["", "Counts are Hermit's token estimates of each request as sent (system prompt, tool schemas and "
              "messages after pruning); \"total sent\" adds up every request including flush and summary requests. "
              "The `none` run has no window check, to show where an unbounded conversation goes."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--results-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    results = []
    for name, overrides in RUNS.items():
        res = run(name, overrides, args.turns)
        print(f"{name:>20}: max {res['max_tokens']:>7,}  median {res['median_tokens']:>7,}  "
              f"compactions {res['compactions']:>3}  flushes {res['flushes']:>3}  ({res['seconds']} s)", flush=True)
        results.append(res)
    threshold = compaction_budget(CompactionConfig(), WINDOW).compact_at
    out = args.results_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "conversation.json").write_text(json.dumps({"window": WINDOW, "seed": SEED, "compact_at": threshold,
                                                       "runs": results}, indent=1) + "\n", encoding="utf-8")
    (out / "conversation.md").write_text(markdown(results, threshold), encoding="utf-8")
    plot(results, out / "conversation-tokens.png", threshold)
    print(f"wrote {out / 'conversation.md'}, conversation.json and conversation-tokens.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
