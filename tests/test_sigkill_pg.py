"""A host killed at random points loses nothing it acknowledged, on PostgreSQL.

A child process is a Hermes host: the memory provider over the PostgreSQL store config.yaml
names, capturing turn after turn through `sync_turn` and printing `ack N` after each call
returns. The parent SIGKILLs it at a random moment (while it captures), 50 times, each time
with a fresh child continuing the same conversation, as `hermes chat --resume` would, with the
whole live list. After each kill every acknowledged message is in the log exactly once, and no
message is there twice. Bounded: 50 kills (more with --soak), each child stops itself after
200 turns or 30 s, and every wait has a timeout.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from postgres_support import own_schema

from chronicle_engine.core import vocabulary
from chronicle_engine.log.postgres import PostgresEventStore

ROOT = Path(__file__).resolve().parent.parent
KILLS = 200 if os.environ.get("CHRONICLE_SOAK") else 50
SESSION = "killed"

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from provider import ChronicleMemoryProvider

home, start = sys.argv[2], int(sys.argv[3])
provider = ChronicleMemoryProvider()
provider.initialize("killed", hermes_home=home, platform="cli")
live = []
for n in range(start):  # the conversation so far, as a resumed Hermes holds it
    live += [{"role": "user", "content": f"turn {n}"}, {"role": "assistant", "content": f"ok {n}"}]
print("ready", flush=True)
deadline = time.monotonic() + 30
for n in range(start, start + 200):
    if time.monotonic() > deadline:
        break
    live += [{"role": "user", "content": f"turn {n}"}, {"role": "assistant", "content": f"ok {n}"}]
    provider.sync_turn(f"turn {n}", f"ok {n}", session_id="killed", messages=live)
    print(f"ack {n}", flush=True)
provider.shutdown()
"""


def captured(store: PostgresEventStore) -> Counter[str]:
    return Counter(
        json.dumps(e.payload["message"], sort_keys=True)
        for e in store.read(session=SESSION, namespaces=["chronicle.chat"])
        if e.envelope.type == "MessageCaptured"
    )


def wire(n: int) -> list[str]:
    return [
        json.dumps({"role": "user", "content": f"turn {n}"}, sort_keys=True),
        json.dumps({"role": "assistant", "content": f"ok {n}"}, sort_keys=True),
    ]


def test_fifty_sigkills_lose_nothing_acknowledged(postgres_cluster: Any, tmp_path: Path) -> None:
    rng = random.Random(17)
    vocabulary()  # (the payload templates capture's events are stored by)
    with own_schema(postgres_cluster) as dsn:
        home = tmp_path / "hermes_home"
        home.mkdir()
        (home / "config.yaml").write_text(yaml.safe_dump({"chronicle": {"store": dsn}}))
        env = {**os.environ, "HERMES_HOME": str(home), "PYTHONHASHSEED": "0"}
        store = PostgresEventStore(dsn)
        acked = -1  # the highest turn any child acknowledged
        killed_mid_turn = 0
        try:
            for _kill in range(KILLS):
                child = subprocess.Popen(
                    [sys.executable, "-c", CHILD, str(ROOT), str(home), str(acked + 1)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env=env,
                )
                assert child.stdout is not None
                try:
                    assert child.stdout.readline().strip() == "ready"
                    time.sleep(rng.uniform(0.0, 0.25))  # somewhere in a turn's capture
                    child.send_signal(signal.SIGKILL)
                    out, _ = child.communicate(timeout=30)
                finally:
                    if child.poll() is None:
                        child.kill()
                        child.wait(timeout=30)
                lines = out.split()
                acks = [int(v) for k, v in zip(lines[::2], lines[1::2], strict=False) if k == "ack"]
                if acks:
                    acked = max(acked, max(acks))
                killed_mid_turn += child.returncode == -signal.SIGKILL
                held = captured(store)
                assert all(count == 1 for count in held.values()), held.most_common(3)
                missing = [m for n in range(acked + 1) for m in wire(n) if m not in held]
                assert not missing, f"acknowledged but not in the log: {missing[:4]}"
        finally:
            store.close()
        assert acked >= KILLS // 2  # the children did capture between the kills
        assert killed_mid_turn == KILLS  # every child died by the signal, none ran out
        print(f"sigkill loop: {KILLS} kills, {acked + 1} turns acknowledged, none lost or doubled")
