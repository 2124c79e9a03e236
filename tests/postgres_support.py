"""A throwaway PostgreSQL cluster for the tests: `initdb` into a temp directory, `pg_ctl start` on
127.0.0.1 (a free port) and on a Unix socket in that directory, one database, stopped and removed
at the end. Every wait is bounded.

PostgreSQL refuses to run as root; a CI machine runs the suite as root. Then the cluster's
directory is given to an unprivileged user (`nobody`) and the server's commands run as that user
through `runuser`. The tests connect over TCP with trust authentication, so the test process itself
stays root.

The binaries: `initdb` on PATH, else the newest `/usr/lib/postgresql/<version>/bin` (where
Debian's `postgresql` package puts them, off PATH).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "PostgresCluster",
    "Target",
    "TreeParts",
    "chat_places",
    "find_bin_dir",
    "own_schema",
    "postgres_core",
    "release_together",
    "start_cluster",
]

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
DATABASE = "chronicle_test"
USER = "chronicle"


def find_bin_dir() -> Path:
    """The directory holding initdb, pg_ctl and postgres; a clear error when there is none."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1].parent
    raise RuntimeError(
        "the PostgreSQL contract tests need a PostgreSQL server's binaries (initdb, pg_ctl): "
        "install Debian's `postgresql` package (`apt-get install -y postgresql`) or put initdb "
        "on PATH"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresCluster:
    root: Path
    bin_dir: Path
    port: int
    run_as: str | None  # the unprivileged user the server runs as when we are root

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    def conninfo(self, dbname: str = DATABASE, **options: str) -> str:
        parts = [f"host=127.0.0.1 port={self.port} user={USER} dbname={dbname}"]
        parts += [f"{key}='{value}'" for key, value in options.items()]
        return " ".join(parts)

    def command(self, name: str, *args: str) -> list[str]:
        argv = [str(self.bin_dir / name), *args]
        return ["runuser", "-u", self.run_as, "--", *argv] if self.run_as else argv

    def run(self, name: str, *args: str, timeout: float) -> str:
        result = subprocess.run(
            self.command(name, *args),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(self.root),  # runuser keeps the cwd; nobody must be able to enter it
        )
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{name} {' '.join(args)} failed ({result.returncode}): "
                f"{result.stderr[-2000:]}{result.stdout[-1000:]}\n{tail}"
            )
        return result.stdout

    def stop(self) -> None:
        for mode in ("fast", "immediate"):
            try:
                self.run(
                    "pg_ctl",
                    "stop",
                    "-D",
                    str(self.data),
                    "-m",
                    mode,
                    "-w",
                    "-t",
                    str(STOP_TIMEOUT_S),
                    timeout=STOP_TIMEOUT_S + 10,
                )
                return
            except (RuntimeError, subprocess.TimeoutExpired):
                continue


