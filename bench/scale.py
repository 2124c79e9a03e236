"""Costs against history on lived-in stores: 10k, 100k and 1M captured messages.

    .venv/bin/python bench/scale.py [--sizes 10000 100000 1000000] [--cache DIR] [--rebuild]
                                    [--queries 300] [--turns 200] [--repeat 3]
    .venv/bin/python bench/scale.py --sizes 10000 --text-scales 1 3   # bytes against text only
    taskset -c 1 .venv/bin/python bench/scale.py --import-only [--import-runs 5] [--instructions]

Each store is built once and cached (`--cache`, default bench/out/scale/): the corpus of
bench/search_scale.py (one user, 40 messages to a session, each session ended as the host's
on_session_end records it), indexed as captured; then a fresh process folds the whole log into
the session tree (its peak RSS is the catch-up row); then the scheduler's own consolidation folds
every closed session into a section of its chronicle (extractive summaries), as a store left by
normal use holds them. A store built by older code is brought up to date by opening it (the
migrations run) before it is measured.

Every measurement runs in a fresh process on a scratch copy of the cached store, so the cache
never changes: search (default scope, after 20 warm-up queries), the first search after opening,
the first compress() of a 1,001-message conversation already captured (as sync_turn leaves it),
sync_turn through the memory provider, the plugin's import. "Cold" means the database files were
dropped from the page cache before the process started, as far as this machine allows (the
method is printed: posix_fadvise DONTNEED on the db, WAL and shm files, checked with fincore when
it is installed); "warm" means they were read through just before (all warm runs come before
the cold ones). Prints one table with a column per size and how each row grows from the
smallest size to the largest; writes bench/out/scale.json.

`--import-only` measures the plugin's import alone (`measure_import` below: bare and
beside Hermes' own imports, Chronicle selected and not, then a first turn) and prints those rows,
each the fastest of `--import-runs` processes; the machine's speed swings between processes, so
pin them to one CPU (`taskset -c 1`, which the children inherit) and compare instructions:
`--instructions` runs each figure once more under `valgrind --tool=callgrind`, counting only
what the child times (from the import to the end of register(), or of the first sync_turn), with
PYTHONHASHSEED=0 (bench/instructions.py's toggle library; needs valgrind, its headers and gcc).

Every loop is bounded in count and in time; a build that runs out of time (`--build-limit`, 14
minutes by default) says so and stops, and the next run goes on from where it stopped. At 1M
the build takes about 20 minutes on a quiet 2-core machine: expect two runs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from compress import conversation  # noqa: E402
from search_scale import Corpus, build, percentile, queries  # noqa: E402

if TYPE_CHECKING:
    from chronicle_engine.core import ChronicleCore

_CHILD_LIMIT_S = 900.0
_WARMUP = 20
_COMPRESS_MESSAGES = 1001


class CountingCorpus(Corpus):
    """The search_scale corpus, counting the bytes of text it hands out. With `scale` k > 1,
    each message is k of the corpus's sentences (k times the text on average)."""

    text_bytes = 0

    def __init__(self, scale: int = 1) -> None:
        super().__init__()
        self.scale = scale

    def message(self) -> str:
        text = " ".join(super(CountingCorpus, self).message() for _ in range(self.scale))
        self.text_bytes += len(text.encode("utf-8"))
        return text


# -- measurements, each in its own process ------------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM). Not getrusage's ru_maxrss: on Linux that keeps the
    parent's resident size across fork and exec, so a child would report the builder's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: KiB anyway


def _core(db: Path) -> ChronicleCore:
    """The store's core; with CHRONICLE_BENCH_MATCH_BUDGET set (bench/cold_reads.py), recall's
    match budget is that number instead of its default."""
    from chronicle_engine.config import Config
    from chronicle_engine.core import ChronicleCore

    budget = os.environ.get("CHRONICLE_BENCH_MATCH_BUDGET")
    if budget:
        return ChronicleCore.get(db, config=Config({"recall": {"match_budget": int(budget)}}))
    return ChronicleCore.get(db)


def child_search(db: Path, n: int) -> dict[str, Any]:
    core = _core(db)
    try:
        asked = queries(core, Corpus(), n + _WARMUP, random.Random(11))
        for q in asked[:_WARMUP]:
            core.recall.search(q)
        out: dict[str, Any] = {}
        for scope in ("all", "messages"):
            latencies, cpu = [], []
            for q in asked[_WARMUP:]:
                t0, c0 = time.perf_counter(), time.thread_time()
                core.recall.search(q, scope=scope, limit=10)
                latencies.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.thread_time() - c0) * 1000)
            out[scope] = {
                "p50_ms": statistics.median(latencies),
                "p95_ms": percentile(latencies, 0.95),
                "max_ms": max(latencies),
                "cpu_p50_ms": statistics.median(cpu),
                "cpu_p95_ms": percentile(cpu, 0.95),
            }
        out["peak_rss_mb"] = peak_rss_mb()
        return out
    finally:
        core.shutdown()


