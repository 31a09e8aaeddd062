"""Gateway benchmark (issue 12): web chat message → first streamed token, and 50 concurrent web sessions.

    OMP_WAIT_POLICY=PASSIVE python bench/gateway_bench.py            # ≈ 1-2 min; writes bench/results/gateway.{md,json}
    OMP_WAIT_POLICY=PASSIVE python bench/gateway_bench.py --quick    # fewer messages, results under bench/out/

What runs: `hermit gateway run` as a subprocess (the real CLI, uvicorn, the bus, the web chat WebSocket)
against the fake provider on 127.0.0.1 with zero delay, and WebSocket clients in this process.

1. *First token*: one client sends N messages one after another (each in a fresh session, so history
   does not grow) and times `chat.send` → first `chat.delta`. The same turns are timed without the
   gateway — `AgentRuntime.run_turn` in this process against the same fake provider, send → first
   TextChunk — and the difference of the medians is the gateway's overhead (goal p50 ≤ 50 ms).
2. *Load*: 50 clients, each on its own socket and session, each sends 20 messages at once (pipelined);
   every reply must come back on the socket that asked, answer that message (the fake provider's reply
   names it) and arrive in the order sent. Reports errors, order violations, misdelivered replies,
   wall time and the gateway's peak RSS (VmHWM; goal ≤ 300 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gatewayhelpers import GatewayProcess, write_config  # noqa: E402
from hermit.agent.loop import AgentEvent, TextChunk  # noqa: E402
from hermit.agent.runtime import AgentRuntime  # noqa: E402
from hermit.config.load import load_config  # noqa: E402
from hermit.config.paths import StatePaths  # noqa: E402
from hermit.models.registry import build_model  # noqa: E402
from hermit.testing import FakeProvider  # noqa: E402

REPLY = "Noted — here is a short reply with a few words to stream back to the page."


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


async def hello(ws: Any, token: str) -> None:
    await ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": token}}))
    res = json.loads(await ws.recv())
    assert res["ok"], res


async def first_token_via_gateway(gw: GatewayProcess, n: int) -> list[float]:
    out = []
    async with websockets.connect(gw.ws_url, max_size=None) as ws:
        await hello(ws, gw.token)
        for i in range(n + 3):
            key = f"agent:main:webchat:dm:ft{i}"
            t0 = time.perf_counter()
            await ws.send(json.dumps({"type": "req", "id": f"m{i}", "method": "chat.send",
                                      "params": {"text": f"ftq-{i}", "sessionKey": key}}))
            first = None
            while True:
                f = json.loads(await ws.recv())
                if f.get("event") == "chat.delta" and first is None:
                    first = time.perf_counter() - t0
                if f.get("event") == "chat.done":
                    break
            if i >= 3:  # the first turns warm up imports and connections
                assert first is not None
                out.append(first * 1000)
    return out


def first_token_direct(home: Path, n: int) -> list[float]:
    loaded = load_config(StatePaths(home))
    agent = loaded.agent()
    model = build_model("fake/test-model", loaded.config.models, {})
    rt = AgentRuntime(agent, model, home=home)
    out = []
    for i in range(n + 3):
        t0 = time.perf_counter()
        first: list[float] = []

        def on_event(ev: AgentEvent, first: list[float] = first, t0: float = t0) -> None:
            if isinstance(ev, TextChunk) and not first:
                first.append(time.perf_counter() - t0)

        rt.run_turn(f"agent:main:webchat:dm:direct{i}", f"ftq-{i}", on_event, stream=True)
        if i >= 3:
            out.append(first[0] * 1000)
    close = getattr(model, "close", None)
    if callable(close):
        close()
    return out


async def load_client(gw: GatewayProcess, c: int, messages: int, report: dict[str, Any]) -> None:
    key = f"agent:main:webchat:dm:load{c:02d}"
    async with websockets.connect(gw.ws_url, max_size=None, open_timeout=60) as ws:
        await hello(ws, gw.token)
        sent = [f"<c{c:02d}m{j:02d}>" for j in range(messages)]
        for j, marker in enumerate(sent):
            await ws.send(json.dumps({"type": "req", "id": f"c{c}-{j}", "method": "chat.send",
                                      "params": {"text": f"message {marker}", "sessionKey": key}}))
        texts: dict[str, str] = {}
        done_order: list[str] = []
        while len(done_order) < messages:
            f = json.loads(await asyncio.wait_for(ws.recv(), 300))
            if f["type"] == "res":
                if not f["ok"]:
                    report["errors"].append(f["error"])
                    done_order.append(f["id"])  # counts as answered (with an error)
                continue
            p = f["payload"]
            if f["event"] == "chat.delta":
                texts[p["replyTo"]] = texts.get(p["replyTo"], "") + p["text"]
            elif f["event"] == "chat.error":
                report["errors"].append(p["text"])
            elif f["event"] == "chat.done":
                done_order.append(p["replyTo"])
                if p["status"] != "done":
                    report["errors"].append(f"turn {p['replyTo']} ended {p['status']}")
        expected = [f"c{c}-{j}" for j in range(messages)]
        if done_order != expected:
            report["order_violations"] += 1
        for j, marker in enumerate(sent):
            reply = texts.get(f"c{c}-{j}", "")
            if not reply.startswith(f"ack {marker}"):
                report["misdelivered"] += 1
        report["replies"] += sum(1 for t in texts.values() if t)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--results-dir", type=Path)
    args = ap.parse_args()
    n = 30 if args.quick else 100
    clients, per_client = (10, 5) if args.quick else (50, 20)
    results_dir = args.results_dir or (ROOT / "bench" / ("out/gateway" if args.quick else "results"))
    results_dir.mkdir(parents=True, exist_ok=True)

    steps: list[dict[str, Any]] = [{"text": f"ack <c{c:02d}m{j:02d}> {REPLY}", "match": {"contains": f"<c{c:02d}m{j:02d}>"}}
                                   for c in range(clients) for j in range(per_client)]
    steps.append({"text": REPLY, "match": {"contains": "ftq-"}, "repeat": True})
    out: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                       "loadavg_start": os.getloadavg()}}
    with tempfile.TemporaryDirectory() as tmp, FakeProvider(steps) as fake:
        home = Path(tmp) / "home"
        write_config(home, fake.openai_base_url, extra="  queue_max_per_session: 64\n")
        direct_home = Path(tmp) / "direct"
        write_config(direct_home, fake.openai_base_url)
        print(f"first token: {n} messages through the gateway, then {n} direct turns…", flush=True)
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()
            via = asyncio.run(first_token_via_gateway(gw, n))
            direct = first_token_direct(direct_home, n)
            print(f"load: {clients} clients × {per_client} messages…", flush=True)
            report: dict[str, Any] = {"errors": [], "order_violations": 0, "misdelivered": 0, "replies": 0}

            async def load() -> float:
                t0 = time.perf_counter()
                await asyncio.gather(*(load_client(gw, c, per_client, report) for c in range(clients)))
                return time.perf_counter() - t0

            wall = asyncio.run(load())
            rss = peak_rss_mb(gw.proc.pid)
        finally:
            gw.stop()
    overhead = statistics.median(via) - statistics.median(direct)
    out["first_token"] = {"messages": n, "gateway_ms": {"p50": statistics.median(via), "p95": pct(via, 95)},
                          "direct_ms": {"p50": statistics.median(direct), "p95": pct(direct, 95)},
                          "gateway_overhead_p50_ms": overhead, "goal_ms": 50, "pass": overhead <= 50}
    out["load"] = {"clients": clients, "messages_per_client": per_client, "turns": clients * per_client,
                   "errors": len(report["errors"]), "error_samples": report["errors"][:5],
                   "order_violations": report["order_violations"], "misdelivered": report["misdelivered"],
                   "wall_seconds": wall, "turns_per_second": clients * per_client / wall,
                   "gateway_peak_rss_mb": rss, "rss_goal_mb": 300,
                   "pass": not report["errors"] and not report["order_violations"] and not report["misdelivered"]
                   and rss <= 300}
    out["machine"]["loadavg_end"] = os.getloadavg()
    out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                   cwd=ROOT).stdout.strip()
    (results_dir / "gateway.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    ft, ld = out["first_token"], out["load"]
    md = f"""# Gateway benchmark

