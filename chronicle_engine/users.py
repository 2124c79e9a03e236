"""Who holds a core open: the slot adapters count themselves in and out.

Invariant: a core is shut down (its WAL checkpointed) only when the last adapter using it lets
go, and never under a call in flight. Hermes builds one memory provider per agent (the gateway
runs many) and imports the plugin twice, so the count lives here, in `chronicle_engine`, which
both copies share.

Two kinds of use: a memory provider *holds* the core from initialize to shutdown; the context
engine, which Hermes copies per agent and never shuts down (a subagent's copy gets no end hook),
*borrows* it for the length of each call. When the last holder lets go during a borrowed call,
the borrower that finishes last shuts the core down instead.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # counted cores come from the slots, which import this at the plugin's import
    from .core import ChronicleCore

__all__ = ["acquire", "release", "users", "borrowing", "held"]

_lock = threading.Lock()


@dataclass
class _Use:
    """A core and who holds it open: holders, calls in flight, and whether it is closing."""

    core: ChronicleCore
    holders: int = 0
    borrows: int = 0
    closing: bool = False  # the last holder let go while a call was in flight


_uses: dict[int, _Use] = {}


def _use(core: ChronicleCore) -> _Use:
    use = _uses.get(id(core))
    if use is None or use.core is not core:
        use = _uses[id(core)] = _Use(core)
    return use


def acquire(core: ChronicleCore) -> None:
    with _lock:
        use = _use(core)
        use.holders += 1
        use.closing = False


def release(core: ChronicleCore) -> bool:
    """Count one holder out. True when the caller must shut the core down now (it was the last
    user); False while others hold it or a call is in flight (the last call closes it)."""
    with _lock:
        use = _uses.get(id(core))
        if use is None or use.core is not core:
            return True
        use.holders = max(0, use.holders - 1)
        if use.holders:
            return False
        if use.borrows:
            use.closing = True
            return False
        del _uses[id(core)]
        return True


@contextlib.contextmanager
def borrowing(core: ChronicleCore) -> Iterator[None]:
    """Use the core for one call. If its last holder let go meanwhile, the last borrower out
    shuts it down."""
    with _lock:
        _use(core).borrows += 1
    close = False
    try:
        yield
    finally:
        with _lock:
            use = _use(core)
            use.borrows -= 1
            if use.borrows <= 0 and not use.holders:
                close = use.closing
                del _uses[id(core)]
        if close:
            core.shutdown()


def users(core: ChronicleCore) -> int:
    """Holders and calls in flight."""
    with _lock:
        use = _uses.get(id(core))
        return use.holders + use.borrows if use is not None and use.core is core else 0


def held(core: ChronicleCore) -> bool:
    """Whether a memory provider holds the core."""
    with _lock:
        use = _uses.get(id(core))
        return bool(use is not None and use.core is core and use.holders)
