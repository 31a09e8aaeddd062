"""Test doubles shipped with the package: scripted models and a fake provider HTTP server.

Importing this package does not start anything; `FakeProvider` binds a port only when started. The fake
provider's module is imported on first use of its names, not here: `python -m hermit.testing.fake_provider`
imports this package first, and a package that had already imported the module it runs as __main__ makes
runpy warn (and holds two copies of it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermit.testing.script import Step, StepMatch, load_script, parse_step, parse_steps
from hermit.testing.scripted import FunctionModel, Reply, ScriptedModel, ScriptExhaustedError

if TYPE_CHECKING:
    from hermit.testing.fake_provider import FakeProvider, RecordedRequest

__all__ = [
    "FakeProvider",
    "FunctionModel",
    "RecordedRequest",
    "Reply",
    "ScriptExhaustedError",
    "ScriptedModel",
    "Step",
    "StepMatch",
    "load_script",
    "parse_step",
    "parse_steps",
]

_LAZY = {"FakeProvider", "RecordedRequest"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from hermit.testing import fake_provider

        return getattr(fake_provider, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