`OMP_WAIT_POLICY=PASSIVE python bench/gateway_bench.py` · commit {out['commit']} · Python {out['machine']['python']},
{out['machine']['cpus']} CPUs, load average {out['machine']['loadavg_start'][0]:.1f} at the start (the machine is shared).

## Web chat message → first streamed token (zero-delay fake provider, {ft['messages']} messages)

| path | p50 | p95 |
|---|---:|---:|
| through the gateway (WebSocket `chat.send` → first `chat.delta`) | {ft['gateway_ms']['p50']:.1f} ms | {ft['gateway_ms']['p95']:.1f} ms |
| the same turn without the gateway (`AgentRuntime.run_turn` → first TextChunk) | {ft['direct_ms']['p50']:.1f} ms | {ft['direct_ms']['p95']:.1f} ms |
| **gateway overhead (difference of the medians)** | **{ft['gateway_overhead_p50_ms']:.1f} ms** | goal ≤ 50 ms: {'PASS' if ft['pass'] else 'FAIL'} |

## {ld['clients']} concurrent web sessions × {ld['messages_per_client']} messages (pipelined)

| | |
|---|---:|
| turns | {ld['turns']} |
| errors | {ld['errors']} |
| sessions whose replies came out of order | {ld['order_violations']} |
| replies on the wrong socket or answering the wrong message | {ld['misdelivered']} |
| wall time | {ld['wall_seconds']:.1f} s ({ld['turns_per_second']:.1f} turns/s) |
| gateway peak RSS (VmHWM) | {ld['gateway_peak_rss_mb']:.0f} MB (goal ≤ 300 MB) |
| result | {'PASS' if ld['pass'] else 'FAIL'} |
"""
    (results_dir / "gateway.md").write_text(md, encoding="utf-8")
    print(md)
    return 0 if ft["pass"] and ld["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
