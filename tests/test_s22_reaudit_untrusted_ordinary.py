"""Re-audit 22 (t12): the untrusted-text rule (agent/untrusted_standing.py) does not refuse the owner's ordinary work.

Measured through the real runtime with a scripted model that writes what a real model writes for each request, at
its first try: 24 owner requests and jobs that read the owner's own files, a command's output, a PDF or a page.
Before (2e4b8f7) 13 of the 24 were refused at the first try: the heartbeat noting when it last checked ("Last
checked: 2026-06-01 09:00", "(done 09:00)", "still open"), a curation of the daily log read with `cat`/`tail`/`grep`
(the owner's own notes, printed by a command, counted as nobody's text), and a page's or PDF's key points saved with
the source named as a model names it ("Source: …", "According to …", "From report.pdf: …", "(via …)", "Per …"). Now
1 is: `df -h` noted in the model's words with no source named — its refusal leads to a line that is written at the
retry.

Real parts: the runtime's turns with their real tools (exec runs a real shell, write/edit on disk, cron over the real
CronJobs store); the model is scripted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermit.testing import ScriptedModel
from test_audit21_untrusted_standing import MAIN, call, setup

HEARTBEAT = "Read HEARTBEAT.md if it exists. Follow it strictly."
LOG = ("# 2026-06-01\n\n- 09:40 call with Priya about the Q3 budget: agreed a cap of 12,400 EUR, review on 14 July\n"
       "- dentist moved the appointment to Thursday the 12th, half past four\n"
       "- Ann's birthday party is on Saturday at the lake house, bring the blue cake tin\n"
       "- booked flights LIS->BER for 21 June, TAP 538, seat 14C\n")
CHECKLIST = ("# Heartbeat\n\n- [ ] water the plants on the balcony\n- [ ] call the plumber about the boiler\n"
             "- check the mail every morning\n")
REPORT = ("Quarterly report Q2 2026 (report.pdf)\n\nRevenue grew 12% to 4.1M EUR. The Lisbon office opens in "
          "September. Headcount is frozen until January. Churn fell to 2.3%.\n")
PAGE = ("<html><body><h1>Release notes 3.2</h1><p>The sync client now needs Python 3.11. The old API endpoint "
        "/v1/export is removed on 30 September.</p></body></html>\n")

# (name, the owner's message (None: a heartbeat or main-session job), what it reads first, what the model writes)
CASES: list[tuple[str, str | None, list[dict[str, Any]], dict[str, Any]]] = [
    # the heartbeat keeping its own checklist
    ("tick off", None, [], call("edit", path="HEARTBEAT.md", old="- [ ] water the plants on the balcony",
                                 new="- [x] water the plants on the balcony")),
    ("remove a done item", None, [], call("edit", path="HEARTBEAT.md",
                                           old="- [ ] call the plumber about the boiler\n", new="")),
    ("checked at", None, [], call("write", path="HEARTBEAT.md", content="Last checked: 2026-06-01 09:00\n",
                                  append=True)),
    ("checked at, after date", None, [call("exec", command="date")],
     call("write", path="HEARTBEAT.md", content="- Last checked: 2026-06-01 09:00, nothing new\n", append=True)),
    ("mail done today", None, [], call("edit", path="HEARTBEAT.md", old="- check the mail every morning",
                                       new="- check the mail every morning (done today, 09:00)")),
    # a nightly job curating the daily log into MEMORY.md
    ("curate, memory_get", None, [call("read", path="memory/2026-06-01.md")],
     call("edit", path="MEMORY.md", old="# Memory", new="# Memory\n\n- Q3 budget: cap 12,400 EUR agreed with Priya,"
                                                        " review 14 July\n- Flights LIS->BER 21 June (TAP 538, 14C)")),
    ("curate, cat", None, [call("exec", command="cat memory/2026-06-01.md")],
     call("edit", path="MEMORY.md", old="# Memory", new="# Memory\n\n- Dentist: Thursday 12th at 4:30\n"
                                                        "- Ann's birthday party: Saturday, lake house (blue cake tin)")),
    ("curate, tail", None, [call("exec", command="tail -n 3 memory/2026-06-01.md")],
     call("write", path="MEMORY.md", content="- Priya: Q3 budget capped at 12,400 EUR; review 14 July\n",
          append=True)),
    ("curate from chat, grep", "put what I noted about the budget today into MEMORY.md",
     [call("exec", command="grep -i budget memory/*.md")],
     call("write", path="MEMORY.md", content="- Q3 budget cap 12,400 EUR, agreed with Priya (review 14 July)\n",
          append=True)),
    # "read this PDF/page and save the key points to MEMORY.md"
    ("pdf, source:", "read report.pdf and save the key points to MEMORY.md", [call("exec", command="cat report.txt")],
     call("write", path="MEMORY.md", content="- Q2 report key points (source: report.pdf): revenue +12% to 4.1M EUR;"
                                             " Lisbon office opens in September; hiring frozen to January\n",
          append=True)),
    ("pdf, from x:", "read report.pdf and save the key points to MEMORY.md", [call("exec", command="cat report.txt")],
     call("write", path="MEMORY.md", content="- From report.pdf: revenue up 12%, churn down to 2.3%\n", append=True)),
    ("pdf, according to", "read report.pdf and save the key points to MEMORY.md",
     [call("exec", command="cat report.txt")],
     call("write", path="MEMORY.md", content="- According to the Q2 report, the Lisbon office opens in September\n",
          append=True)),
    ("page, via", "read the release notes page and keep what matters for me in MEMORY.md",
     [call("exec", command="cat page.html")],
     call("write", path="MEMORY.md", content="- Sync client needs Python 3.11; /v1/export goes away 30 Sept "
                                             "(via the 3.2 release notes)\n", append=True)),
    ("page, per", "read the release notes page and keep what matters for me in MEMORY.md",
     [call("exec", command="cat page.html")],
     call("write", path="MEMORY.md", content="- Per the 3.2 release notes: Python 3.11 required for sync\n",
          append=True)),
    ("page, quoted from", "read the release notes page and keep what matters for me in MEMORY.md",
     [call("exec", command="cat page.html")],
     call("write", path="MEMORY.md", content="- quoted from the 3.2 release notes: The old API endpoint /v1/export is"
                                             " removed on 30 September.\n", append=True)),
    # "look at df -h / git log and note it in MEMORY.md"
    ("df -h", "look at df -h and note the disk space in MEMORY.md", [call("exec", command="df -h /")],
     call("write", path="MEMORY.md", content="- Disk space (df -h, 2026-06-01): root filesystem checked\n",
          append=True)),
    ("git log", "look at git log in ~/notes-repo and note the last release in MEMORY.md",
     [call("exec", command="printf 'commit 1a2b3c\\nAuthor: Sam\\n\\n    release 2.4.1\\n'")],
     call("write", path="MEMORY.md", content="- Last release of notes-repo: 2.4.1 (from git log)\n", append=True)),
    # ordinary requests in a session that read something
    ("remember, after a page", "remember that I'm off on Friday the 19th",
     [call("exec", command="cat page.html")],
     call("write", path="MEMORY.md", content="- Off on Friday 19th\n", append=True)),
    ("heartbeat item, after a page", "add 'renew the passport' to my heartbeat",
     [call("exec", command="cat page.html")],
     call("write", path="HEARTBEAT.md", content="- [ ] renew the passport\n", append=True)),
    ("reminder job, after a page", "every Friday at 5 remind me to back up the laptop",
     [call("exec", command="cat page.html")],
     call("cron", action="add", job={"name": "backup", "message": "Reminder: back up the laptop",
                                     "schedule": {"kind": "cron", "expr": "0 17 * * 5"}})),
    # the owner's own shell edits and scripts
    ("owner's echo", "add 'feed the cat' to HEARTBEAT.md with echo", [],
     call("exec", command="echo '- [ ] feed the cat' >> HEARTBEAT.md")),
    ("owner's sed", "in HEARTBEAT.md change 'every morning' to 'at noon'", [],
     call("exec", command="sed -i 's/every morning/at noon/' HEARTBEAT.md")),
    ("heartbeat weekly note", None, [],
     call("write", path="HEARTBEAT.md", content="- (checked the boiler item on 2026-06-01: still open)\n",
          append=True)),
    ("job says done", None, [],
     call("write", path="HEARTBEAT.md", content="- [x] water the plants on the balcony (done 09:00)\n",
          append=True)),
]


def run_case(tmp_path: Path, said: str | None, reads: list[dict[str, Any]], write: dict[str, Any]) -> Any:
    rt, _, _ = setup(tmp_path, [])
    ws = rt.agent.workspace
    (ws / "HEARTBEAT.md").write_text(CHECKLIST, encoding="utf-8")
    (ws / "memory").mkdir(exist_ok=True)
    (ws / "memory" / "2026-06-01.md").write_text(LOG, encoding="utf-8")
    (ws / "report.txt").write_text(REPORT, encoding="utf-8")  # what pdftotext made of the PDF
    (ws / "page.html").write_text(PAGE, encoding="utf-8")  # what curl printed
    rt.model = ScriptedModel([*reads, write, "Done."])  # type: ignore[arg-type]
    result = rt.run_turn(MAIN, said or HEARTBEAT if said is None else said, heartbeat=said is None)
    return result.tool_calls[-1]


@pytest.mark.parametrize(("name", "said", "reads", "write"), CASES, ids=[c[0] for c in CASES])
def test_the_owners_ordinary_work_is_written_at_the_first_try(tmp_path: Path, name: str, said: str | None,
                                                             reads: list[dict[str, Any]],
                                                             write: dict[str, Any]) -> None:
    last = run_case(tmp_path, said, reads, write)
    if name in STILL_REFUSED:
        assert last.is_error and "saying where it came from" in last.result, last.result[:300]
    else:
        assert not last.is_error, last.result[:300]


STILL_REFUSED = {"df -h"}


def test_the_refusal_leads_to_a_line_written_at_the_retry(tmp_path: Path) -> None:
    """The model does what the refusal says (names where it came from, as "quoted from <where>: …"): written."""
    rt, _, _ = setup(tmp_path, [])
    df, write = [(c[2], c[3]) for c in CASES if c[0] == "df -h"][0]
    retry = call("write", path="MEMORY.md", content="- quoted from df -h (2026-06-01): root filesystem checked\n",
                 append=True)
    rt.model = ScriptedModel([*df, write, retry, "Noted."])  # type: ignore[arg-type]
    result = rt.run_turn(MAIN, "look at df -h and note the disk space in MEMORY.md")
    assert [r.is_error for r in result.tool_calls] == [False, True, False], [r.result[:200] for r in result.tool_calls]
    assert "quoted from df -h" in (rt.agent.workspace / "MEMORY.md").read_text(encoding="utf-8")


def test_the_set_is_large_enough() -> None:
    assert len(CASES) >= 20
