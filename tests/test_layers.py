"""Imports go one way, in the order docs/architecture.md lists the modules, and nothing imports
another module's private names. The architecture page is the source of the order, so this test
also keeps that page true."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "engine"


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
            for m in re.findall(r"`engine/([^`]+)`", first)
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
        for target, names, typing_only, line in _imports(path):
            theirs = _layer_of(target, layers)
            if mine is None or theirs is None or theirs <= mine:
                continue
            # Every subsystem receives the core; naming its type is not depending on it.
            if typing_only and target == "core":
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
