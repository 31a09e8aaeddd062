"""Generate the retrieval benchmark: a memory workspace plus queries with line-level gold labels.

Usage: python bench/retrieval/generate.py [--out DIR]

Writes DIR/workspace/ (MEMORY.md and memory/*.md) and DIR/queries.jsonl; DIR defaults to this
script's directory. Stdlib only, seeded with random.Random(42): the output is byte-for-byte
deterministic. Planted facts come from world.py, routine filler from filler.py. Generation ends
with a sanity check (every gold line exists and holds its fact's key string, no filler line
carries a key, file sizes in range) and fails loudly if anything is off.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import sys
from collections import Counter
from pathlib import Path

import filler
from world import MEMORY, QUERIES, SESSIONS
from world_days import DAYS
from world_model import Day, Fact, Item, Section

SEED = 42
START = dt.date(2026, 6, 1)
END = dt.date(2026, 10, 31)
P_WORKDAY = 0.7  # chance that a day without planted facts still has a log
P_WEEKEND = 0.35
P_ZH_DAY = 0.03  # chance that a filler-only day is written in Chinese
MIN_LINES, MAX_LINES = 10, 60
MAX_BYTES = 2 * 1024 * 1024
QUERY_TYPES = ("paraphrase", "identifier", "name", "date", "zh", "en2zh", "zh2en", "multi", "recent")


class Layout:
    """Collects file contents and the 1-based line of every planted fact."""

    def __init__(self) -> None:
        self.files: dict[str, list[str]] = {}
        self.facts: dict[str, tuple[str, int, Fact]] = {}
        self.filler: list[tuple[str, int]] = []

    def emit(self, path: str, item: Item, *, is_filler: bool = False) -> None:
        lines = self.files.setdefault(path, [])
        if isinstance(item, Fact):
            if item.key not in item.text:
                raise ValueError(f"fact {item.fid}: key {item.key!r} not in its text")
            if item.fid in self.facts:
                raise ValueError(f"fact {item.fid} planted twice")
            lines.append(item.text)
            self.facts[item.fid] = (path, len(lines), item)
        else:
            lines.append(item)
            if is_filler:
                self.filler.append((path, len(lines)))

    def block(self, path: str, heading: str, items: list[Item] | tuple[Item, ...], *, is_filler: bool) -> None:
        self.emit(path, heading)
        for item in items:
            self.emit(path, item, is_filler=is_filler)
        self.emit(path, "")


def build_memory(out: Layout) -> None:
    for item in MEMORY:
        out.emit("MEMORY.md", item)


def clashes(heading: str, planted: tuple[Section, ...]) -> bool:
    """A filler section that would duplicate a planted section's topic on the same day."""
    for sec in planted:
        if heading == sec.heading:
            return True
        if heading.startswith("## 上海") and ("上海" in sec.heading or "翡翠" in sec.heading):
            return True
    return False


def build_day(out: Layout, decks: filler.Decks, date: dt.date, lang: str, planted: tuple[Section, ...]) -> None:
    path = f"memory/{date.isoformat()}.md"
    rng = decks.rng
    ctx = filler.Ctx(date, rng, decks)
    target = rng.randint(12, 48)
    size = 2 + sum(len(s.items) + 2 for s in planted)
    blocks: list[tuple[str, list[Item], bool]] = []
    for make in filler.builders(ctx, lang):
        if size >= max(target, MIN_LINES + 2):
            break
        heading, lines = make(ctx)
        if clashes(heading, planted) or size + len(lines) + 2 > MAX_LINES:
            continue
        blocks.append((heading, list(lines), True))
        size += len(lines) + 2
    blocks.sort(key=lambda b: filler.rank(b[0]))
    # Planted sections go to random positions, keeping their relative order.
    lowest = 0
    for sec in planted:
        pos = rng.randint(lowest, len(blocks))
        blocks.insert(pos, (sec.heading, list(sec.items), False))
        lowest = pos + 1
    out.emit(path, filler.header(date, lang))
    out.emit(path, "")
    for heading, items, is_filler in blocks:
        out.block(path, heading, items, is_filler=is_filler)
    lines = out.files[path]
    while lines and lines[-1] == "":
        lines.pop()


def build_days(out: Layout, rng: random.Random) -> None:
    decks = filler.Decks(rng)
    planted: dict[str, Day] = {}
    for day in DAYS:
        if day.date in planted:
            raise ValueError(f"day {day.date} listed twice in world.DAYS")
        planted[day.date] = day
    date = START
    while date <= END:
        found = planted.get(date.isoformat())
        weekend = date.weekday() >= 5
        if found is not None:
            build_day(out, decks, date, found.lang, found.sections)
        elif rng.random() < (P_WEEKEND if weekend else P_WORKDAY):
            in_china = filler.TRIP_START <= date < filler.TRIP_END
            lang = "zh" if in_china or rng.random() < P_ZH_DAY else "en"
            build_day(out, decks, date, lang, ())
        date += dt.timedelta(days=1)
    unknown = sorted(d for d in planted if not START.isoformat() <= d <= END.isoformat())
    if unknown:
        raise ValueError(f"planted days outside the timeline: {unknown}")


