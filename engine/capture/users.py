"""Who holds a core open: the slot adapters count themselves in and out.

Invariant: a core is shut down (its WAL checkpointed) only when the last adapter using it lets
go. Hermes builds one memory provider per agent (the gateway runs many) and imports the plugin
twice, so the count lives here, in `chronicle_engine`, which both copies share.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["acquire", "release", "users"]

_lock = threading.Lock()
_counts: dict[int, tuple[Any, int]] = {}


def acquire(core: Any) -> None:
    with _lock:
        _, count = _counts.get(id(core), (core, 0))
        _counts[id(core)] = (core, count + 1)


def release(core: Any) -> bool:
    """Count one user out. True when it was the last one (the caller shuts the core down)."""
    with _lock:
        held = _counts.get(id(core))
        if held is None or held[0] is not core:
            return True
        count = held[1] - 1
        if count <= 0:
            del _counts[id(core)]
            return True
        _counts[id(core)] = (core, count)
        return False


def users(core: Any) -> int:
    with _lock:
        held = _counts.get(id(core))
        return held[1] if held is not None and held[0] is core else 0
