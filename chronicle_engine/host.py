"""The fence between Hermes' loop and Chronicle, shared by both slot adapters.

Invariants:
- Nothing Chronicle raises reaches the host: a fenced hook that fails returns its neutral value.
- Each failure is logged once. A database that refuses writes (busy, read-only) is one line per
  database, whichever slot meets it first, and the message is the whole story; any other failure
  is one warning per hook and kind of error, with its traceback, then debug lines.
- Every hook gives the scheduler its tick, and a tick can never break the hook that gave it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar, cast

from .errors import StoreError

if TYPE_CHECKING:  # the slots import this before any core is built (the plugin's import)
    from .core import ChronicleCore

__all__ = ["HostGuard", "Slot", "fenced"]

T = TypeVar("T")
P = ParamSpec("P")


class HostGuard:
    """Logs each failure once and gives the scheduler its ticks, for one slot."""

    def __init__(self, logger: logging.Logger) -> None:
        self.log = logger
        self._logged: set[tuple[str, str]] = set()
        self._refused: set[str] = set()  # refusals met before a core was open

    def failed(self, hook: str, exc: BaseException, core: ChronicleCore | None) -> None:
        if isinstance(exc, StoreError):
            seen = core.warned if core is not None else self._refused
            if type(exc).__name__ in seen:
                self.log.debug("chronicle %s: %s", hook, exc)
                return
            seen.add(type(exc).__name__)
            self.log.warning("chronicle %s: %s. The conversation goes on.", hook, exc)
            return
        key = (hook, type(exc).__name__)
        if key in self._logged:
            self.log.debug("chronicle %s failed again: %s", hook, exc)
            return
        self._logged.add(key)
        self.log.warning(
            "chronicle %s failed (%s: %s); continuing without it, nothing captured is lost",
            hook,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )

    def tick(self, core: ChronicleCore | None, hook: str) -> None:
        """The scheduler's turn on this hook (nothing without an open core)."""
        if core is None:
            return
        try:
            core.scheduler.tick(hook)
        except Exception as exc:  # noqa: BLE001 - maintenance must never break a hook
            self.failed(f"scheduler.tick({hook})", exc, core)


class Slot(Protocol):
    """What a fenced adapter offers its fence."""

    @property
    def guard(self) -> HostGuard: ...

    def fence_core(self) -> ChronicleCore | None:
        """The core a failure is reported against, if one is open (never opens one)."""
        ...

    def fence_scope(self) -> contextlib.AbstractContextManager[None]:
        """What a fenced call runs inside (the context engine borrows the core)."""
        ...


S = TypeVar("S", bound=Slot)


def fenced(
    default: T | Callable[Concatenate[S, P], T],
) -> Callable[[Callable[Concatenate[S, P], T]], Callable[Concatenate[S, P], T]]:
    """Run a hook inside the fence: on any exception, log it once and return `default` (called
    with the hook's own arguments when it is callable)."""

    def wrap(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
        @functools.wraps(method)
        def guarded(self: S, *args: P.args, **kwargs: P.kwargs) -> T:
            try:
                with self.fence_scope():
                    return method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the whole point of the fence
                self.guard.failed(method.__name__, exc, self.fence_core())
            if callable(default):
                return cast(T, default(self, *args, **kwargs))
            return default

        return guarded

    return wrap
