"""Shared test set-up: hermetic, no model requests unless a test scripts one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import warnings
from collections.abc import Iterator

import pytest
from pydantic_ai import models

# A real model call from a test is a bug: scripted calls use FunctionModel / TestModel.
models.ALLOW_MODEL_REQUESTS = False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run the long version of the fault suite (tests/faults/) and print its figures",
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault suite's figures (tests/faults/), one line per test that reported some."""
    support = sys.modules.get("faults_support")
    reported = getattr(support, "REPORTED", None)
    if reported:
        terminalreporter.section("fault suite figures")
        for record in reported:
            terminalreporter.write_line(json.dumps(record))


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--soak"):
        # Read by tests/faults/faults_support.py when the test modules are imported.
        os.environ["CHRONICLE_SOAK"] = "1"


@pytest.fixture(autouse=True)
def _close_leftover_event_loop():
    """`Agent.run_sync` leaves a loop set on the thread; close it so the test ends clean."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_event_loop_policy().get_event_loop()
            if not loop.is_running() and not loop.is_closed():
                loop.close()
            asyncio.set_event_loop(None)


@pytest.fixture(autouse=True)
def _no_home(tmp_path, monkeypatch):
    """Nothing a test does may touch the real $HOME or HERMES_HOME."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes_home"))


@pytest.fixture(scope="session")
def postgres_cluster():
    """A throwaway PostgreSQL server for this test session (tests/postgres_support.py), started
    on first use and stopped at the end."""
    from postgres_support import start_cluster

    with start_cluster() as cluster:
        yield cluster


@pytest.fixture(params=["memory", "file", "postgres"])
def chat_core(request: pytest.FixtureRequest, tmp_path):
    """The session tree and capture on each store: SQLite in memory and in a WAL file (a whole
    core), and PostgreSQL (a schema of its own on the session's server, the tree and capture
    built as the core builds them: nothing selects PostgreSQL for a whole core yet). Both have
    `store`, `reader`, `sessions`, `capture` and `shutdown()`."""
    if request.param == "postgres":
        from postgres_support import Target, own_schema

        with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
            parts = Target("postgres", conninfo).tree()
            yield parts
            parts.shutdown()
        return
    from chronicle_engine.core import ChronicleCore

    core = ChronicleCore(":memory:" if request.param == "memory" else tmp_path / "chat.db")
    yield core
    core.shutdown()


@pytest.fixture(params=["memory", "file", "postgres"])
def store_core(request: pytest.FixtureRequest, tmp_path):
    """A whole ChronicleCore on each store: SQLite in memory and in a WAL file, then PostgreSQL
    (a schema of its own on the session's server) selected as config.yaml's `chronicle.store`
    selects it. Shut down at the end."""
    from chronicle_engine.core import ChronicleCore

    if request.param != "postgres":
        core = ChronicleCore.get(":memory:" if request.param == "memory" else tmp_path / "c.db")
        yield core
        core.shutdown()
        return
    from postgres_support import postgres_core

    cluster = request.getfixturevalue("postgres_cluster")
    with postgres_core(cluster, tmp_path / "store_core_home") as core:
        yield core


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path):
    """A store's place on each backend in turn: a SQLite file, then a schema of its own on the
    session's PostgreSQL server (`tests/postgres_support.py`; a server that cannot start fails
    the test, it is never skipped)."""
    from postgres_support import Target, own_schema

    if request.param == "sqlite":
        yield Target("sqlite", str(tmp_path / "log.db"))
        return
    with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
        yield Target("postgres", conninfo)


@pytest.fixture(params=["sqlite", "postgres"])
def store_settings(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """What config.yaml's `chronicle:` says about the store, once per store: nothing (SQLite at
    db_path), then `store:` naming a schema of its own on the session's PostgreSQL server. A
    test's Hermes home merges it in; the cores the slots open follow it."""
    if request.param == "sqlite":
        yield {}
        return
    from postgres_support import own_schema

    from chronicle_engine.core import ChronicleCore

    with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
        try:
            yield {"store": conninfo}
        finally:
            # Before the schema is dropped: a core the test left open (the context engine
            # never shuts its core) may have a job on its background thread mid-transaction,
            # which the DROP would deadlock with.
            for core in ChronicleCore.open_cores():
                if ChronicleCore._key(core.location) == ChronicleCore._key(conninfo):
                    core.shutdown()
