"""Round 11's probe for time-aware questions: a month named in a question as a range of days.

    python bench/retrieval/month_probe.py DATA_DIR

`memory/search/dates.py` turns a day ("on 16 June, 2023", "July 13", "the week of August 10", "last
week") into the days whose daily logs the search boosts (`date_boost`). A month alone ("When did
Melanie go camping in June?", "What happened to John's job in August 2023?") names no day, so no log
is boosted. The probe adds the month's days (at most 31, as the search already allows a range) when a
question says "in <month>" or "in <month> <year>" without a day, and measures it through
conversations.py's harness:

- `clock`: the search's "today" set to the day after the conversation's last session (a real user's
  notes run up to today; LoCoMo's end in 2023, so a month without a year, taken as the most recent
  such month not after today, would fall in 2026 and boost nothing): the reference for `month`;
- `month`: the same clock, with the month ranges;
- `month-sparse`: the same, but a month is taken only when it holds at most 7 dated notes — as many as
  a week can, the widest range the search already boosts ("the week of …", "last week"). In a worklog
  with a note every day a month is thirty notes, and lifting them all crowds out the rest of the
  question ("… in June and who is it now");
- `month-now`: the month ranges with the real clock, as conversations.py (and so a held-out measurement)
  runs: a month without a year falls in this year and boosts nothing in LoCoMo's 2023 logs.
Then each month variant's questions whose seen R@6 or MRR change, against its reference (`clock`, or
`default` for `month-now`).

Only the ranges change; fusion, the boost and everything after are the search's own. `--generated`
also runs the generated suite (`run.py`'s default, "today" 2026-11-01) without and with the month
ranges: its questions name months too ("which tables does the warehouse team migrate next in
September", "who was Beacon primary on-call in June and who is it now").
"""

from __future__ import annotations

import argparse
import calendar
import datetime as dt
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conversations as C  # noqa: E402

from hermit.memory.search import dates, hybrid  # noqa: E402

_IN_MONTH = re.compile(rf"\bin\s+({dates._MON})\b\.?(?:,?\s+(\d{{4}}))?(?!\s*\d{{1,2}}\b)", re.IGNORECASE)
_plain_ranges = dates.query_day_ranges


DAYS: set[dt.date] | None = None  # with month-sparse: the days that have a dated note


def with_months(query: str, today: dt.date) -> list[dates.DayRange]:
    ranges = _plain_ranges(query, today)
    for m in _IN_MONTH.finditer(query):
        month = dates.MONTHS[m.group(1).lower()]
        year = int(m.group(2)) if m.group(2) else (today.year if month <= today.month else today.year - 1)
        last = calendar.monthrange(year, month)[1]
        r = dates.DayRange(dt.date(year, month, 1), dt.date(year, month, last))
        if DAYS is not None and sum(1 for d in DAYS if r.contains(d)) > 7:
            continue
        if not any(x.start >= r.start and x.end <= r.end for x in ranges):  # a day of it named already
            ranges.append(r)
    return ranges


def note_days(ws: Path) -> set[dt.date]:
    return {dt.date.fromisoformat(f.name[:10]) for f in (ws / "memory").glob("????-??-??*.md")}


def last_day(ws: Path) -> dt.date:
    return max(note_days(ws))


def generated() -> None:
    import run as R

    qs = R.read_jsonl(R.QUERIES)
    v = next(x for x in R.variants() if x.name == "default")
    reports = {}
    global DAYS
    for name, ranges in (("default", _plain_ranges), ("month", with_months), ("month-sparse", with_months)):
        hybrid.query_day_ranges = ranges  # type: ignore[assignment]
        DAYS = note_days(R.WORKSPACE) if name == "month-sparse" else None
        try:
            reports[name], _, gone = R.run_variant(v, qs)
        finally:
            hybrid.query_day_ranges = _plain_ranges  # type: ignore[assignment]
            DAYS = None
        o = reports[name].overall
        print(f"generated {name}: R@6 {o['R@6']:.3f} MRR {o['MRR']:.3f} " + " ".join(
            f"{t} {m['R@6']:.3f}" for t, m in reports[name].by_type.items()) + f" absent any {gone['any']:.2f}")
    before = {p["id"]: p for p in reports["default"].per_query}
    for name in ("month", "month-sparse"):
        for p in reports[name].per_query:
            b = before[p["id"]]
            if (b["R@6"], b["MRR"]) != (p["R@6"], p["MRR"]):
                print(f"  {name} {p['id']}: R@6 {b['R@6']:.2f} → {p['R@6']:.2f}, MRR {b['MRR']:.3f} → {p['MRR']:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--generated", action="store_true", help="also the generated suite (run.py's default)")
    args = ap.parse_args(argv)
    if args.generated:
        generated()
    queries = C.read_jsonl(args.data / "queries.jsonl")
    plain_service = C.service_for
    rows = [C.run_variant(args.data, next(v for v in C.variants() if v.name == "default"), queries)]
    global DAYS
    for name, months in (("clock", False), ("month", True), ("month-sparse", True), ("month-now", True)):
        def service(data: Path, conv: str, v: C.Variant, sparse: bool = name == "month-sparse",
                    now: bool = name == "month-now") -> Any:
            global DAYS
            DAYS = note_days(data / "workspaces" / conv) if sparse else None
            svc = plain_service(data, conv, v)
            if not now:
                day = dt.datetime.combine(last_day(data / "workspaces" / conv) + dt.timedelta(days=1), dt.time(12))
                svc.searcher.clock = day.timestamp
            return svc

        C.service_for = service  # type: ignore[assignment]
        hybrid.query_day_ranges = with_months if months else _plain_ranges  # type: ignore[assignment]
        try:
            note = ("today = the real clock" if name == "month-now" else "today = the day after the last session") + (
                ", months as day ranges" if months else "")
            rows.append(C.run_variant(args.data, C.Variant(name, note + (" (at most 7 notes)" if name == "month-sparse"
                                                                          else "")), queries))
        finally:
            C.service_for = plain_service  # type: ignore[assignment]
            hybrid.query_day_ranges = _plain_ranges  # type: ignore[assignment]
            DAYS = None
    text = {str(q["qid"]): str(q["query"]) for q in queries}
    by_name = {r["variant"]: r for r in rows}
    for name, ref in (("month", "clock"), ("month-sparse", "clock"), ("month-now", "default")):
        print(f"{name} against {ref}:")
        for a, b in zip(by_name[ref]["per_query"], by_name[name]["per_query"], strict=True):
            if (a["seen"], a["MRR"]) != (b["seen"], b["MRR"]):
                print(f"  {a['qid']} {text[a['qid']]!r}: seen {a['seen']:.2f} → {b['seen']:.2f}, "
                      f"MRR {a['MRR']:.3f} → {b['MRR']:.3f}")
    return C.emit(C.markdown(rows), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
