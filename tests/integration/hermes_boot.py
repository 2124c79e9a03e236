"""Run Hermes' own command line (`hermes ...`) as a user who installed only Hermes would.

The test environment has Chronicle pip-installed (editable) beside Hermes. A user who ran
`hermes plugins install` has not: the plugin must load its engine from its own directory. This
boot script hides the editable install before Hermes starts, then calls the same entry point as
the `hermes` console script, so every integration test exercises the clone Hermes installed.
"""

from __future__ import annotations

import importlib.util
import sys


def _hide_editable_chronicle() -> None:
    sys.meta_path[:] = [
        finder
        for finder in sys.meta_path
        if not getattr(finder, "__module__", "").startswith("__editable___chronicle_hermes")
    ]
    sys.path[:] = [p for p in sys.path if not p.rstrip("/").endswith("/engine")]
    importlib.invalidate_caches()
    if importlib.util.find_spec("chronicle_engine") is not None:
        raise SystemExit("hermes_boot: chronicle_engine is still importable; cannot isolate")


if __name__ == "__main__":
    _hide_editable_chronicle()
    from hermes_cli.main import main

    sys.argv[0] = "hermes"
    sys.exit(main())
