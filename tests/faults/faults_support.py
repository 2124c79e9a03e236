"""Shared set-up for the fault suite: how hard to try (`--soak` makes every test try more)."""

from __future__ import annotations

import os

SOAK = os.environ.get("CHRONICLE_SOAK") == "1"
"""Set by the `--soak` option (tests/conftest.py): the long version of every fault test."""


def examples(fast: int, soak_factor: int = 20) -> int:
    """How many examples a property test tries: `fast` in CI, `fast * soak_factor` under --soak."""
    return fast * soak_factor if SOAK else fast
