"""The job queue shared by several processes standing in for hosts, on each store: every due
time of a schedule is fired by at most one of them, every job runs once, and no two claimers
ever hold the same job (SQLite by its one writer; PostgreSQL by SKIP LOCKED, the partial unique
index and the watermark's conditional upsert).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

from postgres_support import Target, release_together

from chronicle_engine.scheduler.queue import JobSpec

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 120  # every run below ends well inside this
PROCESSES = 4
THREADS = 2

_HOST = textwrap.dedent(
    """
    import json, sys, threading, time
    sys.path[:0] = [{root!r}, {tests!r}]
    from postgres_support import Target
    from chronicle_engine.scheduler.queue import JobSpec
    kind, where, name, dues, threads = {args!r}
    opened = [Target(kind, where).open_queue(time.time, f"{{name}}-{{t}}") for t in range(threads)]
    fired, ran, refused = [], [], []
    lock = threading.Lock()

    def host(t):
        store, queue = opened[t]
        deadline = time.monotonic() + 90
        def drain():
            while time.monotonic() < deadline:
                job = queue.claim()
                if job is None:
                    return
                done = queue.complete(job, {{"by": queue.owner}})
                with lock:
                    (ran if done else refused).append([job.id, job.payload.get("due"), job.key])
        for due in dues:
            spec = JobSpec("consolidate", "consolidation", key="consolidate",
                           payload={{"schedule": "consolidate", "due": due}})
            job_id = queue.fire("consolidate", "0 * * * *", due, spec)
            if job_id is not None:
                with lock:
                    fired.append([due, job_id])
            drain()
        drain()
        store.close()

    print("ready", flush=True)
    sys.stdin.readline()  # every host starts at once
    workers = [threading.Thread(target=host, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps({{"fired": fired, "ran": ran, "refused": refused}}))
    """
)


def _run_hosts(script: str, args: list[object]) -> list[dict[str, list[object]]]:
    """Start the hosts, release them together, and collect what each printed."""
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                script.format(root=str(ROOT), tests=str(ROOT / "tests"), args=args[n]),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(len(args))
    ]
    try:
        release_together(processes)
        outputs = []
        for process in processes:
            out, err = process.communicate(timeout=DEADLINE_S)
            assert process.returncode == 0, err[-3000:]
            outputs.append(json.loads(out.strip().splitlines()[-1]))
        return outputs
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()


def test_each_due_time_fires_once_and_each_job_runs_once_across_hosts(target: Target) -> None:
    store, queue = target.open_queue(lambda: 0.0)  # the schema exists before the hosts race
    dues = [1_700_000_000.0 + 3600 * k for k in range(40)]
    args: list[object] = [(target.kind, target.where, f"h{n}", dues, THREADS) for n in range(4)]
    outputs = _run_hosts(_HOST, args)
    fired = [tuple(f) for out in outputs for f in out["fired"]]
    ran = [tuple(r) for out in outputs for r in out["ran"]]
    refused = [r for out in outputs for r in out["refused"]]

    by_due = Counter(due for due, _ in fired)
    assert by_due and max(by_due.values()) == 1, "a due time was fired by two hosts"
    assert by_due[dues[-1]] == 1  # the last due time was handled
    assert queue.watermarks() == {"consolidate": dues[-1]}
    runs = Counter(job_id for job_id, _, _ in ran)
    assert max(runs.values()) == 1, "a job ran twice"
    assert refused == []  # no lease was lost: no claim overlapped another
    assert set(runs) == {job_id for _, job_id in fired}  # every fired job ran
    assert queue.counts()["done"] == len(runs) and queue.counts()["pending"] == 0
    store.close()


def test_claimers_on_many_hosts_take_every_job_exactly_once(target: Target) -> None:
    store, queue = target.open_queue(lambda: 0.0)
    jobs = 240
    ids = [queue.enqueue(JobSpec("sweep", "maintenance", key=f"k{i}")) for i in range(jobs)]
    args: list[object] = [
        (target.kind, target.where, f"h{n}", [], THREADS) for n in range(PROCESSES)
    ]
    outputs = _run_hosts(_HOST, args)  # no due times: each host only drains
    ran = Counter(r[0] for out in outputs for r in out["ran"])
    assert sorted(ran) == sorted(ids) and set(ran.values()) == {1}
    assert [r for out in outputs for r in out["refused"]] == []
    owners = {job.result["by"] for job in queue.jobs(limit=jobs) if job.result}  # type: ignore[index]
    assert len(owners) > 1  # the work was shared, not taken by one claimer while others waited
    assert queue.counts()["done"] == jobs
    store.close()
