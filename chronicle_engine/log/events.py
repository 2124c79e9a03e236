"""Typed domain events, kept apart from the rows that store them.

A domain event is a frozen pydantic model registered under (namespace, type) with a version. The
log stores its payload as JSON; reading decodes it back, first upcasting payloads written by an
older version, step by step. Stored rows are never rewritten: an upcast happens on every read.
"""

# No `from __future__ import annotations`: pydantic reads the annotations below as each model is
# defined, and objects spare it parsing them from strings.
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Annotated, Generic, Literal, NamedTuple, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict
from typing_extensions import TypeVar as DefaultedTypeVar

from ..errors import UnknownEventType, UsageError
from .port import LogStore
from .store import Envelope, PendingEvent, SQLiteEventStore, StoredEvent

__all__ = [
    "DomainEvent",
    "EventTypeRegistry",
    "UpcastRegistry",
    "EventReader",
    "Decoded",
]

E = TypeVar("E", bound="DomainEvent")
# The reader's store: SQLite's unless a reader is built over another (covariant: a reader of
# either store is a reader of `LogStore`).
S = DefaultedTypeVar("S", bound=LogStore, default=SQLiteEventStore, covariant=True)
Upcaster = Callable[[dict[str, object]], dict[str, object]]


class DomainEvent(BaseModel):
    """Base of every event the log holds. Subclass with `frozen=True`."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Decoded(NamedTuple, Generic[E]):
    """A stored event decoded into its class (payload upcast first): where it sits, and what."""

    envelope: Envelope
    event: E

    @property
    def seq(self) -> int:
        return self.envelope.seq


class EventTypeRegistry:
    """Maps (namespace, type) to an event class and its current version, and back."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], tuple[type[DomainEvent], int]] = {}
        self._by_class: dict[type[DomainEvent], tuple[str, str, int]] = {}
        self._adapters: dict[str, TypeAdapter[dict[str, object]]] = {}

    def event(
        self, namespace: str, type_: str, *, version: int = 1
    ) -> Callable[[type[E]], type[E]]:
        """Class decorator: register an event class under (namespace, type) at `version`."""

        def register(cls: type[E]) -> type[E]:
            self.register(namespace, type_, cls, version=version)
            return cls

        return register

    def register(
        self, namespace: str, type_: str, cls: type[DomainEvent], *, version: int = 1
    ) -> None:
        key = (namespace, type_)
        existing = self._by_key.get(key)
        if existing is not None and existing[0] is not cls:
            raise UsageError(
                f"{namespace}.{type_} is already registered to {existing[0].__name__}; "
                "pick another type name or register the class once"
            )
        self._by_key[key] = (cls, version)
        self._by_class[cls] = (namespace, type_, version)
        self._adapters.pop(namespace, None)

    def key_of(self, cls: type[DomainEvent]) -> tuple[str, str, int]:
        try:
            return self._by_class[cls]
        except KeyError:
            raise UnknownEventType(
                f"{cls.__name__} is not registered; decorate it with @types.event(namespace, type)"
            ) from None

    def class_of(self, namespace: str, type_: str) -> tuple[type[DomainEvent], int]:
        try:
            return self._by_key[(namespace, type_)]
        except KeyError:
            raise UnknownEventType(
                f"no event class is registered for {namespace}.{type_}; register it before reading"
            ) from None

    def knows(self, namespace: str, type_: str) -> bool:
        return (namespace, type_) in self._by_key

    def adapter(self, namespace: str) -> TypeAdapter[dict[str, object]]:
        """The namespace's decoder: one TypeAdapter over the discriminated union of its event
        classes, validating `{"type": <type name>, "event": <payload at its current version>}`
        into the same dict with `event` an instance of the registered class. Built on first
        use and again after a registration in the namespace."""
        found = self._adapters.get(namespace)
        if found is None:
            members = [
                TypedDict(  # type: ignore[operator]
                    f"{namespace}.{type_}", {"type": Literal[type_], "event": cls}
                )
                for (ns, type_), (cls, _) in sorted(self._by_key.items())
                if ns == namespace
            ]
            if not members:
                raise UnknownEventType(
                    f"no event class is registered in namespace {namespace!r}; register them "
                    "before reading"
                )
            union = Union[tuple(members)] if len(members) > 1 else members[0]  # noqa: UP007
            found = TypeAdapter(Annotated[union, Field(discriminator="type")])
            self._adapters[namespace] = found
        return found

    def pending(
        self,
        event: DomainEvent,
        *,
        session: str | None = None,
        id: str | None = None,
        created_at: str | None = None,
    ) -> PendingEvent:
        """Wrap a domain event for `store.append`."""
        return self.pending_payload(
            type(event),
            event.model_dump(mode="json"),
            session=session,
            id=id,
            created_at=created_at,
        )

    def pending_payload(
        self,
        cls: type[DomainEvent],
        payload: dict[str, object],
        *,
        session: str | None = None,
        id: str | None = None,
        created_at: str | None = None,
    ) -> PendingEvent:
        """`pending(cls(**payload), ...)` without the model: for a hot path that builds the
        payload itself, which must be exactly what `cls(**payload).model_dump(mode="json")`
        gives (its own tests check that)."""
        namespace, type_, version = self.key_of(cls)
        extra: dict[str, str] = {}
        if id is not None:
            extra["id"] = id
        if created_at is not None:
            extra["created_at"] = created_at
        return PendingEvent(
            namespace=namespace,
            type=type_,
            version=version,
            payload=payload,
            session=session,
            **extra,
        )


