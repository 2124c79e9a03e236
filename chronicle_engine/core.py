"""One core per database, shared by everything in the process.

Hermes imports the plugin directory twice, under two module names, so anything kept at module
level in the plugin is kept twice. Both copies import this package, `chronicle_engine`, by its one
absolute name, so `ChronicleCore.get()` is the single place a database's core is found: by the
memory-provider slot, the context-engine slot, the CLI and the tests alike.

The core owns the store and the event registries, and it is the wiring: it builds each subsystem
on first use, bottom-up (log reader -> sessions -> capture -> recall -> compaction -> scheduler),
handing each constructor the lower parts it uses. No subsystem receives the core.

The store is SQLite's file, or PostgreSQL when config.yaml's `chronicle.store` names a server
(`Config.location()` is what a core is opened and registered by); then each room's PostgreSQL
twin is built instead, and `db_path` names only this host's own files (spill, waiting turns).
`store` is typed as either store, and so is `reader` (an `EventReader` of one or the other): a
part that runs on one store only is built where `isinstance` has said which (`reads_sqlite` for
a reader).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeAlias, TypeVar, cast

from typing_extensions import TypeIs

from .capture.events import register_capture_events
from .capture.spill import Spill
from .chronicle.store import SQLiteChronicleStore
from .chronicle.stores import chronicle_of
from .compaction.events import ContextCompacted, PassLedger, register_context_events
from .config import Config, is_postgres, load_hermes_config
from .errors import StoreError, StoreTooNew
from .log.bookkeeping import register_builtin_events
from .log.events import EventReader, EventTypeRegistry, UpcastRegistry
from .log.store import SQLiteEventStore
from .recall.events import register_recall_events
from .scheduler.events import register_scheduler_events
from .sessions.events import CompactionRecorded, register_session_events

if TYPE_CHECKING:
    from .chronicle.sections import AsyncSummarizer, Summarizer
    from .compaction.engine import Compaction
    from .log.postgres import PostgresEventStore
    from .recall.recall import Recall
    from .scheduler.scheduler import Scheduler
    from .sessions.capture import Capture
    from .sessions.tree import SessionTree

__all__ = ["ChronicleCore", "Reader", "reads_sqlite", "vocabulary"]

_Part = TypeVar("_Part")

Reader: TypeAlias = "EventReader[SQLiteEventStore] | EventReader[PostgresEventStore]"
"""The core's reader: of a SQLite store or of a PostgreSQL one."""

log = logging.getLogger("chronicle_engine.core")


def vocabulary() -> EventTypeRegistry:
    """Every event type any room writes, registered."""
    types = EventTypeRegistry()
    for register in (
        register_builtin_events,
        register_capture_events,
        register_session_events,
        register_recall_events,
        register_context_events,
        register_scheduler_events,
    ):
        register(types)
    return types


def known_migrations(*, postgres: bool) -> frozenset[str]:
    """The name of every migration this build applies to a store of that kind."""
    if postgres:
        from .chronicle.postgres import PG_CHRONICLE_MIGRATIONS
        from .log.postgres import LOG_MIGRATIONS as PG_LOG_MIGRATIONS
        from .recall.postgres import PG_RECALL_MIGRATIONS
        from .scheduler.postgres import PG_SCHEDULER_MIGRATIONS
        from .sessions.postgres import PG_SESSION_MIGRATIONS

        return frozenset(
            m.name
            for m in (
                *PG_LOG_MIGRATIONS,
                *PG_CHRONICLE_MIGRATIONS,
                *PG_SESSION_MIGRATIONS,
                *PG_RECALL_MIGRATIONS,
                *PG_SCHEDULER_MIGRATIONS,
            )
        )
    from .chronicle.store import CHRONICLE_MIGRATIONS
    from .log.store import LOG_MIGRATIONS, LOG_RETIRED_MIGRATIONS
    from .recall.schema import MIGRATIONS as RECALL_MIGRATIONS
    from .scheduler.schema import SCHEDULER_MIGRATIONS
    from .sessions.fold import MIGRATIONS as SESSION_MIGRATIONS

    return frozenset(
        m.name
        for m in (
            *LOG_MIGRATIONS,
            *CHRONICLE_MIGRATIONS,
            *SESSION_MIGRATIONS,
            *RECALL_MIGRATIONS,
            *SCHEDULER_MIGRATIONS,
        )
    ).union(LOG_RETIRED_MIGRATIONS)


