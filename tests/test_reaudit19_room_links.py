"""Re-audit 19 (t10) of the room's merge: a chat's links cannot make the merge slow.

Every merge judges the room's links together (rooms.links_leaving: does one, followed through the others, lead out
of the room?), before it touches the room for the links that came back and after it for all of them — even a merge
with nothing to do, when the room holds a link. That judgement joined the path so far at every part of a link's text,
so its cost was the text's parts squared, times its hops, and none of it looked at the merge's time: 200 links of
2,048 parts each (`a/a/…/a`, 4,095 bytes, inside an 8 MB room) took 3.4 s of CPU per judgement (17 s of the turn at
load 20, past the merge's 13 s), and 2,000 of them 34 s. Now a lookup builds each path once and follows at most
rooms.MAX_LINK_STEPS parts of link text in all; a link that needs more is judged as leaving (removed, and the chat
told) — a path in a room has at most 100 parts, so no link needs that many."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hermit.tools.rooms import MAX_LINK_HOPS, links_leaving
from test_sandbox_attacks import room_tools, run

LONG = "/".join(["a"] * 2048)  # 4,095 bytes: the longest text a link may have


def test_judging_many_long_links_is_cheap() -> None:
    links = {f"l{i}": LONG for i in range(500)}  # 8.4 s of CPU before
    links |= {f"p{i}/q": f"../p{i + 1}/r" for i in range(500)}  # ordinary links: stay
    links |= {f"d/c{i}": (f"c{i - 1}/" if i else "") + "/".join(["x"] * 60 + [".."] * 60) for i in range(200)}
    cpu = time.process_time()
    leaving = links_leaving(links)
    cpu = time.process_time() - cpu
    print(f"\n1,200 links judged in {cpu:.2f} s of CPU (load {os.getloadavg()[0]:.1f})")
    assert cpu < 1.0
    assert {f"l{i}" for i in range(500)} <= set(leaving)
    assert not [rel for rel in leaving if rel.startswith("p")]


def test_what_the_judgement_says_is_unchanged_for_ordinary_links() -> None:
    """The kernel's answers, as before: a link out, a link out through another, a loop, a chain past 40 hops."""
    links = {"up": "..", "ok": "d/e", "via": "ok/../../..", "in": "ok/../x", "self": "self", "abs": "/etc",
             "b": ".", "esc": "b/.."}
    links |= {f"h/{i}": (f"{i - 1}" if i else ".") for i in range(MAX_LINK_HOPS + 3)}
    leaving = set(links_leaving(links))
    assert {"up", "via", "self", "abs", "esc"} <= leaving and not {"ok", "in", "b"} & leaving
    assert f"h/{MAX_LINK_HOPS - 1}" not in leaving and f"h/{MAX_LINK_HOPS + 2}" in leaving


def test_a_room_full_of_long_links_keeps_its_merges_cheap(tmp_path: Path) -> None:
    """Through the real sandbox: a command leaves 300 links of 4,095 bytes and 50 ordinary ones. They are judged in
    little time (the long ones removed, the chat told); the ordinary ones stay; an exec after it that changes nothing
    costs close to nothing. Before, that first merge took 5 s of CPU (past its 13 s at load 20: nothing was kept), and
    a room holding 200 such links cost every later exec 3.4 s of CPU."""
    runner, view = room_tools(tmp_path, quota_mb=8)
    make = (f'T={LONG}; i=0; while [ $i -lt 300 ]; do ln -s "$T" l$i; i=$((i+1)); done; '
            'mkdir -p d; i=0; while [ $i -lt 50 ]; do ln -s ../d d/k$i; i=$((i+1)); done; echo made')
    cpu = time.thread_time()
    out, err = run(runner, "exec", command=make, timeout=60)
    cpu = time.thread_time() - cpu
    print(f"\nthe exec leaving 350 links: {cpu:.2f} s of this thread's CPU (load {os.getloadavg()[0]:.1f})")
    assert not err and "made" in out and "[links removed: l" in out and "would take longer" not in out, out[-500:]
    room = view.room.path
    assert not [n for n in os.listdir(room) if n.startswith("l")]
    assert sorted(os.listdir(room / "d")) == sorted(f"k{i}" for i in range(50))
    assert all(os.readlink(room / "d" / f"k{i}") == "../d" for i in range(50))
    assert cpu < 1.5
    cpu = time.thread_time()
    out, err = run(runner, "exec", command="true", timeout=60)
    cpu = time.thread_time() - cpu
    assert not err and "kept" not in out and "removed" not in out, out[-300:]
    assert cpu < 0.5
