"""Do two checkouts answer the same? Search results of two checkouts on copies of one store.

    .venv/bin/python bench/same_results.py OLD_CHECKOUT NEW_CHECKOUT STORE.db [--queries 150]

For a change meant to leave results alone (how rows are read, not how they rank): each checkout,
in its own process with its own `chronicle_engine` first on the path, opens a scratch copy of
STORE.db (a lived-in store of bench/scale.py) and asks the same queries (bench/search_scale.py's,
seed 99) in five ways: chronicle_search with scope all, messages and sections, one result per
session, and per-turn memory (prefetch). Prints how many answers were compared and whether the
JSON of every answer is byte for byte the same; the first difference otherwise.

    .venv/bin/python bench/same_results.py OLD NEW DIR/locomo.db --locomo [--data PATH]

With `--locomo`, STORE is bench/locomo.py's capture (`--db DIR` keeps it) and the queries are
the dataset's questions, each asked as its conversation's user: chronicle_search over messages,
and per-turn memory (prefetch) as in the conversation's first session.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from locomo import DEFAULT_DATA  # noqa: E402
from scale import last_json  # noqa: E402

_OPEN = """
import json, random, sys
root, db, arg = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = [root, root + "/bench"]
import chronicle_engine
if not chronicle_engine.__file__.startswith(root):
    raise SystemExit(f"imported {chronicle_engine.__file__}, not {root}'s")
from chronicle_engine.core import ChronicleCore
core = ChronicleCore.get(db)
out = []
"""

_CHILD = (
    _OPEN
    + """
from search_scale import Corpus, queries
try:
    for q in queries(core, Corpus(), int(arg), random.Random(99)):
        for scope in ("all", "messages", "sections"):
            out.append([q, scope, core.recall.search(q, scope=scope, limit=10)])
        out.append([q, "by_session", core.recall.search(q, by_session=True)])
        out.append([q, "prefetch", core.recall.prefetch(q)])
finally:
    core.shutdown()
print(json.dumps(out))
"""
)

_LOCOMO_CHILD = (
    _OPEN
    + """
from locomo import questions
try:
    for sample in json.loads(open(arg, encoding="utf-8").read()):
        user = str(sample["sample_id"])
        for _, q, _ in questions(sample):
            found = core.recall.search(q, scope="messages", limit=10, user_id=user)
            out.append([q, "messages", found])
            out.append([q, "prefetch", core.recall.prefetch(q, session_id=f"{user}-session-1")])
finally:
    core.shutdown()
print(json.dumps(out))
"""
)


def answers(
    checkout: Path, store: Path, count: int, scratch: Path, locomo: Path | None = None
) -> list[object]:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{scratch}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(store, scratch)
    root = str(checkout.resolve())
    if locomo is not None:
        argv = [sys.executable, "-c", _LOCOMO_CHILD, root, str(scratch), str(locomo)]
    else:
        argv = [sys.executable, "-c", _CHILD, root, str(scratch), str(count)]
    return list(last_json(argv, str(checkout), 1800))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("store", type=Path)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument(
        "--locomo", action="store_true", help="STORE is bench/locomo.py's; ask its questions"
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the LoCoMo dataset")
    args = parser.parse_args()
    locomo = args.data if args.locomo else None
    with tempfile.TemporaryDirectory(prefix="chronicle-same-", dir=args.store.parent) as tmp:
        old = answers(args.old, args.store, args.queries, Path(tmp) / "old.db", locomo)
        new = answers(args.new, args.store, args.queries, Path(tmp) / "new.db", locomo)
    print(f"{len(old)} answers from {args.old}, {len(new)} from {args.new}")
    for a, b in zip(old, new, strict=False):
        if json.dumps(a) != json.dumps(b):
            print("first difference:")
            print(f"  old: {json.dumps(a)[:1500]}")
            print(f"  new: {json.dumps(b)[:1500]}")
            return 1
    if len(old) != len(new):
        print("different numbers of answers")
        return 1
    print("identical: every answer's JSON is the same, byte for byte")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
