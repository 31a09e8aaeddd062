"""Test doubles shipped with the package: scripted models and a fake provider HTTP server.

Importing this package does not start anything; `FakeProvider` binds a port only when started.
"""

from hermit.testing.fake_provider import FakeProvider, RecordedRequest
from hermit.testing.script import Step, StepMatch, load_script, parse_step, parse_steps
from hermit.testing.scripted import FunctionModel, Reply, ScriptedModel, ScriptExhaustedError

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
