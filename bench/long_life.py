"""A long life of compactions: what the agent can see and restore after 100 passes.

    .venv/bin/python bench/long_life.py [--passes 100] [--max-seconds 900]

One conversation on a 16K window (Hermes' defaults scaled down: threshold 0.5, target ratio 0.2,
the tests' `small_policy`), each turn a request naming a ticket (`OPS-n`, the planted entity), a
tool call, its result and an answer, compacted whenever the prompt reaches the threshold, until
`--passes` passes. Prints:

- the handoff's tokens against its budget (the last pass's and the largest);
- the share of planted tickets the last handoff names, by decile of the conversation (target:
  every decile represented; overall at least 5x the 45 of 3,714 measured before this bench);
- the tool calls needed to restore a whole section with `chronicle_expand` at the engine's
  default budget (target: 1 for a section within the budget), against the older pages of 20;
- with a provider-cache model (`Cache` below), the input tokens billed over the same
  conversation through the context-engine slot with net-cost timing (the host reports cache
  figures) against threshold timing (it does not): target fewer, no request above the threshold.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from agent.model_metadata import estimate_messages_tokens_rough  # noqa: E402
from test_compaction_engine import Host, small_policy, turn  # noqa: E402
from test_compaction_support import core_for, hermes_slots, rotate  # noqa: E402

from chronicle_engine.compaction.handoff import cited, label_of  # noqa: E402
from chronicle_engine.compaction.policy import RESTORE_MAX_TOKENS  # noqa: E402
from chronicle_engine.compaction.timing import (  # noqa: E402
    CACHE_TTL_SECONDS,
    READ_PRICE,
    WRITE_PRICE,
)
from chronicle_engine.core import ChronicleCore  # noqa: E402

__all__ = ["Life", "live", "main"]

TICKET = re.compile(r"\bOPS-(\d+)\b")
BEFORE = (45, 3714)  # tickets the last handoff named, of those planted, before this bench's work


@dataclass
class Life:
    passes: int = 0
    turns: int = 0
    messages: int = 0
    handoff_tokens: list[int] = field(default_factory=list)
    budget: int = 0
    named: set[int] = field(default_factory=set)  # tickets the last handoff names
    top_level: int = 0
    restore_budget: int = 0
    # per sampled section: (its tokens, calls at the default budget, at the largest, pages of 20)
    restore_calls: list[tuple[int, int, int, int]] = field(default_factory=list)
    seconds: float = 0.0
    stopped_early: bool = False

    def deciles(self) -> list[tuple[int, int]]:
        """(named, planted) per tenth of the conversation's turns."""
        out = []
        for d in range(10):
            lo, hi = d * self.turns // 10, (d + 1) * self.turns // 10
            out.append((sum(1 for n in self.named if lo <= n < hi), hi - lo))
        return out


def _calls(core: ChronicleCore, session: str, label: str, budget: int) -> tuple[int, int]:
    """(the section's tokens, the calls that restore it whole at `budget`)."""
    calls, cursor, tokens = 0, None, 0
    for _ in range(10_000):
        out = core.compaction.expand(
            session, section_id=label, max_tokens=budget, continue_from=cursor
        )
        calls += 1
        tokens += out["tokens"]
        if "next" not in out:
            break
        cursor = out["next"]["continue_from"]
    return tokens, calls


