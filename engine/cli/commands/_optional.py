"""Subsystems land one by one; a command that needs one this build lacks says so plainly."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..app import CommandFailed, Exit

T = TypeVar("T")


def subsystem(name: str, get: Callable[[], T]) -> T:
    try:
        return get()
    except ModuleNotFoundError as exc:
        raise CommandFailed(
            f"this build of Chronicle has no {name} subsystem ({exc.name} is missing); "
            "update Chronicle (`hermes plugins update chronicle` or `pip install -U`)",
            Exit.UNAVAILABLE,
        ) from None


def maybe(get: Callable[[], T]) -> T | None:
    """The value, or None when the subsystem it comes from is not part of this build."""
    try:
        return get()
    except ModuleNotFoundError:
        return None
