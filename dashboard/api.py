"""Chronicle's tab in Hermes' dashboard: read-only JSON over the Chronicle database.

Hermes mounts `router` under /api/plugins/chronicle/ behind its own dashboard auth (the
session token on a loopback bind, its login gate otherwise), and only for an enabled plugin.
Invariant: every route is a GET that reads; what each shows is `chronicle_engine.cli.board`'s
(typed and tested there); this file only finds the database and turns refusals into HTTP
errors. The database is the one `config.yaml` names for this HERMES_HOME, opened through the
same core the agent uses, so a reader sees what the agent will.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import APIRouter, HTTPException, Query

if TYPE_CHECKING:
    from chronicle_engine.core import ChronicleCore

router = APIRouter()

_ROOT = Path(__file__).resolve().parent.parent
_LOCK = threading.Lock()


def _load_engine() -> None:
    """chronicle_engine, installed or loaded from this plugin's own copy (as the plugin does)."""
    if "chronicle_engine" in sys.modules:
        return
    try:
        import chronicle_engine  # noqa: F401
    except ImportError:
        name = "chronicle_dashboard_plugin"
        spec = importlib.util.spec_from_file_location(
            name, _ROOT / "__init__.py", submodule_search_locations=[str(_ROOT)]
        )
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)  # makes chronicle_engine importable


def _home() -> Path:
    return Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes")


def _core() -> ChronicleCore:
    _load_engine()
    from chronicle_engine.config import load_hermes_config
    from chronicle_engine.core import ChronicleCore

    home = str(_home())
    config = load_hermes_config(home)
    path = config.db_path()
    if not Path(path).exists():
        raise HTTPException(404, f"no Chronicle database at {path} yet: chat once with Chronicle")
    with _LOCK:
        return ChronicleCore.get(path, config=config)


@contextmanager
def _refusals() -> Iterator[None]:
    """The board's refusals as HTTP: an unknown id 404, a bad argument 400."""
    from chronicle_engine.cli.exits import CommandFailed, Exit

    try:
        yield
    except CommandFailed as exc:
        raise HTTPException(404 if exc.code == Exit.NOT_FOUND else 400, str(exc)) from None
    except LookupError as exc:
        raise HTTPException(404, str(exc.args[0] if exc.args else exc)) from None
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None


@router.get("/overview")
def overview() -> dict[str, object]:
    """The database at a glance and its conversations, newest first."""
    core = _core()
    from chronicle_engine.cli import board

    with _refusals():
        return board.overview(core, _home())


@router.get("/conversation")
def conversation(session: str = Query(..., min_length=1)) -> dict[str, object]:
    """One conversation: timeline, sections, prompt size with the compaction points."""
    core = _core()
    from chronicle_engine.cli import board

    with _refusals():
        return board.conversation(core, session)


@router.get("/expand")
def expand(
    session: str = Query(..., min_length=1), section: str = Query(..., min_length=1)
) -> dict[str, object]:
    """A section's original messages, as captured."""
    core = _core()
    from chronicle_engine.cli import board

    with _refusals():
        return board.expand(core, session, section)


@router.get("/search")
def search(
    q: str = Query(..., min_length=1),
    session: str | None = None,
    scope: str = "all",
    include_tools: bool = False,
    limit: int = Query(10, ge=1, le=50),
) -> dict[str, object]:
    """Ranked hits, the agent's own tool traffic left out unless `include_tools`."""
    core = _core()
    from chronicle_engine.cli import board

    with _refusals():
        return board.search(
            core, q, session=session, scope=scope, include_tools=include_tools, limit=limit
        )


@router.get("/maintenance")
def maintenance() -> dict[str, object]:
    """The job queue, consolidation and the schedules."""
    core = _core()
    from chronicle_engine.cli import board

    with _refusals():
        return board.maintenance(core)
