"""Processes that die and processes that race: no acknowledged turn is lost.

- SIGKILL loop: a writer process drives the memory slot turn after turn and prints each turn
  once `sync_turn` returned (acknowledged); the test kills it with SIGKILL at random moments and
  starts it again, resuming from what it acknowledged. Every acknowledged turn must be in the log.
- Concurrent processes: several processes, each with several threads, capture their own
  sessions at once on one database for a bounded time; no call raises and every turn is in.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import yaml
from faults_support import examples, report

from chronicle_engine.core import ChronicleCore

ROOT = Path(__file__).resolve().parents[2]

_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from provider import ChronicleMemoryProvider
    home, session, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    provider = ChronicleMemoryProvider()
    provider.initialize(session, hermes_home=home, platform="cli")
    live = []
    for k in range(last):
        live += [
            {{"role": "user", "content": f"turn {{k}}: " + "words " * 60}},
            {{"role": "assistant", "content": f"reply {{k}}: " + "more " * 60}},
        ]
        if k >= first:
            provider.sync_turn("", "", session_id=session, messages=live)
            print(k, flush=True)  # acknowledged
    provider.shutdown()
    """
)


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump({"chronicle": {"busy_timeout_ms": 5000}}))
    return home


def _turns_in_log(db: Path, session: str) -> set[int]:
    core = ChronicleCore.get(db)
    try:
        found = set()
        for e in core.store.read(session=session, namespaces=["chronicle.chat"]):
            content = e.payload.get("message", {}).get("content", "")
            if e.envelope.type == "MessageCaptured" and content.startswith("reply "):
                found.add(int(content.split(":")[0].split()[1]))
        return found
    finally:
        core.shutdown()


def test_sigkill_at_random_moments_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    home = _home(tmp_path)
    kills = examples(4, soak_factor=50)
    rng = random.Random(16)
    script = _WRITER.format(root=str(ROOT))
    env = {**os.environ, "HERMES_HOME": str(home)}
    acknowledged: set[int] = set()
    next_turn = 0
    started = time.monotonic()
    for _ in range(kills):
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(home), "k1", str(next_turn), str(next_turn + 400)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()  # it runs: at least one turn acknowledged
        if first.strip():
            acknowledged.add(int(first))
        deadline = time.monotonic() + rng.uniform(0.2, 1.5)  # then dies mid-turn, somewhere
        while time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
        acknowledged |= {int(x) for x in rest.split()}
        next_turn = max(acknowledged) + 1
    db = home / "chronicle" / "chronicle.db"
    in_log = _turns_in_log(db, "k1")
    lost = acknowledged - in_log
    report(
        "sigkill loop",
        kills=kills,
        acknowledged_turns=len(acknowledged),
        turns_lost=len(lost),
        seconds=round(time.monotonic() - started, 1),
    )
    assert not lost, sorted(lost)[:20]


_RACER = textwrap.dedent(
    """
    import sys, threading, time
    sys.path.insert(0, {root!r})
    from provider import ChronicleMemoryProvider
    home, name, threads, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    provider = ChronicleMemoryProvider()
    provider.initialize(name + "-0", hermes_home=home, platform="cli")
    counts = {{}}
    def run(t):
        session = f"{{name}}-{{t}}"
        live = []
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end and n < 2000:
            live += [{{"role": "user", "content": f"q {{n}}"}}, {{"role": "assistant", "content": f"a {{n}}"}}]
            provider.sync_turn("", "", session_id=session, messages=live)
            n += 1
        counts[session] = n
    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers: w.start()
    for w in workers: w.join()
    provider.shutdown()
    import json; print(json.dumps(counts))
    """
)


def test_concurrent_processes_and_threads_capture_every_turn(tmp_path: Path) -> None:
    home = _home(tmp_path)
    processes, threads = 4, 2
    seconds = 3.0 if not os.environ.get("CHRONICLE_SOAK") else 60.0
    script = _RACER.format(root=str(ROOT))
    env = {**os.environ, "HERMES_HOME": str(home)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(home), f"p{i}", str(threads), str(seconds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(processes)
    ]
    counts: dict[str, Any] = {}
    errors = 0
    for proc in procs:
        out, err = proc.communicate(timeout=seconds + 180)
        errors += proc.returncode != 0 or "Traceback" in err or "failed" in err
        counts.update(json.loads(out.strip().splitlines()[-1]))
    db = home / "chronicle" / "chronicle.db"
    core = ChronicleCore.get(db)
    missing = 0
    for session, n in counts.items():
        stored = sum(
            1
            for e in core.store.read(session=session, namespaces=["chronicle.chat"])
            if e.envelope.type == "MessageCaptured"
        )
        missing += 2 * n - stored
    core.shutdown()
    report(
        "concurrent processes",
        processes=processes,
        threads=threads,
        seconds=seconds,
        turns=sum(counts.values()),
        errors=errors,
        turns_lost=missing // 2,
    )
    assert errors == 0 and missing == 0
