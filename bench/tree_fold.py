"""The session tree's bulk fold on PostgreSQL: what `chronicle migrate`, an import or a store
bulk-built past the fold waits for.

    python bench/tree_fold.py [--sessions 2500] [--messages 40]

Starts a throwaway local server (tests/postgres_support.py: initdb, 127.0.0.1, fsync off),
appends `--sessions` chats of `--messages` captured messages straight to the log (past the
tree's fold, as an import or a restore leaves them), then times the one tree write that folds
them all (`SessionTree.refresh`): wall time, this process's CPU and the server's (less
load-bound than the wall on a shared machine), and checks every message became an entry and
every session a head. Prints JSON with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from multihost import _server_cpu  # noqa: E402
from postgres_support import Target, start_cluster  # noqa: E402

from chronicle_engine.capture.events import MessageCaptured  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=2500)
    parser.add_argument("--messages", type=int, default=40)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with start_cluster() as cluster:
        postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
        parts = Target("postgres", cluster.conninfo()).tree()
        types = parts.sessions.types
        began = time.perf_counter()
        batch = []
        for s in range(args.sessions):
            for i in range(args.messages):
                role = "user" if i % 2 == 0 else "assistant"
                text = f"session {s} message {i}: the invoice for order {i * 7}"
                message = MessageCaptured(
                    role=role,
                    message={"role": role, "content": text},
                    fingerprint=f"{s}-{i}",
                    speaker="person" if role == "user" else "assistant",
                    text=text,
                    turn=i // 2,
                )
                batch.append(types.pending(message, session=f"chat-{s}"))
            if len(batch) >= 4000:
                parts.store.append(batch)
                batch = []
        parts.store.append(batch)
        appended = time.perf_counter() - began
        began, cpu, server = time.perf_counter(), time.process_time(), _server_cpu(postmaster)
        parts.sessions.refresh()
        folded, cpu = time.perf_counter() - began, time.process_time() - cpu
        server = _server_cpu(postmaster) - server
        with parts.sessions.tables.reading("counting the tree") as conn:
            entries = conn.execute("SELECT COUNT(*) FROM session_entries").fetchone()
            heads = conn.execute("SELECT COUNT(*) FROM session_heads").fetchone()
        parts.shutdown()
    print(
        json.dumps(
            {
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "load_average": load_before,
                "sessions": args.sessions,
                "messages": args.sessions * args.messages,
                "append_s": round(appended, 1),
                "fold_s": round(folded, 2),
                "fold_cpu_s": round(cpu, 2),
                "fold_server_cpu_s": round(server, 2),
                "entries_ok": bool(entries and entries[0] == args.sessions * args.messages),
                "heads_ok": bool(heads and heads[0] == args.sessions),
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )


if __name__ == "__main__":
    main()
