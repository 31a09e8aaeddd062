"""numpy, imported the first time one of its names is used, not when a memory module is imported.

numpy is ~0.1-0.15 s of CPU to import, and every command that opens the memory index (`memory status`,
`memory search` with keyword-only memory, `doctor`) imported it through the search and store modules without
touching a vector. A memory module writes `from hermit.memory.lazy_numpy import numpy as np` instead of
`import numpy as np`: type checkers see numpy itself; at run time `np` is a stand-in whose first attribute
lookup imports numpy (the import system's own lock makes that safe from any thread) and copies numpy's names
onto the stand-in, so later lookups cost what a module's do. A module may not use `np.` at import time (a
type alias, a default argument): that would import numpy there; type aliases go in quotes.
tests/test_cli_lazy_imports.py checks that `memory status` and keyword-only `memory search` load no numpy.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING, Any


class _LazyModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:  # only called for a name not (yet) on the stand-in
        real = importlib.import_module(self.__name__)
        self.__dict__.update((k, v) for k, v in vars(real).items() if not k.startswith("__"))
        return getattr(real, name)


if TYPE_CHECKING:
    import numpy as numpy
else:
    numpy = _LazyModule("numpy")