def live(passes: int, *, max_seconds: float, restore_sample: int = 40) -> Life:
    life = Life()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        core = core_for(Path(tmp) / "long.db")
        try:
            policy = small_policy()
            host = Host(core, policy)
            life.budget = policy.handoff_tokens
            n = 0
            while len(host.handoffs) < passes:
                if time.perf_counter() - started > max_seconds:
                    life.stopped_early = True
                    break
                host.add(*turn(n, size=300))
                n += 1
                if host.due():
                    host.compress()
                    life.handoff_tokens.append(len(host.handoffs[-1]) // 4)
                    if len(host.handoffs) % 10 == 0:
                        print(
                            f"pass {len(host.handoffs)}, turn {n}, "
                            f"{time.perf_counter() - started:.0f} s",
                            file=sys.stderr,
                            flush=True,
                        )
            life.passes, life.turns, life.messages = len(host.handoffs), n, len(host.everything)
            last = host.handoffs[-1] if host.handoffs else ""
            life.named = {int(t) for t in TICKET.findall(last)}
            levels = [level for level, *_ in cited(last)]
            life.top_level = max(levels, default=0)
            life.restore_budget = max(1_000, (policy.high_tokens - policy.low_tokens) // 2)
            # Every level-1 section the conversation wrote, sampled evenly.
            written = [
                label
                for p in core.compaction.lineage_state(host.session).passes
                for label in p.event.written
                if not label.startswith("L")
            ]
            step = max(1, len(written) // restore_sample)
            for label in written[::step]:
                section = label_of(1, label)
                tokens, calls = _calls(core, host.session, section, life.restore_budget)
                _, largest = _calls(core, host.session, section, RESTORE_MAX_TOKENS)
                pages = core.compaction.expand(
                    host.session, section_id=section, page=1, page_size=20
                )["pages"]
                life.restore_calls.append((tokens, calls, largest, pages))
        finally:
            core.shutdown()
    life.seconds = time.perf_counter() - started
    return life


@dataclass
class Cache:
    """A provider's prompt cache as Anthropic bills it: a request reads the prefix it shares with
    the previous request at READ_PRICE of an input token while that request is under
    CACHE_TTL_SECONDS old, and writes the rest at WRITE_PRICE. Billed in uncached input tokens."""

    keys: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    at: float | None = None
    billed: float = 0.0
    requests: int = 0

    def request(self, messages: list[dict[str, Any]], overhead: int, now: float) -> dict[str, int]:
        keys = [json.dumps(m, sort_keys=True) for m in messages]
        sizes = [estimate_messages_tokens_rough([m]) for m in messages]
        prompt = overhead + sum(sizes)
        read = 0
        if self.at is not None and now - self.at <= CACHE_TTL_SECONDS:
            read = overhead
            for k, (mine, theirs) in enumerate(zip(keys, self.keys, strict=False)):
                if mine != theirs:
                    break
                read += sizes[k]
        write = prompt - read
        self.billed += READ_PRICE * read + WRITE_PRICE * write
        self.requests += 1
        self.keys, self.sizes, self.at = keys, sizes, now
        return {"prompt_tokens": prompt, "cache_read_tokens": read, "cache_write_tokens": write}


@dataclass
class Billed:
    timing: str
    billed: float = 0.0
    requests: int = 0
    passes: int = 0
    early: int = 0  # passes below the threshold
    largest: int = 0
    high: int = 0
    over: int = 0  # requests sent above the threshold


def billed_run(
    turns: int, *, net_cost: bool, overhead: int = 2_000, idle_every: int = 10
) -> Billed:
    """One conversation through both slots (as bench/soak.py drives them), two requests a turn
    (the request, then the tool result), 20 s apart; every `idle_every`th turn comes after 15
    idle minutes. With `net_cost` the host reports the cache figures, else only token counts."""
    result = Billed("net cost" if net_cost else "threshold")
    now = [0.0]
    session = "life-0"
    compression = {"threshold": 0.5, "target_ratio": 0.2, "protect_first_n": 2, "protect_last_n": 6}
    with hermes_slots(16_000, session, compression) as (engine, provider):
        engine.clock = lambda: now[0]
        result.high = engine.policy.high_tokens
        cache = Cache()
        messages: list[dict[str, Any]] = []
        rotations = 0
        for t in range(turns):
            new = turn(t, size=300)
            now[0] += 15 * 60 if t and t % idle_every == 0 else 20
            for step in (new[:1], new[1:3]):
                messages.extend(step)
                prompt = overhead + estimate_messages_tokens_rough(messages)
                if engine.should_compress(prompt):
                    compressed = engine.compress(messages, current_tokens=prompt)
                    if compressed is not messages and compressed != messages:
                        result.passes += 1
                        result.early += prompt < result.high
                        rotations += 1
                        new_id = f"life-{rotations}"
                        session = rotate(engine, provider, session, new_id, messages)
                        messages = compressed
                usage = cache.request(messages, overhead, now[0])
                result.largest = max(result.largest, usage["prompt_tokens"])
                result.over += usage["prompt_tokens"] > result.high
                if not net_cost:
                    usage = {"prompt_tokens": usage["prompt_tokens"]}
                engine.update_from_response({**usage, "completion_tokens": 40})
                now[0] += 20
            messages.append(new[3])
            provider.sync_turn(
                new[0]["content"], new[3]["content"], session_id=session, messages=messages
            )
        result.billed, result.requests = cache.billed, cache.requests
    return result


def report(life: Life) -> str:
    planted = life.turns
    named = len(life.named)
    lines = [
        f"passes: {life.passes}{' (stopped at the time cap)' if life.stopped_early else ''}, "
        f"turns {life.turns:,}, messages {life.messages:,}, in {life.seconds:.0f} s",
        f"handoff tokens: last {life.handoff_tokens[-1] if life.handoff_tokens else 0:,}, "
        f"largest {max(life.handoff_tokens, default=0):,}, budget {life.budget:,}; "
        f"highest condensed level cited: {life.top_level}",
        f"planted tickets named in the last handoff: {named:,} of {planted:,} "
        f"({100 * named / max(1, planted):.1f}%; before: {BEFORE[0]} of {BEFORE[1]:,}, "
        f"{named / BEFORE[0]:.1f}x)",
        "by decile of the conversation: "
        + ", ".join(f"{k + 1}: {a}/{b}" for k, (a, b) in enumerate(life.deciles())),
    ]
    sizes = [r[0] for r in life.restore_calls]
    lines.append(
        f"restoring a whole level-1 section ({len(sizes)} sampled, tokens median "
        f"{statistics.median(sizes) if sizes else 0:g}, max {max(sizes, default=0):,}):"
    )
    for name, budget, k in (
        ("the engine's default budget", life.restore_budget, 1),
        ("the largest budget", RESTORE_MAX_TOKENS, 2),
    ):
        within = [r[k] for r in life.restore_calls if r[0] <= budget]
        over = [(r[0], r[k]) for r in life.restore_calls if r[0] > budget]
        lines.append(
            f"  at {name} ({budget:,} tokens): {len(within)} within it, restored in "
            f"{max(within, default=0)} call(s) at most; {len(over)} larger, in at most "
            f"{max((c for _, c in over), default=0)} (ceil(tokens / budget) + 1 at most: "
            f"{all(c <= math.ceil(t / budget) + 1 for t, c in over)})"
        )
    pages = [r[3] for r in life.restore_calls]
    lines.append(
        f"  before (pages of 20 messages): median {statistics.median(pages) if pages else 0:g} "
        f"calls, max {max(pages, default=0)}"
    )
    return "\n".join(lines)


def failures(life: Life) -> list[str]:
    out = []
    if max(life.handoff_tokens, default=0) > life.budget:
        out.append("a handoff above its budget")
    empty = [k + 1 for k, (a, _) in enumerate(life.deciles()) if a == 0]
    if empty:
        out.append(f"deciles not represented: {empty}")
    if len(life.named) < 5 * BEFORE[0]:
        out.append(f"coverage {len(life.named)} < 5x {BEFORE[0]}")
    for budget, k in ((life.restore_budget, 1), (RESTORE_MAX_TOKENS, 2)):
        if any(r[k] != 1 for r in life.restore_calls if r[0] <= budget):
            out.append(f"a section within {budget:,} tokens took more than one call")
    return out


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=100)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument(
        "--cost-turns", type=int, default=0, help="turns of the cost runs (default: the life's)"
    )
    args = parser.parse_args()
    import logging

    logging.disable(logging.INFO)
    print(
        f"machine: {platform.machine()} cpus={os.cpu_count()} python={platform.python_version()} "
        f"load={os.getloadavg()[0]:.1f} commit={_commit()}"
    )
    life = live(args.passes, max_seconds=args.max_seconds)
    print(report(life))
    missed = failures(life)
    turns = args.cost_turns or life.turns
    runs = [billed_run(turns, net_cost=False), billed_run(turns, net_cost=True)]
    print(
        f"provider cache (reads at {READ_PRICE:g}, writes at {WRITE_PRICE:g} of an input token, "
        f"{CACHE_TTL_SECONDS:.0f} s lifetime; {turns:,} turns, two requests each, 15 idle "
        "minutes before every 10th turn): input billed in uncached-token units"
    )
    for run in runs:
        print(
            f"  {run.timing}: {run.billed:,.0f} over {run.requests:,} requests; passes "
            f"{run.passes} ({run.early} before the threshold); largest request {run.largest:,}, "
            f"threshold {run.high:,}, requests above it {run.over}"
        )
    threshold, net = runs
    print(f"  net cost against threshold: {100 * (net.billed / threshold.billed - 1):+.1f}%")
    if net.billed >= threshold.billed:
        missed.append("net-cost timing billed no less than threshold timing")
    if net.over:
        missed.append(f"{net.over} request(s) above the threshold with net-cost timing")
    print("targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
