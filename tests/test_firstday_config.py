"""`hermit setup` on the config `hermit init` wrote keeps its comments where they were (the first-day walk): the
template's closing comments — `# remote:` of memory_search, `# list:` of agents, the `# models:` example — came
after the `models:` section setup added, indented under the new provider, so they read as part of it (uncommenting
`# list:` there put agents into models.providers). A new top-level section now goes after them, as if typed at the
end of the file; every comment line stays, in its order, and a user's own comments too.

Real `hermit` processes on real files, against the fake provider server."""

from __future__ import annotations

from pathlib import Path

import yaml

import test_setup as setup_cli  # its env_for and hermit (a module attribute: its tests are not collected here)
from hermit.testing import FakeProvider


def comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("#")]


def test_setup_adds_its_sections_after_the_templates_closing_comments_and_keeps_every_comment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert setup_cli.hermit(home, "init").returncode == 0
    cfg = home / "hermit.yaml"
    mine = cfg.read_text().replace("        tokens: 400\n", "        tokens: 400   # my short notes\n")
    cfg.write_text(mine)
    with FakeProvider([{"text": "OK", "repeat": True}]) as fake:
        r = setup_cli.hermit(home, "setup", "--provider", "fake", "--base-url", fake.base_url)
        assert r.returncode == 0, r.stderr
    r = setup_cli.hermit(home, "setup", "--channel", "telegram", "--token-stdin", "--owner", "42",
                         "--no-check", stdin="123:ABC\n")
    assert r.returncode == 0, r.stderr
    text = cfg.read_text()
    assert comments(text) == comments(mine)  # none lost, none moved past another
    assert "        tokens: 400   # my short notes\n" in text
    lines = text.splitlines()
    models, channels = lines.index("models:"), lines.index("channels:")
    assert lines.index("  # list:                            # more agents, each with its own workspace and index") < models
    assert lines[models - 1].startswith("#     ollama:")  # right below the template's example of the section
    assert not comments("\n".join(lines[models:])), "\n".join(lines[models:])  # no template comment inside them
    data = yaml.safe_load(text)
    assert data["models"]["providers"]["fake"]["base_url"] == fake.base_url
    assert data["channels"]["telegram"]["accounts"]["default"]["owners"] == ["42"]
    assert data["agents"]["defaults"]["model"] == "fake/test-model"
    assert channels > models
