"""Instructions a call costs on a lived-in store, counted by callgrind (independent of the load).

    .venv/bin/python bench/instructions.py CHECKOUT STORE.db search [--count 100] [--scope all]
    .venv/bin/python bench/instructions.py CHECKOUT STORE.db rebuild
    .venv/bin/python bench/instructions.py CHECKOUT STORE.db compress [--runs 3]
    .venv/bin/python bench/instructions.py CHECKOUT STORE.db turn --call queue_prefetch [--count 30]
    .venv/bin/python bench/instructions.py CHECKOUT LOCOMO.json locomo [--count 760] [--cache]

CHECKOUT is a directory holding a `chronicle_engine` (this repository, or an older commit's
`git archive`); its code is imported first, by its own `.venv`'s interpreter when it has one (an
older checkout whose package directory has another name maps it there). STORE.db (a lived-in store of bench/scale.py) is
copied to a scratch file first and never changed. The measured process runs under
`valgrind --tool=callgrind` with instrumentation off until the measured call starts and after it
ends (a small library built here with gcc toggles it through callgrind's client requests), with
PYTHONHASHSEED=0; the figure is callgrind's total of instructions for the call alone:

- search: `--count` default-scope searches (bench/search_scale.py's queries, seed 11) after 20
  warm-up ones, in one process;
- rebuild: recall's whole fold again (`RecallIndex.rebuild`), after one search;
- compress: a 1,001-message conversation (bench/compress.py's) is captured by a process of its
  own, which then lets background work settle as bench/scale.py's `settle` does; then a fresh process's first compress() of it is
  counted, `--runs` times (a new conversation each), each also printing its thread CPU time
  measured inside valgrind (not comparable with native times);
- turn: bench/sync_turn.py's turns (seed 11) through the memory provider, as Hermes makes them:
  `prefetch`, `sync_turn` of the live list, `queue_prefetch`; the `--call` named is counted over
  `--count` turns after 10 uncounted ones, each call on its own; the median is the figure, printed
  beside the mean and the largest call (FTS5 merges part of an index on some commits, ~90M
  instructions at a time, so a mean or a total depends on whether one falls in the window). Here STORE.db is made first when it does not exist:
  bench/sync_turn.py's fill of 100,000 events by the checkout's own code, its background work
  settled (recall, consolidation, every schedule due at once), kept for the next run.
- locomo: bench/locomo.py's protocol run as the checkout's own bench/locomo.py makes it, cold
  (each question asked once, no warm-up pass, in the dataset's order): every conversation of
  LOCOMO.json (the dataset, in place of a store) captured into a scratch store, then each timed
  `ask` counted on its own, the first `--count` questions; between two of them whatever that
  bench does untimed runs uncounted (a `by_session` search on a checkout whose `ask` has one,
  else the FTS5 baseline's search). Prints the mean, p50, p95 (the bench's own p95 rule), p99
  and largest count a query. `--cache` also simulates the caches (valgrind `--cache-sim=yes`,
  32 KB L1s and a 1 MB last level, this machine's L2; instrumented from the first question on,
  so what runs between two counted queries leaves its lines behind) and prints the misses a
  query, L1 and last level. (A warm-up pass first would favour whichever checkout keeps more
  per-process caches: the bench has none.)

Needs valgrind, its headers (valgrind/callgrind.h) and gcc.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_TOGGLE = """
#include <valgrind/callgrind.h>
void cg_on(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; }
void cg_off(void) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_STOP_INSTRUMENTATION; }
void cg_dump(void) { CALLGRIND_DUMP_STATS; }
void cg_instr(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_collect(void) { CALLGRIND_TOGGLE_COLLECT; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
"""

_CHILD = r"""
import ctypes, random, sys, time
mode, checkout, db, lib, arg = sys.argv[1:6]
sys.path[:0] = [checkout, checkout + "/bench"]
from chronicle_engine.core import ChronicleCore
core = ChronicleCore.get(db)
try:
    if mode == "setup":
        from compress import conversation
        core.capture.capture_messages(arg, conversation(1001))
        # then settle as bench/scale.py's `settle` does: search index, consolidation, schedules
        core.recall.catch_up()
        consolidator = core.scheduler.consolidator
        for _ in range(1000):
            if consolidator is None or consolidator.run(20_000).remaining == 0:
                break
        started = time.perf_counter()
        for _ in range(1000):
            if not core.scheduler.drain("sync_turn") or time.perf_counter() - started > 600:
                break
        raise SystemExit(0)
    cg = ctypes.CDLL(lib)
    if mode == "search":
        from search_scale import Corpus, queries
        count, scope = arg.split(":")
        asked = queries(core, Corpus(), int(count) + 20, random.Random(11))
        for q in asked[:20]:
            core.recall.search(q, scope=scope)
        cg.cg_on()
        for q in asked[20:]:
            core.recall.search(q, scope=scope)
        cg.cg_off()
    elif mode == "rebuild":
        core.recall.search("warm up")
        cg.cg_on()
        core.recall.index.rebuild()
        cg.cg_off()
    elif mode in ("fill", "turn"):
        import sync_turn
        if mode == "fill":
            sync_turn.fill(core, 100_000, random.Random(7))
            core.recall.catch_up()
            consolidator = core.scheduler.consolidator
            for _ in range(10_000):
                if consolidator is None or consolidator.run(5000).remaining == 0:
                    break
            for _ in range(1000):
                if not core.scheduler.drain("sync_turn"):
                    break
            raise SystemExit(0)
        from pathlib import Path
        from provider import ChronicleMemoryProvider
        call, count = arg.split(":")
        import tempfile
        home = Path(tempfile.mkdtemp(prefix="instructions-home-"))  # never the store's own folder
        (home / "config.yaml").write_text(
            f"chronicle:\n  db_path: {Path(db).resolve()}\n", encoding="utf-8"
        )
        provider = ChronicleMemoryProvider()
        provider.initialize("instr-turns", hermes_home=str(home), platform="cli")
        rng, live, cpu = random.Random(11), [{"role": "system", "content": "You are Hermes."}], 0.0
        def timed(name, fn, *args, **kwargs):
            global cpu
            counted = name == call and n >= 10
            if counted:
                cg.cg_on()
                t = time.thread_time()
            fn(*args, **kwargs)
            if counted:
                cpu += time.thread_time() - t
                cg.cg_off()
                cg.cg_dump()  # one count per call
        for n in range(10 + int(count)):
            new = sync_turn.turn(rng, n)
            timed("prefetch", provider.prefetch, new[0]["content"], session_id="instr-turns")
            live.extend(new)
            timed(
                "sync_turn", provider.sync_turn, new[0]["content"], new[-1]["content"],
                session_id="instr-turns", messages=live,
            )
            timed("queue_prefetch", provider.queue_prefetch, new[0]["content"], session_id="instr-turns")
        provider.shutdown()
        import shutil
        shutil.rmtree(home, ignore_errors=True)
        print(f"cpu_ms {cpu * 1000:.1f}")
    elif mode == "locomo":
        import inspect, json
        from pathlib import Path
        import locomo
        data, count = arg.rsplit(":", 1)
        samples = json.loads(Path(data).read_text(encoding="utf-8"))
        for sample in samples:
            locomo.ingest(core, sample)
        core.recall.catch_up()
        by_session = "by_session" in inspect.signature(locomo.ask).parameters
        asked = 0
        cg.cg_instr()
        for sample in samples:
            user, baseline = str(sample["sample_id"]), locomo.Baseline(sample)
            for qa in sample["qa"]:
                if asked == int(count):
                    break
                if int(qa.get("category", 0)) not in locomo.CATEGORIES:
                    continue
                if not locomo.evidence_ids(qa.get("evidence") or []):
                    continue
                question = str(qa["question"])
                cg.cg_zero()
                cg.cg_collect()
                locomo.ask(core, question, user)
                cg.cg_collect()
                cg.cg_dump()  # one count per timed query
                asked += 1
                if by_session:
                    locomo.ask(core, question, user, by_session=True)
                else:
                    baseline.search(question, 10)
    elif mode == "compress":
        from compress import conversation
        from chronicle_engine.compaction.policy import policy_from_config
        from chronicle_engine.config import Config
        from chronicle_engine.messages import estimate_list_tokens
        messages = conversation(1001)
        window = int(estimate_list_tokens(messages) / 0.9)
        policy = policy_from_config(
            Config(compression={"threshold": 0.5, "target_ratio": 0.2}), window
        )
        compaction = core.compaction
        cg.cg_on()
        t = time.thread_time()
        outcome = compaction.compress(arg, messages, policy=policy)
        cpu = (time.thread_time() - t) * 1000
        cg.cg_off()
        if outcome.messages is None:
            raise SystemExit(f"compress made no progress: {outcome.reason}")
        print(f"cpu_ms {cpu:.1f}")
finally:
    core.shutdown()
"""

_TOTALS = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)


def _library(folder: Path) -> Path:
    source = folder / "cgtoggle.c"
    source.write_text(_TOGGLE, encoding="utf-8")
    lib = folder / "libcgtoggle.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(source)], check=True)
    return lib


# The simulated caches of `locomo --cache`: this machine's L1s and its per-core L2 as the last level.
_CACHES = ("--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,16,64")


def _run(
    mode: str,
    checkout: Path,
    db: Path,
    lib: Path,
    arg: str,
    out: Path | None,
    *,
    cache: bool = False,
) -> str:
    own = checkout / ".venv" / "bin" / "python"
    python = str(own) if own.exists() else sys.executable
    argv = [python, "-c", _CHILD, mode, str(checkout), str(db), str(lib), arg]
    if out is not None:
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--collect-atstart=no",
            *(_CACHES if cache else ()),
            f"--callgrind-out-file={out}",
            *argv,
        ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        argv, cwd=checkout, capture_output=True, text=True, env=env, timeout=7200, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def _instructions(out: Path) -> int:
    found = _TOTALS.search(out.read_text(encoding="utf-8", errors="replace"))
    if found is None:
        raise SystemExit(f"no totals in {out}")
    return int(found[1])


def _totals(out: Path) -> dict[str, int]:
    """Each event callgrind counted in a dump (Ir, and the misses with a cache simulation)."""
    text = out.read_text(encoding="utf-8", errors="replace")
    events = re.search(r"^events:\s+(.+)$", text, re.MULTILINE)
    totals = re.search(r"^totals:\s+(.+)$", text, re.MULTILINE)
    if events is None or totals is None:
        raise SystemExit(f"no totals in {out}")
    return dict(zip(events[1].split(), map(int, totals[1].split()), strict=True))


def _locomo(checkout: Path, data: Path, count: int, cache: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="chronicle-instr-") as tmp:
        folder = Path(tmp)
        out = folder / "locomo.cg"
        arg = f"{data.resolve()}:{count}"
        _run("locomo", checkout, folder / "locomo.db", _library(folder), arg, out, cache=cache)
        dumps = sorted(folder.glob("locomo.cg.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        queries = [t for t in map(_totals, dumps) if t["Ir"] > 0]
    n = len(queries)

    def row(label: str, values: list[int]) -> str:
        ordered = sorted(values)
        p95 = ordered[min(n - 1, math.ceil(0.95 * n) - 1)]  # bench/locomo.py's rule
        p99 = ordered[min(n - 1, math.ceil(0.99 * n) - 1)]
        return (
            f"{label}: mean {statistics.fmean(ordered) / 1e3:,.1f}k, p50"
            f" {statistics.median(ordered) / 1e3:,.1f}k, p95 {p95 / 1e3:,.1f}k,"
            f" p99 {p99 / 1e3:,.1f}k, largest {ordered[-1] / 1e3:,.1f}k"
        )

    print(f"checkout {checkout}, {n} LoCoMo questions asked cold, each counted alone")
    print(row("instructions a query", [q["Ir"] for q in queries]))
    if cache:
        l1 = ("I1mr", "D1mr", "D1mw")
        last = ("ILmr", "DLmr", "DLmw")
        print(row("L1 misses a query", [sum(q[k] for k in l1) for q in queries]))
        print(row("last-level (1 MB) misses a query", [sum(q[k] for k in last) for q in queries]))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkout", type=Path)
    parser.add_argument("store", type=Path)
    parser.add_argument("mode", choices=("search", "rebuild", "compress", "turn", "locomo"))
    parser.add_argument("--call", choices=("prefetch", "sync_turn", "queue_prefetch"))
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--scope", default="all")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache", action="store_true", help="locomo: simulate the caches too")
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    if not (checkout / "chronicle_engine").is_dir() and not (checkout / ".venv").is_dir():
        raise SystemExit(f"{checkout} holds no chronicle_engine (nor a .venv mapping one)")
    if args.mode == "locomo":
        _locomo(checkout, args.store, args.count, args.cache)
        return 0
    if args.mode == "turn":
        if args.call is None:
            parser.error("turn needs --call")
        if not args.store.exists():
            with tempfile.TemporaryDirectory(prefix="chronicle-instr-") as tmp:
                print(f"making {args.store} (bench/sync_turn.py's fill, settled)")
                _run("fill", checkout, args.store.resolve(), _library(Path(tmp)), "-", None)
    with tempfile.TemporaryDirectory(prefix="chronicle-instr-") as tmp:
        folder = Path(tmp)
        lib = _library(folder)
        db = folder / "store.db"
        shutil.copyfile(args.store, db)
        print(f"checkout {checkout}, store {args.store} ({args.store.stat().st_size / 1e6:.0f} MB)")
        if args.mode == "search":
            out = folder / "search.cg"
            _run("search", checkout, db, lib, f"{args.count}:{args.scope}", out)
            n = _instructions(out)
            print(
                f"search: {n:,} instructions for {args.count} searches (scope {args.scope}),"
                f" {n / args.count / 1e6:.2f} M each"
            )
        elif args.mode == "turn":
            out = folder / "turn.cg"
            printed = _run("turn", checkout, db, lib, f"{args.call}:{args.count}", out)
            calls = sorted(n for dump in folder.glob("turn.cg*") if (n := _instructions(dump)) > 0)
            cpu = printed.strip().splitlines()[-1] if printed.strip() else ""
            print(
                f"{args.call}: median {statistics.median(calls) / 1e6:.3f} M instructions a call,"
                f" mean {statistics.fmean(calls) / 1e6:.3f} M, largest {calls[-1] / 1e6:.3f} M"
                f" ({len(calls)} calls; quartiles {calls[len(calls) // 4] / 1e6:.3f} -"
                f" {calls[3 * len(calls) // 4] / 1e6:.3f} M, total {sum(calls):,}; {cpu})"
            )
        elif args.mode == "rebuild":
            out = folder / "rebuild.cg"
            _run("rebuild", checkout, db, lib, "-", out)
            print(f"rebuild: {_instructions(out):,} instructions")
        else:
            for k in range(args.runs):
                session = f"instr-compress-{k}"
                _run("setup", checkout, db, lib, session, None)
                out = folder / f"compress-{k}.cg"
                printed = _run("compress", checkout, db, lib, session, out)
                cpu = printed.strip().splitlines()[-1] if printed.strip() else ""
                print(f"first compress {k + 1}: {_instructions(out):,} instructions ({cpu})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
