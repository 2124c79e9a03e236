"""Which messages of a live list are already in the log: fingerprints and alignment.

Hermes hands capture the whole live list again and again: after every turn, before every
compaction, and after a compaction as `[head..., handoff, tail..., new...]`. A message's identity
is neither its index (compaction shifts it) nor its content alone (a person says "ok" twice). What
identifies the captured part of the list is a *run*: the messages already captured sit, in order,
just before the new ones, and they match the end of the conversation's captured path.

Invariant of `align`: it returns the latest point (p, q) where live[p] is path[q] with a run of
equal fingerprints behind it that is long enough to be evidence (it reaches back to the start of
the live region, or to the start of the path, or `RUN` messages deep). The end of the path is
preferred; an earlier q means the live list left the captured branch (a rewind, a rewritten last
message) and what follows starts a new branch there. Everything after p is new.
"""

from __future__ import annotations

import hashlib
import json
import reprlib
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import cast

from ..storable import SURROGATE, escape_surrogates, has_surrogate

__all__ = [
    "fingerprint",
    "align",
    "embed",
    "RUN",
    "WINDOW",
    "wire_message",
    "plain_wire",
    "EscapedWire",
    "UNREPRESENTABLE",
    "IDENTITY_KEYS",
]

RUN = 8
"""How many equal fingerprints in a row prove an alignment when the run reaches neither start."""

WINDOW = 64
"""How far back from the path's end (beyond the live list's length) an alignment may land."""

IDENTITY_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
"""What makes a message the same message. Sidecars Hermes adds or drops over a message's life
(`api_content`, reasoning fields, timestamps, private `_` markers) are not identity."""


def _json_default(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except Exception:  # noqa: BLE001 - a foreign object's serialiser may fail any way
            pass
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "__dict__"):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


def plain_json(value: object, depth: int = 0) -> bool:
    """True when json.dumps would take `value` as it is (checked by type, not by encoding)."""
    if type(value) is dict or type(value) is list:  # (most calls: a message, its tool calls)
        return depth <= 32 and _plain_items(value, depth)
    if isinstance(value, str):
        # isascii() is O(1); only other text is searched for a lone surrogate (UTF-8 has none).
        return value.isascii() or SURROGATE.search(value) is None
    if value is None or isinstance(value, (bool, int)):
        return True
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if depth > 32:
        return False
    if isinstance(value, (list, dict)):  # a subclass
        return _plain_items(value, depth)
    return False


def _plain_items(value: list[object] | dict[object, object], depth: int) -> bool:
    """`plain_json` of a list or dict within the depth limit: its keys and values."""
    # Every message of a long list passes here: strings and None, most of what a message
    # holds, are checked in the loop rather than by a call each.
    items: Iterable[object]
    if isinstance(value, list):
        items = value
    else:
        for k in value:
            if not isinstance(k, str) or (not k.isascii() and SURROGATE.search(k) is not None):
                return False
        items = value.values()
    for v in items:
        if isinstance(v, str):
            if not v.isascii() and SURROGATE.search(v) is not None:
                return False
        elif v is not None and not plain_json(v, depth + 1):
            return False
    return True


def wire_message(message: object) -> dict[str, object]:
    """The message as it goes over the wire: private `_` keys removed, JSON-safe.

    A well-formed message comes back as a shallow copy whose `json.dumps` is byte-identical to the
    original's. Anything else (an object, a non-dict) is still turned into a storable dict, so a
    malformed message is captured rather than lost.
    """
    return plain_wire(message)[0]


def plain_wire(message: object) -> tuple[dict[str, object], bool]:
    """`wire_message(message)`, and True when that is the well-formed message's copy, whose
    `plain_json` it has just checked (a caller holding it need not walk the message again)."""
    if isinstance(message, dict):
        wire = {k: v for k, v in message.items() if not (isinstance(k, str) and k.startswith("_"))}
        if plain_json(wire):
            return wire, True
        return _storable_wire(wire), False
    return _wire_of(message), False