def _mark() -> None:
    """Tell bench/cold_reads.py (tracing this process's reads) that the measured call starts."""
    if os.environ.get("CHRONICLE_BENCH_MARK"):
        os.write(2, b"@@run@@\n")


def child_first_search(db: Path, query: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    core = _core(db)
    recall = core.recall  # built on first use: imports, migrations checked
    opened = (time.perf_counter() - t0) * 1000
    try:
        _mark()
        t0, c0 = time.perf_counter(), time.thread_time()
        recall.search(query)
        return {
            "open_ms": opened,
            "first_ms": (time.perf_counter() - t0) * 1000,
            "first_cpu_ms": (time.thread_time() - c0) * 1000,
        }
    finally:
        core.shutdown()


def child_compress(db: Path, session: str) -> dict[str, Any]:
    from chronicle_engine.compaction.policy import policy_from_config
    from chronicle_engine.config import Config
    from chronicle_engine.messages import estimate_list_tokens

    messages = conversation(_COMPRESS_MESSAGES)
    window = int(estimate_list_tokens(messages) / 0.9)
    policy = policy_from_config(Config(compression={"threshold": 0.5, "target_ratio": 0.2}), window)
    core = _core(db)
    try:
        t0 = time.perf_counter()
        compaction = core.compaction  # built on first use: imports, migrations checked
        built_ms = (time.perf_counter() - t0) * 1000
        _mark()
        t0, c0 = time.perf_counter(), time.thread_time()
        outcome = compaction.compress(session, messages, policy=policy)
        wall = (time.perf_counter() - t0) * 1000
        cpu = (time.thread_time() - c0) * 1000
        if outcome.messages is None:
            raise SystemExit(f"compress made no progress: {outcome.reason}")
        return {
            "built_ms": built_ms,
            "compress_ms": wall,
            "compress_cpu_ms": cpu,
            "capture_ms": outcome.capture_ms,
        }
    finally:
        core.shutdown()


def child_sync_turn(db: Path, turns: int) -> dict[str, Any]:
    from sync_turn import turn

    from provider import ChronicleMemoryProvider

    rng = random.Random(5)
    with tempfile.TemporaryDirectory(prefix="chronicle-scale-home-") as home:
        Path(home, "config.yaml").write_text(f"chronicle:\n  db_path: {db}\n", encoding="utf-8")
        provider = ChronicleMemoryProvider()
        provider.initialize("scale-turns", hermes_home=home, platform="cli")
        live: list[dict[str, Any]] = [{"role": "system", "content": "You are Hermes."}]
        timings: list[float] = []
        started = time.perf_counter()
        try:
            for n in range(turns):
                if time.perf_counter() - started > _CHILD_LIMIT_S / 2:
                    break
                new = turn(rng, n)
                live.extend(new)
                t0 = time.perf_counter()
                provider.sync_turn(
                    new[0]["content"], new[-1]["content"], session_id="scale-turns", messages=live
                )
                timings.append((time.perf_counter() - t0) * 1000)
        finally:
            provider.shutdown()
    warm = timings[5:] or timings
    return {
        "turns": len(timings),
        "p50_ms": statistics.median(warm),
        "p99_ms": percentile(warm, 0.99),
        "peak_rss_mb": peak_rss_mb(),
    }


_IMPORT = """
import importlib.util, json, sys, tempfile, time
for name in filter(None, sys.argv[2].split(",")):
    __import__(name)
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
counting = None
if len(sys.argv) > 4:  # under callgrind: count what the timers below time, nothing else
    import ctypes
    counting = ctypes.CDLL(sys.argv[4])
def stop():
    if counting is not None:
        counting.cg_off()
root, before, modules = sys.argv[1], rss(), len(sys.modules)
if counting is not None:
    counting.cg_on()
t0, cpu0 = time.perf_counter(), time.process_time()
spec = importlib.util.spec_from_file_location(
    "chronicle_plugin", root + "/__init__.py", submodule_search_locations=[root]
)
module = importlib.util.module_from_spec(spec)
sys.modules["chronicle_plugin"] = module
spec.loader.exec_module(module)
registered = {}
class Host:  # both loaders' registration calls, as Hermes makes them at start-up
    def __getattr__(self, name):
        if name.startswith("register_"):
            return lambda *args, **kwargs: registered.setdefault(name, args)
        raise AttributeError(name)
module.register(Host())
if sys.argv[3] != "use":
    stop()
out = {"seconds": time.perf_counter() - t0, "rss_added_mb": rss() - before,
       "modules_added": len(sys.modules) - modules,
       "pydantic_ai_loaded": "pydantic_ai" in sys.modules}
if sys.argv[3] == "use":  # then a new store opened and one turn captured, as a first chat does
    provider = registered["register_memory_provider"][0]
    with tempfile.TemporaryDirectory(prefix="chronicle-scale-import-") as home:
        provider.initialize("first", hermes_home=home, platform="cli")
        turn = [{"role": "user", "content": "What did we decide about the backups?"},
                {"role": "assistant", "content": "Nightly, kept for thirty days."}]
        provider.sync_turn(turn[0]["content"], turn[1]["content"], session_id="first",
                           messages=turn)
        out["use_cpu_seconds"] = time.process_time() - cpu0
        stop()
        out["use_rss_added_mb"] = rss() - before
        provider.shutdown()
print(json.dumps(out))
"""


HOST_IMPORTS = "pydantic,yaml,httpx,openai,agent.memory_provider,agent.context_engine"
"""What a Hermes process imports whether or not the plugin is there: its own pinned dependencies,
and the two base classes the plugin's adapters subclass (run_agent imports both at its top, through
agent.memory_manager and agent.context_compressor, and Hermes' own registration imports them again
to check what a plugin registers), as bench/startup.py counts them. The row beside these imports is
what the plugin adds to Hermes' start, the figure issue 19's import target is about; the bare row
also pays for these."""


def _import_child(
    preloaded: str, then: str, env: dict[str, str], counting: Path | None = None
) -> dict[str, Any]:
    """One child's figures; with `counting` (bench/instructions.py's toggle library) it runs under
    callgrind, which counts the instructions of what the child times, and adds them."""
    argv = [sys.executable, "-c", _IMPORT, str(ROOT), preloaded, then]
    if counting is None:
        return _child_json(argv, env)
    from instructions import _instructions

    with tempfile.TemporaryDirectory(prefix="chronicle-scale-callgrind-") as tmp:
        dump = Path(tmp, "callgrind.out")
        got = _child_json(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                "--collect-atstart=no",
                f"--callgrind-out-file={dump}",
                *argv,
                str(counting),
            ],
            {**env, "PYTHONHASHSEED": "0"},
        )
        got["instructions"] = _instructions(dump)
    return got


