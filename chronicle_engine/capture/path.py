"""Capture's cached view of a session's active branch: the messages on it, in order.

Invariant: a `BranchPath` is a cache of the tree, never a source of truth. It is checked against
the session's leaf inside every write transaction (`Capture._sync_path`) and grown or reloaded
from the tree when they differ.

After a compaction a branch path may hold only the branch's end (`base` > 0): what the latest
compaction kept and what followed it, with the protected head beside it (`heads`). Positions on
the branch stay absolute (`base` counts the messages before `ids[0]`), so the ids a capture
derives are the same whether the path was read whole or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate, islice, repeat
from operator import attrgetter, eq
from typing import Protocol

__all__ = ["BranchPath", "Entry", "positional"]

_KIND = attrgetter("kind")
_ENTRY_ID = attrgetter("entry_id")
_SEQ = attrgetter("seq")
_ROLE = attrgetter("role")


class Entry(Protocol):
    """An entry of the session tree as a branch path reads it (the tree's `PathEntry`)."""

    @property
    def entry_id(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def fp(self) -> str | None: ...
    @property
    def target(self) -> str | None: ...
    @property
    def role(self) -> str | None: ...


@dataclass
class BranchPath:
    """The cached branch a live message list is aligned with: its events' ids, seqs and
    fingerprints in order, and what ties them to the host's own message dicts."""

    leaf: str | None = None
    ids: list[str] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    fps: list[str] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)  # user messages up to and including each
    kept_from: int | None = None  # index of the first message the latest compaction kept
    # id(live dict) -> (the dict, its content, its tool_calls, index): Hermes keeps the same dict
    # objects across turns, which tells identical messages apart in-process and makes a turn's
    # capture cost independent of the list's length.
    identity: dict[int, tuple[object, object, object, int]] = field(default_factory=dict)
    base: int = 0  # messages on the branch before ids[0] (0: the path starts at the root)
    base_turns: int = 0  # user messages among them
    heads: dict[str, int] = field(default_factory=dict)  # fp -> seq of a head before ids[0]
    _by_seq: dict[int, int] | None = None

    @property
    def length(self) -> int:
        """How many messages the branch holds (the position of the next one)."""
        return self.base + len(self.ids)

    def extend(self, entries: Sequence[Entry]) -> None:
        # `add` in line: a process's first capture of a session extends by the whole branch.
        ids, seqs, fps, turns, by_seq = self.ids, self.seqs, self.fps, self.turns, self._by_seq
        turn = turns[-1] if turns else self.base_turns
        if by_seq is None and all(map(eq, repeat("message"), map(_KIND, entries))):
            # A branch of messages only (a session before its first compaction), at C speed.
            ids.extend(map(_ENTRY_ID, entries))
            seqs.extend(map(_SEQ, entries))
            fps.extend([e.fp or "" for e in entries])
            users = map(eq, repeat("user"), map(_ROLE, entries))
            turns.extend(islice(accumulate(users, initial=turn), 1, None))
            return
        for e in entries:
            kind = e.kind
            if kind == "message":
                seq = e.seq
                ids.append(e.entry_id)
                seqs.append(seq)
                fps.append(e.fp or "")
                turn += e.role == "user"
                turns.append(turn)
                if by_seq is not None and seq >= 0:
                    by_seq[seq] = len(seqs) - 1
            elif kind == "compaction":
                self.kept_from = self.index_of_id(e.target) if e.target else None

    def add(self, entry_id: str, seq: int, fp: str, is_user: bool) -> None:
        self.ids.append(entry_id)
        self.seqs.append(seq)
        self.fps.append(fp)
        self.turns.append(
            (self.turns[-1] if self.turns else self.base_turns) + (1 if is_user else 0)
        )
        if self._by_seq is not None and seq >= 0:
            self._by_seq[seq] = len(self.seqs) - 1

    def index_of_id(self, entry_id: str) -> int | None:
        for q in range(len(self.ids) - 1, -1, -1):
            if self.ids[q] == entry_id:
                return q
        return None

    def index_of_seq(self, seq: int) -> int | None:
        return self.by_seq().get(seq)

    def by_seq(self) -> dict[int, int]:
        """seq -> index of every stored message of the path (kept up to date once built)."""
        if self._by_seq is None:
            self._by_seq = {s: q for q, s in enumerate(self.seqs) if s >= 0}
        return self._by_seq

    def stored(self, q: int, seq: int) -> None:
        self.seqs[q] = seq
        if self._by_seq is not None:
            self._by_seq[seq] = q

    def known(self, obj: dict[str, object]) -> int | None:
        """The index of a live dict captured before, if the host has not changed it since."""
        hit = self.identity.get(id(obj))
        if hit is None or hit[0] is not obj:
            return None
        if obj.get("content") is not hit[1] or obj.get("tool_calls") is not hit[2]:
            return None
        return hit[3] if hit[3] < len(self.ids) else None

    def remember(self, obj: object, q: int) -> None:
        if isinstance(obj, dict):
            self.identity[id(obj)] = (obj, obj.get("content"), obj.get("tool_calls"), q)

    def put_back(self, n: int, leaf: str | None, kept_from: int | None) -> None:
        """Undo, in place, what was added from index n on: the columns back to their length
        n, the leaf and the latest compaction's first kept message as they were then."""
        for column in (self.ids, self.seqs, self.fps, self.turns):
            del column[n:]
        self.leaf, self.kept_from, self._by_seq = leaf, kept_from, None

    def truncated(self, q: int) -> BranchPath:
        """The path up to and including index q (q = -1: empty), for a new branch there."""
        return BranchPath(
            leaf=self.ids[q] if q >= 0 else None,
            ids=self.ids[: q + 1],
            seqs=self.seqs[: q + 1],
            fps=self.fps[: q + 1],
            turns=self.turns[: q + 1],
            kept_from=self.kept_from
            if self.kept_from is not None and self.kept_from <= q
            else None,
            base=self.base,
            base_turns=self.base_turns,
            heads=self.heads,
        )

    def copy(self) -> BranchPath:
        return BranchPath(
            leaf=self.leaf,
            ids=list(self.ids),
            seqs=list(self.seqs),
            fps=list(self.fps),
            turns=list(self.turns),
            kept_from=self.kept_from,
            base=self.base,
            base_turns=self.base_turns,
            heads=self.heads,
        )


def positional(live: Sequence[str], path: Sequence[str], start: int | None) -> tuple[int, int]:
    """Align by position when the live region is known to start at path[start] (the start of
    the conversation, or the first message the latest compaction kept). Trusted only when the
    match runs to the end of the path or of the live region; otherwise (-1, -1)."""
    if start is None or start < 0 or start >= len(path):
        return (-1, -1)
    k = 0
    while k < len(live) and start + k < len(path) and live[k] == path[start + k]:
        k += 1
    if k and (start + k == len(path) or k == len(live)):
        return (k - 1, start + k - 1)
    return (-1, -1)
