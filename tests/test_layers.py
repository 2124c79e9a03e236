"""Imports go one way, in the order docs/architecture.md lists the modules (its floors), no two
modules import each other even through others, and nothing imports another module's private names.
The architecture page is the source of the order, so this test also keeps that page true.

Every import counts, whatever its place: one inside a function or under `TYPE_CHECKING` ties two
modules as much as one at the top does (a reader following a call has to climb it just the same).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "chronicle_engine"


def _layers() -> list[list[str]]:
    """The engine modules of each row of the architecture page's module table, in order."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("## Modules and what each owns", 1)[1]
    layers: list[list[str]] = []
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        names = [
            m.removesuffix(".py").removesuffix("/").replace("/", ".")
            for m in re.findall(r"`chronicle_engine/([^`]+)`", first)
        ]
        if names:
            layers.append(names)
    return layers


def _module(path: Path) -> str:
    parts = list(path.relative_to(ENGINE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, list[str], bool, int]]:
    """(imported module, names, type-checking only, line) for every engine-internal import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    package = (
        _module(path).split(".") if path.name == "__init__.py" else _module(path).split(".")[:-1]
    )
    found: list[tuple[str, list[str], bool, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[: len(package) - node.level + 1]
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
        elif node.module and node.module.startswith("chronicle_engine."):
            target = node.module.removeprefix("chronicle_engine.")
        else:
            continue
        names = [alias.name for alias in node.names]
        found.append((target, names, id(node) in typing_only, node.lineno))
    return found


def _layer_of(module: str, layers: list[list[str]]) -> int | None:
    for index, names in enumerate(layers):
        if any(module == n or module.startswith(n + ".") for n in names):
            return index
    return None


def test_every_engine_module_is_placed_on_the_architecture_page() -> None:
    layers = _layers()
    unplaced = sorted(
        {
            _module(p).split(".")[0]
            for p in ENGINE.rglob("*.py")
            if _module(p) and _layer_of(_module(p), layers) is None
        }
    )
    assert not unplaced, f"add these to docs/architecture.md's module table: {unplaced}"


def test_imports_only_reach_down_the_layers() -> None:
    layers = _layers()
    upward: list[str] = []
    for path in sorted(ENGINE.rglob("*.py")):
        source = _module(path)
        mine = _layer_of(source, layers)
        for target, names, _, line in _imports(path):
            theirs = _layer_of(target, layers)
            if mine is None or theirs is None or theirs <= mine:
                continue
            upward.append(f"{path.relative_to(ROOT)}:{line} imports {target} {names}")
    assert not upward, "imports that reach up a layer:\n" + "\n".join(upward)


def test_no_module_imports_another_modules_private_names() -> None:
    private: list[str] = []
    for path in sorted(ENGINE.rglob("*.py")):
        for target, names, _, line in _imports(path):
            hidden = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if hidden:
                private.append(f"{path.relative_to(ROOT)}:{line} imports {hidden} from {target}")
    assert not private, "\n".join(private)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in ENGINE.rglob("*.py") if _module(p)}


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the engine modules it imports (`from . import x` names the module x)."""
    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        found: set[str] = set()
        for target, names, _, _ in _imports(path):
            for name in names:
                if f"{target}.{name}" in modules:
                    found.add(f"{target}.{name}")
                elif target in modules:
                    found.add(target)
        found.discard(module)
        edges[module] = found
    return edges


def test_no_modules_import_each_other_even_through_others() -> None:
    """No circle of imports: a module's package face (`__init__.py`) aside, following imports
    from any module never comes back to it."""
    modules = _modules()
    edges = _edges(modules)
    circles: list[str] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                circles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(modules):
        if module not in state:
            visit(module)
    assert not circles, "modules that import each other:\n" + "\n".join(circles)


def test_no_core_typed_any() -> None:
    """Subsystems get the lower parts they use in their constructors (core.py wires them, and
    the layering above keeps every subsystem below it); a core passed as `Any` is a service
    locator that neither mypy nor a reader can follow."""
    offenders: list[str] = []
    for path in [*sorted(ENGINE.rglob("*.py")), ROOT / "provider.py", ROOT / "context.py"]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.arg):
                name, note = node.arg, node.annotation
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name, note = node.target.id, node.annotation
            else:
                continue
            if name == "core" and note is not None and ast.unparse(note) == "Any":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, "\n".join(offenders)
