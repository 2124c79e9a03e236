"""The agent's tools: one shape for every tool, whichever slot exposes it.

A tool is a `ToolSpec`: a bare Hermes schema (`name`, `description`, `parameters`) and a handler
that takes the one subsystem it serves (recall's tools take `Recall`, the context engine's take
`Compaction`), the parsed arguments and whatever context the slot has (`session_id`, the live
`messages` for context-engine tools) and returns a JSON-serialisable dict. `dispatch` turns any
exception into a JSON error, so a tool call can never raise into Hermes' loop.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .errors import ChronicleError

__all__ = ["ToolSpec", "schemas", "dispatch"]

log = logging.getLogger("chronicle_engine.tools")

Target = TypeVar("Target")
"""The subsystem a tool's handler is given."""

Handler = Callable[..., Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class ToolSpec(Generic[Target]):
    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler = field(compare=False)

    def schema(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def schemas(tools: Iterable[ToolSpec[Target]]) -> list[dict[str, Any]]:
    return [t.schema() for t in tools]


def dispatch(
    tools: Iterable[ToolSpec[Target]],
    target: Target,
    name: str,
    args: Mapping[str, Any] | None,
    **context: Any,
) -> str:
    """Run the named tool and return its JSON result; errors come back as {"error": ...}."""
    for tool in tools:
        if tool.name == name:
            break
    else:
        return json.dumps({"error": f"unknown Chronicle tool {name!r}"})
    try:
        result = tool.handler(target, dict(args or {}), **context)
        return json.dumps(result, ensure_ascii=False, default=str)
    except ChronicleError as exc:
        return json.dumps({"error": str(exc)})
    except Exception as exc:  # a tool must never raise into the host's loop
        log.exception("chronicle tool %s failed", name)
        return json.dumps({"error": f"{name} failed: {type(exc).__name__}: {exc}"})
