"""How long one compress() takes on long conversations, with the extractive summariser.

    .venv/bin/python bench/compress.py [--sizes 1000 10000] [--repeat 3]

For each size it builds a scripted conversation (~200 tokens a message: requests, tool calls with
their results, answers), records it in a fresh WAL database the way the memory slot would during
the chat, then times `compress()` on the whole list and prints the median wall time, the part of
it spent in capture's idempotent pass, and the tokens before and after against the low watermark.
Targets (issue #4): < 50 ms for 1k messages, < 500 ms for 10k, result at or under the low mark.
"""

from __future__ import annotations

import argparse
import json
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

from test_compaction_support import core_for  # noqa: E402

from chronicle_engine.compaction.policy import policy_from_config  # noqa: E402
from chronicle_engine.config import Config  # noqa: E402
from chronicle_engine.messages import estimate_list_tokens  # noqa: E402

_WORDS = [
    "deploy",
    "service",
    "config",
    "cache",
    "retry",
    "latency",
    "index",
    "build",
    "release",
    "branch",
    "merge",
    "review",
    "schema",
    "migration",
    "queue",
    "worker",
    "timeout",
    "token",
    "budget",
    "handler",
    "parser",
    "module",
]


def _text(n_chars: int, seed: int) -> str:
    words = []
    total = 0
    k = seed
    while total < n_chars:
        k = (k * 1103515245 + 12345) & 0x7FFFFFFF
        word = _WORDS[k % len(_WORDS)]
        words.append(word)
        total += len(word) + 1
    return " ".join(words)[:n_chars]


def conversation(n_messages: int) -> list[dict[str, Any]]:
    """Turns of five messages: request, tool call, tool result, tool call, answer (~200 tokens each)."""
    out: list[dict[str, Any]] = []
    turn = 0
    while len(out) < n_messages:
        out.append(
            {
                "role": "user",
                "content": f"Turn {turn}: check service-{turn} on host db-{turn % 7}. "
                + _text(650, turn),
            }
        )
        for step in range(2):
            call = f"call_{turn}_{step}"
            args = json.dumps(
                {"command": f"grep -n ERROR /var/log/service-{turn}.log | tail -{step + 5}"}
            )
            out.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {"name": "terminal", "arguments": args},
                        }
                    ],
                }
            )
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call,
                    "content": f"exit 0\n{turn}:{step} ok " + _text(1500, turn * 7 + step),
                }
            )
        out.append(
            {
                "role": "assistant",
                "content": f"Decided: service-{turn} is healthy; latency {40 + turn % 60} ms. "
                + _text(700, turn * 3),
            }
        )
        turn += 1
    return out[:n_messages]


def run(size: int, repeat: int) -> dict[str, Any]:
    messages = conversation(size)
    before = estimate_list_tokens(messages)
    window = int(before / 0.9)  # the chat is at 90% of its window: past the high watermark
    config = Config(compression={"threshold": 0.5, "target_ratio": 0.2})
    policy = policy_from_config(config, window)
    times: list[float] = []
    captures: list[float] = []
    cpus: list[float] = []
    after = 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            core = core_for(Path(tmp) / "bench.db")
            core.capture.capture_messages("bench", messages)  # as sync_turn did during the chat
            cpu = time.process_time()
            outcome = core.compaction.compress("bench", messages, policy=policy)
            cpus.append((time.process_time() - cpu) * 1000)
            assert outcome.messages is not None, outcome.reason
            times.append(outcome.duration_ms)
            captures.append(outcome.capture_ms)
            after = estimate_list_tokens(outcome.messages)
            core.shutdown()
    return {
        "messages": size,
        "tokens_before": before,
        "window": window,
        "low_watermark": policy.low_tokens,
        "tokens_after": after,
        "at_or_under_low": after <= policy.low_tokens,
        "compress_ms_median": statistics.median(times),
        "capture_ms_median": statistics.median(captures),
        "cpu_ms_median": statistics.median(cpus),
        "compaction_ms_median": statistics.median(
            t - c for t, c in zip(times, captures, strict=True)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()} python={platform.python_version()}"
    )
    print(
        f"{'messages':>9} {'tokens before':>14} {'low mark':>9} {'after':>8} {'<=low':>6} {'compress ms':>12} {'of it capture':>14} {'compaction ms':>14}"
    )
    for size in args.sizes:
        started = time.perf_counter()
        r = run(size, args.repeat)
        print(
            f"{r['messages']:>9} {r['tokens_before']:>14,} {r['low_watermark']:>9,} {r['tokens_after']:>8,} "
            f"{'yes' if r['at_or_under_low'] else 'NO':>6} {r['compress_ms_median']:>12.1f} "
            f"{r['capture_ms_median']:>14.1f} {r['compaction_ms_median']:>14.1f} "
            f"{r['cpu_ms_median']:>8.1f}"
            f"   ({time.perf_counter() - started:.1f}s incl. set-up)"
        )


if __name__ == "__main__":
    main()
