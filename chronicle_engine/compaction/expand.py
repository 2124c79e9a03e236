"""Reading a range of the log back as `chronicle_expand` serves it: by a token budget (the
default: as many messages as fit, then where the rest continues) or by page (page N of at most
`page_size` messages). A range is measured and paged once (`Expanded`) and kept by the engine
for the next pages while the log is unchanged."""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..log.store import StoredEvent
from ..messages import CHARS_PER_TOKEN
from .policy import RESTORE_MAX_TOKENS, RESTORE_TOKENS

__all__ = ["EXPAND_PAGE_CHARS", "Expanded", "by_budget", "by_page", "chars_of"]


def by_budget(
    result: dict[str, object],
    expanded: Expanded,
    lo: int,
    hi: int,
    max_tokens: int | None,
    continue_from: int | None,
) -> dict[str, object]:
    """Expand by budget (`Compaction.expand`): `result` with the messages from `continue_from`
    (or `lo`) that fit `max_tokens`, and where the rest continues."""
    budget = min(RESTORE_MAX_TOKENS, max(1, int(max_tokens or RESTORE_TOKENS)))
    start = lo if continue_from is None else max(lo, int(continue_from))
    chunk, rest = expanded.window(start, budget * CHARS_PER_TOKEN)
    used = sum(expanded.sizes[e.seq] for e in chunk)
    result.update(
        from_seq=lo,
        to_seq=hi,
        total=len(expanded.events),
        budget_tokens=budget,
        tokens=-(-used // CHARS_PER_TOKEN),
        messages=[{"seq": e.seq, "message": e.payload.get("message")} for e in chunk],
    )
    _note_hidden_and_oversized(result, expanded, chunk, RESTORE_MAX_TOKENS * CHARS_PER_TOKEN)
    if rest:
        rest_chars = sum(expanded.sizes[e.seq] for e in rest)
        result["rest"] = {"messages": len(rest), "tokens": -(-rest_chars // CHARS_PER_TOKEN)}
        result["next"] = {"continue_from": rest[0].seq}
    return result


def by_page(
    result: dict[str, object],
    expanded: Expanded,
    lo: int,
    hi: int,
    page: int | None,
    page_size: int | None,
) -> dict[str, object]:
    """Expand by page (`Compaction.expand`): `result` with page `page` of `page_size`."""
    pages = expanded.pages(max(1, min(int(page_size or 20), 200)))
    page = max(1, int(page or 1))
    chunk = pages[page - 1] if page <= len(pages) else []
    result.update(
        from_seq=lo,
        to_seq=hi,
        page=page,
        pages=max(1, len(pages)),
        total=len(expanded.events),
        messages=[{"seq": e.seq, "message": e.payload.get("message")} for e in chunk],
    )
    _note_hidden_and_oversized(result, expanded, chunk, EXPAND_PAGE_CHARS)
    if page < len(pages):
        result["next"] = {"page": page + 1}
    return result


EXPAND_PAGE_CHARS = 60_000
"""Characters of message JSON one expand page carries at most. Hermes replaces any tool result
over 100,000 characters with a short preview, so a page stays well under that."""


def _note_hidden_and_oversized(
    result: dict[str, object], expanded: Expanded, chunk: Sequence[StoredEvent], limit: int
) -> None:
    if expanded.forgotten:
        # chronicle_forget(..., include_source) hid them
        result["forgotten"] = expanded.forgotten
    if len(chunk) == 1 and expanded.sizes[chunk[0].seq] > limit:
        result["oversized"] = (
            "this one message is longer than a tool result Hermes passes on whole; "
            "`chronicle expand` on the command line prints it in full"
        )


def chars_of(event: StoredEvent) -> int:
    return len(json.dumps(event.payload.get("message"), ensure_ascii=False))


@dataclass
class Expanded:
    """One range as expand serves it: its visible messages, each one's size in characters, how
    many were forgotten, and its pages by page size."""

    key: tuple[object, ...]
    events: list[StoredEvent]
    sizes: dict[int, int]
    forgotten: int
    paged: dict[int, list[list[StoredEvent]]] = field(default_factory=dict)

    def pages(self, size: int) -> list[list[StoredEvent]]:
        if size not in self.paged:
            self.paged[size] = _pages(self.events, size, EXPAND_PAGE_CHARS, self.sizes)
        return self.paged[size]

    def window(self, start: int, max_chars: int) -> tuple[list[StoredEvent], list[StoredEvent]]:
        """The messages from seq `start` on that fit `max_chars` (at least one), and the rest."""
        at = bisect_left([e.seq for e in self.events], start)
        end, used = at, 0
        while end < len(self.events):
            chars = self.sizes[self.events[end].seq]
            if end > at and used + chars > max_chars:
                break
            used += chars
            end += 1
        return self.events[at:end], self.events[end:]


def _pages(
    events: Sequence[StoredEvent], size: int, max_chars: int, sizes: dict[int, int]
) -> list[list[StoredEvent]]:
    """Split into pages of at most `size` messages and `max_chars` characters (`sizes`: each
    message's, by seq; a single longer message gets a page of its own). Deterministic, so page N
    is the same on every call."""
    pages: list[list[StoredEvent]] = []
    current: list[StoredEvent] = []
    used = 0
    for event in events:
        chars = sizes[event.seq]
        if current and (len(current) >= size or used + chars > max_chars):
            pages.append(current)
            current, used = [], 0
        current.append(event)
        used += chars
    if current:
        pages.append(current)
    return pages
