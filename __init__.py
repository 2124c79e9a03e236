"""Chronicle, a Hermes Agent plugin: lossless memory and context compaction.

Hermes imports this directory twice, by two loaders, under two module names:
- the general plugin loader (`hermes_plugins.chronicle`), whose context offers
  `register_context_engine`, `register_cli_command`, `register_tool`, ... but no memory provider;
- the memory-provider loader (`_hermes_user_memory.chronicle`), whose collector offers
  `register_memory_provider` only. It also executes every top-level `*.py` here as a submodule
  BEFORE this file, and keeps a submodule that failed half-imported in `sys.modules`.

So: `plugin.yaml` says `kind: standalone` (or the general loader would skip us as memory-only and
Hermes would silently fall back to its built-in compressor); `register()` offers each loader what
it accepts, checking with `hasattr`; and everything stateful lives in `chronicle_engine`, imported
by one absolute name, so both copies share one core per database. When the engine is not
installed as a package (a plain `hermes plugins install` clone), it is loaded from ./engine under
that same name.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chronicle_engine.recall.recall import Recall

__version__ = "0.1.0"

log = logging.getLogger("chronicle")
_load_lock = threading.Lock()
_HERE = Path(__file__).resolve().parent


def _engine() -> ModuleType:
    with _load_lock:
        if "chronicle_engine" in sys.modules:
            return sys.modules["chronicle_engine"]
        try:
            return importlib.import_module("chronicle_engine")
        except ImportError:
            here = _HERE / "chronicle_engine"
            spec = importlib.util.spec_from_file_location(
                "chronicle_engine", here / "__init__.py", submodule_search_locations=[str(here)]
            )
            if spec is None or spec.loader is None:
                raise
            module = importlib.util.module_from_spec(spec)
            sys.modules["chronicle_engine"] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules["chronicle_engine"]
                raise
            return module


_engine()


def _adapter(module: str, attribute: str) -> Any:  # type: ignore[explicit-any]
    """The class `attribute` of the sibling module `module`, or None if that module is absent.

    The memory loader may have executed the sibling before this package (and before the engine
    was importable); a half-imported copy is dropped and imported again, now that it can work.
    """
    if not (_HERE / f"{module}.py").exists():
        log.debug("chronicle: %s.py is not part of this checkout", module)
        return None
    name = f"{__name__}.{module}"
    for attempt in (1, 2):
        try:
            found = getattr(importlib.import_module(name), attribute)
            return found
        except (ImportError, AttributeError) as exc:
            sys.modules.pop(name, None)
            if attempt == 2:
                log.warning("chronicle: could not load %s.%s: %s", module, attribute, exc)
    return None


def _register_cli(ctx: Any) -> None:  # type: ignore[explicit-any]
    from chronicle_engine import cli

    ctx.register_cli_command(
        name="chronicle",
        help="Inspect, search, back up and check Chronicle's memory",
        setup_fn=cli.configure_parser,
        handler_fn=cli.handle_hermes_args,
        description=cli.DESCRIPTION,
    )


def _open_recall() -> Recall | None:
    """The memory of the store this process already opened for its Hermes home (the memory
    provider's), or None: serving session_search never opens a database of its own."""
    from chronicle_engine.config import load_hermes_config
    from chronicle_engine.core import ChronicleCore

    wanted = ChronicleCore._key(load_hermes_config(None).db_path())
    core = next((c for c in ChronicleCore.open_cores() if c.db_path == wanted), None)
    return core.recall if core is not None else None


def _selected() -> tuple[bool, bool]:
    """Whether Hermes' configuration selects Chronicle as (the memory provider, the context
    engine): `memory.provider: chronicle`, `context.engine: chronicle`. Both True when it
    cannot be read, so a doubt costs an import, never a selected slot that cannot load."""
    try:
        data = _hermes_config()
    except Exception:  # noqa: BLE001 - unreadable: assume selected
        return True, True
    if not isinstance(data, dict):
        return False, False
    memory, context = data.get("memory"), data.get("context")
    return (
        isinstance(memory, dict) and str(memory.get("provider") or "").strip() == "chronicle",
        isinstance(context, dict) and str(context.get("engine") or "").strip() == "chronicle",
    )


def _hermes_config() -> object:
    """The configuration as Hermes itself reads it when the host has loaded its config module
    (config.yaml with an administrator's managed file over it, from Hermes' cache); else
    config.yaml alone (no file: nothing selected)."""
    hermes = sys.modules.get("hermes_cli.config")
    read = getattr(hermes, "load_config_readonly", None)
    if callable(read):
        return read()
    from chronicle_engine.home import hermes_home

    path = hermes_home() / "config.yaml"
    if not path.exists():
        return {}
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def register(ctx: Any) -> None:  # type: ignore[explicit-any]
    """Register whatever this loader's context accepts. Never raises into the host."""
    if hasattr(ctx, "register_memory_provider"):
        try:
            provider = _adapter("provider", "ChronicleMemoryProvider")
            if provider is not None:
                if _selected()[0]:
                    provider.load()  # a selected provider that cannot load is not registered
                ctx.register_memory_provider(provider())
        except Exception:
            log.exception("chronicle: registering the memory provider failed")
    if hasattr(ctx, "register_context_engine"):
        try:
            engine = _adapter("context", "ChronicleContextEngine")
            if engine is not None:
                if _selected()[1]:
                    engine.load()  # a selected engine that cannot load is not registered
                ctx.register_context_engine(engine())
        except Exception:
            log.exception("chronicle: registering the context engine failed")
    if hasattr(ctx, "register_middleware"):
        try:
            from chronicle_engine.recall.host_search import session_search_middleware

            # Hermes answers session_search itself; a tool-execution middleware lets Chronicle
            # serve its discovery shape (everything else goes on to Hermes).
            ctx.register_middleware("tool_execution", session_search_middleware(_open_recall))
        except Exception:
            log.exception("chronicle: serving session_search failed to register")
    if hasattr(ctx, "register_cli_command"):
        try:
            _register_cli(ctx)
        except Exception:
            log.exception("chronicle: registering `hermes chronicle` failed")
