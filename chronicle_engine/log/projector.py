"""Folds turn the log into projections; the Projector drives them.

Invariants:
- Each fold has its own position, written in the same transaction as the state it produced, so a
  catch-up is idempotent and resumable: after a crash the next one redoes exactly the lost batch.
- A generative fold draws (calls a model) in `prepare`, before the write transaction opens; `apply`
  only writes what was prepared. A slow model therefore never holds the write lock.
- A failed batch writes nothing and moves no position.
- Positions never move back, and no event is folded twice, however many writers (threads,
  processes, hosts) fold the same log: a batch is read outside the write transaction, so the
  transaction first reads each fold's position again, held until it commits (`held_position`),
  and folds only what is still beyond it. Another writer's progress is kept; a fold it reset
  meanwhile is left to the next batch; a generative fold whose position moved after its draw
  writes nothing and raises `FoldMoved` (the draw was of events someone else has folded).
- Catch-up streams: a batch of at most `batch_size` events is in memory at a time, however far
  behind a fold is (`fold_within` too, for a writer folding inside its own transaction).
- A fold that declares `namespaces` is given only events of those namespaces, read filtered in
  SQL (the other payloads are never decoded); its position still moves over the whole range the
  batch covered, so a later catch-up never reads the skipped events again, and the fold's state
  is the same whether it folds the log at once, in pieces or in a rebuild.
- `catch_up()`/`rebuild()` refuse a fold that only prepares asynchronously, with TypeError, before
  reading or resetting anything; `catch_up_async()` awaits each draw with no transaction open and
  writes on the calling thread, so the store never leaves the thread that opened it.
"""

from __future__ import annotations

import inspect
import itertools
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import ClassVar, Generic, Protocol, runtime_checkable

from typing_extensions import TypeVar

from ..errors import ChronicleRuntimeError, GenerativeRebuild, UsageError
from .events import EventReader
from .port import LogStore
from .store import StoredEvent

# The connection a store's `atomic()` hands its folds: sqlite3's unless the store is another.
C = TypeVar("C", default=sqlite3.Connection)
C_in = TypeVar("C_in", contravariant=True, default=sqlite3.Connection)

__all__ = [
    "Fold",
    "GenerativeFold",
    "AsyncGenerativeFold",
    "FoldMoved",
    "Projector",
    "prepares_async",
]


class FoldMoved(ChronicleRuntimeError):
    """Another writer moved a generative fold's position after this batch was drawn: the
    batch wrote nothing (its draw was of events no longer this writer's to fold)."""


@runtime_checkable
class Fold(Protocol[C_in]):
    """A deterministic fold: same log, same state. `C_in`: the connection it writes through.

    A fold may also declare `namespaces` (a collection of namespace names, read once when the
    projector is made): it is then given only events of those namespaces."""

    name: str

    def apply(self, conn: C_in, events: Sequence[StoredEvent], prepared: object) -> None:
        """Write the effect of `events` (already in seq order) inside the open transaction."""
        ...

    def reset(self, conn: C_in) -> None:
        """Drop the fold's state (for a rebuild), inside the open transaction."""
        ...


class Reset(Protocol[C_in]):
    """Drops a fold's state: inside the rebuild's transaction when given one, else on its own."""

    def __call__(self, conn: C_in | None = None, /) -> None: ...


class FoldedStore(Protocol[C]):
    """What the projector needs of a store: the log, its transaction and fold positions."""

    def atomic(self) -> AbstractContextManager[C]: ...

    def position(self, fold: str) -> int: ...

    def last_seq(self) -> int: ...

    def held_position(self, conn: C, fold: str, /) -> int:
        """`fold`'s position read inside the write transaction `conn`, held against every other
        writer until that transaction ends."""
        ...

    def set_position(self, conn: C, fold: str, position: int, /) -> None: ...

    def errors(self, what: str) -> AbstractContextManager[None]: ...


class GenerativeFold(Fold[sqlite3.Connection], Protocol):
    """A fold whose output a model writes. `prepare` draws; `apply` only writes."""

    generative: ClassVar[bool]

    def prepare(self, events: Sequence[StoredEvent]) -> object: ...


class AsyncGenerativeFold(GenerativeFold, Protocol):
    async def prepare_async(self, events: Sequence[StoredEvent]) -> object: ...


def declared_namespaces(fold: object) -> frozenset[str] | None:
    """The namespaces a fold reads, or None when it reads the whole log."""
    declared = getattr(fold, "namespaces", None)
    if declared is None:
        return None
    if isinstance(declared, str):
        raise UsageError(
            f"{getattr(fold, 'name', fold)!r} declares namespaces={declared!r}: give a tuple of "
            "namespace names, not one string"
        )
    return frozenset(declared)


def is_generative(fold: object) -> bool:
    return bool(getattr(fold, "generative", False))


