"""Regenerate the generated parts of the docs from the code, so they cannot drift.

    python docs/generate.py          # rewrite README.md's generated blocks in place
    python docs/generate.py --check  # exit 1 if they are stale (tests/test_docs.py runs this)

A generated block sits between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`.
- `config`: every field of the settings models in chronicle_engine/config.py, by dotted path (default,
  purpose, dormant reason), through `KEYS`.
- `commands`: every `chronicle` subcommand with its one-line help.
- `tools`: every tool the two slots give the agent, from their `ToolSpec`s (arguments from each
  tool's arguments model).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def config_reference() -> str:
    from chronicle_engine.config import KEYS

    lines = [
        "| key (under `chronicle:`) | default | what it does |",
        "| --- | --- | --- |",
    ]
    for key in KEYS:
        default = "(see description)" if key.default is None else json.dumps(key.default)
        doc = key.doc
        if key.dormant:
            doc += f" *Dormant: {key.dormant}*"
        if key.security:
            doc += " *Security-relevant.*"
        lines.append(f"| `{key.path}` | `{_cell(default)}` | {_cell(doc)} |")
    return "\n".join(lines)


def command_reference() -> str:
    from chronicle_engine.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = ["| command | what it does |", "| --- | --- |"]
    for choice in sub._choices_actions:
        lines.append(f"| `chronicle {choice.dest}` | {_cell(choice.help or '')} |")
    return "\n".join(lines)


def tool_reference() -> str:
    from chronicle_engine.compaction.tools import CONTEXT_TOOLS
    from chronicle_engine.recall.tools import RECALL_TOOLS

    lines = ["| tool | slot | arguments | what it does |", "| --- | --- | --- | --- |"]
    for slot, tools in (("memory provider", RECALL_TOOLS), ("context engine", CONTEXT_TOOLS)):
        for tool in tools:
            props = tool.parameters.get("properties") or {}
            required = set(tool.parameters.get("required") or [])
            args = ", ".join(f"`{k}`" + ("" if k in required else "?") for k in props) or "—"
            lines.append(f"| `{tool.name}` | {slot} | {args} | {_cell(tool.description)} |")
    return "\n".join(lines)


BLOCKS: dict[str, Callable[[], str]] = {
    "config": config_reference,
    "commands": command_reference,
    "tools": tool_reference,
}


def render(text: str) -> str:
    for name, build in BLOCKS.items():
        pattern = re.compile(
            rf"(<!-- generated:{name} -->\n)(?:.*?\n)?(<!-- /generated:{name} -->)", re.DOTALL
        )
        if not pattern.search(text):
            raise SystemExit(f"README.md has no generated:{name} block")
        body = build()
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if README.md is stale")
    args = ap.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    fresh = render(current)
    if args.check:
        if fresh != current:
            print("README.md is stale: run `python docs/generate.py`", file=sys.stderr)
            return 1
        return 0
    if fresh != current:
        README.write_text(fresh, encoding="utf-8")
        print("README.md updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