def _child_json(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True, env=env)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def measure_import(runs: int = 5, count: bool = False) -> dict[str, Any]:
    """The plugin imported and registered as Hermes' loaders do it (the provider and the engine
    built, nothing opened): in a bare interpreter, and in one that already holds Hermes' own
    dependencies, which is what the plugin adds to Hermes' process. The fastest of `runs` each.

    The engine imports what a call needs when it is first made, so the import alone could hide
    a cost moved into the first turn: each is also measured through a first `initialize()` (a
    new store) and one `sync_turn`, by the process's CPU time from the import on.

    Hermes' home is a scratch one: without a config.yaml (Chronicle not selected), and with one
    selecting Chronicle's slots, where register() imports the context engine's modules before
    registering it (so an engine that cannot load is never the selected one); the first use is
    measured selected.

    A first run writes the bytecode cache, as any start of an installed plugin has it (with
    PYTHONDONTWRITEBYTECODE set, every run would compile the plugin's sources again).

    With `count`, each of the three is also run once more under callgrind, which counts its
    instructions (`instructions`, `selected.instructions`, `use_instructions`): a figure the
    machine's load does not change."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="chronicle-scale-homes-") as homes:
        plain, chosen = Path(homes, "plain"), Path(homes, "selected")
        plain.mkdir()
        chosen.mkdir()
        (chosen / "config.yaml").write_text(
            "memory:\n  provider: chronicle\ncontext:\n  engine: chronicle\n", encoding="utf-8"
        )
        unselected, selected = (
            {**env, "HERMES_HOME": str(plain)},
            {**env, "HERMES_HOME": str(chosen)},
        )
        counting = None
        if count:
            from instructions import _library

            counting = _library(Path(homes))
        _import_child("", "use", selected)
        for label, preloaded in (("bare", ""), ("in_host", HOST_IMPORTS)):
            imported = [_import_child(preloaded, "", unselected) for _ in range(runs)]
            picked = [_import_child(preloaded, "", selected) for _ in range(runs)]
            used = [_import_child(preloaded, "use", selected) for _ in range(runs)]
            out[label] = min(imported, key=lambda r: r["seconds"])
            out[label]["selected"] = min(picked, key=lambda r: r["seconds"])
            out[label]["use_cpu_seconds"] = min(r["use_cpu_seconds"] for r in used)
            out[label]["use_rss_added_mb"] = min(r["use_rss_added_mb"] for r in used)
            if counting is not None:
                count_one = functools.partial(_import_child, preloaded, counting=counting)
                out[label]["instructions"] = count_one("", unselected)["instructions"]
                out[label]["selected"]["instructions"] = count_one("", selected)["instructions"]
                out[label]["use_instructions"] = count_one("use", selected)["instructions"]
    return out


def child_catchup(db: Path) -> dict[str, Any]:
    """The first read after an import: the session tree and the search index fold the log."""
    core = _core(db)
    try:
        before = peak_rss_mb()
        t0 = time.perf_counter()
        core.recall.catch_up()
        return {
            "seconds": time.perf_counter() - t0,
            "peak_rss_mb_before": before,
            "peak_rss_mb_after": peak_rss_mb(),
        }
    finally:
        core.shutdown()


def last_json(argv: Sequence[str], what: str, timeout: float) -> Any:
    """Run `argv`; the last line of its output is JSON, returned decoded."""
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{what} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_child(
    role: str, *args: str, timeout: float = _CHILD_LIMIT_S, prefix: Sequence[str] = ()
) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (under `prefix`, a tracer, when given); its
    last line of output is the result."""
    argv = [*prefix, sys.executable, __file__, "--child", role, *args]
    return dict(last_json(argv, role, timeout))


