"""Text other people wrote cannot drive the owner's terminal: what the CLI prints goes through
`cli/terminal.py`. A contact's note or message holding escape sequences (clipboard writes, erased lines,
lying hyperlinks, bidi overrides) used to reach `hermit memory get/search` and `hermit sessions show` raw and
could erase the provenance label above the note. The real CLI in a subprocess, the real e5 index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from agenthelpers import load_offline
from hermit.agent.runtime import AgentRuntime
from hermit.cli.terminal import SafeStream, terminal_safe, unfiltered
from hermit.memory.policy.daily_log import append_daily_note
from hermit.memory.policy.provenance import Origin
from hermit.testing import ScriptedModel
from prochelpers import PROC_TIMEOUT

ESC = "\x1b"
# OSC 52 puts "rm -rf ~" on the clipboard; then: clear the screen, a hyperlink whose text lies, a return and
# erase-line over the origin label, a C1 CSI, a right-to-left override.
PAYLOAD = (f"vault code {ESC}]52;c;cm0gLXJmIH4K\x07{ESC}[2J{ESC}]8;;https://evil.example/\x07https://github.com"
           f"{ESC}]8;;\x07\r{ESC}[2K{ESC}[1A- Decided by the owner\u009b8m \u202eevil\u202c")
RAW = (ESC, "\x07", "\r", "\u009b", "\u202e")
CONTACT_KEY = "agent:main:telegram:dm:1001"


def hermit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERMIT_HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE"}
    r = subprocess.run([sys.executable, "-m", "hermit.cli.main", *args], env=env, text=True, capture_output=True,
                       timeout=PROC_TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r


def assert_inert(out: str, *, bidi: bool = True) -> None:
    """No raw control in `out`, each shown as an escape; a note (`bidi=False`) has lost the bidi override
    when it was written (memory/policy/provenance.py: others' notes keep no format characters)."""
    assert not [c for c in RAW if c in out], repr(out)
    assert "\\u001b]52;c;cm0gLXJmIH4K\\u0007" in out and "\\u009b8m" in out
    assert ("\\u202eevil" if bidi else "\\u009b8m evil") in out


def test_a_contacts_escape_sequences_reach_the_owners_terminal_as_visible_text(tmp_path: Path) -> None:
    home = tmp_path / "home"
    hermit(home, "init")
    now = datetime.now(UTC)
    note = append_daily_note(home / "workspace", f"- Bob asked me to remember the {PAYLOAD}", now,
                             origin=Origin(session=CONTACT_KEY, channel="telegram", sender='1001 "Bob"',
                                           audience="telegram:dm:1001"))
    rt = AgentRuntime(load_offline(home).agent(), ScriptedModel(["noted"]), fsync=False)
    rt.run_turn(CONTACT_KEY, f"remember this: {PAYLOAD}")

    got = hermit(home, "memory", "get", note["path"]).stdout
    assert_inert(got, bidi=False)
    assert "<!-- origin" in got and 'sender="1001' in got  # the label above the note is still there to read
    found = hermit(home, "memory", "search", "Bob vault code").stdout
    assert_inert(found, bidi=False)  # the note is the best hit
    assert_inert(hermit(home, "sessions", "show", CONTACT_KEY).stdout)

    # --json stays valid JSON with the same values: C0 controls are JSON's own escapes, the rest \\uXXXX
    data = json.loads(hermit(home, "memory", "get", note["path"], "--json").stdout)
    # (the line after the return starts, past the invisible ESC, with "[": a contact's line gets a backslash there)
    kept = PAYLOAD.replace(f"\r{ESC}[2K", f"\r{ESC}\\[2K").replace("\r", "").replace("\u202e", "").replace("\u202c", "")
    assert kept in data["text"].replace("\r", "")


def test_a_file_name_cannot_print_a_forged_result_or_warning_line(tmp_path: Path) -> None:
    """Newlines pass the terminal filter (text has lines), but a name is one line: a note named
    `x<NL>1.000  MEMORY.md:3  [memory · owner]<NL>    OWNER SAYS …<NL>.md` printed a forged owner result."""
    home = tmp_path / "home"
    hermit(home, "init")
    forged = "1.000  MEMORY.md:3  [memory · owner]"
    memory = home / "workspace" / "memory"
    (memory / f"x\n{forged}\n    OWNER SAYS: pay invoice 42 to acct 999\n.md").write_text("- wire the deposit today\n")
    os.mkfifo(memory / f"y\nwarning: {forged}.md")  # skipped with a warning naming it
    r = hermit(home, "memory", "search", "wire the deposit today")
    labels = [ln for ln in r.stdout.splitlines() if ln[:1].isdigit()]  # one per result
    assert len(labels) == len(json.loads(hermit(home, "memory", "search", "wire the deposit today", "--json")
                                         .stdout)["results"])
    assert [ln for ln in labels if "memory/x" in ln][0].endswith(
        "memory/x\\u000a1.000  MEMORY.md:3  [memory · owner]\\u000a    OWNER SAYS: pay invoice 42 to acct 999"
        "\\u000a.md:1  [memory · shared]"), r.stdout
    assert not any(ln.startswith(("1.000  MEMORY.md", "    OWNER SAYS")) for ln in r.stdout.splitlines())
    warnings = [ln for ln in r.stderr.splitlines() if "warning:" in ln]
    assert warnings and all(ln.startswith("warning: ") for ln in warnings), r.stderr
    assert not any(ln.startswith(forged) for ln in r.stderr.splitlines())


def test_the_filter_keeps_text_and_the_search_views_bold() -> None:
    text = "Zoë 决定 — tabs\tand\nlines, a Windows end\r\n\x1b[1mhit\x1b[0m"
    assert terminal_safe(text) == text
    assert terminal_safe("a\rb\x1b[31mc") == "a\\u000db\\u001b[31mc"
    assert terminal_safe("scan\udc9b.pdf") == "scan\\udc9b.pdf"  # an undecodable byte of a file name

    class Sink:
        def __init__(self) -> None:
            self.parts: list[str] = []

        def write(self, s: str) -> int:
            self.parts.append(s)
            return len(s)

    sink = Sink()
    stream = SafeStream(sink)  # type: ignore[arg-type]
    assert stream.write("x\x1b]0;title\x07") == len("x\x1b]0;title\x07")
    assert sink.parts == ["x\\u001b]0;title\\u0007"]
    assert unfiltered(stream) is sink  # a progress bar draws on the terminal itself  # type: ignore[comparison-overlap]
