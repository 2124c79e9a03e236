"""Chronicle, a Hermes Agent plugin: lossless memory and context compaction.

Hermes imports this directory twice (as `hermes_plugins.chronicle` and as
`_hermes_user_memory.chronicle`). Everything stateful lives in `chronicle_engine`, imported by one
absolute name, so both copies share one core per database. When the engine is not installed as a
package (a plain `hermes plugins install` clone), it is loaded from ./engine under that same name.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
from pathlib import Path
from types import ModuleType

__version__ = "0.1.0"

log = logging.getLogger("chronicle")
_load_lock = threading.Lock()


def _engine() -> ModuleType:
    with _load_lock:
        if "chronicle_engine" in sys.modules:
            return sys.modules["chronicle_engine"]
        try:
            return importlib.import_module("chronicle_engine")
        except ImportError:
            here = Path(__file__).resolve().parent / "engine"
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


def register(ctx) -> None:  # noqa: ANN001 - the host's PluginContext or memory collector
    """Register whatever this loader's context accepts; each loader offers a different subset."""
    try:
        from .provider import ChronicleMemoryProvider
    except ImportError:  # the slot adapters land with their issues
        ChronicleMemoryProvider = None  # type: ignore[assignment,misc]  # noqa: N806
    try:
        from .context import ChronicleContextEngine
    except ImportError:
        ChronicleContextEngine = None  # type: ignore[assignment,misc]  # noqa: N806
    if ChronicleMemoryProvider is not None and hasattr(ctx, "register_memory_provider"):
        ctx.register_memory_provider(ChronicleMemoryProvider())
    if ChronicleContextEngine is not None and hasattr(ctx, "register_context_engine"):
        ctx.register_context_engine(ChronicleContextEngine())
