"""The compaction plan: what stays verbatim, what is folded, what is shortened. Pure.

The planner sees one `MessageFacts` per message of the live list (its cost, role, tool ids and
what the engine knows about it) and returns index sets. It never looks at content and never
touches the store, so its laws are property-tested on their own.

Laws (tests/test_compaction_planner.py):
- A unit (an assistant message with its tool results, or any other single message) is kept or
  not kept as a whole; a unit that is malformed (a tool result with no call before it, a call
  whose results are missing) is never kept, so the output can hold no orphan.
- Kept verbatim: the head (the first `protect_first_n` messages, or everything before an earlier
  handoff); the newest turn; the person's newest request, however long the tool loop after it;
  every protected message (pins within their budget, what the log does not hold); the last
  `protect_last_n` messages; then as much of the recent tail as the budget allows.
- Every message that is neither kept nor already folded is in `fold`: nothing leaves the context
  without landing in a section.
- If the kept part does not fit, allowances shorten it in this order of precedence: the newest
  turn, the newest request, protected messages newest first, the tail newest first. The head is
  never shortened: it stays byte-identical.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, compress, count, filterfalse, starmap
from operator import attrgetter, itemgetter
from typing import NamedTuple

__all__ = ["MessageFacts", "Unit", "Plan", "units_of", "plan", "total_tokens", "STUB_TOKENS"]

STUB_TOKENS = 80
"""The least a shortened message keeps: its first words and the note saying how to restore it
(`assemble.shorten` fits a message's content into any allowance this large)."""


# MessageFacts and Unit are named tuples, not frozen dataclasses: as immutable, and one is made
# per message (per unit) of every pass, where a frozen dataclass's __init__ sets each field
# through object.__setattr__ (~3 µs a MessageFacts). Both are built as `tuple_new(cls, values)`:
# a NamedTuple's own __new__ is Python code, one call per message (`message_facts`, `units_of`).
tuple_new = tuple.__new__


class MessageFacts(NamedTuple):
    tokens: int
    role: str
    folded: bool = False  # already covered by a section of this conversation
    handoff: bool = False  # this engine's earlier handoff: replaced, never folded
    protected: bool = False  # kept wherever it sits
    real_user: bool = False  # the person's own request
    call_ids: tuple[str, ...] = ()  # an assistant's tool calls
    result_id: str | None = None  # a tool result's call id
    pinned: bool = False  # protected only because a pin covers it (`limits.bound_pins`)
    instruction: bool = False  # a standing instruction: carried by the handoff when folded


class Unit(NamedTuple):
    start: int
    end: int  # exclusive
    well_formed: bool

    def indices(self) -> range:
        return range(self.start, self.end)


@dataclass(frozen=True, slots=True)
class Plan:
    """A compaction's cut: which indices stay at the head, are kept verbatim, folded or dropped."""

    head: tuple[int, ...]
    keep: tuple[int, ...]  # kept after the handoff, in list order
    fold: tuple[int, ...]  # newly folded into sections by this pass
    drop: tuple[int, ...]  # not in the output (folded now, folded before, or an old handoff)
    cut: int  # first index of the verbatim tail
    allowances: dict[int, int] = field(default_factory=dict)  # index -> tokens it may keep
    tokens_after: int = 0  # head + handoff reserve + kept, after shortening
    newest_request: int | None = None
    handoffs_dropped: int = 0
    handoff_role: str = "user"

    @property
    def changed(self) -> bool:
        """Whether the output would differ from the input beyond re-rendering the handoff."""
        return bool(self.fold or self.allowances or len(self.drop) > self.handoffs_dropped)


_TOKENS = attrgetter("tokens")
_HANDOFF = attrgetter("handoff")
_PROTECTED = attrgetter("protected")
_FOLDED = attrgetter("folded")
_START = itemgetter(0)  # of a Unit
_SPAN = itemgetter(0, 1)
_FORMED = itemgetter(2)


def units_of(facts: Sequence[MessageFacts]) -> list[Unit]:
    """Split the list into units: a call with the results that follow it, or one message."""
    units: list[Unit] = []
    append = units.append
    i, n = 0, len(facts)
    while i < n:
        f = facts[i]
        role = f.role
        if role == "assistant" and f.call_ids and not f.handoff:
            # (an earlier handoff the host merged with a call is not a call of ours to keep: it
            # is dropped alone, and its results, now orphans, are folded)
            j = i + 1
            if len(f.call_ids) == 1:  # (most calls: no set of one id to build and compare)
                only = f.call_ids[0]
                while j < n and facts[j].role == "tool" and facts[j].result_id == only:
                    j += 1
                append(tuple_new(Unit, (i, j, j > i + 1 and only != "")))
                i = j
                continue
            wanted = set(f.call_ids)
            found: set[str] = set()
            while j < n and facts[j].role == "tool" and facts[j].result_id in wanted:
                found.add(facts[j].result_id or "")
                j += 1
            append(tuple_new(Unit, (i, j, found == wanted and "" not in wanted)))
            i = j
        else:
            append(tuple_new(Unit, (i, i + 1, role != "tool")))
            i += 1
    return units


def total_tokens(facts: Sequence[MessageFacts]) -> int:
    """What the messages cost together (summed at C speed: a pass asks it of every message)."""
    return sum(map(_TOKENS, facts))


def _cost(cum: Sequence[int], unit: Unit) -> int:
    """A unit's tokens, from `cum` (the tokens before each index: `_prefix`)."""
    return cum[unit.end] - cum[unit.start]


def _prefix(facts: Sequence[MessageFacts]) -> list[int]:
    return [0, *accumulate(map(_TOKENS, facts))]


def _indices(facts: Sequence[MessageFacts], flag: attrgetter[bool]) -> set[int]:
    """The indices of the messages whose `flag` is set (read at C speed: most are not)."""
    return set(compress(count(), map(flag, facts)))


def _head_units(
    facts: Sequence[MessageFacts], units: list[Unit], protect_first_n: int
) -> list[Unit]:
    first_handoff = next(compress(count(), map(_HANDOFF, facts)), None)
    if first_handoff is not None:
        return [u for u in units if u.end <= first_handoff]
    head: list[Unit] = []
    seen = 0
    for unit in units:
        if all(facts[i].role == "system" for i in unit.indices()):
            head.append(unit)
            continue
        if seen >= protect_first_n:
            break
        head.append(unit)
        seen += sum(1 for i in unit.indices() if facts[i].role != "system")
    return head


def plan(
    facts: Sequence[MessageFacts],
    *,
    protect_first_n: int,
    protect_last_n: int,
    budget: int,
    reserve: int = 0,
    force: bool = False,
    max_kept: int | None = None,
) -> Plan:
    """Decide the compacted list for a budget of `budget` tokens, `reserve` of them for the
    handoff. `force` (a `/compress`) keeps no more tail than the protected part."""
    units = units_of(facts)
    cum = _prefix(facts)
    handoffs = _indices(facts, _HANDOFF)
    head_units = _head_units(facts, units, protect_first_n)
    body = units[len(head_units) :]  # (the head is a run of units from the first)
    if handoffs:
        body = [u for u in body if not (u.end - u.start == 1 and u.start in handoffs)]
    formed = list(compress(body, map(_FORMED, body)))

    newest_turn = formed[-1] if formed and formed[-1] is body[-1] else None
    newest_request = next((u for u in reversed(formed) if facts[u.start].real_user), None)
    protected = _holding(formed, _indices(facts, _PROTECTED))
    mandatory: dict[int, Unit] = {u.start: u for u in protected}
    for unit in (newest_turn, newest_request):
        if unit is not None:
            mandatory[unit.start] = unit

    # The tail: the protected last messages, then whole units back while they fit.
    cut, position = _protected_tail(body, protect_last_n, len(facts))
    head_cost = sum(_cost(cum, u) for u in head_units if u.well_formed)

    total, kept_count = _kept_cost(cum, formed, mandatory, cut)
    total += head_cost + reserve
    least = position  # the tail may not start after body[least] (protect_last_n)
    if not force:
        position, cut, total = _grow_tail(
            cum, body, mandatory, position, cut, total, kept_count, budget, max_kept
        )

    head_kept = [u for u in head_units if u.well_formed]
    handoff_role = _handoff_role(facts, head_kept)
    # A bridge the budget has no room for costs the oldest optional tail unit instead (a few
    # more folded messages rather than shortened ones), while the tail has such units.
    position, total, cut, kept_units, bridges = _room_for_bridges(
        facts, cum, body, formed, mandatory, handoff_role, position, least, total, budget
    )
    if bridges:
        for unit in bridges:
            mandatory[unit.start] = unit
            total += _cost(cum, unit)
        kept_units = sorted(kept_units + bridges, key=lambda u: u.start)
    head_idx = tuple(chain.from_iterable(starmap(range, map(_SPAN, head_kept))))
    keep_idx = tuple(chain.from_iterable(starmap(range, map(_SPAN, kept_units))))
    fold, drop = _fold_and_drop(facts, set(head_idx) | set(keep_idx), handoffs)

    allowances: dict[int, int] = {}
    if total > budget:
        order: list[Unit] = []
        for unit in (newest_turn, newest_request):
            if unit is not None and unit not in order:
                order.append(unit)
        order += [u for u in reversed(protected) if u not in order]
        order += [u for u in reversed(kept_units) if u not in order]
        allowances, total = _allowances(facts, cum, order, budget - reserve - head_cost)
        total += reserve + head_cost

    return Plan(
        head=head_idx,
        keep=keep_idx,
        fold=fold,
        drop=drop,
        cut=cut,
        allowances=allowances,
        tokens_after=total,
        newest_request=newest_request.start if newest_request is not None else None,
        handoffs_dropped=len(handoffs.intersection(drop)),
        handoff_role=handoff_role,
    )


def _holding(formed: list[Unit], indices: set[int]) -> list[Unit]:
    """The units of `formed` (in order) that hold one of `indices`."""
    starts = list(map(_START, formed))
    found: dict[int, Unit] = {}
    for i in indices:
        k = bisect_right(starts, i) - 1
        if k >= 0 and i < formed[k].end:
            found[k] = formed[k]
    return [found[k] for k in sorted(found)]


def _kept(formed: list[Unit], mandatory: dict[int, Unit], tail_from: int) -> list[Unit]:
    """The units kept with a tail from `tail_from`, in order: the mandatory ones before it,
    then every unit from it."""
    before = sorted((u for u in mandatory.values() if u.start < tail_from), key=_START)
    return before + formed[bisect_left(list(map(_START, formed)), tail_from) :]


def _kept_cost(
    cum: Sequence[int], formed: list[Unit], mandatory: dict[int, Unit], tail_from: int
) -> tuple[int, int]:
    """What the units kept with a tail from `tail_from` cost, and how many messages they hold."""
    cost = held = 0
    for u in _kept(formed, mandatory, tail_from):
        cost += cum[u.end] - cum[u.start]
        held += u.end - u.start
    return cost, held


def _fold_and_drop(
    facts: Sequence[MessageFacts], kept: set[int], handoffs: set[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The indices a pass folds (not kept, not folded before, not a handoff) and drops."""
    drop = tuple(filterfalse(kept.__contains__, range(len(facts))))
    gone = _indices(facts, _FOLDED) | handoffs
    return (tuple(filterfalse(gone.__contains__, drop)) if gone else drop), drop


def _protected_tail(body: Sequence[Unit], protect_last_n: int, end: int) -> tuple[int, int]:
    """Where the protected tail starts: (its first index, the position in `body` of its first
    unit); the whole units back from the end that hold the last `protect_last_n` messages."""
    cut = end
    counted = 0
    position = len(body)
    while position > 0 and counted < protect_last_n:
        position -= 1
        unit = body[position]
        cut = unit.start
        if unit.well_formed:
            counted += unit.end - unit.start
    return cut, position


def _grow_tail(
    cum: Sequence[int],
    body: list[Unit],
    mandatory: dict[int, Unit],
    position: int,
    cut: int,
    total: int,
    kept_count: int,
    budget: int,
    max_kept: int | None,
) -> tuple[int, int, int]:
    """The tail grown back from body[position], whole units at a time, while they fit the
    budget (and `max_kept` messages): (position, cut, total)."""
    while position > 0:
        unit = body[position - 1]
        extra = 0
        if unit.well_formed and unit.start not in mandatory:
            extra = cum[unit.end] - cum[unit.start]
            if max_kept is not None and kept_count + (unit.end - unit.start) > max_kept:
                break
        if total + extra > budget:
            break
        total += extra
        if unit.well_formed and unit.start not in mandatory:
            kept_count += unit.end - unit.start
        position -= 1
        cut = unit.start
    return position, cut, total


def _room_for_bridges(
    facts: Sequence[MessageFacts],
    cum: Sequence[int],
    body: list[Unit],
    formed: list[Unit],
    mandatory: dict[int, Unit],
    handoff_role: str,
    position: int,
    least: int,
    total: int,
    budget: int,
) -> tuple[int, int, int, list[Unit], list[Unit]]:
    """The tail given up, oldest optional unit first, while the bridges the kept part needs do
    not fit the budget and the tail may still shrink (`least`): the tail's position in `body`,
    the kept cost, the cut, the kept units and the bridges they need."""
    cut = body[position].start if position < len(body) else len(facts)
    kept_units = _kept(formed, mandatory, cut)
    bridges = _bridges(facts, body, kept_units, handoff_role)
    while bridges and total + sum(_cost(cum, u) for u in bridges) > budget and position < least:
        unit = body[position]
        if unit.well_formed and unit.start not in mandatory:
            total -= _cost(cum, unit)
        position += 1
        cut = body[position].start if position < len(body) else len(facts)
        kept_units = _kept(formed, mandatory, cut)
        bridges = _bridges(facts, body, kept_units, handoff_role)
    return position, total, cut, kept_units, bridges


def _allowances(
    facts: Sequence[MessageFacts], cum: Sequence[int], order: Sequence[Unit], room: int
) -> tuple[dict[int, int], int]:
    """Over budget: the tokens each kept message may keep (only those cut are listed), and
    what the kept units then cost. `order`: the units by precedence; `room`: the budget left
    after the handoff's reserve and the head."""
    allowances: dict[int, int] = {}
    # Every kept message may shrink to a stub; what the budget has beyond the stubs goes to
    # the units in order of precedence, so the protected part fits whenever its stubs do.
    floor = {u.start: sum(min(facts[i].tokens, STUB_TOKENS) for i in u.indices()) for u in order}
    # The head is kept byte for byte (the host's prompt cache starts with it): it is paid
    # for first and never shortened.
    remaining = room - sum(floor.values())
    total = 0
    for unit in order:
        cost = _cost(cum, unit)
        extra = max(0, min(cost - floor[unit.start], remaining))
        remaining -= extra
        grant = floor[unit.start] + extra
        if grant >= cost:
            total += cost
            continue
        # Within the unit, stub-sized messages stay whole; the larger share the rest.
        small = sum(facts[i].tokens for i in unit.indices() if facts[i].tokens <= STUB_TOKENS)
        rest, large = grant - small, cost - small
        for i in unit.indices():
            tokens = facts[i].tokens
            allowance = max(STUB_TOKENS, tokens * rest // large) if large else tokens
            if allowance < tokens:
                allowances[i] = allowance
                total += allowance
            else:
                total += tokens
    return allowances, total


def _handoff_role(facts: Sequence[MessageFacts], head: list[Unit]) -> str:
    """The handoff's role: not the role that ends the head (a user turn is answered, tool
    results are followed, by an assistant); a user turn when nothing precedes it."""
    last = facts[head[-1].end - 1].role if head else None
    return "assistant" if last in ("user", "tool") else "user"


def _first_role(facts: Sequence[MessageFacts], unit: Unit) -> str:
    return facts[unit.start].role


def _last_role(facts: Sequence[MessageFacts], unit: Unit) -> str:
    return facts[unit.end - 1].role


def _bridges(
    facts: Sequence[MessageFacts], body: list[Unit], kept: list[Unit], handoff_role: str
) -> list[Unit]:
    """Original units to keep as well, so that no two messages of the same role meet where the
    compacted list skips over folded ones: after the handoff, and between kept units that were
    not neighbours. The host would merge such a pair in place (a handoff swallowing a call, a
    pinned request swallowing the next one); a verbatim neighbour keeps both whole."""
    if not kept:
        return []
    taken = {u.start for u in kept}
    position = dict(zip(map(_START, body), count()))
    added: list[Unit] = []

    def free(unit: Unit) -> bool:
        return unit.well_formed and unit.start not in taken

    def take(unit: Unit) -> None:
        taken.add(unit.start)
        added.append(unit)

    # After the handoff: the role it does not have.
    first = kept[0]
    want = "user" if handoff_role == "assistant" else "assistant"
    if _first_role(facts, first) != want:
        k = position.get(first.start, 0) - 1
        if want == "assistant":
            if k >= 0 and free(body[k]) and _first_role(facts, body[k]) == "assistant":
                take(body[k])
        else:
            # The request that started this stretch, however far back.
            while k >= 0 and not (free(body[k]) and _first_role(facts, body[k]) == "user"):
                if body[k].start in taken:
                    break
                k -= 1
            if k >= 0 and free(body[k]) and _first_role(facts, body[k]) == "user":
                take(body[k])
    # Between kept units that were not neighbours.
    for a, b in zip(kept, kept[1:], strict=False):
        if a.end == b.start:
            continue
        end, start = _last_role(facts, a), _first_role(facts, b)
        if end != start or end not in ("user", "assistant"):
            continue
        if end == "user":  # the reply to `a`
            k = position.get(a.start, -2) + 1
            if (
                0 <= k < len(body)
                and body[k].start < b.start
                and free(body[k])
                and _first_role(facts, body[k]) == "assistant"
            ):
                take(body[k])
        else:  # the request before `b`
            k = position.get(b.start, 0) - 1
            if (
                k >= 0
                and body[k].start > a.start
                and free(body[k])
                and _first_role(facts, body[k]) == "user"
            ):
                take(body[k])
    return added
