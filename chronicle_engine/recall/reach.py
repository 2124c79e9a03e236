"""Narrowing a read below its user's scope, in SQL, before any LIMIT.

A search picks its best candidates for the whole scope, then reads their rows. A filter applied
only to those rows starves whenever what it wants is not among the scope's best: a session's own
match behind a hundred better ones elsewhere, or everything outside the window behind a long live
conversation. So each restriction here is a SQL condition that the candidate queries carry
themselves, with the same test in Python for rows that arrive another way (a hit's neighbours).

Invariant: for every message, `Reach.admits(seq, session, ts)` is true exactly when the SQL of
`Reach.messages()` is, and `Window.holds` exactly when the SQL of `Window.sql` is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .when import Stretches

__all__ = ["Window", "Reach", "Told"]


def _marks(values: Sequence[object]) -> str:
    return ",".join("?" * len(values))


def _within(column: str, values: Sequence[object]) -> str:
    """`column IN (?, ...)`; false for no values (SQLite reads `IN ()`, PostgreSQL does not)."""
    return f"{column} IN ({_marks(values)})" if values else "1 = 0"


@dataclass(frozen=True)
class Window:
    """The messages a conversation has in the model's window: those of its `sessions` (the
    lineage) from seq `start` on, and the head a compaction kept (`heads`, any session)."""

    sessions: tuple[str, ...]
    start: int = 0
    heads: frozenset[int] = field(default_factory=frozenset)

    def holds(self, seq: int, session: str | None) -> bool:
        return (seq >= self.start and session in self.sessions) or seq in self.heads

    def sql(self, seq: str, session: str) -> tuple[str, list[str | int]]:
        """A condition true for a message in the window; `seq` and `session` name its columns
        (the session may be NULL: a row that is not a message, or one without a session)."""
        heads = sorted(self.heads)
        within = _within(f"coalesce({session}, '')", self.sessions)
        sql = f"({seq} >= ? AND {within}"
        sql += f" OR {seq} IN ({_marks(heads)}))" if heads else ")"
        return sql, [self.start, *self.sessions, *heads]


@dataclass(frozen=True)
class Told:
    """The messages of a scope told within a time a query names (`when.Stretches`)."""

    scope: int
    stretches: Stretches

    def holds(self, ts: float) -> bool:
        """Whether a message of the scope, told at `ts`, is within the time."""
        return any(start <= ts < end for start, end in self.stretches)

    def sql(self, message: str = "m") -> tuple[str, list[int | float]]:
        """A condition true for a message within the time; `message` is the alias of its
        `recall_messages` row. It names the scope, so the (scope, ts) index reads only the
        time's own messages."""
        if not self.stretches:
            return "1 = 0", []
        ranges = " OR ".join([f"{message}.ts >= ? AND {message}.ts < ?"] * len(self.stretches))
        bounds = [bound for stretch in self.stretches for bound in stretch]
        return f"({message}.scope = ? AND ({ranges}))", [self.scope, *bounds]


@dataclass(frozen=True)
class Reach:
    """What a read may return within its scope: only messages of `sessions` (scope "session":
    the lineage, whose seqs all lie in `span`), and never one held by the `outside` window
    (per-turn memory: what the model already sees). Beliefs follow their messages.

    `told` (a time the query names) narrows messages to those told within it; only message
    reads take it (a belief has no time of its own)."""

    sessions: tuple[str, ...] | None = None
    span: tuple[int, int] | None = None
    outside: Window | None = None
    told: Told | None = None

    @property
    def narrowed(self) -> bool:
        return self.sessions is not None or self.outside is not None or self.told is not None

    def within(self, told: Told) -> Reach:
        """This reach, narrowed to the messages `told` holds."""
        return Reach(self.sessions, self.span, self.outside, told)

    def admits(self, seq: int, session: str | None, ts: float = 0.0) -> bool:
        """Whether a message of the read's scope is within reach (`ts`: its time)."""
        if self.sessions is not None and session not in self.sessions:
            return False
        if self.told is not None and not self.told.holds(ts):
            return False
        return self.outside is None or not self.outside.holds(seq, session)

    def messages(
        self, seq: str = "m.seq", session: str = "m.session", message: str = "m"
    ) -> tuple[str, list[str | int | float]]:
        """The SQL condition on a message's columns ("" when nothing is narrowed); `message` is
        the alias of its `recall_messages` row, which a time's condition reads."""
        parts: list[str] = []
        params: list[str | int | float] = []
        if self.sessions is not None:
            parts.append(_within(session, self.sessions))
            params.extend(self.sessions)
            if self.span is not None:
                parts.append(f"{seq} BETWEEN ? AND ?")
                params.extend(self.span)
        if self.outside is not None:
            held, values = self.outside.sql(seq, session)
            parts.append(f"NOT {held}")
            params.extend(values)
        if self.told is not None:
            told, bounds = self.told.sql(message)
            parts.append(told)
            params.extend(bounds)
        return " AND ".join(parts), params

    def beliefs(self, belief: str = "b") -> tuple[str, list[str | int]]:
        """The SQL condition on a belief (alias `belief`): said in `sessions`; and, outside a
        window, a belief stays unless every message it was drawn from is in the window."""
        parts: list[str] = []
        params: list[str | int] = []
        if self.sessions is not None:
            parts.append(_within(f"{belief}.session", self.sessions))
            params.extend(self.sessions)
        if self.outside is not None:
            held, values = self.outside.sql("src.seq", "said.session")
            parts.append(
                "(NOT EXISTS (SELECT 1 FROM recall_belief_sources src"
                f" WHERE src.belief = {belief}.id)"
                " OR EXISTS (SELECT 1 FROM recall_belief_sources src"
                " LEFT JOIN recall_messages said ON said.seq = src.seq"
                f" WHERE src.belief = {belief}.id AND NOT {held}))"
            )
            params.extend(values)
        return " AND ".join(parts), params
