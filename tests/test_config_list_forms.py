"""The original's list forms in hermit.yaml: `models: [{id: …}]` under a provider is accepted; where a list
cannot be read unambiguously the error names file and line and shows the right form."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermit.config import StatePaths, load_config
from hermit.errors import ConfigError
from hermit.models import model_profile


def _load(tmp_path: Path, text: str, name: str = "hermit.yaml") -> object:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return load_config(StatePaths(tmp_path))


def test_provider_models_as_a_list_of_ids_is_accepted(tmp_path: Path) -> None:
    cfg = _load(tmp_path, """\
models:
  providers:
    ollama:
      type: openai-compatible
      base_url: http://127.0.0.1:11434/v1
      models:
        - id: llama3.1
          context_window: 131072
        - id: qwen3
""")
    models = cfg.config.models.providers["ollama"].models  # type: ignore[attr-defined]
    assert list(models) == ["llama3.1", "qwen3"]
    assert models["llama3.1"].context_window == 131072 and models["qwen3"].context_window is None
    # A limit the entry leaves out is the known-model table's (qwen3: 40,960), not a fixed 200k.
    profile = model_profile("ollama", "qwen3", cfg.config.models.providers["ollama"])  # type: ignore[attr-defined]
    assert (profile.context_window, profile.max_output_tokens) == (40_960, 8192)


def test_json_list_form_too(tmp_path: Path) -> None:
    cfg = _load(tmp_path, '{"models": {"providers": {"lm": {"type": "openai-compatible", '
                          '"base_url": "http://127.0.0.1:1234/v1", "models": [{"id": "phi-4"}]}}}}', "hermit.json")
    assert list(cfg.config.models.providers["lm"].models) == ["phi-4"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("text", "line", "words"), [
    ("agents: {}\nmodels:\n  - id: llama3.1\n", 2, "models.providers"),
    ("models:\n  providers:\n    o:\n      type: openai-compatible\n      models:\n        - name: llama3.1\n", 5, "- id:"),
    ("models:\n  providers:\n    o:\n      type: openai-compatible\n      models:\n        - id: a\n        - id: a\n",
     5, "twice"),
    ("models:\n  providers:\n    - id: ollama\n      type: openai-compatible\n", 2, "providers:"),
])
def test_ambiguous_lists_get_file_line_and_the_right_form(tmp_path: Path, text: str, line: int, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    msg = e.value.message + " " + e.value.hint
    assert f"hermit.yaml:{line}" in msg, msg
    assert words in msg, msg
    assert "Input should be a valid dictionary" not in msg
