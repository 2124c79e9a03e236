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
from .errors import StoreBusy, StoreCorrupt, StoreError

if TYPE_CHECKING:
    from .config import Config
    from .core import ChronicleCore

__all__ = ["open_core", "move_aside", "replay_waiting"]

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
