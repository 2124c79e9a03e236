"""Which declared config keys shipped code actually reads, found mechanically rather than by eye.

Every key in `config.KEYS` is in exactly one state:
- WIRED: shipped code reads it (the audit names the first file and line);
- DORMANT: nothing reads it, and its declaration says why (`Field(..., json_schema_extra=
  {"dormant": "..."})`);
- UNREAD: nothing reads it and nothing says why. That is a defect: tests/test_config_honesty.py
  fails the build on it, and on a dormant declaration that has gone stale (the key is read).

Settings are typed attributes, so a read is an attribute access found in the AST of every shipped
file (the `chronicle_engine` package and, when run from the plugin directory, the root adapters;
a field's declaration is not an attribute access, so the settings module counts only where it
uses a value itself). A read of `a.b.c` is an attribute
chain ending in `<section>.c`, where `<section>` is `b` itself or one of the names its model says
code holds it under (`held_as`): `settings.recall.candidates`, `recall.candidates` and, with
`held_as = ("tuning",)`, `self.tuning.candidates` all read `recall.candidates`. A top-level key is
read as `<anything>.settings.<key>` or `settings.<key>`. A value reached any other way (a
`getattr` with a computed name, a dump of the whole model) is not seen; write the read as an
attribute instead.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from .config import KEYS, ChronicleSettings, Key

__all__ = [
    "KeyAudit",
    "shipped_files",
    "find_reads",
    "section_names",
    "audit",
    "format_audit",
    "main",
]


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


def section_names(model: type[BaseModel] = ChronicleSettings) -> dict[str, frozenset[str]]:
    """For each section's dotted path ("" for the top level), the names code may hold it under."""
    out: dict[str, frozenset[str]] = {}

    def walk(section: type[BaseModel], path: str, own: str) -> None:
        held = getattr(section, "held_as", ())
        out[path] = frozenset({own, *held})
        for name, info in section.model_fields.items():
            child = info.annotation
            if isinstance(child, type) and issubclass(child, BaseModel):
                walk(child, f"{path}.{name}" if path else name, name)

    walk(model, "", "settings")
    return out


def _chain(node: ast.Attribute) -> list[str]:
    """`a.b.c` as ["a", "b", "c"]; a call or subscript in the chain ends it."""
    names = [node.attr]
    value = node.value
    while isinstance(value, ast.Attribute):
        names.append(value.attr)
        value = value.value
    if isinstance(value, ast.Name):
        names.append(value.id)
    return names[::-1]


def find_reads(
    files: Iterable[Path],
    keys: Sequence[Key] = KEYS,
    sections: dict[str, frozenset[str]] | None = None,
    *,
    relative_to: Path | None = None,
) -> dict[str, str]:
    """For each key read somewhere in `files`, the first place it is read ("file:line")."""
    held = sections if sections is not None else section_names()
    wanted: dict[tuple[str, str], list[str]] = {}  # (holder name, leaf) -> key paths
    for key in keys:
        parent, _, leaf = key.path.rpartition(".")
        for name in held.get(parent, frozenset({parent.rpartition(".")[2] or "settings"})):
            wanted.setdefault((name, leaf), []).append(key.path)
    where: dict[str, str] = {}
    for file in files:
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        shown = file
        if relative_to is not None:
            try:
                shown = file.relative_to(relative_to)
            except ValueError:
                shown = file
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
                continue
            chain = _chain(node)
            if len(chain) < 2:
                continue
            for path in wanted.get((chain[-2], chain[-1]), ()):
                where.setdefault(path, f"{shown}:{node.lineno}")
    return where


def audit(keys: Sequence[Key] = KEYS, files: Sequence[Path] | None = None) -> list[KeyAudit]:
    """Every declared key with its state."""
    shipped = list(files) if files is not None else shipped_files()
    base = Path(__file__).resolve().parent.parent
    reads = find_reads(shipped, keys, relative_to=base)
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
