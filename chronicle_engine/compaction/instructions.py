"""The standing instructions a handoff carries: the person's rules ("from now on always ...")
whose turns a pass folded.

An instruction turn is folded like any other (its tool traffic goes into a section); what stays
in view is the request itself, in the handoff's standing-instructions part.

Invariants:
- The part has its own budget (`Policy.standing_tokens`, a share of the window) and never grows
  past it: the newest instructions verbatim while they fit three quarters of it, older ones
  condensed to one cited line each in the rest, and the oldest beyond that counted and cited by
  their seq range. A repeated instruction is shown once, at its newest seq.
- Every instruction shown cites its seq, so chronicle_expand returns the original in context.
- Nothing in it looks like a section block: `handoff.cited` never reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..capture.secrets import mask
from ..messages import estimate_tokens

__all__ = ["Carried", "render_instructions", "INSTRUCTIONS_HEADING"]

INSTRUCTIONS_HEADING = (
    "### Standing instructions, still in force (the user's own words, oldest first; "
    "chronicle_expand(from_seq=N, to_seq=N) shows any of them in context)"
)
_CONDENSED_CHARS = 90
_VERBATIM_SHARE = 0.75


@dataclass(frozen=True, slots=True)
class Carried:
    """What a pass's handoff carried, for the next pass to carry on."""

    shown: tuple[int, ...] = ()  # seqs shown verbatim or condensed, oldest first
    older: int = 0  # instructions past the budget: counted and cited by range only
    older_from: int = 0
    older_to: int = 0

    def as_record(self) -> list[int]:
        return [self.older, self.older_from, self.older_to] if self.older else []

    @classmethod
    def from_record(cls, shown: Sequence[int], older: Sequence[int]) -> Carried:
        count, lo, hi = (list(older) + [0, 0, 0])[:3]
        return cls(tuple(int(s) for s in shown), int(count), int(lo), int(hi))


def _tokens(line: str) -> int:
    return estimate_tokens({"role": "user", "content": line})


def render_instructions(
    items: Sequence[tuple[int, str]], budget_tokens: int, older: Carried = Carried()
) -> tuple[str, Carried]:
    """The standing-instructions part for `items` ((seq, text), any order) within
    `budget_tokens`, and what it carried. `older`: what earlier passes already counted only."""
    newest: dict[str, int] = {}
    for seq, text in sorted(items):
        newest[" ".join(text.split()).lower()] = seq
    texts = {seq: " ".join(text.split()) for seq, text in items}
    chosen = sorted(set(newest.values()), reverse=True)  # newest first
    lines: dict[int, str] = {}
    used = _tokens(INSTRUCTIONS_HEADING)
    verbatim_budget = int(budget_tokens * _VERBATIM_SHARE)
    condensing = False
    count, lo, hi = older.older, older.older_from, older.older_to
    for seq in chosen:
        text = texts[seq]
        line = f"- [seq {seq}] {text}"
        if not condensing and used + _tokens(line) <= verbatim_budget:
            lines[seq] = line
            used += _tokens(line)
            continue
        condensing = True
        if len(text) > _CONDENSED_CHARS:
            line = f"- [seq {seq}] {text[:_CONDENSED_CHARS].rstrip()}…"
        if used + _tokens(line) <= budget_tokens:
            lines[seq] = line
            used += _tokens(line)
            continue
        count += 1
        lo = min(lo, seq) if lo else seq
        hi = max(hi, seq)
    if not lines and not count:
        return "", Carried()
    body = [INSTRUCTIONS_HEADING]
    if count:
        body.append(
            f"- {count} older instruction(s) between seq {lo} and {hi}, in the sections above; "
            f"chronicle_expand(from_seq={lo}, to_seq={hi}) returns that range"
        )
    body += [lines[seq] for seq in sorted(lines)]
    return mask("\n".join(body)), Carried(tuple(sorted(lines)), count, lo, hi)
