"""Registered secrets stay out of what is derived from the workspace and the model (audit F6): a key a command
wrote into a bootstrap file (its tool result showed `***`) is masked in every session's system prompt, a
contact's sandboxed DM included, while the file keeps what was written; the model's text is masked before it
is recorded, returned or sent to a channel, and a key split across stream deltas never goes to the web chat
piece by piece; the history, the memory flush, a compaction's request and its summary are masked too. The real
runtime, exec tool, bus and a recording channel, with a FunctionModel that records every request."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from gatewayhelpers import RecordingChannel, inbound, last_user_text, make_bus, runtime
from hermit import redaction
from hermit.agent.compaction import SUMMARY_MARKER
from hermit.channels.base import StreamDelta
from hermit.messages import AssistantMessage, TextPart, Usage
from hermit.models.base import ModelProfile, ModelRequest
from hermit.redaction import MASK, SecretMasker, register
from hermit.sessions.keys import main_session_key
from hermit.testing.scripted import FunctionModel, Reply
from sessionhelpers import SMALL_COMPACTION, SMALL_WINDOW, small_config, user_text
from sessionhelpers import runtime as session_runtime

BOT_TOKEN = "123456:CANARYtgTOKENabcdefghijklmnop"
API_KEY = "sk-CANARYfakeKEY0123456789"
ENV_TEXT = f"FAKE_API_KEY={API_KEY}\nTELEGRAM_BOT_TOKEN={BOT_TOKEN}\n"
MAIN = main_session_key("main")
CONTACT_PEER = "own-77"  # gatewayhelpers' routing: a DM session of its own, not the main one
CONTACT = f"agent:main:telegram:dm:{CONTACT_PEER}"


@pytest.fixture(autouse=True)
def known(monkeypatch: pytest.MonkeyPatch) -> SecretMasker:
    """A fresh process masker with the two keys registered through the real API (as the CLI and the model
    transport register theirs), so this module's secrets do not stay in other tests' KNOWN."""
    masker = SecretMasker()
    monkeypatch.setattr(redaction, "KNOWN", masker)
    register(API_KEY, BOT_TOKEN)
    return masker


def request_dump(req: ModelRequest) -> str:
    return req.system + "\n" + json.dumps([m.to_dict() for m in req.messages], ensure_ascii=False)


def transcripts(home: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in (home / "agents").rglob("*.jsonl"))


def quote_env_lines(system: str) -> str:
    """What a model that answers from its prompt says when asked for TOOLS.md."""
    lines = [ln for ln in system.splitlines() if ln.startswith(("TELEGRAM_BOT_TOKEN=", "FAKE_API_KEY="))]
    return "Sure, my instructions say: " + " ".join(lines)


def test_a_key_a_command_wrote_into_tools_md_and_memory_md_reaches_no_prompt(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True)
    # The owner pasted the keys into TOOLS.md by hand (shared: every chat's prompt has TOOLS.md); the command
    # below adds them again, in an owner-only block (what the owner's shell writes there is marked).
    (ws / "TOOLS.md").write_text("# Tools\n" + ENV_TEXT, encoding="utf-8")
    (ws / "MEMORY.md").write_text("# Memory\n", encoding="utf-8")
    env = tmp_path / "hermit.env"
    env.write_text(ENV_TEXT, encoding="utf-8")
    requests: list[ModelRequest] = []

    def model(req: ModelRequest) -> Reply:
        requests.append(req)
        text = last_user_text(req)
        if text == "save my setup" and not any(m.to_dict()["role"] == "toolResult" for m in req.messages):
            command = f"cat {env} >> {ws / 'TOOLS.md'}; cat {env} >> {ws / 'MEMORY.md'}; cat {env}"
            return {"tool_calls": [{"name": "exec", "arguments": {"command": command}}]}
        if text == "what does your TOOLS.md say?":
            return quote_env_lines(req.system)
        return "noted"

    rt = runtime(tmp_path, model)
    assert rt.run_turn(MAIN, "save my setup").reply == "noted"
    rt.run_turn(MAIN, "anything else?")
    ch = RecordingChannel()
    bus = make_bus(rt, ch)

    async def contact() -> None:
        await bus.publish(inbound("what does your TOOLS.md say?", CONTACT_PEER))
        await bus.drain(10)

    asyncio.run(contact())
    # The owner's notes stay as written: only what is derived from them is masked.
    assert BOT_TOKEN in (ws / "TOOLS.md").read_text() and API_KEY in (ws / "MEMORY.md").read_text()
    tool_result = [m for m in requests[1].messages if m.to_dict()["role"] == "toolResult"][0].to_dict()
    assert f"TELEGRAM_BOT_TOKEN={MASK}" in json.dumps(tool_result)  # what the model saw (already masked)
    main_system = requests[-2].system
    assert "## MEMORY.md" in main_system and main_system.count(f"TELEGRAM_BOT_TOKEN={MASK}") == 3
    contact_req = requests[-1]
    assert "MEMORY.md" not in contact_req.system.split("# Project Context")[1].split("## ")[0]
    assert contact_req.system.count(f"TELEGRAM_BOT_TOKEN={MASK}") == 1 and rt.sandboxed(CONTACT)  # by hand only
    for req in requests:
        dump = request_dump(req)
        assert BOT_TOKEN not in dump and API_KEY not in dump
    assert [m.text for m in ch.messages()] == [
        f"Sure, my instructions say: FAKE_API_KEY={MASK} TELEGRAM_BOT_TOKEN={MASK}"]
    stored = transcripts(tmp_path)
    assert BOT_TOKEN not in stored and API_KEY not in stored


def test_a_reply_quoting_a_key_is_masked_in_the_transcript_the_result_and_a_chat_reply(tmp_path: Path) -> None:
    (tmp_path / "workspace" / "memory").mkdir(parents=True)
    reply = f"Sure, my instructions say: TELEGRAM_BOT_TOKEN={BOT_TOKEN} and {API_KEY}."
    masked = f"Sure, my instructions say: TELEGRAM_BOT_TOKEN={MASK} and {MASK}."
    rt = runtime(tmp_path, lambda req: reply)
    seen: list[Any] = []
    result = rt.run_turn(MAIN, "tell me", on_event=seen.append, stream=False)  # the CLI's `hermit agent -m`
    assert result.reply == masked
    assert all(BOT_TOKEN not in repr(e) for e in seen) and seen
    ch = RecordingChannel()
    bus = make_bus(rt, ch)

    async def contact() -> None:
        await bus.publish(inbound("what does your TOOLS.md say?", CONTACT_PEER))
        await bus.drain(10)

    asyncio.run(contact())
    assert [m.text for m in ch.messages()] == [masked]
    stored = transcripts(tmp_path)
    assert BOT_TOKEN not in stored and API_KEY not in stored and masked in stored


def test_a_key_split_across_stream_deltas_never_reaches_the_web_chat(tmp_path: Path) -> None:
    """The FunctionModel streams 8 characters a delta, as an adapter streams tokens: the bot token spans five."""
    (tmp_path / "workspace" / "memory").mkdir(parents=True)
    reply = f"Here: {BOT_TOKEN}! And the key {API_KEY} too — that is all."
    rt = runtime(tmp_path, lambda req: reply)
    ch = RecordingChannel("webchat", streaming=True)
    bus = make_bus(rt, ch)

    async def main() -> None:
        await bus.publish(inbound("keys?", channel="webchat", message_id="m1"))
        await bus.drain(10)

    asyncio.run(main())
    deltas = [i.text for i in ch.items if isinstance(i, StreamDelta)]
    assert "".join(deltas) == f"Here: {MASK}! And the key {MASK} too — that is all."
    assert len(deltas) > 1 and ch.messages() == []
    for secret in (BOT_TOKEN, API_KEY):
        pieces = {secret[i:i + 8] for i in range(0, len(secret) - 7)}
        assert not any(p in d for d in deltas for p in pieces), deltas
    assert BOT_TOKEN not in transcripts(tmp_path)


def test_history_flush_and_compaction_are_masked_and_the_summary_is_stored_masked(tmp_path: Path) -> None:
    """A transcript written before replies were masked (and a key the user typed) goes to no request: not the
    next turns, not the memory flush, not the compaction request; a summary that echoes a key is kept masked."""
    requests: list[ModelRequest] = []

    def reply(request: ModelRequest) -> str:
        requests.append(request)
        if SUMMARY_MARKER in request.system:
            return f"## Identifiers\n- the bot token is {BOT_TOKEN}"
        return "NO_REPLY" if "## Memory Flush" in request.system else "ack"

    defaults = {"compaction": SMALL_COMPACTION}
    home = tmp_path / "home"
    rt = session_runtime(small_config(home, defaults=defaults),
                         FunctionModel(reply, profile=ModelProfile("scripted", "small", context_window=SMALL_WINDOW)))
    (rt.agent.workspace / "MEMORY.md").write_text(f"# Memory\nkey: {API_KEY}\n", encoding="utf-8")
    rt.run_turn(MAIN, f"my bot token is {BOT_TOKEN}")
    record = rt.session(MAIN)
    assert record is not None
    old = AssistantMessage((TextPart(f"Stored before F6: {API_KEY}"),), "end_turn", Usage(), "m", "p")
    rt.store.open_transcript(record).append_message(old.to_dict())
    for n in range(1, 12):  # as test_memory_flush: the context nears the window, flush, then compaction
        rt.run_turn(MAIN, user_text(n))
    assert rt.compact(MAIN).ok  # a second summary: the first one (masked) as its previous summary
    rt.run_turn(MAIN, "after")
    kinds = {"flush" if "## Memory Flush" in r.system else "summary" if SUMMARY_MARKER in r.system else "turn"
             for r in requests}
    assert kinds == {"flush", "summary", "turn"}
    first = request_dump(requests[0])
    assert BOT_TOKEN in first and f"key: {MASK}" in first  # the message as the user sent it; MEMORY.md masked
    for req in requests[1:]:
        dump = request_dump(req)
        assert BOT_TOKEN not in dump and API_KEY not in dump, dump[:300]
    compactions = [json.loads(line) for line in transcripts(home).splitlines()
                   if json.loads(line)["type"] == "compaction"]
    assert compactions and all(c["summary"] == f"## Identifiers\n- the bot token is {MASK}" for c in compactions)
    assert API_KEY in (rt.agent.workspace / "MEMORY.md").read_text()


def test_the_masker_masks_overlapping_keys_whole_and_stays_cheap() -> None:
    a, b = "12345678", "5678abcdefgh"  # b starts inside a: masking a then b left "abcdefgh", b then a left "1234"
    m = SecretMasker([a, b, "short"])
    assert m.mask(f"x {a}abcdefgh y {a} z {b} short") == f"x {MASK} y {MASK} z {MASK} short"
    assert m.mask("nothing here") == "nothing here"
    rng = random.Random(6)
    keys = [f"sk-ant-api03-{rng.getrandbits(400):x}", BOT_TOKEN, API_KEY, "gw-token-Zq8vR3kLm2Xp9sT4uW7yB1cD5e"]
    big = SecretMasker(keys)
    prompt = "".join(rng.choice(["the ", "sk-", "1234", "CANARY ", "gw-", "\n", "note "]) for _ in range(40_000))
    prompt = prompt[:150_000]
    start = time.perf_counter()
    for _ in range(20):
        assert big.mask(prompt) == prompt
    assert (time.perf_counter() - start) / 20 < 0.02  # ~0.2 ms measured; a regression to per-char work fails


@pytest.mark.parametrize("seed", range(12))
def test_streamed_pieces_add_up_to_the_masked_text_and_never_carry_a_key(seed: int) -> None:
    from hermit.redaction import StreamMasker  # here: the other tests run against a tree without it

    rng = random.Random(seed)
    keys = ["12345678", "5678abcdefgh", BOT_TOKEN, API_KEY]
    m = SecretMasker(keys)
    text = "".join(rng.choice(["hi ", "1234", "5678", "abcdefgh", BOT_TOKEN, API_KEY, BOT_TOKEN[:20], "x"])
                   for _ in range(60))
    stream, out, at = StreamMasker(m), [], 0
    while at < len(text):
        step = rng.randint(1, 12)
        out.append(stream.feed(text[at:at + step]))
        at += step
    out.append(stream.finish())
    sent = "".join(out)
    assert not any(k in sent for k in keys)
    assert sent.replace(MASK, "") == m.mask(text).replace(MASK, "")
