"""onnxruntime, imported with its telemetry off: the one way Hermit loads it.

onnxruntime's Linux wheels (1.32) start Microsoft's 1DS telemetry on import: a device id and an event queue
(the process's executable path, OS, CPU, memory) written under `$HOME/.cache/Microsoft/DeveloperTools/`,
following links, and sent to mobile.events.data.microsoft.com. Hermit's memory is local: nothing leaves the
machine unasked, and a root-run Hermit creates nothing in whatever folder HOME names. `ORT_DISABLE_TELEMETRY`
must be set before the first import, so every module that runs onnxruntime imports it through here.
"""

from __future__ import annotations

import os
from types import ModuleType


def onnxruntime() -> ModuleType:
    """The onnxruntime module, its telemetry off (ImportError when it is not installed)."""
    os.environ["ORT_DISABLE_TELEMETRY"] = "1"  # not setdefault: "0" would turn it back on
    import onnxruntime as ort

    return ort