def build_sessions(out: Layout) -> None:
    for note in SESSIONS:
        path = f"memory/{note.date}-{note.slug}.md"
        if path in out.files:
            raise ValueError(f"session note {path} collides with another file")
        for line in (f"# Session: {note.date} {note.time} UTC", "",
                     "- **Session Key**: agent:main:main",
                     f"- **Session ID**: {note.session_id}",
                     f"- **Source**: {note.source}", "",
                     "## Conversation Summary", ""):
            out.emit(path, line)
        for i, item in enumerate(note.items):
            if i:
                out.emit(path, "")
            out.emit(path, item)


def query_records(out: Layout) -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    for n, q in enumerate(QUERIES, start=1):
        if q.type not in QUERY_TYPES:
            raise ValueError(f"query {q.text!r}: unknown type {q.type}")
        gold: list[str] = []
        for fid in q.fids:
            if fid not in out.facts:
                raise ValueError(f"query {q.text!r}: unknown fact id {fid}")
            path, line, _ = out.facts[fid]
            label = f"{path}:{line}"
            if label not in gold:
                gold.append(label)
        multi = q.type == "multi"
        if multi and len({g.rpartition(":")[0] for g in gold}) < 2:
            raise ValueError(f"multi query {q.text!r} needs golds in at least two different notes")
        records.append({"id": f"q{n:03d}", "query": q.text, "type": q.type, "gold": gold, "any": not multi})
    return records


def write(out: Layout, root: Path, records: list[dict[str, object]]) -> Path:
    ws = root / "workspace"
    if ws.exists():
        shutil.rmtree(ws)
    (ws / "memory").mkdir(parents=True)
    for rel in sorted(out.files):
        (ws / rel).write_text("\n".join(out.files[rel]) + "\n", encoding="utf-8", newline="\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return ws


def sanity_check(out: Layout, ws: Path, records: list[dict[str, object]]) -> None:
    """Re-read the written files and verify every gold label; raise on any problem."""
    on_disk = {rel: (ws / rel).read_text(encoding="utf-8").split("\n")[:-1] for rel in out.files}
    for fid, (path, line, fact) in out.facts.items():
        lines = on_disk[path]
        assert 1 <= line <= len(lines), f"{fid}: {path}:{line} out of range"
        assert fact.key in lines[line - 1], f"{fid}: key {fact.key!r} missing at {path}:{line}"
    keys = sorted({f.key for _, _, f in out.facts.values()})
    for path, line in out.filler:
        text = on_disk[path][line - 1]
        for key in keys:
            assert key not in text, f"filler line {path}:{line} contains planted key {key!r}: {text}"
    by_label = {f"{p}:{n}": f for p, n, f in out.facts.values()}
    for rec in records:
        gold = rec["gold"]
        assert isinstance(gold, list) and gold, rec
        for label in gold:
            path, _, num = str(label).rpartition(":")
            assert by_label[str(label)].key in on_disk[path][int(num) - 1], label
    for rel, lines in on_disk.items():
        if rel.startswith("memory/") and rel.count("-") == 2:  # daily log memory/YYYY-MM-DD.md
            assert MIN_LINES <= len(lines) <= MAX_LINES, f"{rel}: {len(lines)} lines"
            assert lines[0].startswith("# "), rel
    total = sum(p.stat().st_size for p in ws.rglob("*.md"))
    assert total < MAX_BYTES, f"workspace is {total} bytes"


def summary(out: Layout, records: list[dict[str, object]]) -> str:
    daily = [p for p in out.files if p.startswith("memory/") and p.count("-") == 2]
    sessions = [p for p in out.files if p.startswith("memory/") and p.count("-") > 2]
    zh_daily = [p for p in daily if out.files[p][0].endswith(filler.ZH_WEEKDAYS)]
    mixed = [p for p in daily if p not in zh_daily and any(ln == "## 跟婆婆视频" for ln in out.files[p])]
    types = Counter(str(r["type"]) for r in records)
    used = {fid for q in QUERIES for fid in q.fids}
    unused = sorted(set(out.facts) - used)
    n_lines = sum(len(v) for v in out.files.values())
    parts = [
        f"files: {len(out.files)} (MEMORY.md {len(out.files['MEMORY.md'])} lines, {len(daily)} daily logs, "
        f"{len(sessions)} session notes); total lines {n_lines}",
        f"daily logs in Chinese: {len(zh_daily)} ({100 * len(zh_daily) / len(daily):.0f}%), "
        f"English logs with a Chinese section: {len(mixed)}",
        f"planted facts: {len(out.facts)}; queries: {len(records)} "
        + ", ".join(f"{t}={types[t]}" for t in QUERY_TYPES),
    ]
    if unused:
        parts.append(f"facts not targeted by any query (distractors/context): {', '.join(unused)}")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="output directory (default: bench/retrieval)")
    args = parser.parse_args(argv)
    rng = random.Random(SEED)
    out = Layout()
    build_memory(out)
    build_days(out, rng)
    build_sessions(out)
    records = query_records(out)
    ws = write(out, args.out, records)
    sanity_check(out, ws, records)
    print(summary(out, records))
    print(f"wrote {ws} and {args.out / 'queries.jsonl'}; sanity check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
