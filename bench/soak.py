"""Soak: thousands of turns through both of Chronicle's slots, the way Hermes drives them.

    .venv/bin/python bench/soak.py [--turns 10000] [--shapes instructions,tools,overhead]

The plugin directory is loaded as Hermes loads it and registered through both loaders' shapes
(the general loader's `register_context_engine`, the memory loader's `register_memory_provider`);
the engine is deep-copied for the agent and given its window by `update_model`, as Hermes does.
Each turn is a request, a tool call, its result and an answer. The host loop follows Hermes':
the prompt it counts is the system prompt and tool schemas (the shape's overhead) plus its rough
estimate of the messages; `should_compress` before the request, `compress(current_tokens=...)`
when due, then the rotation (`on_session_end` on both slots, `on_session_start(...,
boundary_reason="compression")`, `on_session_switch(...)`), `update_from_response` after the
request and `sync_turn` with the live list after the turn. No config.yaml `compression:`
section: Hermes' own defaults apply.

Shapes:
- instructions: a 128K window; every 7th request is a standing instruction ("from now on ...");
- tools: a 128K window; every turn's tool result is ~12 KB;
- overhead: a 64K window with ~40K tokens of host overhead (many tools' schemas).

Per shape it prints: passes, turns between compactions (min / median), tokens after each pass
against the low mark and the threshold, the largest prompt sent against the window, model calls,
and how many of the original messages are restorable (in the final context, or through
chronicle_expand). Targets: no pass ends above the threshold; turns between compactions never
below the shape's floor; the largest prompt under the window; every original restorable.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from agent.model_metadata import estimate_messages_tokens_rough  # noqa: E402
from test_compaction_support import hermes_slots, rotate, tool_step  # noqa: E402

from chronicle_engine.compaction.handoff import cited, label_of  # noqa: E402
from chronicle_engine.messages import content_text, is_own_handoff  # noqa: E402

__all__ = ["SHAPES", "Shape", "soak", "main"]


@dataclass(frozen=True)
class Shape:
    name: str
    window: int
    overhead: int  # tokens of system prompt and tool schemas the host counts beyond messages
    result_chars: int  # the size of each tool result
    instruction_every: int = 0  # every Nth request is a standing instruction (0: none)
    floor: int = 1  # the fewest turns allowed between two compactions (the target)


SHAPES = {
    "instructions": Shape("instructions", 128_000, 6_000, 3_000, instruction_every=7, floor=10),
    "tools": Shape("tools", 128_000, 6_000, 12_000, floor=5),
    "overhead": Shape("overhead", 64_000, 40_000, 1_200, floor=2),
}

_WORDS = [
    "checked",
    "the",
    "service",
    "logs",
    "and",
    "compared",
    "latency",
    "with",
    "the",
    "baseline",
    "then",
    "the",
    "config",
]


def _filler(chars: int, seed: int) -> str:
    words: list[str] = []
    size = 0
    k = seed
    while size < chars:
        word = _WORDS[k % len(_WORDS)] + (str(k % 97) if k % 5 == 0 else "")
        words.append(word)
        size += len(word) + 1
        k += 7
    return " ".join(words)[:chars]


def turn_messages(shape: Shape, t: int) -> list[dict[str, Any]]:
    if shape.instruction_every and t % shape.instruction_every == shape.instruction_every - 1:
        user = (
            f"From now on always run the linter rule R{t} before you commit, "
            f"and never touch the folder build-{t}."
        )
    else:
        user = f"Turn {t}: please check service-{t % 500} and report what changed."
    return [
        {"role": "user", "content": user},
        *tool_step(
            f"call_{t}",
            f"tail -n 80 /var/log/svc-{t}.log",
            f"exit 0\nvalue {t * 31 % 10007}\n" + _filler(shape.result_chars, t),
        ),
        {"role": "assistant", "content": f"Service-{t % 500} is fine; latency {40 + t % 50} ms."},
    ]


@dataclass
class Result:
    shape: Shape
    turns: int = 0
    passes: int = 0
    pass_turns: list[int] = field(default_factory=list)
    after: list[int] = field(default_factory=list)  # prompt tokens after each pass
    largest_prompt: int = 0
    model_calls: int = 0
    originals: int = 0
    restorable: int = 0
    low: int = 0
    high: int = 0
    seconds: float = 0.0
    check_seconds: float = 0.0  # of `seconds`, the restorability check after the chat
    stopped_early: bool = False
    warnings: int = 0

    @property
    def gaps(self) -> list[int]:
        return [b - a for a, b in zip(self.pass_turns, self.pass_turns[1:], strict=False)]

    def failures(self) -> list[str]:
        out: list[str] = []
        over = [a for a in self.after if a >= self.high]
        if over:
            out.append(f"{len(over)} pass(es) ended at or above the threshold (max {max(over):,})")
        if self.gaps and min(self.gaps) < self.shape.floor:
            out.append(f"{min(self.gaps)} turns between compactions < floor {self.shape.floor}")
        if self.largest_prompt >= self.shape.window:
            out.append(f"a prompt of {self.largest_prompt:,} tokens reached the window")
        if self.restorable < self.originals:
            out.append(f"{self.originals - self.restorable} original(s) not restorable")
        return out


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def soak(
    shape: Shape, turns: int, *, max_seconds: float = 1800.0, progress_every: int = 1000
) -> Result:
    result = Result(shape)
    counter = _Counter()
    logging.getLogger("chronicle").addHandler(counter)
    started = time.perf_counter()
    session = "soak-0"
    # No `compression:` section: out of the box.
    with hermes_slots(shape.window, session) as (engine, provider):
        try:
            policy = engine.policy
            result.low, result.high = policy.low_tokens, policy.high_tokens
            messages: list[dict[str, Any]] = []
            everything: list[dict[str, Any]] = []
            rotations = 0
            for t in range(turns):
                if time.perf_counter() - started > max_seconds:
                    result.stopped_early = True
                    break
                new = turn_messages(shape, t)
                provider.on_turn_start(t + 1, new[0]["content"])
                messages.extend(new)
                everything.extend(new)
                prompt = shape.overhead + estimate_messages_tokens_rough(messages)
                if engine.should_compress(prompt):
                    compressed = engine.compress(messages, current_tokens=prompt)
                    if compressed is not messages and compressed != messages:
                        result.passes += 1
                        result.pass_turns.append(t)
                        rotations += 1
                        session = rotate(engine, provider, session, f"soak-{rotations}", messages)
                        messages = compressed
                        prompt = shape.overhead + estimate_messages_tokens_rough(messages)
                        result.after.append(prompt)
                result.largest_prompt = max(result.largest_prompt, prompt)
                engine.update_from_response(
                    {"prompt_tokens": prompt, "completion_tokens": 40, "total_tokens": prompt + 40}
                )
                provider.sync_turn(
                    new[0]["content"], new[-1]["content"], session_id=session, messages=messages
                )
                result.turns = t + 1
                if progress_every and result.turns % progress_every == 0:
                    _progress(shape, result, started, f"turn {result.turns:,}")
            result.model_calls = sum(
                p.event.model_calls for p in engine.core.compaction.lineage_state(session).passes
            )
            result.originals = len(everything)
            _progress(shape, result, started, f"checking {len(everything):,} originals")
            checking = time.perf_counter()
            result.restorable = _restorable(engine, messages, everything)
            result.check_seconds = time.perf_counter() - checking
        finally:
            logging.getLogger("chronicle").removeHandler(counter)
    result.seconds = time.perf_counter() - started
    result.warnings = counter.count
    return result


def _progress(shape: Shape, result: Result, started: float, what: str) -> None:
    """A line on stderr, so a long run shows where it is; the result goes to stdout."""
    print(
        f"[{shape.name}] {what}: {result.passes} passes, {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
        flush=True,
    )


def _key(message: dict[str, Any]) -> str:
    return json.dumps(
        {k: v for k, v in message.items() if not str(k).startswith("_")}, sort_keys=True
    )


_SHORTENED = re.compile(r"chronicle_expand\(from_seq=(\d+), to_seq=(\d+)\)")


def _restorable(engine: Any, final: list[dict[str, Any]], everything: list[dict[str, Any]]) -> int:
    """How many originals are in the final context verbatim or come back through expand."""
    found = {_key(m) for m in final}
    handoff = next((m for m in final if is_own_handoff(m)), None)
    labels = [label_of(level, sid) for level, sid, _, _ in cited(content_text(handoff or {}))]
    ranges = [
        {"from_seq": int(a), "to_seq": int(b)}
        for m in final
        for a, b in _SHORTENED.findall(content_text(m))
    ]
    for query in [{"section_id": label} for label in labels] + ranges:
        page = 1
        while True:
            out = json.loads(
                engine.handle_tool_call(
                    "chronicle_expand", {**query, "page": page, "page_size": 200}, messages=final
                )
            )
            found.update(_key(item["message"]) for item in out.get("messages", []))
            if "next" not in out:
                break
            page = out["next"]["page"]
    return sum(1 for m in everything if _key(m) in found)


def report(result: Result) -> str:
    s = result.shape
    gaps = result.gaps
    after = result.after
    lines = [
        f"## {s.name}: window {s.window:,}, host overhead ~{s.overhead:,}, "
        f"tool results {s.result_chars:,} chars"
        + (
            f", a standing instruction every {s.instruction_every} requests"
            if s.instruction_every
            else ""
        ),
        f"turns: {result.turns:,}{' (stopped at the time cap)' if result.stopped_early else ''}"
        f" in {result.seconds:.1f} s (of it {result.check_seconds:.1f} s checking restorability)",
        f"passes: {result.passes}",
        "turns between compactions: "
        + (f"min {min(gaps)}, median {statistics.median(gaps):g}" if gaps else "-")
        + f" (floor {s.floor})",
        f"tokens after a pass: min {min(after, default=0):,}, median "
        f"{int(statistics.median(after)) if after else 0:,}, max {max(after, default=0):,}; "
        f"low mark {result.low:,}, threshold {result.high:,}",
        f"largest prompt sent: {result.largest_prompt:,} of a {s.window:,} window",
        f"model calls: {result.model_calls}",
        f"restorable: {result.restorable:,} of {result.originals:,} originals "
        f"({100 * result.restorable / max(1, result.originals):.1f}%)",
        f"warnings logged: {result.warnings}",
    ]
    failures = result.failures()
    lines.append("targets: " + ("met" if not failures else "MISSED: " + "; ".join(failures)))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--max-seconds", type=float, default=1800.0, help="per shape")
    parser.add_argument(
        "--progress-every", type=int, default=1000, help="turns between progress lines on stderr"
    )
    args = parser.parse_args()
    logging.disable(logging.INFO)  # the engines' progress lines are not the result
    print(f"machine: {platform.machine()} cpus={os.cpu_count()} python={platform.python_version()}")
    missed = 0
    for name in args.shapes.split(","):
        result = soak(
            SHAPES[name.strip()],
            args.turns,
            max_seconds=args.max_seconds,
            progress_every=args.progress_every,
        )
        print()
        print(report(result))
        missed += bool(result.failures())
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
