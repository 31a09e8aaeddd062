"""Keys stay out of what a tool gives back: a tool result is masked (a key a command prints or a file holds
never reaches the transcript or the provider), and the `hermit` process is non-dumpable, so the owner's
unsandboxed exec — same uid, whitelisted environment — cannot read the keys from /proc/$PPID/environ either.
Real `hermit agent` subprocesses against the fake provider; as root the command runs as uid 65534, since a
root process reads any /proc/<pid>/environ (non-dumpable or not), which is also checked."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agenthelpers import tool_results
from ciguard import need
from hermit.redaction import CUT_MARGIN, MASK, SecretMasker, mask_cut
from hermit.testing import FakeProvider
from hermit.testing.fake_embeddings import FakeEmbeddingServer
from prochelpers import PROC_TIMEOUT, python_as, pythonpath

KEY = "sk-provider-key-0123456789abcdef"
BOT_TOKEN = "7712345678:AAHfakeTelegramBotToken_abcdefghijk12"
GATEWAY_TOKEN = "gw-token-Zq8vR3kLm2Xp9sT4uW7yB1cD5eF6gH0j"
CANARY = "not-a-secret-canary-4c1e7b"  # not registered anywhere: masking cannot hide it, only /proc can
NOBODY = 65534


def agent_turn(home: Path, command: str, *, uid: int | None = None, channels: dict[str, object] | None = None,
               memory_search: dict[str, object] | None = None) -> tuple[str, str]:
    """One `hermit agent` turn whose model runs `command` through exec: (the tool result the provider got,
    every transcript line)."""
    script = [{"tool_calls": [{"name": "exec", "arguments": {"command": command}}]}, "done"]
    with FakeProvider(script) as fake:
        cfg: dict[str, object] = {
            "agents": {"defaults": {"model": "fake/m", "memory_search": memory_search or {"provider": "none"}}},
            "models": {"providers": {"fake": {"type": "openai-compatible", "base_url": fake.openai_base_url,
                                              "api_key_env": "HERMIT_TEST_PROVIDER_KEY"}}}}
        if channels is not None:
            cfg["channels"] = channels
        (home / "hermit.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
        env = {**{k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))},
               "HERMIT_HOME": str(home), "HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE",
               "HERMIT_TEST_PROVIDER_KEY": KEY, "HERMIT_TEST_CANARY": CANARY}
        if not (home / "workspace").exists():
            init = subprocess.run([sys.executable, "-m", "hermit.cli.main", "init"], capture_output=True, text=True,
                                  env=env, stdin=subprocess.DEVNULL, timeout=PROC_TIMEOUT)
            assert init.returncode == 0, init.stderr
        kw: dict[str, object] = {}
        python = sys.executable
        if uid is not None:
            kw = {"user": uid, "group": uid, "extra_groups": []}
            found = python_as(kw)
            need(found is not None, f"a Python that can import this checkout as uid {uid}")
            python, env["PYTHONPATH"] = str(found), pythonpath()
            for p in [home, *home.rglob("*")]:
                os.lchown(p, uid, uid)
        r = subprocess.run([python, "-m", "hermit.cli.main", "agent", "-m", "go"], capture_output=True,
                           text=True, env=env, stdin=subprocess.DEVNULL, timeout=PROC_TIMEOUT, **kw)  # type: ignore[call-overload]
        assert r.returncode == 0, r.stderr
        result = tool_results(fake.requests[-1])[-1][0]  # this turn's (a session may hold earlier ones)
    stored = "".join(p.read_text(encoding="utf-8") for p in (home / "agents").rglob("*.jsonl"))
    return result, stored


@pytest.fixture
def home() -> Iterator[Path]:
    """A state dir that uid 65534 can reach too (pytest's tmp dirs are 0700 root's)."""
    base = Path(tempfile.mkdtemp(prefix="hermit-tool-secrets-"))
    os.chmod(base, 0o755)
    (base / "home").mkdir(mode=0o700)
    try:
        yield base / "home"
    finally:
        shutil.rmtree(base)


def test_a_key_in_a_tool_result_is_masked_before_the_transcript_and_the_provider(home: Path) -> None:
    result, stored = agent_turn(home, f"echo key=$(printf %s {KEY[:10]}){KEY[10:]}; echo done")
    assert KEY not in result and "key=***" in result and "done" in result
    assert KEY not in stored and "key=***" in stored
    assert json.dumps(KEY)[1:-1] not in stored


def test_the_owners_exec_cannot_read_the_hermit_process_environment(home: Path) -> None:
    command = "tr '\\0' '\\n' < /proc/$PPID/environ | grep HERMIT_TEST_ || echo unreadable"
    as_user = NOBODY if os.geteuid() == 0 else None
    result, _ = agent_turn(home, command, uid=as_user)
    assert CANARY not in result and "unreadable" in result and "Permission denied" in result
    if os.geteuid() == 0:  # what docs/security.md says: root's own commands still read it (CAP_SYS_PTRACE)
        for p in [home, *home.rglob("*")]:
            os.lchown(p, 0, 0)
        result, _ = agent_turn(home, command)
        assert CANARY in result


def test_channel_tokens_and_the_gateway_token_are_masked_in_a_cli_run(home: Path) -> None:
    """`hermit agent` registers what the config names and the gateway token before the command runs, not only
    when it reports an error: a command printing the bot token or the token file shows `***`."""
    (home / "gateway").mkdir(mode=0o700)
    token = home / "gateway" / "token"
    token.write_text(GATEWAY_TOKEN + "\n", encoding="utf-8")
    token.chmod(0o600)
    channels = {"telegram": {"accounts": {"personal": {"token": BOT_TOKEN}}}}
    result, stored = agent_turn(home, f"grep -o 'token: .*' {home / 'hermit.yaml'}; echo gw=$(cat {token})",
                                channels=channels)
    assert BOT_TOKEN not in result and "token: ***" in result
    assert GATEWAY_TOKEN not in result and "gw=***" in result
    assert BOT_TOKEN not in stored and GATEWAY_TOKEN not in stored



EMBED_KEY = "emb-compat-key-ABCDEFGH12345678"


def test_the_embeddings_key_is_masked_like_the_models(home: Path) -> None:
    """Audit U: memory_search.remote's key (by variable or in the config), its headers and a password in its
    URL were never registered: the owner's exec printing hermit.env showed the embeddings key in the tool
    result, the transcript and the request to the model provider, while the model's key beside it was ***."""
    (home / "hermit.env").write_text(f"HERMIT_TEST_EMBED_KEY={EMBED_KEY}\n", encoding="utf-8")
    (home / "hermit.env").chmod(0o600)
    with FakeEmbeddingServer(dims=32, api_key=EMBED_KEY) as emb:
        memory = {"provider": "openai-compatible", "model": "fake-embed",
                  "remote": {"base_url": emb.openai_base_url, "api_key_env": "HERMIT_TEST_EMBED_KEY",
                             "headers": {"X-Team-Secret": "team-header-secret-8d2f1c",
                                         "HTTP-Referer": "https://myapp.example/hermit"}}}
        result, stored = agent_turn(home, f"cat {home / 'hermit.env'}; grep -o 'X-Team-Secret: .*' "
                                          f"{home / 'hermit.yaml'}; echo see https://myapp.example/hermit",
                                    memory_search=memory)
    assert EMBED_KEY not in result and "HERMIT_TEST_EMBED_KEY=***" in result
    assert "team-header-secret-8d2f1c" not in result and "X-Team-Secret: ***" in result
    assert "see https://myapp.example/hermit" in result  # an ordinary header's value is not a secret
    assert EMBED_KEY not in stored and "team-header-secret-8d2f1c" not in stored