def reads_sqlite(reader: Reader) -> TypeIs[EventReader[SQLiteEventStore]]:
    """Whether `reader` reads a SQLite store (it narrows the reader's type, as `isinstance`
    narrows a store's)."""
    return isinstance(reader.store, SQLiteEventStore)


class _LastOut:
    """Runs `close` when the last holder is done with the store: the shutdown that made it (its
    first holder), and each step or background thread still running when it returned."""

    def __init__(self, close: Callable[[], None]) -> None:
        self._close = close
        self._holders = 1
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            self._holders += 1

    def done(self) -> None:
        with self._lock:
            self._holders -= 1
            last = self._holders == 0
        if last:
            self._close()


class ChronicleCore:
    """The store, the event vocabulary and the subsystems for one database."""

    _registry: ClassVar[dict[str, ChronicleCore]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, location: str | os.PathLike[str], config: Config | None = None) -> None:
        self.config = config or Config()
        self.location = str(location)
        """What this core was opened by: a SQLite file, or a PostgreSQL connection string."""
        self.postgres = is_postgres(self.location)
        busy_ms = self.config.settings.busy_timeout_ms
        if self.postgres:
            from .log.postgres import PostgresEventStore

            self.store: SQLiteEventStore | PostgresEventStore = PostgresEventStore(
                self.location, busy_timeout_ms=busy_ms, password=self.config.store_password()
            )
            # This host's own files (the spill, the waiting turns) stay on its disk.
            self.db_path = str(self.config.db_path().expanduser().resolve())
        else:
            self.store = SQLiteEventStore(location, busy_timeout_ms=busy_ms)
            self.db_path = self.location
        self._refuse_a_newer_schema()
        # The whole vocabulary is known from the start, so any reader (the CLI, an export, a
        # rebuild) can decode every event before the subsystem that writes it is first used.
        self.types = vocabulary()
        # The event models a compaction pass writes are built on first use (`defer_build`, so
        # importing the plugin stays cheap). Building them as the core opens, before any thread
        # can use them (pydantic's rebuild is not safe against a concurrent first use), keeps
        # that cost out of the first pass, which runs on the host's thread mid-turn.
        for model in (ContextCompacted, PassLedger, CompactionRecorded):
            model.model_rebuild()
        self.upcasts = UpcastRegistry()
        self.reader: Reader = (  # (each branch a reader of its own store's type)
            EventReader(self.store, self.upcasts, self.types)
            if isinstance(self.store, SQLiteEventStore)
            else EventReader(self.store, self.upcasts, self.types)
        )
        self._closed = False
        self._subsystems: dict[str, object] = {}
        # every scheduler built over this core: shutdown stops their background threads
        self._schedulers: weakref.WeakSet[Scheduler] = weakref.WeakSet()
        self._schedulers_lock = threading.Lock()  # (shutdown lists them while one may be made)
        self._subsystems_lock = threading.RLock()
        self.warned: set[str] = set()
        """Degraded states already logged for this database; both slots log each one once."""
        self._replay_spill()

    def _refuse_a_newer_schema(self) -> None:
        """A database a newer Chronicle migrated (it records migrations this build does not
        know) is closed again and refused (`StoreTooNew`) before anything reads or writes it."""
        try:
            unknown = sorted(self.store.migrated() - known_migrations(postgres=self.postgres))
        except BaseException:
            self.store.close()
            raise
        if unknown:
            self.store.close()
            raise StoreTooNew(
                f"{self.location} was migrated by a newer Chronicle (migrations this build does "
                f"not know: {', '.join(unknown)}); upgrade Chronicle to open it (or open a "
                "backup taken before the upgrade)"
            )

    def _replay_spill(self) -> None:
        """Events kept aside while this database refused writes (`capture/spill.py`) reach the
        log when a core opens it, even if no session of theirs ever writes again."""
        spill = Spill.beside(self.db_path)
        if spill is None or not spill.waiting():
            return
        try:
            with self.sessions.writing():
                pass  # the outermost tree write replays the spill first
        except StoreError as exc:
            log.info("chronicle: the spill file waits for the next write (%s)", exc)

    # -- the registry --------------------------------------------------------------------

    @staticmethod
    def _key(db_path: str | os.PathLike[str]) -> str:
        text = str(db_path)
        if is_postgres(text):
            return text.strip()  # a connection string never holds the password (config.py)
        if text == ":memory:" or text.startswith("file:"):
            return text  # a URI (e.g. "file:/path/chronicle.db?mode=ro") goes to SQLite as written
        return str(Path(text).expanduser().resolve())

    @classmethod
    def get(cls, db_path: str | os.PathLike[str], *, config: Config | None = None) -> ChronicleCore:
        """The process's core for `db_path` (a SQLite file, or a PostgreSQL connection string:
        `Config.location()`), opened on first use. `:memory:` is never shared."""
        if str(db_path) == ":memory:":
            return cls(db_path, config)
        key = cls._key(db_path)
        with cls._registry_lock:
            core = cls._registry.get(key)
            if core is None or core._closed:
                core = cls(key, config)
                cls._registry[key] = core
            return core

    @classmethod
    def for_hermes_home(cls, hermes_home: str | os.PathLike[str] | None = None) -> ChronicleCore:
        config = load_hermes_config(hermes_home)
        return cls.get(config.location(), config=config)

    @classmethod
    def open_cores(cls) -> list[ChronicleCore]:
        with cls._registry_lock:
            return [c for c in cls._registry.values() if not c._closed]

    # -- subsystems ----------------------------------------------------------------------
    # Each is built on first use, once, under the core's lock: opening a core writes nothing
    # (a read-only or busy database opens), and a part nobody asks for costs nothing.

    def _subsystem(self, name: str, build: Callable[[ChronicleCore], _Part]) -> _Part:
        found = self._subsystems.get(name)
        if found is None:
            with self._subsystems_lock:
                found = self._subsystems.get(name)
                if found is None:
                    found = build(self)
                    self._subsystems[name] = found
        return cast(_Part, found)

    @property
    def sessions(self) -> SessionTree:
        return self._subsystem("sessions", lambda core: core._new_sessions())

    def _new_sessions(self) -> SessionTree:
        from .sessions.tree import SessionTree

        store = self.store
        if isinstance(store, SQLiteEventStore):
            from .sessions.tables import SQLiteSessionTables

            return SessionTree(self.reader, SQLiteSessionTables(store))
        from .sessions.postgres import PostgresSessionTables

        # a refused capture waits in this host's spill, beside its local db_path
        return SessionTree(self.reader, PostgresSessionTables(store, spill_path=self.db_path))

    @property
    def capture(self) -> Capture:
        from .sessions.capture import Capture

        return self._subsystem("capture", lambda core: Capture(core.sessions, core.config))

    @property
    def recall(self) -> Recall:
        return self._subsystem("recall", lambda core: core._new_recall())

    def _new_recall(self) -> Recall:
        from .recall.recall import Recall

        def redraw(seqs: Sequence[int]) -> list[str]:
            # forgetting redraws the sections that held what it hid (compaction's writer)
            return [f"{r.old} -> {r.new}" for r in self.compaction.forget_messages(seqs)]

        reader = self.reader
        if reads_sqlite(reader):
            return Recall(reader, self.config, self.sessions, self.capture, redraw=redraw)
        from .recall.postgres import PostgresRecallIndex

        index = PostgresRecallIndex(reader, self.config, self.sessions, self.capture)
        return Recall.over(index, self.capture, redraw)

    @property
    def compaction(self) -> Compaction:
        from .compaction.engine import Compaction

        # expand leaves out what recall's forget hid; recall is built only when asked
        return self._subsystem(
            "compaction",
            lambda core: Compaction(
                # PARTIAL (issue 17): compaction's parts (its ledgers, the section writer,
                # rederive, the chronicle store's connections) are typed for SQLite's store and
                # run on either through the log's port; typed for both, they would not need this.
                cast("EventReader[SQLiteEventStore]", core.reader),
                core.config,
                core.sessions,
                core.capture,
                lambda seqs: core.recall.hidden_seqs(seqs),
                forgotten_between=core._forgotten_between,
            ),
        )

    def _forgotten_between(self, lo: int, hi: int) -> set[int]:
        """The forgotten message seqs in lo..hi, when recall runs in this process (it does
        whenever Chronicle is the memory provider: forgetting happens through its tools). A pass
        of a core without recall asks nothing and builds nothing."""
        if self._subsystems.get("recall") is None:
            return set()
        return {s for s in self.recall.forgotten_messages(current=False) if lo <= s <= hi}

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler the slots tick: its hooks' steps run in the background when
        `maintenance.background` says so (the default)."""
        return self._subsystem("scheduler", lambda core: core.new_scheduler(background=None))

    def new_scheduler(
        self,
        *,
        clock: Callable[[], float] | None = None,
        timer: Callable[[], float] | None = None,
        summarize: Summarizer | AsyncSummarizer | None = None,
        background: bool | None = False,
    ) -> Scheduler:
        """A scheduler over this database's parts (`scheduler` is the one the slots tick; tests
        and benchmarks build their own with a clock or a summariser of their choosing). Its
        hooks' steps run on the hook's thread unless `background` (None: as
        `maintenance.background` says)."""
        from .chronicle.write import WriterSummarizer
        from .compaction.policy import policy_from_config
        from .scheduler.scheduler import Scheduler

        scheduler = Scheduler(
            self.reader,
            self.config,
            sessions=lambda: self.sessions,
            # The context engine's writer (read at each draw), and the prose budget a
            # compaction of the default window gives one section.
            writer=lambda: WriterSummarizer(
                lambda: self.compaction.writer, policy_from_config(self.config).section_chars
            ),
            recall=lambda: self.recall,
            warned=self.warned,
            clock=clock,
            timer=timer,
            summarize=summarize,
            background=background,
        )
        with self._schedulers_lock:
            self._schedulers.add(scheduler)
            closing = self._closed
        if closing:  # made while the core shuts down: it runs nothing on a closing store
            scheduler.ask_to_stop(0.0)
        return scheduler

    # -- reading -------------------------------------------------------------------------

    def chronicle(self, name: str = "default") -> SQLiteChronicleStore:
        return chronicle_of(self.store, name)

    # -- lifecycle -----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the schedulers' background threads, checkpoint the WAL and close every
        connection. Safe to call twice.

        The registry forgets this core first: a `get` from now on opens a new core, which may
        run beside this one until its threads end (the queue's claims give each job to one
        runner, here and on other hosts). Each thread gets STOP_SECONDS from the first ask to
        stop (the exit handler's, if it came first) to end its current job, which usually ends
        sooner: consolidation makes no model call after the ask, and gives its claim back. A
        thread still running then keeps the store open until its job returns, and closes it
        itself, as a step running on a caller's own thread does (a hook with
        `maintenance.background` off, `drain`, `run_due`): the store is never closed under a
        job (on PostgreSQL, a connection in use). A job that outlasts the exit handler's wait
        too leaves the store unclosed when the process ends (SQLite recovers its WAL on the
        next open; PostgreSQL ends the session)."""
        with self._registry_lock:
            if self._closed:
                return
            self._closed = True
            if self._registry.get(self._key(self.location)) is self:
                del self._registry[self._key(self.location)]
        with self._schedulers_lock:
            schedulers = list(self._schedulers)
        for scheduler in schedulers:
            scheduler.ask_to_stop()
        close = _LastOut(self.store.close)  # (held by this call until the end)
        for scheduler in schedulers:
            if not scheduler.wait_stopped():  # its background thread still runs a job
                close.hold()
                if not scheduler.after_thread(close.done):
                    close.done()  # it ended meanwhile
            # A step on a caller's own thread (a hook with maintenance.background off, drain,
            # run_due): waited for until the same deadline, then left to close after it.
            close.hold()
            if not scheduler.after_step(close.done):
                close.done()
        close.done()

    def __repr__(self) -> str:
        return f"ChronicleCore({self.location!r})"