# -- the page cache -----------------------------------------------------------------------------


def _files(db: Path) -> list[Path]:
    return [p for p in (Path(f"{db}{s}") for s in ("", "-wal", "-shm")) if p.exists()]


def resident_bytes(db: Path) -> int | None:
    """Bytes of the database files in the page cache (fincore), or None without it."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES", *map(str, _files(db))],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return None
    return sum(int(x) for x in out.stdout.split())


def drop_cache(db: Path) -> str:
    """Ask the kernel to drop the database files from the page cache. Returns what was done and
    what stayed resident."""
    for path in _files(db):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    left = resident_bytes(db)
    checked = "unchecked (no fincore)" if left is None else f"{left / 1e6:.1f} MB left resident"
    return f"posix_fadvise(DONTNEED) on the db/-wal/-shm files, {checked}"


def fill_cache(db: Path) -> str:
    """Read the database files through, so the page cache holds them (the machine has the
    memory for a 1M store several times over). Returns what was done and what is resident."""
    for path in _files(db):
        with path.open("rb", buffering=0) as f:
            while f.read(8 << 20):
                pass
    left = resident_bytes(db)
    size = sum(p.stat().st_size for p in _files(db))
    checked = "unchecked (no fincore)" if left is None else f"{left / 1e6:.1f} MB resident"
    return f"read through ({size / 1e6:.1f} MB), {checked}"


# -- building a lived-in store ------------------------------------------------------------------


def built(
    cache: Path, size: int, rebuild: bool, limit_s: float, text_scale: int = 1
) -> tuple[Path, dict[str, Any]]:
    """The cached lived-in store of `size` messages, built if missing. Each phase is recorded
    when done, so a build stopped at `limit_s` seconds goes on where it stopped when run again
    (the folds keep their own positions). With `text_scale` k > 1, every message holds k times
    the text (`CountingCorpus`), cached as lived-SIZE-xK."""
    name = f"lived-{size}" if text_scale == 1 else f"lived-{size}-x{text_scale}"
    db = cache / f"{name}.db"
    meta_path = cache / f"{name}.json"
    meta: dict[str, Any] = {}
    if not rebuild and db.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("complete"):
            refresh(db)
            return db, meta
    started = time.perf_counter()

    def save() -> None:
        meta_path.write_text(json.dumps(meta, indent=1), encoding="utf-8")

    if not meta.get("appended"):
        for path in (*_files(db), meta_path):
            path.unlink(missing_ok=True)
        cache.mkdir(parents=True, exist_ok=True)
        meta = {"messages": size, "text_scale": text_scale}
        corpus = CountingCorpus(text_scale)
        core = _core(db)
        try:
            print(f"[{size:,}] appending {size:,} captured messages", flush=True)
            meta["capture_s"] = build(
                core,
                size,
                1,
                corpus,
                end_sessions=True,
                index=False,
                progress=max(size // 10, 1000),
            )
            meta["text_bytes"] = corpus.text_bytes
        finally:
            core.shutdown()
        meta["appended"] = True
        save()
    if "catchup" not in meta:
        print(f"[{size:,}] folding the tree and the search index in a fresh process", flush=True)
        meta["catchup"] = run_child("catchup", str(db), timeout=max(60.0, limit_s))
        print(f"[{size:,}] catch-up: {meta['catchup']}", flush=True)
        save()
    core = _core(db)
    try:
        consolidator = core.scheduler.consolidator
        if consolidator is None:
            raise SystemExit("consolidation is unavailable: " + str(core.scheduler))
        t0 = time.perf_counter()
        for _ in range(100_000):
            report = consolidator.run(20_000)
            position, last = consolidator.backlog()
            print(f"[{size:,}]   consolidated through {position:,} of {last:,}", flush=True)
            if report.remaining == 0 or position >= last:
                break
            if time.perf_counter() - started > limit_s:
                meta["consolidate_s"] = meta.get("consolidate_s", 0) + time.perf_counter() - t0
                save()
                raise SystemExit(
                    f"[{size:,}] build stopped after {limit_s:.0f} s; run again to go on"
                )
        meta["consolidate_s"] = meta.get("consolidate_s", 0) + time.perf_counter() - t0
        settle(core)
        with core.store.reading() as conn:
            meta["sections"] = conn.execute("SELECT count(*) FROM sections").fetchone()[0]
    finally:
        core.shutdown()
    meta["complete"] = True
    save()
    print(f"[{size:,}] built, {meta['sections']:,} sections", flush=True)
    return db, meta


def settle(core: ChronicleCore) -> None:
    """Let background work run as the hooks of normal use would (bounded): the search index
    and consolidation catch up, the maintenance schedules run once."""
    core.recall.catch_up()
    consolidator = core.scheduler.consolidator
    for _ in range(1000):
        if consolidator is None or consolidator.run(20_000).remaining == 0:
            break
    started = time.perf_counter()
    for _ in range(1000):
        if not core.scheduler.drain("sync_turn") or time.perf_counter() - started > 600:
            break


def refresh(db: Path) -> None:
    """Open the cached store with this code (its migrations run and the log's later indexes
    are built: how long the opening took is printed when it changed the schema, as a host
    opening its store after an upgrade waits) and let it catch up."""
    before = _schema(db)
    t0 = time.perf_counter()
    core = _core(db)
    opened = time.perf_counter() - t0
    changed = sorted(_schema(db) - before)
    if changed:
        print(f"{db.name}: opened in {opened:.2f} s, adding {', '.join(changed)}")
    try:
        settle(core)
    finally:
        core.shutdown()


def _schema(db: Path) -> set[str]:
    """The migrations recorded in `db` and its indexes, by name."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        recorded = {str(row[0]) for row in conn.execute("SELECT name FROM migrations")}
        indexes = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        return recorded | {f"index {row[0]}" for row in indexes}


