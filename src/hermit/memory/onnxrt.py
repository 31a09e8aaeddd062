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

_LEVELS: float | None = None


def onnxruntime() -> ModuleType:
    """The onnxruntime module, its telemetry off (ImportError when it is not installed)."""
    os.environ["ORT_DISABLE_TELEMETRY"] = "1"  # not setdefault: "0" would turn it back on
    import onnxruntime as ort

    return ort


def int8_levels() -> float:
    """The largest level of the signed operand of onnxruntime's u8 × s8 MatMulInteger: 127 where the CPU has
    VNNI (products summed into int32), else 63.

    x86 CPUs without VNNI (AVX2, AVX-512 without VNNI) sum pairs of u8 × s8 products in saturating int16
    (vpmaddubsw), and 2 × 255 × 127 overflows it: 842 of 25,000 rows' dots in the int8 matrix pass came back
    wrong on an AMD EPYC with AVX2 only, and the int8 e5 graph's vectors fell to cosine 0.994 of the engine's.
    2 × 255 × 63 = 32,130 fits every kernel."""
    global _LEVELS
    if _LEVELS is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                flags = set(next((line for line in f if line.startswith("flags")), "").split())
        except OSError:
            flags = set()
        _LEVELS = 127.0 if flags & {"avx512_vnni", "avx_vnni"} else 63.0
    return _LEVELS
