"""`hermit setup` on a terminal as a new user answers it (what the H5 audit found): Enter at the API key prompt —
nothing pasted yet — asked again with the way out, where it ended setup with "pass --api-key-stdin … (or run
`hermit setup` on a terminal)" to a person at a terminal, every answer before it lost."""

from __future__ import annotations

from pathlib import Path

import test_setup as setup_cli  # its Terminal and env_for (a module attribute: its tests are not collected here)
from hermit.testing import FakeProvider

KEY = "sk-ant-test-0123456789abcdef"


def test_an_empty_api_key_on_a_terminal_is_asked_again_and_setup_goes_on(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        term = setup_cli.Terminal(["setup", "--provider", "anthropic", "--base-url", fake.base_url],
                                  setup_cli.env_for(home))
        try:
            term.expect("Model [claude-sonnet-4-5]: ")
            term.send("")
            term.expect("API key for anthropic: ")
            term.send("")  # Enter: no key at hand yet
            # The prompt asked again, not only the line before it: getpass drops what was typed before it asks.
            term.expect("such as the fake provider)\nAPI key for anthropic: ")
            term.send(KEY)
            term.expect("Add a chat channel account")
            term.send("")
            term.expect("next: ")
        finally:
            code = term.close()
    assert code == 0, term.seen
    assert "on a terminal" not in term.seen and KEY not in term.seen
    assert "ok: anthropic/claude-sonnet-4-5 answers" in term.seen
    assert f"ANTHROPIC_API_KEY={KEY}" in (home / "hermit.env").read_text()


def test_ctrl_c_at_the_asked_again_key_saves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    term = setup_cli.Terminal(["setup", "--provider", "openai", "--model", "gpt-4.1"], setup_cli.env_for(home))
    try:
        term.expect("API key for openai: ")
        term.send("")
        term.expect("such as the fake provider)\nAPI key for openai: ")
        term.send("\x03")  # Ctrl-C, as the line says
        term.expect("interrupted")
    finally:
        code = term.close()
    assert code == 130, term.seen
    assert not home.exists()  # nothing written: no config, no env file, no workspace
