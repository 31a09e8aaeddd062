"""A package's exported names, resolved on first use (PEP 562).

A package whose `__init__` imported every submodule made importing one light part of it (`models.base`,
`agent.routing`, `tools.rooms`, `scheduler.control`, `config.paths`) load the runtime, the model clients and numpy:
every `hermit` command paid ~0.5 s of CPU for it. Such a package names where each export lives and sets
`__getattr__ = names_from(__name__, {...})`; its `if TYPE_CHECKING:` imports give the type checker the names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def names_from(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: an exported name is read from `package.<where[name]>`, imported then."""

    def resolve(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return resolve