def test_passwords_in_endpoint_urls_and_the_postgres_dsn_are_secrets(tmp_path: Path) -> None:
    from hermit.cli.context import CliContext, configured_secrets
    from hermit.redaction import header_secret, url_passwords

    (tmp_path / "hermit.yaml").write_text(yaml.safe_dump({
        "agents": {"defaults": {"memory_search": {
            "provider": "openai-compatible", "model": "m",
            "remote": {"base_url": "http://emb:emb-url-pass-5521@127.0.0.1:9/v1", "api_key": "emb-plain-key-77120"},
            "store": {"backend": "postgres", "postgres": {"dsn_env": "HERMIT_TEST_DSN"}}}}},
        "models": {"providers": {"proxy": {"type": "openai-compatible",
                                           "base_url": "https://u:proxy-pass-99812@proxy.example/v1"}}}}))
    ctx = CliContext(tmp_path, environ={
        "HERMIT_TEST_DSN": "postgresql://hermit:pg-pass-30817@db/hermit?sslpassword=pg-ssl-pass-4410",
        "https_proxy": "http://me:env-proxy-pass-6621@10.0.0.1:3128"})
    found = configured_secrets(ctx)
    for secret in ("emb-url-pass-5521", "emb-plain-key-77120", "proxy-pass-99812", "pg-pass-30817",
                   "pg-ssl-pass-4410", "env-proxy-pass-6621"):
        assert secret in found, secret
    assert url_passwords("host=db user=h password='kw-pass 1' dbname=x") == ["kw-pass 1"]
    assert url_passwords("postgresql://hermit@db/hermit?sslmode=require&password=q-pass-1234") == ["q-pass-1234"]
    assert url_passwords("host=db password=a-pass-1 sslpassword=b-pass-2") == ["a-pass-1", "b-pass-2"]
    assert url_passwords("https://api.example/v1?password_reset=1") == []
    assert header_secret("Authorization", "Bearer k-123456789") == "k-123456789"
    assert header_secret("X-Goog-Api-Key", "g-123456789") == "g-123456789"
    assert header_secret("Content-Type", "application/json") is None
    assert url_passwords("https://api.example/v1") == [] and url_passwords("http://user@host/") == []