def prepares_async(fold: object) -> bool:
    """True when the fold can only prepare by being awaited."""
    probe = getattr(fold, "prepares_async", None)
    if isinstance(probe, bool):
        return probe
    return hasattr(fold, "prepare_async") and not hasattr(fold, "prepare")


def _refuse_async(fold: object) -> None:
    if prepares_async(fold):
        name = getattr(fold, "name", type(fold).__name__)
        raise TypeError(
            f"{name!r} only prepares asynchronously: drive it with catch_up_async() or "
            "rebuild_async(); nothing was folded or reset"
        )


class Projector(Generic[C]):
    """Drives a set of folds over the log, each from its own position."""

    def __init__(
        self,
        store: FoldedStore[C],
        reader: EventReader[LogStore],
        folds: Sequence[Fold[C]],
        *,
        batch_size: int = 1000,
    ) -> None:
        names = [f.name for f in folds]
        if len(set(names)) != len(names):
            raise UsageError(f"fold names must be unique within a projector, got {names}")
        self.store = store
        self.reader = reader
        self.folds = list(folds)
        self.batch_size = batch_size
        self._namespaces = {f.name: declared_namespaces(f) for f in self.folds}
        # One read serves every fold: the union of what they declared, or everything.
        wanted: set[str] | None = set() if self.folds else None
        for declared in self._namespaces.values():
            wanted = None if declared is None or wanted is None else wanted | declared
        self._wanted = tuple(sorted(wanted)) if wanted is not None else None

    # -- catch-up ------------------------------------------------------------------------

    def catch_up(self, *, upto: int | None = None) -> int:
        """Fold every event not yet folded. Returns the number of events read."""
        for fold in self.folds:
            _refuse_async(fold)
        settled = self._settles()
        total = 0
        while True:
            batch, positions, end = self._next_batch(upto)
            if end is None:
                return total
            pending = {f.name: self._pending(f, batch, positions) for f in self.folds}
            prepared = {
                f.name: f.prepare(pending[f.name])  # type: ignore[attr-defined]
                for f in self.folds
                if is_generative(f) and pending[f.name]
            }
            for name, value in prepared.items():
                if inspect.isawaitable(value):
                    _close_awaitable(value)
                    raise TypeError(
                        f"{name!r} has an async summarizer: write it as an async def and drive the "
                        "projector with catch_up_async()"
                    )
            written = self._apply(pending, positions, prepared, end)
            total += len(batch)
            if settled and written and len(batch) < self.batch_size:
                return total

    async def catch_up_async(self, *, upto: int | None = None) -> int:
        """Like catch_up, but awaits each fold's draw with no transaction open."""
        settled = self._settles()
        total = 0
        while True:
            batch, positions, end = self._next_batch(upto)
            if end is None:
                return total
            pending = {f.name: self._pending(f, batch, positions) for f in self.folds}
            prepared: dict[str, object] = {}
            for f in self.folds:
                events = pending[f.name]
                if not is_generative(f) or not events:
                    continue
                if hasattr(f, "prepare_async"):
                    prepared[f.name] = await f.prepare_async(events)  # type: ignore[attr-defined]
                else:
                    value = f.prepare(events)  # type: ignore[attr-defined]
                    prepared[f.name] = await value if inspect.isawaitable(value) else value
            written = self._apply(pending, positions, prepared, end)
            total += len(batch)
            if settled and written and len(batch) < self.batch_size:
                return total

    def _settles(self) -> bool:
        """Whether a batch shorter than `batch_size` ends a catch-up. Such a batch read everything
        the log held (up to `upto`) when it was read; with no generative fold (whose apply may
        append more) that is the end. An event appended since is the next catch-up's."""
        return not any(is_generative(f) for f in self.folds)

    def fold_within(self, conn: C, *, after: int, upto: int) -> int:
        """Fold the events in (after, upto] into every fold, inside the caller's open write
        transaction, a batch at a time (memory bounded by `batch_size`, however far behind).
        For a writer whose folds must be caught up before it appends in the same transaction
        (the session tree); it writes the positions itself, in that transaction. The events
        each fold is given are those `catch_up` would give it. Returns the events read."""
        for fold in self.folds:
            if is_generative(fold):
                raise UsageError(
                    f"{fold.name!r} is generative: its draws must not run inside a write "
                    "transaction; fold it with catch_up()"
                )
        events = self.reader.read(after=after, upto=upto, namespaces=self._wanted, by_seq=True)
        total = 0
        while batch := list(itertools.islice(events, self.batch_size)):
            for fold in self.folds:
                pending = self._pending(fold, batch, {fold.name: after})
                if pending:
                    fold.apply(conn, pending, None)
            total += len(batch)
        return total

    def _next_batch(self, upto: int | None) -> tuple[list[StoredEvent], dict[str, int], int | None]:
        """The next batch, the positions it was read from, and the end of the log range it
        covers (None when there is nothing left to fold)."""
        positions = {f.name: self.store.position(f.name) for f in self.folds}
        start = min(positions.values(), default=0)
        if self._wanted is None:
            batch = list(self.reader.read(after=start, upto=upto, limit=self.batch_size))
            return batch, positions, batch[-1].seq if batch else None
        # Filtered, a short read must still say how far it looked. The end is fixed before the
        # read: writes are serialised and seqs grow in commit order, so every event up to the
        # log's last seq is already visible, and one appended later lies beyond it.
        last = self.store.last_seq()
        end = last if upto is None else min(upto, last)
        if end <= start:
            return [], positions, None
        batch = list(
            self.reader.read(
                after=start, upto=end, namespaces=self._wanted, limit=self.batch_size, by_seq=True
            )
        )
        if len(batch) == self.batch_size:
            end = batch[-1].seq  # a full batch: the rest of the range is the next batch's
        return batch, positions, end

    def _pending(
        self, fold: Fold[C], batch: list[StoredEvent], positions: dict[str, int]
    ) -> list[StoredEvent]:
        events = _pending_for(batch, positions[fold.name])
        namespaces = self._namespaces[fold.name]
        if namespaces is None or (self._wanted is not None and namespaces.issuperset(self._wanted)):
            return events
        return [e for e in events if e.envelope.namespace in namespaces]

    def _apply(
        self,
        pending: dict[str, list[StoredEvent]],
        positions: dict[str, int],
        prepared: dict[str, object],
        end: int,
    ) -> bool:
        """Write the batch; False when a fold was reset meanwhile and is behind it still."""
        names = ", ".join(f.name for f in self.folds)
        behind = False
        with self.store.errors(f"folding the log into {names}"), self.store.atomic() as conn:
            # Held in the order of their names, whichever projector holds them: no deadlock.
            held = {name: self.store.held_position(conn, name) for name in sorted(positions)}
            for f in self.folds:
                events, now = pending[f.name], held[f.name]
                if now != positions[f.name]:  # another writer folded, or reset, meanwhile
                    if events and is_generative(f):
                        raise FoldMoved(
                            f"{f.name!r} moved from {positions[f.name]} to {now} while its "
                            "batch was drawn; nothing was written"
                        )
                    if now < positions[f.name]:
                        behind = True  # reset: the next batch reads from where it is now
                        continue
                    events = _pending_for(events, now)
                if events:
                    f.apply(conn, events, prepared.get(f.name))
                if end > now:
                    self.store.set_position(conn, f.name, end)
        return not behind

    # -- rebuild -------------------------------------------------------------------------

    def rebuild(
        self,
        name: str,
        *,
        reset: Reset[C] | None = None,
        reset_in_transaction: bool = True,
        discard_generated: bool = False,
    ) -> int:
        """Drop one fold's state and fold the whole log again."""
        fold = self._fold(name)
        _refuse_async(fold)
        self._reset(fold, reset, reset_in_transaction, discard_generated)
        return Projector(self.store, self.reader, [fold], batch_size=self.batch_size).catch_up()

    async def rebuild_async(
        self,
        name: str,
        *,
        reset: Reset[C] | None = None,
        reset_in_transaction: bool = True,
        discard_generated: bool = False,
    ) -> int:
        fold = self._fold(name)
        self._reset(fold, reset, reset_in_transaction, discard_generated)
        projector = Projector(self.store, self.reader, [fold], batch_size=self.batch_size)
        return await projector.catch_up_async()

    def _fold(self, name: str) -> Fold[C]:
        for f in self.folds:
            if f.name == name:
                return f
        raise UsageError(
            f"this projector has no fold named {name!r}; it has {[f.name for f in self.folds]}"
        )

    def _reset(
        self,
        fold: Fold[C],
        reset: Reset[C] | None,
        reset_in_transaction: bool,
        discard_generated: bool,
    ) -> None:
        if is_generative(fold) and not discard_generated:
            raise GenerativeRebuild(
                f"{fold.name!r} is a generative fold: rebuilding re-runs every model call it made "
                "and returns the same anchors with different content. Carry it across instead, "
                "or pass discard_generated=True to accept both."
            )
        if reset is not None and not reset_in_transaction:
            reset()
            with self.store.atomic() as conn:
                self.store.held_position(conn, fold.name)
                self.store.set_position(conn, fold.name, 0)
            return
        with self.store.atomic() as conn:
            self.store.held_position(conn, fold.name)  # first, as a batch's writer holds it
            if reset is not None:
                reset(conn)
            else:
                fold.reset(conn)
            self.store.set_position(conn, fold.name, 0)


def _pending_for(batch: list[StoredEvent], position: int) -> list[StoredEvent]:
    if not batch or batch[0].seq > position:
        return batch
    return [e for e in batch if e.seq > position]


def _close_awaitable(value: object) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()
