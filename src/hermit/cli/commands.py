"""Which module registers which top-level command, read from the modules' source so none is imported.

`hermit --help` lists every command, but importing every command module pulls in the agent runtime,
the config schema, the gateway… (half a second on a busy machine). Each module's `register(sub)` is read
with `ast` instead: its `sub.add_parser("name", help="…")` calls give the names and one-line helps, and
only the module of the command actually run is imported. A module whose register() cannot be read
this way is simply imported.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DeclaredCommand:
    name: str
    help: str
    module: str


def declared_commands(module: str) -> list[DeclaredCommand] | None:
    """The top-level commands `module.register(sub)` adds, or None when that cannot be read statically."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    register = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "register"), None)
    if register is None or not register.args.args:
        return None
    sub = register.args.args[0].arg
    found: list[DeclaredCommand] = []
    for node in ast.walk(register):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_parser" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == sub):
            continue
        if not (node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            return None  # a computed name: import the module instead
        helps = [k.value for k in node.keywords if k.arg == "help"]
        if helps and not (isinstance(helps[0], ast.Constant) and isinstance(helps[0].value, str)):
            return None
        text = helps[0].value if helps and isinstance(helps[0], ast.Constant) else ""
        found.append(DeclaredCommand(node.args[0].value, str(text), module))
    return found or None


def command_index(argv: list[str], options_with_values: tuple[str, ...]) -> int | None:
    """Where in argv the command is: the first word that is not a global option or its value."""
    skip = False
    for i, token in enumerate(argv):
        if skip:
            skip = False
            continue
        if token in options_with_values:
            skip = True
            continue
        if token == "--":
            return None
        if token.startswith("-"):
            continue
        return i
    return None


def command_word(argv: list[str], options_with_values: tuple[str, ...]) -> str | None:
    """The first word of argv that is not a global option or its value: the command being run."""
    i = command_index(argv, options_with_values)
    return None if i is None else argv[i]