def test_a_key_split_by_the_output_cut_is_masked_at_both_edges(home: Path) -> None:
    """exec keeps the first 8,000 and the last 12,000 bytes: a key straddling either edge would leave two halves
    the masker no longer recognises; whole keys in the kept parts are still masked."""
    first, last = f"full={KEY}\n", f"\nfull2={KEY}\n"
    body = (first + "x" * (7984 - len(first)) + KEY + "z" * 1000 + KEY + "y" * (11984 - len(last)) + last)
    script = home.parent / "print.py"
    script.write_text(f"import sys\nsys.stdout.write({body!r})\n", encoding="utf-8")
    result, stored = agent_turn(home, f"python3 {script}")
    assert "bytes of output omitted" in result
    assert "full=***" in result and "full2=***" in result
    for piece in (KEY[:16], KEY[16:], KEY[:6], KEY[-6:]):
        assert piece not in result and piece not in stored
    assert "x\n[… " in result and " omitted …]\ny" in result


def test_a_key_across_the_margins_inner_edge_is_masked_whole_and_the_count_stays_sane(home: Path) -> None:
    """The margin went before whole keys were masked: a key ending 10 characters into it kept its first
    part, unmasked (audit R). And the omitted count was taken from re-encoded text: invalid UTF-8 made it
    negative."""
    edge = 8000 - CUT_MARGIN
    body = "x" * (edge + 10 - len(KEY)) + KEY + "y" * 30000
    script = home.parent / "edge.py"
    script.write_text(f"import sys\nsys.stdout.write({body!r})\n", encoding="utf-8")
    result, stored = agent_turn(home, f"python3 {script}; printf '\\377%.0s' $(seq 20001) >&2")
    for piece in (KEY[:16], KEY[:-10], KEY[-10:]):
        assert piece not in result and piece not in stored
    counts = [int(n.replace(",", "")) for n in re.findall(r"\[… (-?[\d,]+) bytes of output omitted", result)]
    assert counts and all(n > 0 for n in counts), result[-400:]


def test_the_cut_drops_the_same_margin_whatever_ends_there() -> None:
    """Masking only the pieces at the cut that matched a secret answered a chat's guesses: its command chose
    what ended at the cut and saw `***` when the guess was the start of a key (~32 calls a character,
    audit Q). Now a fixed margin goes on both sides, whatever the text."""
    head = "A" * 1000
    for guess in ("sk-p", KEY[:12], "zzzz", ""):
        cut = mask_cut(head[len(guess):] + guess, guess[::-1] + "B" * (1000 - len(guess)))
        assert cut == ("A" * (1000 - CUT_MARGIN), "B" * (1000 - CUT_MARGIN))
    assert mask_cut("short", "tail") == ("", "")


def test_secrets_registered_for_later_are_read_when_first_masking() -> None:
    reads: list[int] = []
    masker = SecretMasker()

    def source() -> list[str]:
        reads.append(1)
        assert masker.mask("reentrant") == "reentrant"  # a log line written while reading must not wait
        return [KEY]

    masker.add_later(source)
    assert reads == []
    assert masker.mask(f"k={KEY}") == "k=***" and masker.mask(KEY) == MASK and reads == [1]