def used_bytes(db: Path) -> int:
    """Bytes of the database's pages in use."""
    conn = sqlite3.connect(db)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)
    finally:
        conn.close()


def vacuumed(db: Path) -> Path:
    """A vacuumed copy of `db` (VACUUM INTO): a store migrated in place keeps the pages an older
    layout filled, half empty; a store built by this code holds about what VACUUM leaves."""
    out = db.with_name(db.stem + "-vacuumed.db")
    out.unlink(missing_ok=True)
    conn = sqlite3.connect(db)
    try:
        conn.execute("VACUUM INTO ?", (str(out),))
    finally:
        conn.close()
    return out


def table_bytes(db: Path) -> dict[str, int]:
    """Bytes per table, its indexes and its FTS shadow tables folded in (dbstat)."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
        owners = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
    except sqlite3.Error:
        return {}
    finally:
        conn.close()
    out: dict[str, int] = {}
    for name, size in rows:
        owner = owners.get(name, name)
        for suffix in ("_data", "_idx", "_docsize", "_config", "_content"):
            if owner.endswith(suffix) and owner[: -len(suffix)] in owners:
                owner = owner[: -len(suffix)]
        out[owner] = out.get(owner, 0) + int(size)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


_STORED = """CASE typeof({c}) WHEN 'null' THEN 0 WHEN 'real' THEN 8
    WHEN 'integer' THEN CASE WHEN {c} IN (0, 1) THEN 0 WHEN {c} BETWEEN -128 AND 127 THEN 1
        WHEN {c} BETWEEN -32768 AND 32767 THEN 2 WHEN {c} BETWEEN -8388608 AND 8388607 THEN 3
        WHEN {c} BETWEEN -2147483648 AND 2147483647 THEN 4
        WHEN {c} BETWEEN -140737488355328 AND 140737488355327 THEN 6 ELSE 8 END
    ELSE length(CAST({c} AS BLOB)) END"""
"""The bytes SQLite's record format stores a value in (its header byte aside)."""


