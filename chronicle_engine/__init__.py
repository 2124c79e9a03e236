"""Chronicle's core: an append-only event log, its folds, and the chronicle written from it.

Installed as the top-level package `chronicle_engine` (the repo's `chronicle_engine/` directory), so the two
Hermes loaders that import the plugin directory, the CLI and the tests all share one copy.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
