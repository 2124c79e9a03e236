"""Every error Chronicle raises on purpose.

One base, `ChronicleError`. A subclass also inherits the builtin it resembles, so callers that
already catch `KeyError` or `TypeError` keep working. `UsageError` is a caller's mistake (fix the
call); `ChronicleRuntimeError` is something that went wrong while running (retry, degrade, report).
Messages say what to do next.
"""

from __future__ import annotations

__all__ = [
    "ChronicleError",
    "UsageError",
    "EgressRefused",
    "ChronicleRuntimeError",
    "StoreError",
    "StoreBusy",
    "StoreUnreachable",
    "StoreReadOnly",
    "StoreFull",
    "StoreCorrupt",
    "StoreTooNew",
    "AppendOnlyViolation",
    "UnknownEventType",
    "SectionCollision",
    "ChronicleFork",
    "GenerativeRebuild",
    "PinMiss",
    "SummaryFailed",
    "FormatError",
]


class ChronicleError(Exception):
    """Base of every error Chronicle raises deliberately."""


class UsageError(ChronicleError):
    """The caller asked for something that cannot work as asked."""


class ChronicleRuntimeError(ChronicleError, RuntimeError):
    """Something failed while running; the caller's request itself was sound."""


class StoreError(ChronicleRuntimeError):
    """The database could not do what was asked. Wraps the `sqlite3` error as `__cause__`."""


class StoreBusy(StoreError):
    """Another process held the write lock for longer than the store is willing to wait."""


class StoreUnreachable(StoreBusy):
    """A database server (PostgreSQL) could not be reached, or dropped the connection. Handled
    as a busy store: what was to be written waits in the spill, and the next call reconnects."""


class StoreReadOnly(StoreError, PermissionError):
    """The database file (or its directory) is not writable."""


class StoreFull(StoreReadOnly):
    """The disk (or a size limit) refused the write. Handled as a store that takes no writes:
    what was to be written waits in the spill, which says where it is."""


class StoreCorrupt(StoreReadOnly):
    """The database file is damaged (not a database, a malformed page). Writes wait in the
    spill like a read-only store's; when a core opens it, the file is moved aside and a fresh
    one started, and `chronicle doctor --salvage` reads what it can from the old one."""


class StoreTooNew(StoreError):
    """The database records migrations this build does not know: a newer Chronicle migrated it.
    It is not opened (an older build could misread what the newer one wrote, or write what it
    no longer reads); turns wait on disk until Chronicle is upgraded."""


class AppendOnlyViolation(StoreError):
    """Something tried to update or delete an event; the log only grows."""


class UnknownEventType(UsageError, LookupError):
    """An event's (namespace, type) is not registered, so it cannot be encoded or decoded."""


class SectionCollision(UsageError, KeyError):
    """A strict write (`append_new`) named a section id that is already stored."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ChronicleFork(UsageError):
    """The write would leave two current sections over one seq, or part of a range uncovered."""


class GenerativeRebuild(UsageError):
    """A generative fold was asked to rebuild without `discard_generated=True`."""


class PinMiss(ChronicleRuntimeError, LookupError):
    """A replay resolver was asked for a model call that the log never recorded."""


class SummaryFailed(ChronicleRuntimeError):
    """A summariser could not produce a consolidation (model down, timeout, bad output)."""


class FormatError(UsageError, ValueError):
    """An imported file is malformed. The message names the line."""


class EgressRefused(UsageError, PermissionError):
    """An endpoint (or the proxy in front of it) that the settings do not allow. Raised before
    anything is resolved or sent."""