def where_bytes_go(db: Path, size: int) -> list[str]:
    """Per message: the bytes of each table and index apart (dbstat, pages whole), and of
    each column of the tables a message writes a row to (record bodies only: a row's header,
    its rowid and the pages' slack are the rest of the table's figure)."""
    conn = sqlite3.connect(db)
    try:
        lines = [
            f"  {name:<40} {total / size:>8.1f} B/message"
            for name, total in conn.execute(
                "SELECT name, sum(pgsize) AS total FROM dbstat GROUP BY name"
                " ORDER BY total DESC LIMIT 20"
            )
        ]
        for table in ("events", "session_entries", "recall_messages"):
            names = [  # an INTEGER PRIMARY KEY is the rowid, not stored in the record
                name
                for name, kind, pk in conn.execute(
                    "SELECT name, type, pk FROM pragma_table_info(?)", (table,)
                )
                if not (pk and kind.upper() == "INTEGER")
            ]
            if not names:
                continue
            sums = ", ".join(f"sum({_STORED.format(c=f'[{n}]')})" for n in names)
            got = conn.execute(f"SELECT {sums} FROM [{table}]").fetchone()
            cells = ", ".join(f"{n} {(v or 0) / size:.1f}" for n, v in zip(names, got, strict=True))
            lines.append(f"  {table} columns, B/message: {cells}")
        return lines
    finally:
        conn.close()