def _storable_wire(wire: dict[object, object]) -> dict[str, object]:
    """A message dict that is not plain JSON, made storable (`wire_message`)."""
    if _shape_fault(wire) is not None:
        repaired = _repaired(wire)
        if isinstance(repaired, dict):  # (always: a dict is repaired into a dict)
            wire = repaired
    try:
        text = json.dumps(
            {str(k): v for k, v in wire.items()}, ensure_ascii=False, default=_json_default
        )
    except (ValueError, TypeError, RecursionError):  # an object's attributes hold a cycle
        wire = {
            str(k): v if plain_json(v) else _unrepresentable(v, "an object that holds itself")
            for k, v in wire.items()
        }
        text = json.dumps(wire, ensure_ascii=False)
    if has_surrogate(text):
        return _escaped(text)
    if all(isinstance(k, str) for k in wire):
        try:
            json.dumps(wire, ensure_ascii=False)
            return cast(dict[str, object], wire)  # every key a string, just checked
        except (TypeError, ValueError):
            pass
    loaded = json.loads(text)
    return loaded if isinstance(loaded, dict) else {"role": "unknown", "content": text}


def _wire_of(message: object) -> dict[str, object]:
    """A message that is not a dict, as a storable dict (`wire_message`)."""
    if message is None:
        return {"role": "unknown", "content": None}
    if isinstance(message, str):
        return wire_message({"role": "unknown", "content": message})
    converted = _json_default(message)
    if isinstance(converted, dict):
        return wire_message(converted)
    return {"role": "unknown", "content": str(converted)}


UNREPRESENTABLE = "[Chronicle could not store this part of the message"
"""How the marker begins that stands, in a stored message, for a part with no JSON form (a
container inside itself, nesting beyond MAX_DEPTH)."""

_preview = reprlib.Repr()
_preview.maxlevel, _preview.maxstring, _preview.maxother = 4, 200, 200


class EscapedWire(dict[str, object]):
    """A wire message whose text had lone surrogates, each written as the six characters of its
    escape (`caf\\udce9`), so it can be stored and indexed. `original` is the message as
    received, as ASCII JSON: `json.loads(original)` gives it back, surrogates included."""

    original: str = ""


def _escaped(text: str) -> EscapedWire:
    """The wire message whose (non-ASCII) JSON is `text`, its lone surrogates escaped."""

    loaded = json.loads(text)
    body = escape_surrogates(loaded)
    wire = EscapedWire(body if isinstance(body, dict) else {"role": "unknown", "content": text})
    wire.original = json.dumps(loaded, ensure_ascii=True, separators=(",", ":"))
    return wire


MAX_DEPTH = 100
"""Deeper nesting than this has no JSON form here (the encoders recurse; real messages nest a
few levels)."""


def _shape_fault(value: object, depth: int = 0, ancestors: set[int] | None = None) -> str | None:
    """Why `value` has no JSON form (a container inside itself, nesting beyond MAX_DEPTH), or
    None. Recursion is bounded by MAX_DEPTH."""
    if not isinstance(value, (dict, list, tuple, set, frozenset)):
        return None
    if depth > MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} levels deep"
    ancestors = set() if ancestors is None else ancestors
    if id(value) in ancestors:
        return "a circular reference"
    ancestors.add(id(value))
    for child in value.values() if isinstance(value, dict) else value:
        found = _shape_fault(child, depth + 1, ancestors)
        if found is not None:
            return found
    ancestors.discard(id(value))
    return None


def _repaired(value: object, depth: int = 0, ancestors: tuple[int, ...] = ()) -> object:
    """A copy of `value` with each node that has no JSON form (a container inside itself, one
    nested beyond MAX_DEPTH) replaced by a visible marker; everything else kept as it was."""
    if not isinstance(value, (dict, list, tuple, set, frozenset)):
        return value
    if id(value) in ancestors:
        return _unrepresentable(value, "a circular reference")
    if depth >= MAX_DEPTH:
        return _unrepresentable(value, f"nested more than {MAX_DEPTH} levels deep")
    inner = (*ancestors, id(value))
    if isinstance(value, dict):
        return {k: _repaired(v, depth + 1, inner) for k, v in value.items()}
    return [_repaired(v, depth + 1, inner) for v in value]


def _unrepresentable(value: object, reason: str) -> str:
    """The visible marker that stands for `value`: why, and a bounded preview."""
    try:
        preview = _preview.repr(value)
    except RecursionError:
        preview = "(none)"
    return f"{UNREPRESENTABLE}: {reason}. A preview: {escape_surrogates(preview)}]"


