"""Session pooling: one result per session, for questions whose evidence is spread over several
conversations ("how many times did I ...", "what did I decide each time ...").

Invariant: pooling only regroups a ranking it is given; it reads nothing and scores nothing
itself. A session's weight is the sum of the reciprocal ranks of all its hits, 1 / (k + rank),
so a session with several good hits outranks one with a single slightly better hit, and a
session is shown by its best hit. The ranking pooled is as deep as the full-text candidates
(`recall.candidates`): every candidate a search re-ranks can lend its session weight.

k is the number of sessions asked for (10 by default), not the fusion's 60: a hit at rank k
weighs about half as much as the first, so the turns that would have been shown count most and
the long tail of the candidates breaks ties. Compared on both development sets at k = 1, 3, 5,
10, 20, 30 and 60 (bench/locomo.py, bench/longmemeval.py): k = 10 holds every evidence session
more often than 60 on both halves of LoCoMo and on one half of LongMemEval, as often on the
other; k of 5 or less does better still on LoCoMo but worse on a LongMemEval half. See
docs/benchmarks.md ("One result per session").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from .search import Hit

__all__ = ["pool_sessions"]


def pool_sessions(hits: Sequence[Hit], *, k: int, limit: int) -> list[Hit]:
    """The best `limit` sessions of `hits` (a ranking, best first), each as its best hit with
    `session_hits`, how many of the ranking's hits it holds. A hit with no session stands
    alone."""
    weight: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    best: dict[str, Hit] = {}
    for rank, hit in enumerate(hits, start=1):
        key = hit.session or hit.id
        weight[key] += 1.0 / (k + rank)
        count[key] += 1
        best.setdefault(key, hit)
    ordered = sorted(weight, key=lambda key: -weight[key])[:limit]
    return [
        best[key].rescored(weight[key], best[key].extra | {"session_hits": count[key]})
        for key in ordered
    ]
