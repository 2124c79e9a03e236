"""Opening a database for the slots: retried, corruption moved aside, waiting turns replayed.

Invariants:
- A database that is busy while it opens (a cold start: several processes creating and
  migrating the same new file) is retried with backoff for up to the store's busy timeout, so a
  race of starts never fails one of them.
- A damaged file (not a database, a malformed page met while opening) is never written into and
  never deleted: it is renamed `<db>.corrupt-<time>` (with its -wal and -shm), an error line
  names it and the salvage command, and a fresh database is started in its place.
- Once a core is open, the turns kept while no store could be opened (`capture/waiting.py`) are
  captured into it before anything else is served.
- Both slots open through `Reopening`: a store that would not open is tried again on a later
  hook after a backoff (0.5 s doubling to 30 s), never in a tight loop on Hermes' thread, and
  what a hook hands over meanwhile waits on disk.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .capture.spill import database_file
from .capture.waiting import WaitingTurns
from .errors import StoreBusy, StoreCorrupt, StoreError, UsageError

if TYPE_CHECKING:
    from .config import Config
    from .core import ChronicleCore

__all__ = ["open_core", "move_aside", "replay_waiting", "Reopening", "RETRY_MAX_S"]

log = logging.getLogger("chronicle_engine.opening")


def open_core(
    db_path: str | os.PathLike[str], config: Config, *, patient: bool = True
) -> ChronicleCore:
    """The process's core for `db_path` (`ChronicleCore.get`), opened as the module docstring
    says; `patient=False` makes one attempt (a retry on a hook must not hold the turn). Raises
    StoreError (or OSError for a path no directory can be made at) when it cannot be opened
    now; the caller retries later."""
    from .core import ChronicleCore

    budget = max(0.0, config.settings.busy_timeout_ms / 1000) if patient else 0.0
    deadline = time.monotonic() + budget
    delay = 0.01
    moved = False
    while True:
        try:
            core = ChronicleCore.get(db_path, config=config)
        except StoreCorrupt as exc:
            if moved:
                raise
            moved = True
            aside = move_aside(db_path)
            if aside is None:
                raise
            log.error(
                "chronicle: the database %s is damaged (%s). It was moved to %s and a fresh one "
                "started; `chronicle doctor --salvage %s` copies what can still be read into "
                "the new one",
                db_path,
                exc.__cause__ or exc,
                aside,
                aside,
            )
            continue
        except StoreBusy:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
            continue
        replay_waiting(core)
        return core


RETRY_MAX_S = 30.0
"""The longest wait between two attempts to open a store that would not open."""


class Reopening:
    """A store a slot has not opened yet: its settings, when to try again (backoff), and where
    turns wait until it opens."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.attempts = 0
        self.next_at = 0.0
        self.waiting = WaitingTurns.beside(str(config.db_path()))

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def _failed(self) -> float:
        self.attempts += 1
        delay = min(RETRY_MAX_S, 0.25 * 2 ** min(self.attempts, 16))
        self.next_at = time.monotonic() + delay
        return delay

    def open(self, *, patient: bool) -> ChronicleCore:
        """The core (`open_core`), or StoreError saying where turns wait meanwhile and when the
        next attempt is; before the backoff is over, StoreError without trying."""
        try:
            db_path = self.config.location()  # a SQLite file, or a PostgreSQL connection string
            refused: UsageError | None = None
        except UsageError as exc:  # chronicle.store refused: turns wait as for a closed store
            db_path, refused = "that chronicle.store names", exc
        if not self.due():
            raise StoreError(
                f"the database {db_path} is not open yet (attempt {self.attempts + 1} in "
                f"{max(0.0, self.next_at - time.monotonic()):.2f}s)"
            )
        try:
            if refused is not None:
                raise refused
            return open_core(db_path, self.config, patient=patient)
        except (StoreError, OSError, UsageError) as exc:
            # (UsageError: e.g. the password variable chronicle.store_password_env names is not
            # set; the turns wait all the same)
            delay = self._failed()
            where = self.waiting.places() if self.waiting else "nowhere"
            raise StoreError(
                f"the database {db_path} could not be opened ({exc}); nothing is lost: turns "
                f"wait in {where} and are written when it opens (next attempt in {delay:.2f}s)"
            ) from exc

    def keep(self, session: str, messages: object, identity: dict[str, str | None]) -> None:
        """Keep a live list on disk until the store opens (`capture/waiting.py`), as capture
        would have taken it: nothing when capture is off or skips this agent context."""
        if self.waiting is None or not isinstance(messages, list | tuple) or not messages:
            return
        capture = self.config.settings.capture
        if not capture.enabled or identity.get("agent_context") in capture.skip_agent_contexts:
            return
        try:
            self.waiting.keep_capture(session, list(messages), dict(identity))
        except OSError as exc:
            log.error("chronicle: a turn of %s is lost: %s", session, exc)

    def keep_switch(self, session: str, parent: str, reason: str) -> None:
        """Keep a session switch until the store opens."""
        if self.waiting is None:
            return
        try:
            self.waiting.keep_switch(session, parent, reason)
        except OSError as exc:
            log.error("chronicle: the switch %s -> %s is lost: %s", parent, session, exc)


def move_aside(db_path: str | os.PathLike[str]) -> Path | None:
    """Rename a damaged database (and its -wal and -shm) out of the way; the new name, or None
    for a database with no file."""
    database = database_file(str(db_path))
    if database is None or not database.exists():
        return None
    aside = database.with_name(f"{database.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    os.replace(database, aside)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{database}{suffix}", f"{aside}{suffix}")
    return aside


def replay_waiting(core: ChronicleCore) -> int:
    """Capture the turns kept while the database could not be opened; how many records."""
    waiting = WaitingTurns.beside(core.db_path)
    if waiting is None or not waiting.waiting():
        return 0

    def capture(session: str, messages: list[object], identity: dict[str, str | None]) -> None:
        core.capture.capture_messages(
            session,
            messages,
            user_id=identity.get("user_id"),
            profile=identity.get("profile"),
            agent_context=identity.get("agent_context"),
            platform=identity.get("platform"),
            return_seqs=False,
        )

    def switch(session: str, parent: str, reason: str) -> None:
        core.sessions.switch(session, parent_session_id=parent, reason=reason)

    try:
        replayed = waiting.replay(capture, switch)
    except StoreError as exc:
        log.info("chronicle: the waiting turns wait for the next open (%s)", exc)
        return 0
    if replayed:
        log.info(
            "chronicle: %d turns kept while the database could not be opened are now in %s",
            replayed,
            core.db_path,
        )
    return replayed
