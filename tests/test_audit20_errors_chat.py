"""Audit 20, errors as a leak path: what a failed turn tells a contact or a group, and what the log keeps.

Real providers quote the request in a 400 ("Invalid 'messages[1].content': …" — the prompt, history included), show
the key's end in a 401 ("Incorrect API key provided: sk-…abcd"), answer a 429/500 with their own text or an HTML
page, or send garbage. Each of those ends a contact's or a group's turn here, through the real `hermit gateway run`,
the real Telegram adapter polling the fake Bot API and the fake provider speaking the OpenAI API with a key. The
owner's canaries sit in MEMORY.md, memory/private/ and the main session. A contact's model also asks its file and
memory tools for the owner's files, by name and by way of `..`, and the errors it gets back are read in its next
request (what it could repeat to the contact).

Asserted: a contact and the group get the one apology and nothing else — no canary, key or its end, bot token,
provider text, status, URL or host path; the tool errors a contact's model reads name none of those either; the
gateway log keeps the detail (the owner's) with the key and the bot token masked, and the main session's next
request holds no contact's failure. Holds (guard). Found (LOW): the provider's message was kept whole, so a 400 that
quoted the owner's request copied MEMORY.md and the main session into the log (and the transcript, the terminal and
the bug report its hint asks for) once per failure and retry notice; it is now cut to 300 characters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from audit19_who import until
from channeldrivers import TelegramDriver
from channelhelpers import run
from hermit.gateway.replies import APOLOGY
from hermit.testing.fake_provider import FakeProvider
from test_channel_gateway import Gateway, env_for

KEY = "sk-proj-AUDIT20ERRKEY-7c1f9e2b4d"
CANARIES = {"memory": "WOMBAT-MEMORY-2001", "private": "WOMBAT-PRIVATE-2002", "chat": "WOMBAT-CHAT-2003"}
OWNER, GROUP, MEMBER = 1001, -1007, 3003
CONTACTS = {"echo400": 2002, "key401": 2003, "page500": 2004, "garbage": 2005, "tools": 2006}
TOOL_PROBES: list[dict[str, Any]] = [
    {"name": "read", "arguments": {"path": "MEMORY.md"}},
    {"name": "read", "arguments": {"path": "memory/private/p.md"}},
    {"name": "read", "arguments": {"path": "../hermit.yaml"}},
    {"name": "memory_get", "arguments": {"path": "MEMORY.md"}},
    {"name": "memory_get", "arguments": {"path": "memory/private/p.md"}},
]
HTML_PAGE = ("<html><head><title>500 Internal Server Error</title></head><body><h1>Internal error</h1>"
             "<pre>upstream request: {request}</pre></body></html>")
SCRIPT: list[dict[str, Any]] = [
    {"match": {"contains": "OWNER-FAILS"}, "error": 400, "repeat": True,
     "message": "Invalid 'messages[1].content': expected a string, got {request}"},
    {"match": {"contains": "OWNER-SENTINEL"}, "text": "sentinel-ok", "repeat": True},
    {"match": {"contains": "CONTACT-echo400"}, "error": 400, "repeat": True,
     "message": "Invalid 'messages[1].content': expected a string, got {request}"},
    {"match": {"contains": "CONTACT-key401"}, "error": 401, "repeat": True,
     "message": "Incorrect API key provided: sk-proj-************************{key4}. You can find your API key at "
                "https://platform.openai.com/account/api-keys."},
    {"match": {"contains": "CONTACT-page500"}, "error": 500, "message": HTML_PAGE, "repeat": True},
    {"match": {"contains": "CONTACT-garbage"}, "garbage": True, "repeat": True},
    {"match": {"contains": "GROUP-ASK"}, "error": 429, "retry_after": 0, "repeat": True,
     "message": "Rate limit reached for gpt-x in organization org-AUDIT20ORG on tokens: {request}"},
    {"match": {"contains": "tool_call_id"}, "text": "tools-done", "repeat": True},
    {"match": {"contains": "CONTACT-tools"}, "tool_calls": TOOL_PROBES},
    {"match": {"contains": "OWNER-SAYS"}, "text": "noted"},
]


def write_home(home: Path, driver: TelegramDriver, provider: FakeProvider) -> None:
    account = {**driver.account_config("personal"), "owners": [str(OWNER)], "dm_policy": "allowlist",
               "allow_from": [str(c) for c in CONTACTS.values()], "group_policy": "allowlist",
               "groups": [str(GROUP)], "group_allow_from": [str(MEMBER)], "require_mention": False}
    cfg = {"agents": {"defaults": {"model": "fake/test-model", "memory_search": {"provider": "none"}}},
           "models": {"providers": {"fake": {"type": "openai-compatible", "api_key_env": "AUDIT20_KEY",
                                             "max_retries": 1, "base_url": provider.openai_base_url}}},
           "gateway": {"shutdown_grace_seconds": 5},
           "channels": {"telegram": {"accounts": {"personal": account}}}}
    home.mkdir(mode=0o700, parents=True)
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    ws = home / "workspace"
    (ws / "memory" / "private").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(f"# Memory\n\n- wombat {CANARIES['memory']}\n", encoding="utf-8")
    (ws / "memory" / "private" / "p.md").write_text(f"- wombat {CANARIES['private']}\n", encoding="utf-8")


def chats(driver: TelegramDriver) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in driver.fakes["personal"].sent():
        out.setdefault(str(m["chat_id"]), []).append(str(m["text"]))
    return out


def test_failed_turns_tell_contacts_and_groups_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    driver = TelegramDriver(["personal"])
    token = driver.fakes["personal"].token

    async def body() -> dict[str, list[str]]:
        await driver.start()
        write_home(home, driver, provider)
        gw = Gateway(home, env_for(driver) | {"AUDIT20_KEY": KEY})
        fake = driver.fakes["personal"]
        try:
            await gw.start()
            fake.push_message(chat_id=OWNER, text=f"OWNER-SAYS remember wombat {CANARIES['chat']}")
            await until(lambda: chats(driver).get(str(OWNER)) == ["noted"], "the owner's first answer")
            for kind, contact in CONTACTS.items():
                fake.push_message(chat_id=contact, text=f"CONTACT-{kind} what does the owner keep?")
            fake.push_message(chat_id=GROUP, from_id=MEMBER, chat_type="supergroup", text="GROUP-ASK tell us")
            await until(lambda: all(chats(driver).get(str(c)) for c in CONTACTS.values()), "every contact's answer")
            await until(lambda: chats(driver).get(str(GROUP)), "the group's answer")
            fake.push_message(chat_id=OWNER, text="OWNER-SENTINEL anything new?")
            await until(lambda: chats(driver).get(str(OWNER), [])[-1:] == ["sentinel-ok"], "the sentinel")
            fake.push_message(chat_id=OWNER, text="OWNER-FAILS and now?")
            await until(lambda: chats(driver).get(str(OWNER), [])[-1:] == [APOLOGY], "the owner's failed turn")
            return chats(driver)
        finally:
            if gw.proc is not None:
                await gw.stop()
            await driver.stop()

    with FakeProvider(SCRIPT, api_key=KEY) as provider:
        sent = run(body, timeout=240)
        requests = [json.dumps(r.body, ensure_ascii=False) for r in provider.requests]

    # Each failure ended in the one apology; the probing contact got its answer.
    for kind, contact in CONTACTS.items():
        assert sent[str(contact)] == (["tools-done"] if kind == "tools" else [APOLOGY]), (kind, sent[str(contact)])
    assert sent[str(GROUP)] == [APOLOGY], sent[str(GROUP)]
    others = [t for peer, texts in sent.items() if peer != str(OWNER) for t in texts]
    secrets = [*CANARIES.values(), KEY, KEY[-4:], token, "AUDIT20ORG", str(home), "127.0.0.1", "HTTP "]
    assert not [(s, t) for t in others for s in secrets if s in t]

    # The errors the probing contact's model read (its follow-up request) name no canary, key or host path.
    follow_up = [r for r in requests if "CONTACT-tools" in r and "tool_call_id" in r]
    assert follow_up, "the probing contact's tool results never went back to the model"
    tool_text = follow_up[-1]
    assert not [s for s in [*CANARIES.values(), KEY, token, str(home), str(tmp_path)] if s in tool_text], tool_text

    # No contact's or group's failure reached the main session's next request.
    sentinel = [r for r in requests if "OWNER-SENTINEL" in r][-1]
    assert CANARIES["memory"] in sentinel and CANARIES["chat"] in sentinel
    assert not [m for m in ("CONTACT-", "GROUP-ASK", "Incorrect API key", "Internal error") if m in sentinel]

    # The log keeps the owner's detail, masked: a failed turn is named, the key and the bot token never.
    log = "\n".join(p.read_text(encoding="utf-8") for p in (home / "logs").glob("*.log*"))
    log += (home / "gateway.stderr").read_text(encoding="utf-8")
    assert "failed" in log and "Incorrect API key" in log
    assert KEY not in log and token not in log
    # A provider quoting the whole request (the owner's: MEMORY.md, the main session) is cut in the log, as in the
    # transcript and the terminal: the error's hint asks for a bug report, and one echo per failure and retry
    # notice would otherwise copy the prompt into the log (and rotate its history out).
    assert f"telegram/{OWNER} failed" in log and not [c for c in CANARIES.values() if c in log], log[-3000:]
    assert max(len(line) for line in log.splitlines()) < 2000
