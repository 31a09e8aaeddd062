"""`hermit setup` on a terminal: Enter at the model choice, on a first run with no API key anywhere, picked
Anthropic and then asked for its key again and again — Ctrl-C was the only way out (t7's walk, session 22). Enter now
picks what can work here: a local Ollama that answers (it was already first), else a provider whose key is in the
environment, else the built-in fake provider; and setup says how to add a real model later.

Real `hermit setup` on a pseudo-terminal (test_setup.Terminal); `--ollama-url` at a port nothing listens on."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import test_setup as setup_cli  # its Terminal, env_for and config (a module attribute: its tests are not collected)
from gatewayhelpers import free_port


def _argv() -> list[str]:
    return ["setup", "--no-check", "--ollama-url", f"http://127.0.0.1:{free_port()}"]  # no Ollama answers there


def test_enter_at_the_model_choice_with_no_keys_picks_the_fake_provider(tmp_path: Path) -> None:
    home = tmp_path / "home"
    term = setup_cli.Terminal(_argv(), setup_cli.env_for(home))
    try:
        term.expect("4) the built-in fake provider")
        term.expect("choice [4]: ")  # before: [1], Anthropic, and its key asked for until Ctrl-C
        term.send("")
        term.expect("Model [test-model]: ")
        term.send("")
        term.expect("Add a chat channel account")
        term.send("")
        term.expect("next: ")
    except BaseException:
        os.killpg(term.proc.pid, signal.SIGKILL)
        term.close()
        raise
    assert term.close() == 0, term.seen
    assert "API key for anthropic" not in term.seen
    assert "for a real model later: hermit setup --provider anthropic" in term.seen, term.seen
    assert setup_cli.config(home)["agents"]["defaults"]["model"] == "fake/test-model"  # type: ignore[index]


def test_with_a_key_in_the_environment_enter_keeps_the_model_it_gives(tmp_path: Path) -> None:
    """Held before too: a key in the environment makes a current model, which Enter keeps (no key asked for)."""
    home = tmp_path / "home"
    term = setup_cli.Terminal(_argv(), setup_cli.env_for(home, OPENAI_API_KEY="sk-s22-enter-openai"))
    try:
        term.expect("5) keep the current model (openai/gpt-4.1)")
        term.expect("choice [5]: ")
    finally:
        os.killpg(term.proc.pid, signal.SIGKILL)
        term.close()
