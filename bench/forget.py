"""What forgetting costs: one chronicle_forget call that reaches a compacted section of N messages.

    .venv/bin/python bench/forget.py [--sizes 100 1000 5000] [--repeat 3]

For each size it records a scripted conversation (bench/compress.py's, ~200 tokens a message) in a
fresh WAL database, compacts it once with the extractive writer (one section over most of it),
then times one `chronicle_forget` tool call on a user message inside that section, with
include_source: recall hides the message and its beliefs, and the section is redrawn from the log
without it as its next generation (the older generation's words purged). It prints the median
wall time of the whole call (recall already current, as the memory slot keeps it during a chat)
and of the redraw alone (`forget_messages` on a second message), and the section's size.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from compress import conversation  # noqa: E402
from test_compaction_support import core_for  # noqa: E402

from chronicle_engine.compaction.policy import policy_from_config  # noqa: E402
from chronicle_engine.config import Config  # noqa: E402
from chronicle_engine.messages import estimate_list_tokens  # noqa: E402
from chronicle_engine.recall.tools import RECALL_TOOLS  # noqa: E402
from chronicle_engine.tools import dispatch  # noqa: E402


def run(size: int, repeat: int) -> dict[str, Any]:
    messages = conversation(size)
    window = int(estimate_list_tokens(messages) / 0.9)
    policy = policy_from_config(Config(compression={"threshold": 0.5, "target_ratio": 0.2}), window)
    calls: list[float] = []
    redraws: list[float] = []
    section_messages = 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            core = core_for(Path(tmp) / "bench.db")
            seqs = core.capture.capture_messages("bench", messages, user_id="u")
            outcome = core.compaction.compress("bench", messages, policy=policy, user_id="u")
            assert outcome.messages is not None, outcome.reason
            name = core.sessions.chronicle_name("bench")
            (section,) = core.chronicle(name).current()
            a = section.anchor
            section_messages = int(section.meta.get("messages") or 0)
            core.recall.catch_up()  # the memory slot keeps recall current during the chat
            users = [
                s
                for s, m in zip(seqs, messages, strict=True)
                if m["role"] == "user" and s is not None and a.from_seq <= s <= a.to_seq
            ]
            started = time.perf_counter()
            result = json.loads(
                dispatch(
                    RECALL_TOOLS,
                    core.recall,
                    "chronicle_forget",
                    {"id": f"m{users[len(users) // 2]}", "include_source": True},
                    session_id="bench",
                    user_id="u",
                )
            )
            calls.append((time.perf_counter() - started) * 1000)
            assert result.get("sections_redrawn"), result
            started = time.perf_counter()
            assert core.compaction.forget_messages([users[len(users) // 3]])
            redraws.append((time.perf_counter() - started) * 1000)
            core.shutdown()
    return {
        "messages": size,
        "section_messages": section_messages,
        "forget_call_ms_median": statistics.median(calls),
        "redraw_ms_median": statistics.median(redraws),
    }


def main() -> None:
    # Every redraw announces that it sits outside the replay guarantee; not needed here.
    logging.getLogger("chronicle_engine.chronicle.reconsolidation").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()} "
        f"python={platform.python_version()}"
    )
    print(f"{'messages':>9} {'in section':>11} {'forget call ms':>15} {'redraw ms':>10}")
    for size in args.sizes:
        started = time.perf_counter()
        r = run(size, args.repeat)
        print(
            f"{r['messages']:>9} {r['section_messages']:>11} {r['forget_call_ms_median']:>15.1f} "
            f"{r['redraw_ms_median']:>10.1f}   ({time.perf_counter() - started:.1f}s incl. set-up)"
        )


if __name__ == "__main__":
    main()
