"""Prompt tokens per model call across a long scripted chat, with and without Chronicle.

    python bench/compaction_tokens.py [--turns 120] [--out bench/out/compaction.json]

Runs the `chronicle demo` host (the plugin's real adapters, called in Hermes' order, offline)
over a long scripted coding chat and records, for every model call, the prompt tokens Chronicle
lets through and the tokens the same conversation would need uncompacted. Prints a summary and
writes the JSON `bench/plots.py` draws (docs/bench_compaction.png).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import yaml

from chronicle_engine.cli.demo import COMPRESSION, CONTEXT_LENGTH, DemoHost, _Slots, load_plugin
from chronicle_engine.cli.demo_chat import turns
from chronicle_engine.core import ChronicleCore


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=120)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "compaction.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="chronicle-bench-") as tmp:
        home = Path(tmp)
        # Hermes runs with HERMES_HOME set, and the engine opens its store from it when the
        # host first gives it a model (before on_session_start names a home): without this, the
        # engine's store would be the user's ~/.hermes one, shared by every run of this bench.
        saved = os.environ.get("HERMES_HOME")
        os.environ["HERMES_HOME"] = tmp
        db = home / "chronicle" / "chronicle.db"
        (home / "config.yaml").write_text(
            yaml.safe_dump({"compression": COMPRESSION, "chronicle": {"db_path": str(db)}}),
            encoding="utf-8",
        )
        slots = _Slots()
        load_plugin().register(slots)
        host = DemoHost(home, slots.provider, slots.engine)
        host.start()
        started = time.perf_counter()
        for t in turns(args.turns):
            host.turn(t.number, t.user, t.steps, t.answer)
        elapsed = time.perf_counter() - started
        for core in ChronicleCore.open_cores():
            if core.db_path.startswith(tmp):
                core.shutdown()
        if saved is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = saved
    threshold = int(CONTEXT_LENGTH * COMPRESSION["threshold"])
    command = f"python bench/compaction_tokens.py --turns {args.turns}"
    machine = f"{platform.machine()} {platform.system()}, Python {platform.python_version()}"
    data = {
        "machine": machine,
        "command": command,
        "context_length": CONTEXT_LENGTH,
        "threshold_tokens": threshold,
        "systems": {
            "Chronicle": [
                {"turn": c["turn"], "tokens": c["tokens"], "compacted": c["compacted"]}
                for c in host.calls
            ],
            "no compaction": [
                {"turn": c["turn"], "tokens": c["uncompacted_tokens"], "compacted": False}
                for c in host.calls
            ],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1), encoding="utf-8")
    peak = max(c["tokens"] for c in host.calls)
    print(f"{machine}; {command}")
    print(
        f"turns: {args.turns}, model calls: {len(host.calls)}, compactions: {len(host.compactions)}"
    )
    print(
        f"peak prompt tokens with Chronicle: {peak:,} (threshold {threshold:,}, window {CONTEXT_LENGTH:,})"
    )
    print(f"tokens the chat would need uncompacted: {host.calls[-1]['uncompacted_tokens']:,}")
    for c in host.compactions:
        print(f"  turn {c.turn}: {c.tokens_before:,} -> {c.tokens_after:,} tokens")
    print(f"host loop wall time: {elapsed:.2f}s ({elapsed / args.turns * 1000:.1f} ms/turn)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