class UpcastRegistry:
    """Steps that turn a payload written at version N into version N+1."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, str, int], Upcaster] = {}

    def register(self, namespace: str, type_: str, from_version: int, step: Upcaster) -> None:
        self._steps[(namespace, type_, from_version)] = step

    def upcast(
        self, namespace: str, type_: str, version: int, target: int, payload: dict[str, object]
    ) -> dict[str, object]:
        while version < target:
            step = self._steps.get((namespace, type_, version))
            if step is None:
                raise UnknownEventType(
                    f"{namespace}.{type_} v{version} has no upcaster to v{version + 1}; "
                    "register one with UpcastRegistry.register"
                )
            payload = step(dict(payload))
            version += 1
        return payload


class EventReader(Generic[S]):
    """Reads the log with every payload upcast to its current version; decodes on request.
    `S` is the store's type (SQLite's unless said otherwise)."""

    def __init__(self, store: S, upcasts: UpcastRegistry, types: EventTypeRegistry) -> None:
        self.store = store
        self.upcasts = upcasts
        self.types = types

    def read(
        self,
        *,
        after: int = 0,
        upto: int | None = None,
        session: str | None = None,
        sessions: Sequence[str] | None = None,
        namespaces: Sequence[str] | None = None,
        limit: int | None = None,
        by_seq: bool = False,
    ) -> Iterator[StoredEvent]:
        for event in self.store.read(
            after=after,
            upto=upto,
            session=session,
            sessions=sessions,
            namespaces=namespaces,
            limit=limit,
            by_seq=by_seq,
        ):
            yield self.current(event)

    def current(self, event: StoredEvent) -> StoredEvent:
        """The event with its payload at the registered version (unknown types pass through)."""
        env = event.envelope
        known = self.types._by_key.get((env.namespace, env.type))
        if known is None or env.version >= known[1]:
            return event
        payload = self.upcasts.upcast(env.namespace, env.type, env.version, known[1], event.payload)
        return StoredEvent(env, payload)

    def refusal(self, event: PendingEvent) -> str | None:
        """Why this reader could not read `event` back once it is in the log (a type nobody
        registered, a version newer than this build's, an older one with no upcaster, a payload
        its model refuses), or None. The log is append-only: what goes in must come out."""
        known = self.types._by_key.get((event.namespace, event.type))
        if known is None:
            return f"unknown event type {event.namespace}.{event.type}"
        cls, current = known
        if event.version > current:
            return (
                f"{event.namespace}.{event.type} version {event.version} is newer than this "
                f"Chronicle reads (version {current}); upgrade Chronicle to import it"
            )
        try:
            payload = self.upcasts.upcast(
                event.namespace, event.type, event.version, current, event.payload
            )
            cls.model_validate(payload)
        except (UnknownEventType, ValueError) as exc:
            return f"{event.namespace}.{event.type} v{event.version} cannot be read: {exc}"
        return None

    def decode(self, event: StoredEvent) -> DomainEvent:
        """The event as an instance of its registered class, upcast first (through the
        namespace's adapter; UnknownEventType for a type this build does not know)."""
        env = event.envelope
        cls, _ = self.types.class_of(env.namespace, env.type)  # a clear error for an unknown type
        payload = self.current(event).payload
        adapter = self.types.adapter(env.namespace)
        try:
            validated = adapter.validate_python({"type": env.type, "event": payload})
        except ValidationError:
            # A newer build may have added fields: read what this build knows, as a reader of
            # plain payloads would. A payload that is wrong in the fields it knows still fails.
            known = {k: v for k, v in payload.items() if k in cls.model_fields}
            if len(known) == len(payload):
                raise
            validated = adapter.validate_python({"type": env.type, "event": known})
        decoded = validated["event"]
        assert isinstance(decoded, DomainEvent)  # the adapter validates into the event's class
        return decoded

    def typed(
        self,
        *,
        after: int = 0,
        upto: int | None = None,
        sessions: Sequence[str] | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> Iterator[Decoded[DomainEvent]]:
        """Like `read`, each event decoded; events of types this build does not know are
        skipped (a newer writer's), as a reader of plain payloads would ignore them."""
        for event in self.read(after=after, upto=upto, sessions=sessions, namespaces=namespaces):
            env = event.envelope
            if self.types.knows(env.namespace, env.type):
                yield Decoded(env, self.decode(event))

    # -- named questions, answered upcast --------------------------------------------------

    def get_many(self, seqs: Iterable[int]) -> dict[int, StoredEvent]:
        """The events at `seqs` the log holds, by seq, payloads at their current version."""
        return {seq: self.current(e) for seq, e in self.store.get_many(seqs).items()}

    def latest(self, cls: type[E], *, sessions: Sequence[str]) -> Decoded[E] | None:
        """The last event of class `cls` written in any of `sessions`, decoded."""
        namespace, type_, _ = self.types.key_of(cls)
        found = self.store.latest(namespace, type_, sessions=sessions)
        if found is None:
            return None
        event = self.decode(found)
        assert isinstance(event, cls)
        return Decoded(found.envelope, event)
