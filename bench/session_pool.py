"""How `by_session` pooling's k changes session recall, on both development sets.

`chronicle_search(by_session=true)` pools the ranking of the full-text candidates by session: a
session's weight is the sum of 1 / (k + rank) of its hits (`recall.pool.pool_sessions`), and k is
the number of sessions asked for. This script asks each question once for the candidates, the
way the search does (`RecallIndex.hits`, as deep as `recall.candidates`), and pools the same
ranking at several k, so the choice of k can be checked on both sets and both halves of each.

It reads the databases the two recall benches keep (captured by the benches themselves):

    python bench/longmemeval.py --variant protocol --keep DIR_LME
    python bench/locomo.py --variant protocol --db DIR_LOCOMO
    python bench/session_pool.py --lme DIR_LME --locomo DIR_LOCOMO/locomo.db [--k 1,3,5,10,20,30,60]

Scored as the benches score `by_session`: LongMemEval, every session holding a gold turn among
the ten sessions (the benchmark's session gold; halves by sha1 of the question id); LoCoMo,
every evidence turn's session among the ten (categories 1-4; halves: conversations 1-3, 4-5).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import locomo  # noqa: E402
import longmemeval  # noqa: E402

from chronicle_engine.core import ChronicleCore  # noqa: E402
from chronicle_engine.recall.pool import pool_sessions  # noqa: E402
from chronicle_engine.recall.search import Hit  # noqa: E402

LIMIT = 10


def pooled(hits: Sequence[Hit], k: int) -> list[str]:
    return [h.session or "" for h in pool_sessions(hits, k=k, limit=LIMIT)]


def candidates(core: ChronicleCore, query: str, **who: str) -> list[Hit]:
    depth = max(core.recall.index.tuning.candidates, LIMIT)
    return core.recall.index.hits(query, limit=depth, pooling=True, **who)


def run_lme(folder: Path, data: Path, ks: Sequence[int]) -> dict[int, dict[str, list[float]]]:
    out: dict[int, dict[str, list[float]]] = {k: defaultdict(list) for k in ks}
    for q in longmemeval.load(data):
        path = folder / f"{q.qid}.db"
        if not path.exists():
            raise SystemExit(f"{path} is missing: run bench/longmemeval.py --keep {folder}")
        core = ChronicleCore.get(path)
        try:
            hits = candidates(core, q.text)
        finally:
            core.shutdown()
        half = "even" if longmemeval.half_of(q.qid) == 0 else "odd"
        for k in ks:
            found = float(q.gold_sessions <= set(pooled(hits, k)))
            for key in ("all", half):
                out[k][key].append(found)
    return out


def run_locomo(path: Path, data: Path, ks: Sequence[int]) -> dict[int, dict[str, list[float]]]:
    out: dict[int, dict[str, list[float]]] = {k: defaultdict(list) for k in ks}
    samples = json.loads(data.read_text(encoding="utf-8"))
    core = ChronicleCore.get(path)
    try:
        for n, sample in enumerate(samples, start=1):
            user = str(sample["sample_id"])
            for _, question, relevant in locomo.questions(sample):
                hits = candidates(core, question, scope="messages", user_id=user)
                half = "conv. 1-3" if n <= 3 else "conv. 4-5"
                for k in ks:
                    sessions = {locomo.dataset_session(s) for s in pooled(hits, k)}
                    found = float(locomo.session_of(relevant) <= sessions)
                    for key in ("all", half):
                        out[k][key].append(found)
    finally:
        core.shutdown()
    return out


def report(title: str, table: dict[int, dict[str, list[float]]], keys: Sequence[str]) -> None:
    print(f"\n{title}")
    print(f"  {'k':>4}" + "".join(f"{key:>12}" for key in keys))
    for k, row in table.items():
        cells = "".join(f"{sum(row[key]) / len(row[key]):>12.3f}" for key in keys)
        print(f"  {k:>4}{cells}")
    any_row = next(iter(table.values()))
    print("  questions" + "".join(f"{len(any_row[key]):>12}" for key in keys)[5:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lme", type=Path, required=True, help="bench/longmemeval.py --keep DIR")
    parser.add_argument(
        "--locomo", type=Path, required=True, help="the locomo.db bench/locomo.py kept"
    )
    parser.add_argument("--lme-data", type=Path, default=longmemeval.DEFAULT_DATA)
    parser.add_argument("--locomo-data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument("--k", default="1,3,5,10,20,30,60")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.k.split(",")]
    if not args.locomo.exists():
        print(f"no database at {args.locomo}: run bench/locomo.py --db DIR", file=sys.stderr)
        return 2
    lme = run_lme(args.lme, args.lme_data, ks)
    report(
        "LongMemEval dev: every gold session among the ten sessions", lme, ("all", "even", "odd")
    )
    loc = run_locomo(args.locomo, args.locomo_data, ks)
    report(
        "LoCoMo dev: every evidence session among the ten sessions",
        loc,
        ("all", "conv. 1-3", "conv. 4-5"),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
