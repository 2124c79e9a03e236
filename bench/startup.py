"""Start-up cost: what Chronicle adds to a `hermes` start, and how fast `chronicle` answers.

    .venv/bin/python bench/startup.py [--runs 7]

Each figure is the minimum over `--runs` fresh interpreters (the least disturbed run):
- plugin import: the plugin package imported as Hermes' loaders import it and both adapters
  loaded, after what a `hermes` chat process has imported before it discovers plugins (its
  agent base classes, and openai with pydantic, which its agent loop imports first); and the
  RSS that import adds;
- the first hooks of a chat in that same process: `initialize` (which creates the database),
  the first `sync_turn` and the first `prefetch`, and the RSS they add;
- core import: `import chronicle_engine.core`;
- `chronicle --version` and `chronicle status` (on a database the demo filled), wall time of the
  whole process, beside `python -c pass` for the interpreter's own start.
Targets (issue 14): plugin import < 0.1 s; `chronicle --version` and `status` < 0.3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

_PLUGIN_IMPORT = """
import importlib.util, json, sys, time
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
import agent.memory_provider, agent.context_engine, openai, pydantic  # loaded by then
before, t = rss(), time.perf_counter()
spec = importlib.util.spec_from_file_location(
    "hermes_plugins.chronicle", %(init)r, submodule_search_locations=[%(root)r]
)
plugin = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = plugin
spec.loader.exec_module(plugin)
plugin._adapter("provider", "ChronicleMemoryProvider")
plugin._adapter("context", "ChronicleContextEngine")
elapsed = time.perf_counter() - t
imported = rss()
# The first hooks of a chat, as Hermes calls them, on a database this process creates.
provider = plugin._adapter("provider", "ChronicleMemoryProvider")()
t = time.perf_counter()
provider.initialize("bench-first", hermes_home=%(home)r, platform="cli")
first_open = time.perf_counter() - t
t = time.perf_counter()
provider.sync_turn("Where does the heron deploy key live?", "In vault path kv/heron/deploy.",
                   session_id="bench-first")
first_turn = time.perf_counter() - t
t = time.perf_counter()
provider.prefetch("heron deploy key", session_id="bench-first")
first_prefetch = time.perf_counter() - t
after_hooks = rss()
provider.shutdown()
print(json.dumps({"s": elapsed, "rss_kib": imported - before, "open_s": first_open,
                  "turn_s": first_turn, "prefetch_s": first_prefetch,
                  "hooks_rss_kib": after_hooks - imported,
                  "pydantic_ai": any(k.startswith("pydantic_ai") for k in sys.modules)}))
"""

_CORE_IMPORT = """
import json, time
t = time.perf_counter()
import chronicle_engine.core
print(json.dumps({"s": time.perf_counter() - t}))
"""


def _inproc(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _wall(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, timeout=120)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    runs = max(1, min(args.runs, 50))

    plugin = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            code = _PLUGIN_IMPORT % {
                "init": str(ROOT / "__init__.py"),
                "root": str(ROOT),
                "home": home,
            }
            plugin.append(_inproc(code))
    core = [_inproc(_CORE_IMPORT)["s"] for _ in range(runs)]
    chronicle = str(BIN / "chronicle")
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "demo.db")
        subprocess.run([chronicle, "demo", "--db", db, "--force"], capture_output=True, timeout=600)
        python = [_wall([sys.executable, "-c", "pass"]) for _ in range(runs)]
        version = [_wall([chronicle, "--version"]) for _ in range(runs)]
        status = [_wall([chronicle, "status", "--db", db]) for _ in range(runs)]

    best = min(plugin, key=lambda r: r["s"])
    rows = [
        ("plugin import (after Hermes' base modules)", best["s"], "< 0.100"),
        ("core import (chronicle_engine.core)", min(core), ""),
        ("python -c pass (interpreter start)", min(python), ""),
        ("chronicle --version (whole process)", min(version), "< 0.300"),
        ("chronicle status (whole process, demo database)", min(status), "< 0.300"),
    ]
    print(f"start-up, min of {runs} runs; {platform.python_version()} on {platform.machine()}")
    for name, seconds, target in rows:
        print(f"  {name:<50} {seconds:7.3f} s  {target}")
    first = [
        ("first initialize (creates the database)", "open_s"),
        ("first sync_turn", "turn_s"),
        ("first prefetch", "prefetch_s"),
    ]
    for name, key in first:
        print(f"  {name:<50} {min(r[key] for r in plugin):7.3f} s")
    print(f"  {'RSS added by the plugin import':<50} {best['rss_kib'] / 1024:7.1f} MiB")
    hooks_rss = min(r["hooks_rss_kib"] for r in plugin) / 1024
    print(f"  {'RSS added by those first hooks':<50} {hooks_rss:7.1f} MiB")
    print(f"  {'pydantic-ai loaded (import and first hooks)':<50} {best['pydantic_ai']!s:>7}")
    print(f"  load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
