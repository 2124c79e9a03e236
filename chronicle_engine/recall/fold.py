"""The recall fold: captured messages, beliefs and the memory tools' events, projected into the
tables search reads.

Invariants:
- Deterministic: the same log gives the same rows, ids and index (no clock, no model, no
  randomness), so `Projector.rebuild("recall")` reproduces exactly what incremental folding built.
- Indexes only masked text: a message's `text` (credentials masked by capture, and again here),
  never the wire message.
- Beliefs come from the person's own words only: `person_text` of a message whose speaker is the
  person, in the primary agent context.
- Nothing is updated in place. A belief that changes gets a new row naming the one it
  supersedes; forgetting lists the item in `recall_hidden` and takes it out of its index.
- A memory-tool event only touches memory of its own user and profile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..capture.events import NAMESPACE as CHAT
from ..capture.secrets import mask
from ..log.store import Envelope, StoredEvent
from ..log.tables import Statements
from .beliefs import Claim, extract, norm_key, norm_value
from .events import NAMESPACE as RECALL
from .schema import create_message_index, log_texts, message_index
from .text import asks, index_row, name_words

__all__ = [
    "FOLD_NAME",
    "MESSAGE_COLUMNS",
    "CapturedMessage",
    "RecallFold",
    "captured",
    "current_belief",
    "parse_time",
    "scope_number",
]

FOLD_NAME = "recall"

_CURRENT = "NOT EXISTS (SELECT 1 FROM recall_beliefs nx WHERE nx.supersedes = b.id)"


def parse_time(text: str | None) -> float:
    if not text:
        return 0.0
    try:
        return datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return 0.0


def scope_number(
    conn: Statements,
    user_id: str | None,
    profile: str | None,
    *,
    create: bool = False,
    index: bool = True,
) -> int | None:
    """The partition number of (user, profile); with `create`, made if new (with its SQLite
    message index unless not `index`: PostgreSQL's index is one table for every scope)."""
    key = (user_id or "", profile or "")
    sql = "SELECT n FROM recall_scopes WHERE user_id = ? AND profile = ?"
    row = conn.execute(sql, key).fetchone()
    if row is not None:
        return int(row[0])
    if not create:
        return None
    conn.execute("INSERT INTO recall_scopes(user_id, profile) VALUES (?, ?)", key)
    made = conn.execute(sql, key).fetchone()
    assert made is not None
    n = int(made[0])
    if index:
        create_message_index(conn, n)
    return n


def current_belief(conn: Statements, belief_id: str) -> str:
    """Follow supersession forward to the belief that now stands for `belief_id`'s subject."""
    seen = belief_id
    for _ in range(10_000):  # a chain is acyclic by construction; the bound only guards a bug
        row = conn.execute("SELECT id FROM recall_beliefs WHERE supersedes = ?", (seen,)).fetchone()
        if row is None:
            return seen
        seen = row[0]
    return seen


def _text(value: object) -> str | None:
    """A payload's text field (None when absent)."""
    return value if isinstance(value, str) else None


def _short_name(message: object) -> str:
    name = message.get("name") if isinstance(message, dict) else None
    if isinstance(name, str) and 0 < len(name) <= 64:
        return mask(name)
    return ""


MESSAGE_COLUMNS = (
    "seq, scope, session, role, speaker, name, agent_context, at, ts, prev, body, person"
)
"""`recall_messages`' columns, in the order `CapturedMessage.row` gives them."""


@dataclass(frozen=True, slots=True)
class CapturedMessage:
    """What recall keeps of a captured message, masked; the same on every store."""

    user_id: str | None
    profile: str | None
    role: str
    speaker: str
    agent_context: str
    name: str
    body: str
    person: str  # the person's own words ('' unless the speaker is the person)

    def row(
        self, env: Envelope, scope: int, prev: int | None, body: str, at: str
    ) -> tuple[object, ...]:
        """Its `recall_messages` row (`MESSAGE_COLUMNS`), with the body and time as stored."""
        return (
            env.seq,
            scope,
            env.session,
            self.role,
            self.speaker,
            self.name,
            self.agent_context,
            at,
            parse_time(env.created_at),
            prev,
            body,
            "" if self.person == self.body else self.person,  # schema.PERSON_TEXT reads it back
        )


def captured(event: StoredEvent) -> CapturedMessage | None:
    """A `MessageCaptured` event as recall keeps it; None when it holds no text to recall."""
    p = event.payload
    text = p.get("text")
    if not isinstance(text, str) or not text.strip():
        return None
    speaker = str(p.get("speaker") or "host")
    person = p.get("person_text") if speaker == "person" else ""
    body = mask(text)
    return CapturedMessage(
        user_id=_text(p.get("user_id")),
        profile=_text(p.get("profile")),
        role=str(p.get("role") or ""),
        speaker=speaker,
        agent_context=str(p.get("agent_context") or "primary"),
        name=_short_name(p.get("message")),
        body=body,
        # (a person's words are usually the whole text: masked once)
        person=body if person == text else mask(person) if isinstance(person, str) else "",
    )


class RecallFold:
    """Folds chat and memory-tool events into recall's tables."""

    name = FOLD_NAME
    namespaces = (CHAT, RECALL)  # the projector reads no other payload for this fold

    def __init__(self, *, body_from_log: bool = False) -> None:
        self.body_from_log = body_from_log
        """Keep a message's body '' when its log row gives the same text (`schema.TEXT_FIELD`,
        read through SQLite's log), and its time '' (the event's `created_at`): they are then held once,
        by the log. Checked row by row against the row appended, so a body that differs
        (masked here, say) is kept as before."""
        # Within one apply(): the index values of each message row it inserted (read back by
        # `_indexed` instead of the view, which reads a row whose body is the log's through
        # that log row's JSON), and each session's last such row with its body (the next
        # turn's context). Cleared at any other event: only a memory tool's event changes them.
        self._fresh: dict[int, tuple[str, str, str]] = {}
        self._last: dict[str | None, tuple[int, str]] = {}
        # Within one apply(): the scope of each (user, profile) met (a scope's number never
        # changes; only `reset` drops them, in a transaction of its own).
        self._scope_numbers: dict[tuple[str, str], int] = {}

    def apply(self, conn: Statements, events: Sequence[StoredEvent], prepared: object) -> None:
        # `events` are unfolded: the projector trims its batch by the position it holds inside
        # this transaction (another thread or process may have folded some meanwhile).
        self._forget_fresh()
        self._scope_numbers.clear()
        for event in events:
            env = event.envelope
            if env.namespace == CHAT and env.type == "MessageCaptured":
                self._message(conn, event)
                continue
            self._forget_fresh()
            if env.namespace == RECALL:
                if env.type == "MemoryRemembered":
                    self._remembered(conn, event)
                elif env.type == "MemoryForgotten":
                    self._forgotten(conn, event)
                elif env.type == "MemoryCorrected":
                    self._corrected(conn, event)
        self._forget_fresh()
        self._scope_numbers.clear()

    def _forget_fresh(self) -> None:
        self._fresh.clear()
        self._last.clear()

    def reset(self, conn: Statements) -> None:
        for (n,) in conn.execute("SELECT n FROM recall_scopes").fetchall():
            conn.execute(f"DROP TABLE IF EXISTS {message_index(n)}")
        for table in (
            "recall_corrections",
            "recall_belief_sources",
            "recall_beliefs",
            "recall_hidden",
            "recall_messages",
            "recall_name_words",
            "recall_questions",
            "recall_scopes",
            "recall_vectors",
        ):
            conn.execute(f"DELETE FROM {table}")

    def _scope(self, conn: Statements, user_id: str | None, profile: str | None) -> int:
        """The scope of (user, profile), made (with its message index) if new."""
        n = scope_number(conn, user_id, profile, create=True)
        assert n is not None
        return n

    def _index_belief(self, conn: Statements, belief_id: str) -> None:
        """Index a belief just written. On SQLite a trigger does it (schema.py)."""
        return None

    # -- messages ---------------------------------------------------------------------------

    def _message(self, conn: Statements, event: StoredEvent) -> None:
        m = captured(event)
        if m is None:
            return
        env = event.envelope
        key = (m.user_id or "", m.profile or "")
        scope = self._scope_numbers.get(key)
        if scope is None:
            scope = self._scope_numbers[key] = self._scope(conn, m.user_id, m.profile)
        # The session's row before this one. A row this apply() inserted is the latest of its
        # session below this seq: the rows past the fold's position are all this apply()'s,
        # written in seq order.
        last = self._last.get(env.session)
        if last is not None:
            prev: int | None = last[0]
        else:
            # (`session IS ?` says the same on SQLite; PostgreSQL reads no placeholder after IS)
            prev_row = (
                conn.execute(
                    "SELECT MAX(seq) FROM recall_messages WHERE session IS NULL AND seq < ?",
                    (env.seq,),
                )
                if env.session is None
                else conn.execute(
                    "SELECT MAX(seq) FROM recall_messages WHERE session = ? AND seq < ?",
                    (env.session, env.seq),
                )
            ).fetchone()
            prev = prev_row[0] if prev_row else None
        stored, at = m.body, env.created_at
        if self.body_from_log:
            # '': schema.log_texts and the index's view read it from the log row
            same_text, same_time = self._logged(conn, event, m.body)
            stored = "" if same_text else stored
            at = "" if same_time else at
        inserted = conn.execute(
            f"INSERT INTO recall_messages({MESSAGE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT DO NOTHING",
            m.row(env, scope, prev, stored, at),
        ).rowcount
        if inserted == 1:
            # What recall_message_text reads for the new row: its body is m.body (stored, or
            # the log's text, which equals it); a row just made is not forgotten (only an
            # existing row is). Its context: the body of the row before, unless forgotten.
            if prev is None:
                before = ""
            elif last is not None:
                before = last[1]
            else:
                ctx = conn.execute(
                    "SELECT ctx FROM recall_message_text WHERE seq = ?", (env.seq,)
                ).fetchone()
                before = str(ctx[0]) if ctx else ""
            self._fresh[env.seq] = index_row(m.name, m.body, before)
            self._last[env.session] = (env.seq, m.body)
            if asks(m.body):  # ranking reads it with the row (search.MessageRow.asks)
                conn.execute(
                    "INSERT INTO recall_questions(seq) VALUES (?) ON CONFLICT DO NOTHING",
                    (env.seq,),
                )
        else:
            self._last.pop(env.session, None)
        for word in name_words(m.name):
            conn.execute(
                "INSERT INTO recall_name_words(word) VALUES (?) ON CONFLICT DO NOTHING", (word,)
            )
        self._index(conn, scope, env.seq)
        self._person_claims(conn, scope, m, env)

    def _person_claims(
        self, conn: Statements, scope: int, m: CapturedMessage, env: Envelope
    ) -> None:
        """The beliefs a message states: the person's own words, in the primary context."""
        if m.speaker == "person" and m.agent_context == "primary" and m.person:
            for i, claim in enumerate(extract(m.person)):
                self._believe(conn, scope, claim, f"b{env.seq}.{i}", env, origin="person")

    @staticmethod
    def _logged(conn: Statements, event: StoredEvent, body: str) -> tuple[bool, bool]:
        """Does the message's log row give `body` as its text (`schema.TEXT_FIELD`, read by
        SQLite's JSON), and the event's time? Without asking SQLite when the payload's text
        is its content (what the row gives whether it keeps the text or leaves it out as that
        copy) and holds no NUL (where SQLite's JSON reading ends a text): the event was read
        from that row, so its time is the row's."""
        p = event.payload
        text = p.get("text")
        message = p.get("message")
        if (
            text == body
            and isinstance(message, dict)
            and message.get("content") == text
            and "\x00" not in body
        ):
            return True, True
        logged = log_texts(conn, (event.seq,)).get(event.seq)
        if logged is None:
            return False, False
        return logged[0] == body, logged[1] == event.envelope.created_at

    def _indexed(self, conn: Statements, seq: int) -> tuple[str, str, str] | None:
        """What the index holds for `seq` (a delete must give FTS5 exactly what was inserted)."""
        fresh = self._fresh.pop(seq, None)
        if fresh is not None:
            return fresh
        row = conn.execute(
            "SELECT name, body, ctx FROM recall_message_text WHERE seq = ?", (seq,)
        ).fetchone()
        return index_row(row[0], row[1], row[2]) if row else None

    def _index(self, conn: Statements, scope: int, seq: int) -> None:
        values = self._indexed(conn, seq)
        if values is not None:
            conn.execute(
                f"INSERT INTO {message_index(scope)}(rowid, name, body, ctx) VALUES (?, ?, ?, ?)",
                (seq, *values),
            )

    def _unindex(self, conn: Statements, scope: int, seq: int) -> None:
        values = self._indexed(conn, seq)
        if values is not None:
            table = message_index(scope)
            conn.execute(
                f"INSERT INTO {table}({table}, rowid, name, body, ctx) VALUES ('delete', ?, ?, ?, ?)",
                (seq, *values),
            )

    def _hide_message(self, conn: Statements, seq: int, by: int) -> None:
        row = conn.execute("SELECT scope FROM recall_messages WHERE seq = ?", (seq,)).fetchone()
        if row is None or _hidden(conn, f"m{seq}"):
            return
        scope = int(row[0])
        # The next turn indexes this one's words as its context: take them out of it too. It is
        # in its own scope's index (one session may hold several people's turns).
        following = [
            (int(r[0]), int(r[1]))
            for r in conn.execute("SELECT seq, scope FROM recall_messages WHERE prev = ?", (seq,))
        ]
        self._unindex(conn, scope, seq)
        for nxt, its_scope in following:
            if not _hidden(conn, f"m{nxt}"):
                self._unindex(conn, its_scope, nxt)
        conn.execute(
            "INSERT INTO recall_hidden(target, by_seq) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (f"m{seq}", by),
        )
        # Unindexed above with its words; now the words go too (the log keeps the event).
        conn.execute("UPDATE recall_messages SET body = '', person = '' WHERE seq = ?", (seq,))
        conn.execute("DELETE FROM recall_vectors WHERE target = ?", (f"m{seq}",))
        conn.execute("DELETE FROM recall_questions WHERE seq = ?", (seq,))
        for nxt, its_scope in following:
            if not _hidden(conn, f"m{nxt}"):
                self._index(conn, its_scope, nxt)
        # A belief that only this message stated goes with it.
        for (belief,) in conn.execute(
            "SELECT belief FROM recall_belief_sources WHERE seq = ?", (seq,)
        ).fetchall():
            sources = [
                s
                for (s,) in conn.execute(
                    "SELECT seq FROM recall_belief_sources WHERE belief = ?", (belief,)
                )
            ]
            if all(_hidden(conn, f"m{s}") for s in sources if _is_message(conn, s)):
                conn.execute(
                    "INSERT INTO recall_hidden(target, by_seq) VALUES (?, ?)"
                    " ON CONFLICT DO NOTHING",
                    (belief, by),
                )

    # -- beliefs ----------------------------------------------------------------------------

    def _believe(
        self,
        conn: Statements,
        scope: int,
        claim: Claim,
        belief_id: str,
        env: Envelope,
        *,
        origin: str,
        supersedes: str | None = None,
    ) -> str:
        if supersedes is None:
            row = conn.execute(
                f"SELECT id, value, polarity FROM recall_beliefs b WHERE scope = ? AND kind = ?"
                f" AND key = ? AND {_CURRENT} ORDER BY rowid DESC LIMIT 1",
                (scope, claim.kind, claim.key),
            ).fetchone()
            if row is not None:
                same = norm_value(row[1]) == norm_value(claim.value) and row[2] == claim.polarity
                if same and not _hidden(conn, row[0]):
                    conn.execute(
                        "INSERT INTO recall_belief_sources(belief, seq) VALUES (?, ?)"
                        " ON CONFLICT DO NOTHING",
                        (row[0], env.seq),
                    )
                    return str(row[0])
                supersedes = str(row[0])
        conn.execute(
            "INSERT INTO recall_beliefs(id, scope, kind, key, value, polarity, text,"
            " origin, source_seq, session, at, supersedes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT DO NOTHING",
            (
                belief_id,
                scope,
                claim.kind,
                claim.key,
                mask(claim.value),
                claim.polarity,
                mask(f"{claim.label}: {claim.text}"),
                origin,
                env.seq,
                env.session,
                env.created_at,
                supersedes,
            ),
        )
        self._index_belief(conn, belief_id)
        conn.execute(
            "INSERT INTO recall_belief_sources(belief, seq) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (belief_id, env.seq),
        )
        return belief_id

    def _remembered(self, conn: Statements, event: StoredEvent) -> None:
        p = event.payload
        text = p.get("text")
        if not isinstance(text, str) or not text.strip():
            return
        scope = self._scope(conn, _text(p.get("user_id")), _text(p.get("profile")))
        assert scope is not None
        note = mask(text.strip())
        claim = Claim("note", "note " + norm_key(note)[:120], note, 1, note)
        self._believe(conn, scope, claim, f"b{event.seq}.0", event.envelope, origin="agent")

    def _forgotten(self, conn: Statements, event: StoredEvent) -> None:
        p = event.payload
        target = str(p.get("target") or "")
        scope = scope_number(conn, _text(p.get("user_id")), _text(p.get("profile")))
        if scope is None or not target:
            return
        if target.startswith("m") and target[1:].isdigit():
            if _message_scope(conn, int(target[1:])) == scope:
                self._hide_message(conn, int(target[1:]), event.seq)
        elif target.startswith("b"):
            row = conn.execute(
                "SELECT scope FROM recall_beliefs WHERE id = ?", (target,)
            ).fetchone()
            if row is None or int(row[0]) != scope:
                return
            conn.execute(
                "INSERT INTO recall_hidden(target, by_seq) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (target, event.seq),
            )
            if p.get("include_source"):
                for (seq,) in conn.execute(
                    "SELECT seq FROM recall_belief_sources WHERE belief = ?", (target,)
                ).fetchall():
                    if _message_scope(conn, seq) == scope:
                        self._hide_message(conn, seq, event.seq)
        elif target.startswith("s:"):
            conn.execute(
                "INSERT INTO recall_hidden(target, by_seq) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (target, event.seq),
            )

    def _corrected(self, conn: Statements, event: StoredEvent) -> None:
        p = event.payload
        target = str(p.get("target") or "")
        text = p.get("text")
        scope = scope_number(conn, _text(p.get("user_id")), _text(p.get("profile")))
        if scope is None or not isinstance(text, str) or not text.strip():
            return
        env = event.envelope
        if target.startswith("b"):
            row = conn.execute(
                "SELECT scope FROM recall_beliefs WHERE id = ?", (target,)
            ).fetchone()
            if row is None or int(row[0]) != scope:
                return
            current = current_belief(conn, target)
            old = conn.execute(
                "SELECT kind, key, polarity FROM recall_beliefs WHERE id = ?", (current,)
            ).fetchone()
            assert old is not None  # current_belief names a stored belief
            kind, key, polarity = old[0], old[1], int(old[2])
            said = [c for c in extract(text) if c.kind == kind and c.key == key]
            if said:
                claim = Claim(kind, key, said[0].value, said[0].polarity, text.strip())
            else:
                claim = Claim(kind, key, text.strip(), polarity, text.strip())
            self._believe(
                conn, scope, claim, f"b{env.seq}.0", env, origin="correction", supersedes=current
            )
        elif target.startswith("m") and target[1:].isdigit():
            if _message_scope(conn, int(target[1:])) != scope:
                return
            note = Claim("fact", f"correction {target}", text.strip(), 1, text.strip())
            belief = self._believe(conn, scope, note, f"b{env.seq}.0", env, origin="correction")
            conn.execute(
                "INSERT INTO recall_corrections(target, belief) VALUES (?, ?)"
                " ON CONFLICT DO NOTHING",
                (target, belief),
            )
            for i, claim in enumerate(extract(text), start=1):
                self._believe(conn, scope, claim, f"b{env.seq}.{i}", env, origin="correction")


def _hidden(conn: Statements, target: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM recall_hidden WHERE target = ?", (target,)).fetchone()
        is not None
    )


def _is_message(conn: Statements, seq: int) -> bool:
    return (
        conn.execute("SELECT 1 FROM recall_messages WHERE seq = ?", (seq,)).fetchone() is not None
    )


def _message_scope(conn: Statements, seq: int) -> int | None:
    row = conn.execute("SELECT scope FROM recall_messages WHERE seq = ?", (seq,)).fetchone()
    return int(row[0]) if row else None
