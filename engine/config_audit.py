"""Which declared config keys shipped code actually reads, found mechanically rather than by eye.

Every key in `config.KEYS` is in exactly one state:
- WIRED: shipped code reads it (the audit names the first file and line);
- DORMANT: nothing reads it, and its declaration says why (`Key(..., dormant="...")`);
- UNREAD: nothing reads it and nothing says why. That is a defect: tests/test_config_honesty.py
  fails the build on it, and on a dormant declaration that has gone stale (the key is read).

A read is found in the AST of every shipped file (the `chronicle_engine` package and, when run
from the plugin directory, the root adapters). It is a string equal to a key's path that is
- an argument of a call (`config.get("a.b")`, `_read(config, "a.b", int)`), except the
  declaration `Key(...)` itself and logging calls, or
- a subscript index (`cfg["a.b"]`), or
- a module-level name bound to such a string, used in either place, or
- an f-string in either place, whose literal parts make a pattern: `config.get(f"queue.shares.{c}")`
  reads every key that matches `queue.shares.*`.
A key read any other way (built by concatenation, looked up through a tuple in a loop) is not seen;
write the read in one of these shapes instead.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .config import KEYS, Key

__all__ = ["KeyAudit", "shipped_files", "find_reads", "audit", "format_audit", "main"]

_LOGGING = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})


@dataclass(frozen=True, slots=True)
class KeyAudit:
    path: str
    state: str  # "WIRED" | "DORMANT" | "UNREAD"
    where: str | None = None  # first read, "file:line", for a WIRED key
    reason: str | None = None  # the dormant reason
    stale: bool = False  # declared dormant, yet read: the declaration is out of date


def shipped_files(package_dir: Path | None = None) -> list[Path]:
    """The package's own .py files, plus the plugin root's adapters when the package sits in a
    plugin directory (a `plugin.yaml` beside it)."""
    package = package_dir or Path(__file__).resolve().parent
    files = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    root = package.parent
    if (root / "plugin.yaml").exists():
        files += sorted(root.glob("*.py"))
    return files


def _func_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _pattern(node: ast.JoinedStr) -> re.Pattern[str] | None:
    parts: list[str] = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(re.escape(value.value))
        else:
            parts.append(".+")
    if not any(p != ".+" for p in parts):
        return None  # f"{x}" alone says nothing about which key
    return re.compile("".join(parts))


class _Reads(ast.NodeVisitor):
    def __init__(self, paths: set[str], constants: dict[str, str]) -> None:
        self.paths = paths
        self.constants = constants
        self.hits: list[tuple[str, int]] = []  # (path, line)
        self.patterns: list[tuple[re.Pattern[str], int]] = []

    def _consider(self, node: ast.AST) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in self.paths:
                self.hits.append((node.value, node.lineno))
        elif isinstance(node, ast.Name) and node.id in self.constants:
            self.hits.append((self.constants[node.id], node.lineno))
        elif isinstance(node, ast.JoinedStr):
            pattern = _pattern(node)
            if pattern is not None:
                self.patterns.append((pattern, node.lineno))

    def visit_Call(self, node: ast.Call) -> None:
        name = _func_name(node)
        if name == "Key" or name in _LOGGING:
            return  # a declaration or a log line is not a read
        for arg in (*node.args, *(k.value for k in node.keywords)):
            self._consider(arg)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._consider(node.slice)
        self.generic_visit(node)


def _module_constants(tree: ast.Module, paths: set[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for stmt in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        if isinstance(value, ast.Constant) and value.value in paths:
            for target in targets:
                if isinstance(target, ast.Name):
                    found[target.id] = str(value.value)
    return found


def find_reads(
    files: Iterable[Path], paths: Iterable[str], *, relative_to: Path | None = None
) -> dict[str, str]:
    """For each key path read somewhere in `files`, the first place it is read ("file:line")."""
    wanted = set(paths)
    where: dict[str, str] = {}
    for file in files:
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        reads = _Reads(wanted, _module_constants(tree, wanted))
        reads.visit(tree)
        shown = file
        if relative_to is not None:
            try:
                shown = file.relative_to(relative_to)
            except ValueError:
                shown = file
        for path, line in reads.hits:
            where.setdefault(path, f"{shown}:{line}")
        for pattern, line in reads.patterns:
            for path in wanted:
                if pattern.fullmatch(path):
                    where.setdefault(path, f"{shown}:{line}")
    return where


def audit(keys: Sequence[Key] = KEYS, files: Sequence[Path] | None = None) -> list[KeyAudit]:
    """Every declared key with its state."""
    shipped = list(files) if files is not None else shipped_files()
    base = Path(__file__).resolve().parent.parent
    reads = find_reads(shipped, [k.path for k in keys], relative_to=base)
    rows: list[KeyAudit] = []
    for key in keys:
        where = reads.get(key.path)
        if where is not None:
            rows.append(KeyAudit(key.path, "WIRED", where, key.dormant, stale=bool(key.dormant)))
        elif key.dormant:
            rows.append(KeyAudit(key.path, "DORMANT", None, key.dormant))
        else:
            rows.append(KeyAudit(key.path, "UNREAD"))
    return rows


def format_audit(rows: Sequence[KeyAudit], *, unread_only: bool = False) -> str:
    shown = [r for r in rows if r.state == "UNREAD" or r.stale] if unread_only else list(rows)
    width = max((len(r.path) for r in shown), default=0)
    lines = []
    for r in shown:
        if r.state == "WIRED":
            note = f"read at {r.where}"
            if r.stale:
                note += f"  (declared dormant, stale: {r.reason})"
        elif r.state == "DORMANT":
            note = f"dormant: {r.reason}"
        else:
            note = "nothing reads it and it is not declared dormant"
        lines.append(f"{r.state:<8} {r.path:<{width}}  {note}")
    counts = {s: sum(1 for r in rows if r.state == s) for s in ("WIRED", "DORMANT", "UNREAD")}
    lines.append(
        f"{counts['WIRED']} wired, {counts['DORMANT']} dormant, {counts['UNREAD']} unread"
        f", {sum(1 for r in rows if r.stale)} stale dormant declaration(s)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chronicle_engine.config_audit",
        description="List every Chronicle config key as WIRED, DORMANT or UNREAD.",
    )
    parser.add_argument("--unread-only", action="store_true", help="only the defects")
    args = parser.parse_args(argv)
    rows = audit()
    print(format_audit(rows, unread_only=args.unread_only))
    return 1 if any(r.state == "UNREAD" or r.stale for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