# json.dumps with these options builds a new encoder on every call; the fingerprint's bytes are
# the same either way (they are stored: changing them would break alignment with the log).
_identity_json = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=_json_default
).encode


def fingerprint(message: object, *, plain: bool = False) -> str:
    """A short, stable digest of the message's identity keys. The same for a message and its
    `wire_message`, so it can be taken from the host's dict without copying it. `plain`: the
    message is a wire message whose values are plain JSON (`plain_wire`, or the stored form)."""
    wire = message if isinstance(message, dict) else wire_message(message)
    ident = [wire.get(k) for k in IDENTITY_KEYS]
    if wire.get("role") == "tool":
        # Hermes drops a tool result's `name` when it reloads a session from its own database
        # (keeping `tool_name`); the tool_call_id already says which call the result answers.
        ident[IDENTITY_KEYS.index("name")] = None
    if not plain and not plain_json(ident):
        # A lone surrogate, a cycle, nesting too deep, a foreign object: the fingerprint is the
        # one of the form wire_message stores, so a message and its wire form keep one.
        return fingerprint(wire_message(wire), plain=True)
    data = _identity_json(ident).encode("utf-8")
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _run(live: Sequence[str], path: Sequence[str], p: int, q: int, cap: int) -> int:
    r = 0
    while r < cap and p - r >= 0 and q - r >= 0 and live[p - r] == path[q - r]:
        r += 1
    return r


def align(
    live: Sequence[str], path: Sequence[str], *, run: int = RUN, strict: bool = False
) -> tuple[int, int]:
    """(p, q) with live[p] == path[q] as described in the module docstring; (-1, -1) if none.

    Not `strict`, a shorter run is taken when nothing better exists: two equal messages in a
    row, or one at the path's very end. That is for a list a compressor reshaped (a handoff in
    front, copies that differ from what was logged). A list with no handoff is the conversation
    as the host holds it: there a run broken by a different message is a different history (an
    edited first request whose reply repeats the old one), not evidence, and `strict` says so."""
    n, m = len(live), len(path)
    if not n or not m:
        return (-1, -1)
    positions: dict[str, list[int]] = {}
    for p in range(n - 1, -1, -1):
        positions.setdefault(live[p], []).append(p)  # descending p
    lowest_q = max(0, m - (n + WINDOW))
    fallback: tuple[int, int, int] | None = None  # (run, q, p)
    for q in range(m - 1, lowest_q - 1, -1):
        for p in positions.get(path[q], ()):
            cap = min(run, p + 1, q + 1)
            r = _run(live, path, p, q, cap)
            if r >= cap:
                return (p, q)
            if fallback is None or (r, q, p) > fallback:
                fallback = (r, q, p)
    if strict:
        return (-1, -1)
    if fallback is not None and fallback[0] >= 2:
        return (fallback[2], fallback[1])
    if fallback is not None and fallback[1] == m - 1:
        return (fallback[2], fallback[1])
    return (-1, -1)


def embed(live: Sequence[str], path: Sequence[str]) -> tuple[int, list[int]] | None:
    """The latest p with live[p] equal to the path's last entry such that live[:p+1] is, in
    order, a subsequence of the path ending there; with the path index of each of live[:p+1].

    This is the shape of a compacted region: the messages kept after a handoff (pins, bridges,
    the tail) in their logged order, the folded ones left out between them. The whole region up
    to p is evidence, so no run length is asked. None when there is no such p."""
    if not live or not path:
        return None
    last = len(path) - 1
    candidates = [p for p in range(len(live) - 1, -1, -1) if live[p] == path[last]]
    if not candidates:
        return None
    where: dict[str, list[int]] = {}
    for q, f in enumerate(path):
        where.setdefault(f, []).append(q)
    for p in candidates:
        placed = [last]
        bound = last
        for k in range(p - 1, -1, -1):
            found = where.get(live[k], [])
            at = bisect_left(found, bound) - 1  # the latest match before the one after it
            if at < 0:
                break
            bound = found[at]
            placed.append(bound)
        else:
            placed.reverse()
            return p, placed
    return None
