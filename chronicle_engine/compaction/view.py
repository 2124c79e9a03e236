"""What the handoff shows, and the rebase that keeps it within its budget.

The view is a list of sections (`ViewSection`), oldest first, whose ranges follow each other
without overlap and together cover everything compaction folded for one conversation. Older
ranges sit at the same or a higher level than newer ones.

A pass extends the view with the sections it wrote or reused. When the rendered handoff would
outgrow its budget, `rebase` condenses runs of sections into one section of the next level (its
own named chronicle, f"{name}/L{level}", citing the whole range) until the handoff is at most half
its budget. Condensed ranges never overlap another section of their level: a run is condensed
only out of the view, and the view partitions the folded range.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..chronicle.sections import Section, level_name, section_id_for
from ..chronicle.write import draw_condensed
from ..chronicle.writers import Drawn, SectionWriter
from ..messages import chars_for_tokens
from .handoff import HEADER, ViewSection, handoff_tokens, label_of, render

_BLOCK_LINE = 120  # a section's first line in the handoff: its label, range and counts

__all__ = ["level_name", "Condensed", "rebase", "messages_in"]


@dataclass(frozen=True, slots=True)
class Condensed:
    """A condensed section as the view shows it, and the summary drawn (or reused) for it."""

    view: ViewSection
    drawn: Drawn


def messages_in(views: Sequence[ViewSection]) -> int:
    total = 0
    for v in views:
        count = (v.section.meta or {}).get("messages")
        if isinstance(count, int):
            total += count
    return total


def _condense(
    run: Sequence[ViewSection],
    level: int,
    writer: SectionWriter,
    *,
    focus: str | None,
    budget_chars: int,
    existing: Callable[[int, str], Section | None],
    deadline: float | None = None,
) -> Condensed:
    lo, hi = run[0].from_seq, run[-1].to_seq
    section_id = section_id_for(lo, hi)
    label = label_of(level, section_id)
    found = existing(level, section_id)
    if found is not None:  # written by an earlier, interrupted or replayed rebase
        return Condensed(ViewSection(level, found), Drawn(found.prose, writer="reused"))
    memory = next(
        (
            v.section.meta.get("memory_context")
            for v in reversed(run)
            if isinstance((v.section.meta or {}).get("memory_context"), str)
        ),
        None,
    )
    meta: dict[str, object] = {
        "children": [v.label for v in run],
        "children_count": len(run),
        "messages": messages_in(run),
    }
    if memory:
        meta["memory_context"] = memory
    section, drawn = draw_condensed(
        writer,
        [(v.label, v.section) for v in run],
        label=label,
        budget_chars=budget_chars,
        focus=focus,
        deadline=deadline,
        meta=meta,
    )
    return Condensed(ViewSection(level, section), drawn)


def rebase(
    view: Sequence[ViewSection],
    *,
    budget_tokens: int,
    section_chars: int,
    writer: SectionWriter,
    focus: str | None,
    existing: Callable[[int, str], Section | None],
    deadline: float | None = None,
) -> tuple[list[ViewSection], list[Condensed]]:
    """Condense until the handoff is at most half of `budget_tokens`. Returns the new view and
    the condensed sections to write (each at its level). No model is asked past `deadline`
    (a `time.monotonic()` value)."""
    current = list(view)
    written: list[Condensed] = []
    target = budget_tokens // 2
    level = 1
    # A condensed section carries the whole past: it may fill what the rebase aims for, beside
    # the header (a level-1 section keeps its own, smaller share).
    condensed_chars = max(section_chars, chars_for_tokens(target) - len(HEADER) - _BLOCK_LINE)

    def fits() -> bool:
        return handoff_tokens(render(current)) <= target

    while not fits() and len(current) > 1:
        top = max(v.level for v in current)
        positions = [i for i, v in enumerate(current) if v.level == level]
        if level == 1 and len(positions) > 1:
            positions = positions[:-1]  # the newest pass keeps its own detail a while longer
        if level > top:
            positions = list(range(len(current)))  # every level is down to one: condense it all
        if len(positions) >= 2:
            run = current[positions[0] : positions[-1] + 1]
            # Above every level in the run, so it cannot overlap a section of its own level.
            new_level = max(v.level for v in run) + 1
            made = _condense(
                run,
                new_level,
                writer,
                focus=focus,
                budget_chars=condensed_chars,
                existing=existing,
                deadline=deadline,
            )
            written.append(made)
            current[positions[0] : positions[-1] + 1] = [made.view]
        level += 1
    return current, written
