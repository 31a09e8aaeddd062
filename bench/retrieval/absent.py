"""Questions whose answer is in no note: how often search still returns "relevant" results for them.

A search that finds nothing should say so, and the agent then says it checked (SPEC §3's Memory Recall
rule). A search that returns unrelated notes above minScore invites the agent to answer from them. The
dataset's own unanswerable questions (LoCoMo's adversarial category) are not in the converted data, so
this set is written here, in two kinds, and each question is checked against the workspace it is asked
in: a question any of whose answer words occurs in that workspace is dropped (it might be answerable).

- `owner`: what a user asks their assistant ("what is my passport number"), asked in every workspace;
- `speaker`: LoCoMo-style questions about the two people of a conversation ("When did Caroline go
  skydiving?"), the names filled in from the workspace's MEMORY.md ("… the conversations between A and B."), so no
  question is written for a particular conversation, and none is tuned on one.

Nothing here reads a held-out conversation; the templates were written before measuring.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# (question, answer words: a word counts as present when a word of the workspace starts with it)
OWNER: list[tuple[str, tuple[str, ...]]] = [
    ("what is my passport number", ("passport",)),
    ("what's the wifi password", ("wifi", "wi-fi", "password")),
    ("when is my next dentist appointment", ("dentist", "dental")),
    ("what is the licence plate of my car", ("licence", "license", "plate")),
    ("what is my blood type", ("blood type", "blood group")),
    ("what is my health insurance policy number", ("insurance", "policy number")),
    ("what is my bank account number", ("bank account", "iban", "account number")),
    ("what is my landlord's phone number", ("landlord",)),
    ("what shoe size do I wear", ("shoe size",)),
    ("where did I park the car this morning", ("parked",)),
    ("what is my employee ID", ("employee id", "employee number", "badge")),
    ("what's the gate code for the building", ("gate code", "door code", "keypad")),
    ("when does my gym membership expire", ("membership",)),
    ("what is my social security number", ("social security", "ssn")),
    ("which dry cleaner did I leave my suit at", ("dry clean", "cleaner")),
    ("what did the mechanic say about the brakes", ("mechanic", "brake")),
    ("what's my frequent flyer number", ("frequent flyer", "loyalty number", "mileage")),
    ("when is the car's next oil change due", ("oil change",)),
    ("what is the PIN for my debit card", ("pin", "debit")),
    ("what are my in-laws' anniversary plans", ("in-law", "anniversary")),
]

SPEAKER: list[tuple[str, tuple[str, ...]]] = [
    ("When did {x} go skydiving?", ("skydiv", "parachut")),
    ("What is the name of {x}'s goldfish?", ("goldfish", "fish")),
    ("Which football team does {x} support?", ("football", "soccer")),
    ("When did {x} buy a motorcycle?", ("motorcycle", "motorbike")),
    ("How many times has {x} been to Japan?", ("japan", "tokyo", "kyoto")),
    ("What is {x}'s favourite sushi restaurant?", ("sushi",)),
    ("When did {x} run a marathon?", ("marathon",)),
    ("What did {x} say about the chess tournament?", ("chess",)),
    ("When did {x} get a tattoo?", ("tattoo",)),
    ("What is {x} allergic to?", ("allerg",)),
    ("Where did {x} go scuba diving?", ("scuba", "diving", "dive")),
    ("When did {x} move to Canada?", ("canada", "toronto", "vancouver", "montreal")),
    ("What is {x}'s favourite video game?", ("video game", "videogame", "gaming", "xbox", "playstation")),
    ("What did {x} cook for Thanksgiving?", ("thanksgiving",)),
    ("When did {x} adopt a parrot?", ("parrot",)),
    ("Who is {x}'s dentist?", ("dentist", "dental")),
    ("What was {x}'s salary at the bank?", ("salary", "bank")),
    ("When did {x} visit the Grand Canyon?", ("grand canyon", "canyon")),
    ("How much did {x} win at poker?", ("poker",)),
    ("What is {x}'s favourite opera?", ("opera",)),
    ("When did {x} take flying lessons?", ("flying lesson", "pilot")),
    ("How did {x} do in the triathlon?", ("triathlon",)),
    ("What is {x}'s blood type?", ("blood type", "blood group")),
    ("Which university did {x}'s grandfather attend?", ("grandfather", "grandpa")),
    ("What did {x} think of the jazz festival in New Orleans?", ("jazz", "new orleans")),
]

_PAIR = re.compile(r"conversations between (\w+) and (\w+)")


@dataclass(frozen=True)
class AbsentQuestion:
    qid: str
    workspace: str  # which workspace it is asked in (a conversation id, or "generated")
    kind: str  # "owner" | "speaker"
    query: str


def _words(workspace: Path) -> str:
    """The workspace's memory text, lower-cased, words separated by single spaces."""
    files = [workspace / "MEMORY.md", *sorted((workspace / "memory").glob("**/*.md"))]
    text = " ".join(p.read_text(encoding="utf-8", errors="replace") for p in files if p.is_file())
    return " " + " ".join(re.findall(r"[\w'-]+", text.lower())) + " "


def _present(words: str, answers: tuple[str, ...]) -> bool:
    return any(f" {a.lower()}" in words for a in answers)


def speakers(workspace: Path) -> list[str]:
    """The two people of a converted conversation, from its MEMORY.md ("… the conversations between A and B.")."""
    head = (workspace / "MEMORY.md").read_text(encoding="utf-8") if (workspace / "MEMORY.md").is_file() else ""
    m = _PAIR.search(head)
    return [m.group(1), m.group(2)] if m else []


def questions(workspace: Path, name: str) -> list[AbsentQuestion]:
    """The absent-answer questions for one workspace: every template whose answer words it lacks."""
    words = _words(workspace)
    out: list[AbsentQuestion] = []
    for k, (q, answers) in enumerate(OWNER):
        if not _present(words, answers):
            out.append(AbsentQuestion(f"{name}-owner-{k:02d}", name, "owner", q))
    for who in speakers(workspace):
        for k, (q, answers) in enumerate(SPEAKER):
            if not _present(words, answers):
                out.append(AbsentQuestion(f"{name}-{who.lower()}-{k:02d}", name, "speaker", q.format(x=who)))
    return out
