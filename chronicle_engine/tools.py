"""The agent's tools: one shape for every tool, whichever slot exposes it.

A tool is a `ToolSpec`: a name, a description, a pydantic model of its arguments and a handler
that takes the one subsystem it serves (recall's tools take `Recall`, the context engine's take
`Compaction`), the validated arguments and whatever context the slot has (`session_id`, the live
`messages` for context-engine tools) and returns a JSON-serialisable dict. The bare Hermes
schema (`name`, `description`, `parameters`) is generated from the arguments model, so what the
model is told and what a call is checked against cannot drift.

Invariants:
- `dispatch` never raises: every failure comes back as `{"error": ...}` in the tool's own words
  (which argument, what it must be), never a Python internal.
- Arguments are validated before a handler runs: text has a length bound (a 10 MB argument is
  refused at its length, not read), whole numbers lie in SQLite's range.
- The result is always valid UTF-8 JSON: a lone surrogate (in an argument or in stored text) is
  replaced by U+FFFD on the way out.
"""

# No `from __future__ import annotations`: pydantic reads the annotations below as each model is
# defined, and objects spare it parsing them from strings.
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Annotated, ClassVar, Generic, Protocol, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from .errors import ChronicleError

__all__ = [
    "ToolArgs",
    "ToolSpec",
    "Text",
    "Words",
    "Name",
    "Seq",
    "NonBlank",
    "schemas",
    "dispatch",
    "parameters_schema",
]

log = logging.getLogger("chronicle_engine.tools")

_SURROGATES = re.compile("[\ud800-\udfff]")
_MAX_SEQ = 2**63 - 1  # SQLite's largest integer


def _scrub(value: str) -> str:
    """Lone surrogates (unencodable in UTF-8) become U+FFFD. Most texts hold none: an ASCII
    text is known so at once (`isascii` reads a flag), another is encoded first (a lone
    surrogate is what UTF-8 refuses), both cheaper than the pattern's scan of every character
    (a search's whole JSON result passes here)."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", value)
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be non-empty text")
    return value


def _no_flag(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("must be a whole number, not true or false")
    return value


def _checked_text(max_length: int, numbers: bool, value: object) -> object:
    """The length is checked first (a 10 MB argument is refused without being read); lone
    surrogates then become U+FFFD, before pydantic sees the text (it refuses them)."""
    if numbers and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        return value
    if len(value) > max_length:
        raise ValueError(f"is too long ({max_length:,} characters at most)")
    return _scrub(value)


# What the argument models are built from. Each text type has a length bound.
Text = Annotated[
    str, BeforeValidator(partial(_checked_text, 20_000, False)), Field(max_length=20_000)
]
Words = Annotated[
    str, BeforeValidator(partial(_checked_text, 4_000, False)), Field(max_length=4_000)
]
Name = Annotated[str, BeforeValidator(partial(_checked_text, 256, True)), Field(max_length=256)]
Seq = Annotated[int, Field(ge=0, le=_MAX_SEQ), BeforeValidator(_no_flag)]
NonBlank = AfterValidator(_not_blank)


class ToolArgs(BaseModel):
    """The arguments of one tool. Unknown arguments are ignored, as Hermes' own tools do; an
    argument given as null, or as blank text where the model names it in `blank_is_absent`,
    counts as not given."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    blank_is_absent: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: object) -> object:
        if not isinstance(data, Mapping):
            return data
        return {
            k: v
            for k, v in data.items()
            if v is not None
            and not (k in cls.blank_is_absent and isinstance(v, str) and not v.strip())
        }


Target = TypeVar("Target")
"""The subsystem a tool's handler is given."""
_Target_contra = TypeVar("_Target_contra", contravariant=True)
_Args = TypeVar("_Args", bound=ToolArgs)
_Args_contra = TypeVar("_Args_contra", bound=ToolArgs, contravariant=True)


class Handler(Protocol[_Target_contra, _Args_contra]):
    """What runs a tool: the subsystem, the validated arguments, the slot's context."""

    def __call__(
        self, target: _Target_contra, args: _Args_contra, /, **context: object
    ) -> Mapping[str, object]: ...


