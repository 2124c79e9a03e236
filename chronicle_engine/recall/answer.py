"""chronicle_answer: answer from evidence, with citations, or abstain.

Invariant: the answer is always a sentence that memory holds (a belief or a captured message),
quoted with the ids it came from; nothing is composed. When the best evidence does not contain
enough of the question's content words (`recall.answer_min_coverage`, and at least two of them
when the question has more than one), the result is an abstention that says why and shows the
weak evidence, instead of a guess.
"""

from __future__ import annotations

import re

from ..capture.secrets import mask
from .gate import gate_words
from .index import RecallIndex
from .search import Hit

__all__ = ["answer"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def _cite(hit: Hit) -> dict[str, object]:
    out: dict[str, object] = {
        "id": hit.id,
        "kind": hit.kind,
        "seq": hit.seq,
        "session": hit.session,
    }
    out["time"] = hit.time
    if hit.kind == "section":
        out["section_id"] = hit.extra.get("section_id")
    return out


def _evidence(hit: Hit) -> dict[str, object]:
    return {**_cite(hit), "text": hit.text}


def answer(
    recall: RecallIndex,
    question: str,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    profile: str | None = None,
) -> dict[str, object]:
    asked = gate_words(question if isinstance(question, str) else "")
    if not asked:
        return {
            "abstain": True,
            "answer": None,
            "reason": "the question has no content words to look for",
            "evidence": [],
        }
    hits = recall.hits(question, session_id=session_id, user_id=user_id, profile=profile, limit=8)
    need = recall.tuning.answer_min_coverage
    best: tuple[float, int, str, Hit] | None = None
    supporting: list[Hit] = []
    for rank, hit in enumerate(hits):
        text = hit.text
        if hit.kind == "belief":
            text = f"{hit.text}\n{hit.extra.get('value', '')}"
        hit_best = 0.0
        for sentence in _SENTENCE.split(text):
            words = gate_words(sentence)
            shared = len(asked & words)
            coverage = shared / len(asked)
            hit_best = max(hit_best, coverage)
            if shared and (
                best is None or coverage > best[0] or (coverage == best[0] and rank < best[1])
            ):
                best = (coverage, rank, sentence.strip(), hit)
        if hit_best >= need:
            supporting.append(hit)
    strong = (
        best is not None
        and best[0] >= need
        and (len(asked) == 1 or len(asked & gate_words(best[2])) >= 2)
    )
    if not strong or best is None:
        coverage = best[0] if best else 0.0
        return {
            "abstain": True,
            "answer": None,
            "reason": (
                "no memory matches the question"
                if not hits
                else f"the best evidence covers {coverage:.0%} of the question's content words "
                f"(needs {need:.0%}); not enough to answer without guessing"
            ),
            "confidence": round(coverage, 2),
            "evidence": [_evidence(h) for h in hits[:3]],
        }
    coverage, _, sentence, hit = best
    cited = [hit] + [h for h in supporting if h.id != hit.id][:2]
    text = sentence
    if hit.kind == "belief" and hit.extra.get("type") != "note":
        text = hit.text.split(": ", 1)[-1] if ": " in hit.text else hit.text
    return {
        "abstain": False,
        "answer": mask(text),
        "confidence": round(coverage, 2),
        "citations": [_cite(h) for h in cited],
        "evidence": [_evidence(h) for h in cited],
    }
