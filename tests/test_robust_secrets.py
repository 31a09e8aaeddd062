"""A provider error that echoes the API key never shows it: not on `hermit agent`'s output (errors and
retry notices), not in any file under the state dir (the transcript); a channel token the gateway masks in
its log is masked in a stored error too; one masker does it all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agenthelpers import load, make_runtime
from conftest import write
from hermit.errors import HermitError
from hermit.gateway.logs import SecretMask
from hermit.redaction import MASK, SecretMasker
from hermit.sessions.transcript import read_transcript
from hermit.testing import FakeProvider
from prochelpers import PROC_TIMEOUT

KEY = "sk-live-THISISTHEAPIKEY-0123456789abcdef"


def agent_says_hello(home: Path, fake: FakeProvider, api: str, key: str) -> subprocess.CompletedProcess[str]:
    """`hermit agent -m hello --verbose` on a new state dir `home` whose model is `fake` through its `api`
    ("anthropic" or "openai"), the API key `key` in the environment variable the config names."""
    provider = ({"type": "anthropic", "base_url": fake.base_url, "api_key_env": "MY_KEY"} if api == "anthropic"
                else {"type": "openai-compatible", "base_url": fake.openai_base_url, "api_key_env": "MY_KEY"})
    write(home / "hermit.yaml", yaml.safe_dump({
        "agents": {"defaults": {"model": "fake/m", "memory_search": {"enabled": False}}},
        "models": {"providers": {"fake": provider}}}))
    (home / "workspace").mkdir()
    env = {**os.environ, "HERMIT_HOME": str(home), "MY_KEY": key, "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "hermit.cli.main", "agent", "-m", "hello", "--verbose"], env=env,
                          capture_output=True, text=True, timeout=PROC_TIMEOUT, stdin=subprocess.DEVNULL)


def test_masker_masks_longest_first_and_ignores_short_values() -> None:
    m = SecretMasker(["abc", "", "token-1234567", "token-1234567-and-more"])
    assert m.mask("a token-1234567-and-more b token-1234567 c abc") == f"a {MASK} b {MASK} c abc"
    err = HermitError(f"refused token-1234567 (from {KEY})", "check token-1234567")
    m.add(KEY)
    masked = m.mask_error(err)
    assert masked is err and KEY not in str(err) and "token-1234567" not in str(err) and err.args[0] == err.message


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_hermit_agent_never_shows_or_stores_an_echoed_key(tmp_path: Path, api: str) -> None:
    home = tmp_path / "home"
    echo = f"invalid api key: {KEY}"
    with FakeProvider([{"error": 500, "message": f"upstream trouble for {KEY}"}, {"error": 401, "message": echo}],
                      ) as fake:
        r = agent_says_hello(home, fake, api, KEY)
    assert r.returncode == 1
    assert KEY not in r.stdout + r.stderr
    assert f"invalid api key: {MASK}" in r.stderr and "retrying" in r.stderr  # the notice is masked too
    leaked = [p for p in home.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []
    stored = [e for p in (home / "agents" / "main" / "sessions").glob("*.jsonl") for e in read_transcript(p).entries]
    assert any(MASK in str(getattr(e, "message", "")) for e in stored)


def test_a_channel_token_masked_in_the_gateway_log_is_masked_in_a_stored_error(tmp_path: Path) -> None:
    token = "123456:BOT-TOKEN-abcdefghijklmnop"
    SecretMask([token])  # what the gateway's logging setup does with every configured secret
    with FakeProvider([{"error": 400, "message": f"your message quoted {token}"}]) as fake:
        rt = make_runtime(load(tmp_path, "openai", fake), None, memory=False)
        with pytest.raises(HermitError) as err:
            rt.run_turn("agent:main:main", "hi")
        assert token not in str(err.value)
    files = [p for p in tmp_path.rglob("*.jsonl")]
    assert files and not [p for p in files if token.encode() in p.read_bytes()]
    assert any(MASK in p.read_text() for p in files)
