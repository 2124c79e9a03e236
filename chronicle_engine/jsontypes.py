"""Names for the shapes of JSON a payload, a report or a settings file holds.

Invariant: types only, nothing runs here and nothing is imported, so every floor may use them.
A value typed `JSON` is narrowed (isinstance) before use, never cast.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSON", "JSONObject", "SQLValue"]

JSON: TypeAlias = "str | int | float | bool | None | list[JSON] | dict[str, JSON]"
JSONObject: TypeAlias = "dict[str, JSON]"
# What SQLite stores in a column and hands back in a row.
SQLValue: TypeAlias = "str | int | float | bytes | None"
