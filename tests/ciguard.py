"""The one rule for tests that need a system dependency: skip locally, fail under CI=true (CI runs every test)."""

from __future__ import annotations

import os

import pytest


def need(ok: bool, what: str) -> None:
    """Skip locally when `what` is missing; under CI=true, fail instead (.ci/run installs it)."""
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing; CI installs it (.ci/run)")
    pytest.skip(f"{what} is not installed")
