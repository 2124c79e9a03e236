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
- with a provider-cache model (see `cost.py`'s docstring), the input tokens billed over a run
  with net-cost timing against threshold timing (target: fewer, no request above the threshold).
"""

from __future__ import annotations

import argparse
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

from test_compaction_engine import Host, small_policy, turn  # noqa: E402
from test_compaction_support import core_for  # noqa: E402

from chronicle_engine.compaction.handoff import cited, label_of  # noqa: E402
from chronicle_engine.compaction.policy import RESTORE_MAX_TOKENS  # noqa: E402

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


def _calls(core: Any, session: str, label: str, budget: int) -> tuple[int, int]:
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
    print("targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
