"""Text the store can hold: UTF-8 has no form for a lone surrogate.

Python decodes bytes that are not UTF-8 (a file name, a tool's raw output) to lone surrogates
(`caf\\udce9`); SQLite, and any JSON written as UTF-8, refuses them. Nothing Chronicle stores may
carry one, and nothing it is handed may stop it storing the rest: a surrogate is written as the
six characters of its escape, visibly, and capture keeps the original beside it
(`MessageCaptured.original`).
"""

from __future__ import annotations

import re

__all__ = ["SURROGATE", "has_surrogate", "escape_text", "escape_surrogates"]

SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    """Whether `text` has a code point UTF-8 cannot encode. O(1) for ASCII text."""
    return not text.isascii() and SURROGATE.search(text) is not None


def escape_text(text: str) -> str:
    """`text` with each lone surrogate written as the six characters of its escape."""
    if not has_surrogate(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def escape_surrogates(value: object, _depth: int = 0) -> object:
    """`value` (JSON data) with every lone surrogate in its strings and keys escaped
    (`\\udce9` as six characters); anything else is returned as it is, the same object when
    nothing changed. Containers nested deeper than 100 levels (or holding themselves) are
    returned as they are: capture marks those (`capture/align.py`)."""
    if isinstance(value, str):
        return escape_text(value)
    if _depth > 100:
        return value
    if isinstance(value, list):
        return [escape_surrogates(v, _depth + 1) for v in value]
    if isinstance(value, dict):
        return {
            escape_surrogates(k, _depth + 1): escape_surrogates(v, _depth + 1)
            for k, v in value.items()
        }
    return value
