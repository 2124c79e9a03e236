"""Running the plugin in a fresh interpreter, as Hermes' loaders do: each import happens there
for the first time. Shared by the tests of what loading the plugin costs and needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LOAD_PLUGIN = f"""
import importlib.util, json, sys
root = {str(ROOT)!r}
spec = importlib.util.spec_from_file_location(
    "chronicle_plugin_under_test", root + "/__init__.py", submodule_search_locations=[root]
)
plugin = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = plugin
spec.loader.exec_module(plugin)

class Collector:
    def __init__(self):
        self.got = {{}}
    def register_memory_provider(self, p):
        self.got["provider"] = p
    def register_context_engine(self, e):
        self.got["engine"] = e

collector = Collector()
plugin.register(collector)
provider, engine = collector.got.get("provider"), collector.got.get("engine")
"""
"""Imports the plugin from this checkout and registers it: `provider` and `engine` are its slots
(None for a slot that did not register)."""


def fresh_interpreter(script: str, tmp_path: Path) -> dict:
    """Run `script` in a new interpreter (no $HOME of ours, HERMES_HOME under `tmp_path`) and
    return the JSON object its last line prints."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "HERMES_HOME": str(tmp_path / "hermes_home"),
        "PYTHONPATH": str(ROOT),
    }
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
