"""`hermit doctor`: every check runs, nothing leaks, broken environments and the chat model are reported."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml

from hermit.cli.checks import Check, CheckFn, check, run_checks
from hermit.cli.context import CliContext
from hermit.cli.main import main
from hermit.errors import ConfigError
from hermit.testing import FakeProvider

SETUP = "run `hermit setup` first (or `hermit init` for memory only)"  # the README's first step is setup

_KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY")


def doctor(home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
           *extra: str, env: dict[str, str] | None = None) -> tuple[int, list[dict[str, object]], str]:
    for k in _KEY_VARS:
        monkeypatch.delenv(k, raising=False)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("HERMIT_HOME", str(home))
    code = main(["doctor", "--json", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def by_name(checks: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(c["name"]): c for c in checks}


def keyword_only_config(home: Path, extra: dict[str, object] | None = None) -> None:
    (home / "workspace").mkdir(parents=True, exist_ok=True)
    cfg: dict[str, object] = {"agents": {"defaults": {"memory_search": {"provider": "none"}}}, **(extra or {})}
    (home / "hermit.yaml").write_text(yaml.safe_dump(cfg))


def test_before_init_every_check_runs_and_nothing_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    code, checks, err = doctor(home, capsys, monkeypatch)
    c = by_name(checks)
    assert code == 1 and err == ""
    assert [x["name"] for x in checks][:5] == ["python", "sqlite", "extensions", "sqlite-vec", "fts5"]
    assert c["state dir"]["status"] == "fail" and str(c["state dir"]["fix"]) == SETUP
    assert c["workspace"]["status"] == "fail" and "does not exist" in str(c["workspace"]["detail"])
    assert "RuntimeError" not in json.dumps(checks)
    assert c["chat model"]["status"] == "warn" and "not configured" in str(c["chat model"]["detail"])
    assert c["memory index"]["status"] == "skip"
    assert not home.exists()


def test_text_output_reads_well(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMIT_HOME", str(tmp_path / "home"))
    for k in _KEY_VARS:
        monkeypatch.delenv(k, raising=False)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "extension loading extension loading" not in out
    assert "[ok  ] extensions       SQLite extension loading enabled" in out
    assert "[warn] chat model" in out and "[skip] memory index" in out and f"fix: {SETUP}" in out


def test_broken_config_does_not_stop_the_other_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "hermit.yaml").write_text("agents:\n  defaults:\n    memory_serch: {}\n")
    code, checks, _ = doctor(home, capsys, monkeypatch)
    c = by_name(checks)
    assert code == 1
    assert c["config"]["status"] == "fail" and "memory_serch" in str(c["config"]["detail"])
    assert c["translation"]["status"] == "ok"  # does not need the config, so it still ran
    assert c["chat model"]["status"] == "skip" and "config" in str(c["chat model"]["detail"])


def test_hermit_home_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.write_text("not a dir")
    code, checks, _ = doctor(home, capsys, monkeypatch)
    c = by_name(checks)
    assert code == 1
    assert c["state dir"]["status"] == "fail" and "is a file" in str(c["state dir"]["detail"])
    # the dictionary package is installed: doctor must not blame it for the state dir
    assert c["translation"]["status"] == "skip"
    assert "not installed" not in json.dumps(checks)
    assert "NotADirectoryError" not in json.dumps(checks) and "Errno" not in json.dumps(checks)


def test_chat_model_local_server_reachable_or_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    with FakeProvider([]) as fake:
        keyword_only_config(home, {
            "agents": {"defaults": {"model": "local/m1", "memory_search": {"provider": "none"}}},
            "models": {"providers": {"local": {"type": "openai-compatible", "base_url": fake.openai_base_url}}},
        })
        code, checks, _ = doctor(home, capsys, monkeypatch)
        chat = by_name(checks)["chat model"]
        assert chat["status"] == "ok" and "answering" in str(chat["detail"]), chat
    # the server is gone now: the same config fails, quickly and clearly
    code, checks, _ = doctor(home, capsys, monkeypatch)
    chat = by_name(checks)["chat model"]
    assert code == 1 and chat["status"] == "fail"
    assert "not reachable" in str(chat["detail"]) and "base_url" in str(chat["fix"])


def test_chat_model_missing_key_names_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    keyword_only_config(home, {"agents": {"defaults": {"model": "anthropic/claude-sonnet-4-5",
                                                       "memory_search": {"provider": "none"}}}})
    code, checks, _ = doctor(home, capsys, monkeypatch)
    chat = by_name(checks)["chat model"]
    assert code == 1 and chat["status"] == "fail" and "ANTHROPIC_API_KEY" in str(chat["fix"])
    code, checks, _ = doctor(home, capsys, monkeypatch, env={"ANTHROPIC_API_KEY": "sk-ant-x"})
    chat = by_name(checks)["chat model"]
    assert chat["status"] == "ok" and "not called" in str(chat["detail"])
    assert "sk-ant-x" not in json.dumps(checks)


def test_check_seam_never_raises_and_skips_dependents(tmp_path: Path) -> None:
    @check("first", fix="do the first thing")
    def first(ctx: CliContext) -> str:
        raise ConfigError("broken", "the hint wins over the default fix")

    @check("second", needs=("first",))
    def second(ctx: CliContext) -> str:
        raise AssertionError("must not run when 'first' failed")

    @check("third", fix="restart")
    def third(ctx: CliContext) -> str:
        raise OSError("disk on fire")

    @check("fourth")
    def fourth(ctx: CliContext) -> Check:
        return Check("fourth", "warn", "meh")

    fns: list[CheckFn] = [first, second, third, fourth]
    res = run_checks(CliContext(home=tmp_path), fns)
    assert [(c.name, c.status) for c in res] == [("first", "fail"), ("second", "skip"), ("third", "fail"),
                                                 ("fourth", "warn")]
    assert res[0].fix == "the hint wins over the default fix"
    assert res[2].detail == "OSError: disk on fire" and res[2].fix == "restart"
    assert [c.ok for c in res] == [False, True, False, True]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_local_urls_are_probed_and_a_closed_port_fails() -> None:
    from hermit.cli.model_check import is_local_url, probe

    assert is_local_url("http://127.0.0.1:11434/v1") and is_local_url("http://localhost:1/v1")
    assert is_local_url("http://192.168.1.5:8080/v1") and not is_local_url("https://api.openai.com/v1")
    why = probe(f"http://127.0.0.1:{_free_port()}/v1")
    assert why is not None and "cannot connect" in why
