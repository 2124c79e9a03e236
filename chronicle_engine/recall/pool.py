"""Session pooling: one result per session, for questions whose evidence is spread over several
conversations ("how many times did I ...", "what did I decide each time ...").

Invariant: pooling only regroups a ranking it is given; it reads nothing and scores nothing
itself. A session's weight is the sum of the reciprocal ranks of all its hits (the fusion's own
k), so a session with several good hits outranks one with a single slightly better hit, and a
session is shown by its best hit. The ranking pooled is as deep as the full-text candidates
(`recall.candidates`): every candidate a search re-ranks can lend its session weight.
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