def _clean(node: object) -> object:
    if isinstance(node, dict):
        out = {k: _clean(v) for k, v in node.items() if k != "title"}
        variants = out.get("anyOf")
        if isinstance(variants, list):
            kept = [v for v in variants if v != {"type": "null"}]
            if len(kept) == 1 and len(kept) < len(variants):
                del out["anyOf"]
                out = {**kept[0], **out}
        if "default" in out and out["default"] is None:
            del out["default"]
        return out
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def parameters_schema(model: type[ToolArgs]) -> dict[str, object]:
    """The JSON schema of `model` as a tool's `parameters`: an object, its properties with their
    types, bounds and descriptions, and the required names (no titles; an optional argument is
    its own type, not "that or null")."""
    cleaned = _clean(model.model_json_schema())
    schema = cleaned if isinstance(cleaned, dict) else {}
    out: dict[str, object] = {"type": "object", "properties": schema.get("properties", {})}
    if schema.get("required"):
        out["required"] = list(schema["required"])
    return out


class ToolSpec(Generic[Target]):
    """A tool: its name and description, its arguments model, and the handler that runs it
    on `Target` (which sees its arguments as that model, validated)."""

    __slots__ = ("name", "description", "arguments", "_run")

    def __init__(
        self,
        name: str,
        description: str,
        arguments: type[_Args],
        handler: Handler[Target, _Args],
    ) -> None:
        self.name = name
        self.description = description
        self.arguments: type[ToolArgs] = arguments

        def run(
            target: Target, parsed: ToolArgs, context: Mapping[str, object]
        ) -> Mapping[str, object]:
            if not isinstance(parsed, arguments):
                raise TypeError(f"{name} takes {arguments.__name__}, not {type(parsed).__name__}")
            return handler(target, parsed, **context)

        self._run = run

    def run(
        self, target: Target, parsed: ToolArgs, context: Mapping[str, object]
    ) -> Mapping[str, object]:
        """The handler's answer to arguments validated by `arguments`."""
        return self._run(target, parsed, context)

    @property
    def parameters(self) -> dict[str, object]:
        return parameters_schema(self.arguments)

    def schema(self) -> dict[str, object]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def schemas(tools: Iterable[ToolSpec[Target]]) -> list[dict[str, object]]:
    return [t.schema() for t in tools]


_SAID: dict[str, Callable[[ErrorDetails], str]] = {
    "missing": lambda e: "is required",
    "string_type": lambda e: "must be text",
    "string_unicode": lambda e: "must be valid text",
    "string_too_long": lambda e: f"is too long ({e['ctx']['max_length']:,} characters at most)",
    "string_too_short": lambda e: "must be non-empty text",
    "int_type": lambda e: "must be a whole number",
    "int_parsing": lambda e: "must be a whole number",
    "int_from_float": lambda e: "must be a whole number",
    "int_parsing_size": lambda e: "is too large",
    "greater_than_equal": lambda e: f"must be at least {e['ctx']['ge']}",
    "less_than_equal": lambda e: f"must be at most {e['ctx']['le']}",
    "bool_type": lambda e: "must be true or false",
    "bool_parsing": lambda e: "must be true or false",
    "literal_error": lambda e: f"must be one of {e['ctx']['expected']}",
}


def _explain(tool: str, exc: ValidationError) -> str:
    said: list[str] = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = error.get("loc") or ()
        name = str(loc[0]) if loc else "arguments"
        kind = str(error.get("type", ""))
        if kind in _SAID:
            text = _SAID[kind](error)
        elif kind == "value_error":
            text = str(error.get("msg", "")).removeprefix("Value error, ")
        else:
            text = "is not valid here"
        said.append(f"'{name}' {text}")
    return f"{tool}: " + "; ".join(dict.fromkeys(said))


def _json(value: object) -> str:
    return _scrub(json.dumps(value, ensure_ascii=False, default=str))


def _arguments(args: object) -> Mapping[str, object] | None:
    if args is None:
        return {}
    if isinstance(args, str):  # some hosts pass the model's JSON text as it came
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return None
    return args if isinstance(args, Mapping) else None


def dispatch(
    tools: Iterable[ToolSpec[Target]], target: Target, name: str, args: object, **context: object
) -> str:
    """Run the named tool and return its JSON result; errors come back as {"error": ...}."""
    for tool in tools:
        if tool.name == name:
            break
    else:
        return _json({"error": f"unknown Chronicle tool {name!r}"})
    given = _arguments(args)
    if given is None:
        return _json({"error": f"{name}: the arguments must be a JSON object"})
    try:
        parsed = tool.arguments.model_validate(dict(given))
    except ValidationError as exc:
        return _json({"error": _explain(name, exc)})
    try:
        return _json(tool.run(target, parsed, context))
    except ChronicleError as exc:
        return _json({"error": str(exc)})
    except Exception as exc:  # a tool must never raise into the host's loop
        log.exception("chronicle tool %s failed", name)
        said = str(exc).strip() or "an unexpected error"
        return _json({"error": f"{name} failed: {said} (the details are in Chronicle's log)"})
