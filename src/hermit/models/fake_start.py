"""The built-in fake provider `hermit setup --provider fake` configures, and how to start it when it is not running.

A model call to a local server that nothing listens on carries the hint for a local model server (`ollama
serve`, models/transport.py). When it is the fake provider setup made (its script `<state>/fake-provider.json`
is there), the CLI, `hermit chat` and the web app say the exact command that starts it instead.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from urllib.parse import urlsplit

from hermit.errors import HermitError

FAKE_URL = "http://127.0.0.1:8765/v1"
FAKE_SCRIPT = "fake-provider.json"
_NOTHING = re.compile(r"^(?P<name>[^:\s]+): nothing listens on (?P<host>\[[^\]]+\]|[^\s:]+):(?P<port>\d+)\b")


def fake_start_command(base_url: str, script: Path) -> str:
    """The shell command that serves the fake provider at `base_url` with the replies in `script`."""
    return (f"{shlex.quote(sys.executable)} -m hermit.testing.fake_provider --port {urlsplit(base_url).port or 80} "
            f"--script {shlex.quote(str(script))}")


def stopped_fake_hint(home: Path, e: HermitError) -> str | None:
    """For a model call refused because setup's fake provider (provider `fake`, or any at its address) is not
    running: the command that starts it; None for any other error."""
    m = _NOTHING.match(e.message)
    script = home / FAKE_SCRIPT
    if m is None or not script.is_file():
        return None
    url = f"http://{m['host']}:{m['port']}/v1"
    if not (m["name"] == "fake" or url == FAKE_URL):
        return None
    return (f"start the fake provider in another terminal: {fake_start_command(url, script)}\n"
            f"      or set up a real model: hermit setup")
