"""A provider's echo of part of a key (s21 t5): "Incorrect API key provided: sk-proj-****2b4d", "sk-…2b4d",
"sk-proj-AUD...2b4d". Masking matched whole secrets only, so the key's type and its last characters stayed in the
owner's terminal, retry notices, transcript and gateway log (what a bug report pastes). Now any run of mask
characters followed by a configured secret's end (4 characters or more), with the secret's start before it if shown,
is masked as the secret is. Real `hermit agent` and real `hermit gateway run` against the fake provider."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gatewayhelpers import GatewayProcess, write_config, ws_calls
from hermit.redaction import MASK, SecretMasker
from hermit.testing import FakeProvider
from test_robust_secrets import agent_says_hello

KEY = "sk-proj-S21PARTIALKEY-8e41c07d2b4d"
END = KEY[-4:]
ECHOES = [f"Incorrect API key provided: sk-proj-{'*' * 40}{END}. You can find your API key at https://example.test.",
          f"invalid x-api-key sk-…{END}", f"key {KEY[:11]}...{END} was revoked", f"key ending •••{KEY[-6:]} denied"]


def test_each_partial_form_is_masked_and_plain_words_are_not() -> None:
    m = SecretMasker([KEY])
    for echo in ECHOES:
        masked = m.mask(echo)
        assert END not in masked and MASK in masked, masked
        assert "sk-proj-" not in masked.replace(" sk-…", "")  # the key's start goes with its end
    # Not an echo: the same four characters as a word, or after a single full stop; a run not followed by the end
    assert m.mask(f"build {END} done. {END}") == f"build {END} done. {END}"
    assert m.mask("loading... please wait **bold**") == "loading... please wait **bold**"


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_hermit_agent_shows_and_keeps_no_partial_key(tmp_path: Path, api: str) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"error": 500, "message": ECHOES[1]}, {"error": 401, "message": ECHOES[0]}]) as fake:
        r = agent_says_hello(home, fake, api, KEY)
    assert r.returncode == 1
    assert "Incorrect API key provided" in r.stderr and "retrying" in r.stderr, r.stderr
    assert END not in r.stdout + r.stderr, r.stderr
    kept = [p for p in home.rglob("*") if p.is_file() and END.encode() in p.read_bytes()]
    assert kept == []
    stored = b"".join(p.read_bytes() for p in (home / "agents" / "main" / "sessions").glob("*.jsonl"))
    assert b"Incorrect API key provided" in stored


def test_the_gateway_log_and_transcript_keep_no_partial_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "gw"
    with FakeProvider([{"error": 401, "message": ECHOES[2], "repeat": True}], api_key=KEY) as fake:
        write_config(home, fake.openai_base_url)
        cfg = yaml.safe_load((home / "hermit.yaml").read_text(encoding="utf-8"))
        cfg["models"]["providers"]["fake"]["api_key_env"] = "MY_KEY"
        (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
        monkeypatch.setenv("MY_KEY", KEY)  # the gateway subprocess's environment
        gw = GatewayProcess(home)
        try:
            gw.wait_ready()
            replies = ws_calls(gw.ws_url, gw.token, [("chat.send", {"text": "hello"})])
        finally:
            gw.stop()
    said = str(replies)
    assert END not in said, said
    log = "\n".join(p.read_text(encoding="utf-8") for p in (home / "logs").glob("*.log*")) + gw.stderr()
    assert "revoked" in log, log[-2000:]
    assert END not in log, log[-2000:]
    kept = [p for p in home.rglob("*") if p.is_file() and END.encode() in p.read_bytes()]
    assert kept == []