def store_bytes(db: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Bytes per message and per byte of text of a vacuumed copy of `db`, and by table."""
    size = meta["messages"]
    compact = vacuumed(db)
    try:
        used = used_bytes(compact)
        return {
            "bytes_per_message": used / size,
            "bytes_per_text_byte": used / meta["text_bytes"],
            "text_bytes_per_message": meta["text_bytes"] / size,
            "tables": table_bytes(compact),
            "where": where_bytes_go(compact, size),
        }
    finally:
        compact.unlink()


def bytes_against_text(args: argparse.Namespace) -> int:
    """Build each size at each text scale and fit bytes per message = a + b x text per message:
    b, the bytes each byte of text costs (every copy of the text and its index), and a, the
    bytes a message costs whatever its text (ids, times, row headers, index entries)."""
    scales = sorted(set(args.text_scales))
    if len(scales) < 2:
        raise SystemExit("--text-scales needs two scales or more, e.g. --text-scales 1 3")
    for size in sorted(args.sizes):
        points = []
        for k in scales:
            db, meta = built(args.cache, size, args.rebuild, args.build_limit, k)
            got = store_bytes(db, meta)
            points.append((got["text_bytes_per_message"], got["bytes_per_message"], got))
            print(
                f"[{size:,} x{k}] text {got['text_bytes_per_message']:.0f} B/message,"
                f" store {got['bytes_per_message']:,.0f} B/message"
                f" ({got['bytes_per_text_byte']:.2f} per byte of text)",
                flush=True,
            )
        xs = [x for x, _, _ in points]
        ys = [y for _, y, _ in points]
        slope, intercept = statistics.linear_regression(xs, ys)
        print(
            f"[{size:,}] bytes per message = {intercept:,.0f} + {slope:.2f} x text bytes"
            f" (least squares over {len(points)} text scales)"
        )
        lo, hi = points[0][2]["tables"], points[-1][2]["tables"]
        print(f"[{size:,}] by table: per message at x{scales[0]}, and per byte of added text")
        for name in list(hi)[:12]:
            a = lo.get(name, 0) / size
            b = (hi[name] / size - a) / (xs[-1] - xs[0])
            print(f"  {name:<32} {a:>8.0f} B/message {b:>7.2f} B per byte of text")
        print(f"[{size:,} x{scales[0]}] each table and index apart, and the rows' columns:")
        print("\n".join(points[0][2]["where"]))
    print(f"{load()} at the end")
    return 0


# -- one size -----------------------------------------------------------------------------------


def measure(db: Path, meta: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    size = meta["messages"]
    scratch = db.with_name(f"scratch-{size}.db")
    for path in _files(scratch):
        path.unlink()
    shutil.copyfile(db, scratch)
    row: dict[str, Any] = {"messages": size, "sections": meta["sections"]}
    row.update(store_bytes(scratch, meta))
    row["catchup_peak_rss_mb"] = meta["catchup"]["peak_rss_mb_after"]
    row["catchup_s"] = meta["catchup"]["seconds"]
    core = _core(scratch)
    try:
        probes = queries(core, Corpus(), args.repeat, random.Random(13))
        for k in range(2 * args.repeat):  # as sync_turn captured them during each chat
            core.capture.capture_messages(f"compress-{k}", conversation(_COMPRESS_MESSAGES))
        settle(core)
    finally:
        core.shutdown()
    try:
        print(f"[{size:,}] search, warm", flush=True)
        row["search"] = run_child("search", str(scratch), str(args.queries))
        print(f"[{size:,}] first search and first compress, warm and cold", flush=True)
        row["first_search"] = {"warm": [], "cold": []}
        row["compress"] = {"warm": [], "cold": []}
        # Every warm run reads a page cache filled again just before it: a cold run before it
        # would otherwise have left the file mostly out of the cache.
        for kind in ("warm", "cold"):
            for k, query in enumerate(probes):
                settle_cache = fill_cache if kind == "warm" else drop_cache
                row[f"cache_{kind}"] = settle_cache(scratch)
                row["first_search"][kind].append(run_child("first_search", str(scratch), query))
                settle_cache(scratch)
                session = f"compress-{2 * k + (kind == 'cold')}"
                row["compress"][kind].append(run_child("compress", str(scratch), session))
        print(f"[{size:,}] sync_turn", flush=True)
        row["sync_turn"] = run_child("sync_turn", str(scratch), str(args.turns))
    finally:
        for path in _files(scratch):
            path.unlink()
    return row


# -- printing -----------------------------------------------------------------------------------


def _ms(values: Sequence[float]) -> str:
    return "–".join(f"{v:.1f}" for v in (min(values), max(values))) + " ms"


def table(rows: list[dict[str, Any]], imported: dict[str, Any]) -> list[tuple[str, list[str], str]]:
    def grow(first: float, last: float) -> str:
        return f"×{last / first:.2f}" if first else "–"

    lines: list[tuple[str, list[str], str]] = []

    def add(label: str, cells: list[str], values: list[float]) -> None:
        lines.append((label, cells, grow(values[0], values[-1]) if len(values) > 1 else ""))

    for scope, named in (("all", "default scope"), ("messages", "messages only")):
        found = [r["search"][scope] for r in rows]
        add(
            f"search p50 / p95, {named} (warm)",
            [f"{x['p50_ms']:.2f} / {x['p95_ms']:.2f} ms" for x in found],
            [x["p95_ms"] for x in found],
        )
        add(
            "  the same, CPU time of the searching thread",
            [f"{x['cpu_p50_ms']:.2f} / {x['cpu_p95_ms']:.2f} ms" for x in found],
            [x["cpu_p95_ms"] for x in found],
        )
    timed = (
        ("first search after opening", "first_search", "first_ms"),
        ("  the same, CPU time", "first_search", "first_cpu_ms"),
        ("  before it: open, recall built", "first_search", "open_ms"),
        ("first compress, 1,001 messages", "compress", "compress_ms"),
        ("  the same, CPU time", "compress", "compress_cpu_ms"),
        ("  before it: context engine built", "compress", "built_ms"),
    )
    for label, key, field in timed:
        for kind in ("warm", "cold"):
            values = [[run[field] for run in r[key][kind]] for r in rows]
            add(f"{label} ({kind})", [_ms(v) for v in values], [max(v) for v in values])
    add(
        "DB bytes per message (vacuumed)",
        [f"{r['bytes_per_message']:,.0f} B" for r in rows],
        [r["bytes_per_message"] for r in rows],
    )
    add(
        "DB bytes per byte of text",
        [f"{r['bytes_per_text_byte']:.1f}" for r in rows],
        [r["bytes_per_text_byte"] for r in rows],
    )
    add(
        "sync_turn p50 / p99",
        [f"{r['sync_turn']['p50_ms']:.2f} / {r['sync_turn']['p99_ms']:.2f} ms" for r in rows],
        [r["sync_turn"]["p99_ms"] for r in rows],
    )
    add(
        "peak RSS (search, sync_turn)",
        [f"{r['search']['peak_rss_mb']:.0f}, {r['sync_turn']['peak_rss_mb']:.0f} MB" for r in rows],
        [max(r["search"]["peak_rss_mb"], r["sync_turn"]["peak_rss_mb"]) for r in rows],
    )
    add(
        "catch-up over all events (tree, index), peak RSS",
        [f"{r['catchup_peak_rss_mb']:.0f} MB ({r['catchup_s']:.0f} s)" for r in rows],
        [r["catchup_peak_rss_mb"] for r in rows],
    )
    return lines + import_lines(imported, len(rows))


def import_lines(imported: dict[str, Any], columns: int) -> list[tuple[str, list[str], str]]:
    """The rows of `measure_import`'s figures, the same in each of `columns` columns."""

    def counted(run: dict[str, Any], key: str) -> str:
        return f", {run[key] / 1e6:,.0f}M instructions" if key in run else ""

    lines: list[tuple[str, list[str], str]] = []
    for label, key in (("bare interpreter", "bare"), ("beside Hermes' own imports", "in_host")):
        got = imported[key]
        for how, run in (("", got), (", Chronicle selected", got["selected"])):
            lines.append(
                (
                    f"plugin import + register(), {label}{how}",
                    [
                        f"{run['seconds']:.3f} s, {run['rss_added_mb']:.1f} MB"
                        f" ({run['modules_added']} modules){counted(run, 'instructions')}"
                    ]
                    * columns,
                    "(independent of size)",
                )
            )
        lines.append(
            (
                "  selected, then initialize() (new store) + 1 sync_turn, CPU",
                [
                    f"{got['use_cpu_seconds']:.3f} s, {got['use_rss_added_mb']:.1f} MB"
                    f"{counted(got, 'use_instructions')}"
                ]
                * columns,
                "(from the import on)",
            )
        )
    return lines


def _print_table(head: list[str], lines: list[tuple[str, list[str], str]]) -> None:
    width = max(len(label) for label, _, _ in lines)
    cols = [max(len(h), *(len(cells[i]) for _, cells, _ in lines)) for i, h in enumerate(head)]
    print()
    print(
        " | ".join([" " * width, *(h.rjust(c) for h, c in zip(head, cols, strict=True)), "growth"])
    )
    for label, cells, growth in lines:
        print(
            " | ".join(
                [
                    label.ljust(width),
                    *(x.rjust(c) for x, c in zip(cells, cols, strict=True)),
                    growth,
                ]
            )
        )


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--cache", type=Path, default=ROOT / "bench" / "out" / "scale")
    parser.add_argument("--rebuild", action="store_true", help="build the stores again")
    parser.add_argument(
        "--build-limit",
        type=float,
        default=840.0,
        help="seconds a build may take in one run (a stopped build goes on when run again)",
    )
    parser.add_argument("--build-only", action="store_true", help="build the stores, measure none")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--text-scales",
        type=int,
        nargs="+",
        default=None,
        help="measure bytes only: build each size with k times the text a message for each k"
        " given (e.g. 1 3) and fit bytes per message against text per message",
    )
    parser.add_argument(
        "--import-only",
        action="store_true",
        help="measure the plugin's import alone (no store built or read) and print its rows",
    )
    parser.add_argument(
        "--import-runs", type=int, default=5, help="processes each import figure is the fastest of"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count each import figure's instructions under callgrind (needs valgrind, its"
        " headers and gcc)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.child:
        children = {
            "search": lambda: child_search(Path(rest[0]), int(rest[1])),
            "first_search": lambda: child_first_search(Path(rest[0]), rest[1]),
            "compress": lambda: child_compress(Path(rest[0]), rest[1]),
            "sync_turn": lambda: child_sync_turn(Path(rest[0]), int(rest[1])),
            "catchup": lambda: child_catchup(Path(rest[0])),
        }
        print(json.dumps(children[args.child]()))
        return 0
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"machine: {machine}; {load()} at the start")
    print("the machine is shared with other jobs: timings are not final")
    if args.text_scales:
        return bytes_against_text(args)
    if args.import_only:
        _print_table(
            ["import"], import_lines(measure_import(args.import_runs, args.instructions), 1)
        )
        print(f"{load()} at the end")
        return 0
    rows = []
    for size in sorted(args.sizes):
        db, meta = built(args.cache, size, args.rebuild, args.build_limit)
        if args.build_only:
            continue
        rows.append(measure(db, meta, args))
        print(f"[{size:,}] measured; {load()}", flush=True)
    if args.build_only:
        return 0
    imported = measure_import(args.import_runs, args.instructions)
    _print_table(
        [f"{r['messages']:,} ({r['sections']:,} sections)" for r in rows], table(rows, imported)
    )
    print()
    print(f"warm: {rows[-1].get('cache_warm', 'not measured')}")
    print(f"cold: {rows[-1].get('cache_cold', 'not measured')}")
    print(f"text per message: {rows[-1]['text_bytes_per_message']:.0f} bytes on average")
    print(f"bytes by table at {rows[-1]['messages']:,}:")
    for name, size in list(rows[-1]["tables"].items())[:12]:
        print(f"  {name:<32} {size / rows[-1]['messages']:>8.0f} B/message")
    print(f"{load()} at the end")
    out = ROOT / "bench" / "out" / "scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"machine": machine, "rows": rows, "import": imported}, indent=1),
        encoding="utf-8",
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