def _owner() -> str | None:
    """The user the server runs as: None when we are not root (we run it ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("nobody", "postgres"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("running as root and no unprivileged user (nobody) to run PostgreSQL as")


@contextlib.contextmanager
def start_cluster(
    root: Path | None = None, settings: tuple[str, ...] = ()
) -> Iterator[PostgresCluster]:
    """A running cluster with database `chronicle_test`, owned by user `chronicle`. Without
    `root`: made in a new temporary directory, stopped and removed when the block ends. With
    `root`: made there unless it already holds one (the benches keep a big store so between
    runs), stopped when the block ends and kept. `settings` are more server settings
    ("name=value")."""
    bin_dir = find_bin_dir()
    run_as = _owner()
    keep = root is not None
    # Not pytest's tmp_path: its parents are private to the user running the tests.
    if root is None:
        root = Path(tempfile.mkdtemp(prefix="chronicle-pg-", dir="/tmp" if run_as else None))
    cluster: PostgresCluster | None = None
    try:
        made = not (root / "data" / "PG_VERSION").exists()
        (root / "socket").mkdir(parents=True, exist_ok=True)
        if run_as:
            entry = pwd.getpwnam(run_as)
            for path in (root, root / "socket"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        cluster = PostgresCluster(root, bin_dir, _free_port(), run_as)
        if made:
            cluster.run(
                "initdb",
                "-D",
                str(cluster.data),
                "-U",
                USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                timeout=START_TIMEOUT_S,
            )
        started = False
        for _attempt in range(3):  # the free port can be taken between probe and bind
            options = (
                f"-c listen_addresses=127.0.0.1 -p {cluster.port} "
                f"-c unix_socket_directories={cluster.socket_dir} "
                # Only a crash of the machine needs fsync; a killed server recovers from its WAL.
                "-c fsync=off -c max_connections=100"
            ) + "".join(f" -c {setting}" for setting in settings)
            try:
                cluster.run(
                    "pg_ctl",
                    "start",
                    "-D",
                    str(cluster.data),
                    "-l",
                    str(root / "server.log"),
                    "-w",
                    "-t",
                    str(START_TIMEOUT_S),
                    "-o",
                    options,
                    timeout=START_TIMEOUT_S + 10,
                )
                started = True
                break
            except RuntimeError:
                cluster.stop()
                cluster.port = _free_port()
        if not started:
            raise RuntimeError(f"PostgreSQL would not start; see {root / 'server.log'}")
        _create_database(cluster)
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def _create_database(cluster: PostgresCluster) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with psycopg.connect(
                cluster.conninfo("postgres"), autocommit=True, connect_timeout=5
            ) as conn:
                if not conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
                ).fetchone():
                    conn.execute(f"CREATE DATABASE {DATABASE}")
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextlib.contextmanager
def own_schema(cluster: PostgresCluster) -> Iterator[str]:
    """A conninfo whose tables land in a schema of their own, dropped at the end: tests share
    one server and nothing else."""
    import uuid

    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield cluster.conninfo(options=f"-c search_path={schema}")
    finally:
        with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@contextlib.contextmanager
def postgres_core(
    cluster: PostgresCluster, home: Path, compression: dict[str, object] | None = None
):  # -> Iterator[ChronicleCore]
    """A whole core on a schema of its own, selected as config.yaml's `chronicle.store` selects
    it (and named by `home`'s config.yaml, for the command line); shut down at the end."""
    import yaml

    from chronicle_engine.config import Config
    from chronicle_engine.core import ChronicleCore

    with own_schema(cluster) as conninfo:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.yaml").write_text(yaml.safe_dump({"chronicle": {"store": conninfo}}))
        config = Config({"store": conninfo}, compression=compression, hermes_home=home)
        core = ChronicleCore.get(config.location(), config=config)
        try:
            yield core
        finally:
            core.shutdown()


@dataclass
class Target:
    """Where a store lives (a SQLite file or a PostgreSQL schema), and how to open another store
    on it (another thread's or process's)."""

    kind: str  # "sqlite" or "postgres"
    where: str  # the file, or the conninfo

    def open(self):  # -> SQLiteEventStore | PostgresEventStore
        from chronicle_engine.log.store import SQLiteEventStore

        if self.kind == "sqlite":
            return SQLiteEventStore(self.where)
        from chronicle_engine.log.postgres import PostgresEventStore

        return PostgresEventStore(self.where)

    def open_queue(self, clock, owner: str | None = None):  # -> (store, its job queue)
        """A store here with the scheduler's queue tables migrated, and the queue on it."""
        store = self.open()
        if self.kind == "sqlite":
            from chronicle_engine.scheduler.queue import JobQueue
            from chronicle_engine.scheduler.schema import SCHEDULER_MIGRATIONS

            store.migrate(SCHEDULER_MIGRATIONS)
            return store, JobQueue(store, clock=clock, owner=owner)
        from chronicle_engine.scheduler.postgres import PG_SCHEDULER_MIGRATIONS, PostgresJobQueue

        store.migrate(PG_SCHEDULER_MIGRATIONS)
        return store, PostgresJobQueue(store, clock=clock, owner=owner)

    def chronicle(self, store, name: str):  # -> the chronicle of that name in `store`
        if self.kind == "sqlite":
            from chronicle_engine.chronicle.store import SQLiteChronicleStore

            return SQLiteChronicleStore(store, name)
        from chronicle_engine.chronicle.postgres import PostgresChronicleStore

        return PostgresChronicleStore(store, name)

    def tree(self, store=None) -> TreeParts:
        """The session tree and capture over a store here (a new one unless given), built as
        the core builds them, with the store's own session tables."""
        from chronicle_engine.config import Config
        from chronicle_engine.core import vocabulary
        from chronicle_engine.log.events import EventReader, UpcastRegistry
        from chronicle_engine.sessions.capture import Capture
        from chronicle_engine.sessions.tree import SessionTree

        store = store if store is not None else self.open()
        types = vocabulary()
        reader = EventReader(store, UpcastRegistry(), types)
        if self.kind == "sqlite":
            from chronicle_engine.sessions.tables import SQLiteSessionTables

            tables = SQLiteSessionTables(store)
        else:
            from chronicle_engine.sessions.postgres import PostgresSessionTables

            tables = PostgresSessionTables(store)
        tree = SessionTree(reader, tables)
        return TreeParts(store, reader, tree, Capture(tree, Config()))

    def errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        from chronicle_engine.log.postgres import postgres_errors
        from chronicle_engine.log.store import sqlite_errors

        return sqlite_errors(what) if self.kind == "sqlite" else postgres_errors(what)


@dataclass
class TreeParts:
    """What the session-tree tests use of a core (`ChronicleCore` has the same names)."""

    store: object
    reader: object
    sessions: object
    capture: object

    def shutdown(self) -> None:
        self.store.close()


@contextlib.contextmanager
def chat_places(kind: str, request, tmp: Path, count: int = 1) -> Iterator[list[ChatPlace]]:
    """`count` places for a chat's store, each opened as often as a test likes: SQLite files in
    `tmp` (kind "file"; ":memory:" for kind "memory", one store a place and an open), or
    schemas of their own on the test session's PostgreSQL server (kind "postgres", dropped at
    the end). For property tests, which need a fresh store for every example. What the places
    opened is shut down at the end (an example hypothesis stops midway included)."""
    with contextlib.ExitStack() as stack:
        if kind == "postgres":
            cluster = request.getfixturevalue("postgres_cluster")
            wheres = [stack.enter_context(own_schema(cluster)) for _ in range(count)]
        else:
            wheres = [
                ":memory:" if kind == "memory" else str(tmp / f"chat-{n}.db") for n in range(count)
            ]
        places = [ChatPlace("postgres" if kind == "postgres" else "sqlite", w) for w in wheres]
        try:
            yield places
        finally:
            for place in places:
                for opened in place.opened:
                    opened.shutdown()


@dataclass
class ChatPlace:
    """Where a chat's store lives; `open()` gives what the session-tree tests use of a core: a
    whole `ChronicleCore` on SQLite, the tree and capture as the core builds them on
    PostgreSQL (`Target.tree`). Both have `store`, `reader`, `sessions`, `capture` and
    `shutdown()`."""

    kind: str
    where: str
    opened: list = field(default_factory=list)

    def open(self):  # -> ChronicleCore | TreeParts
        if self.kind == "postgres":
            self.opened.append(Target("postgres", self.where).tree())
        else:
            from chronicle_engine.core import ChronicleCore

            self.opened.append(ChronicleCore(self.where))
        return self.opened[-1]


def release_together(processes: list[subprocess.Popen[str]]) -> None:
    """Wait until each process has printed `ready` (its store is open), then tell them all to
    go at once, so they race from the first write."""
    for process in processes:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
