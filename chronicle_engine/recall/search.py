"""Full-text search over one user's memory: captured messages, beliefs and chronicle sections.

Invariants:
- Scoped: messages are read from the user's own index (`recall_fts_<n>`); beliefs and sections
  are filtered to the same scope in SQL. Hidden (forgotten) items never come back.
- Narrowed in SQL: a session filter or a window to leave out (`reach.Reach`) is part of the
  candidate queries, before their LIMIT, so a narrow read is not starved by better matches that
  it would drop anyway.
- A bounded number of statements per read: rows, texts, belief sources, section owners and
  hidden items are looked up for all candidates at once, never one query per candidate.
- Every word reaches MATCH quoted (`text.match_any`), so any query string is safe.
- Bounded: bm25 reads every match of each word it scores, so it is only given words whose matches
  add up to at most `match_budget`; the commonest words of a query are left out when rarer ones
  exist, and a query of common words only is answered from their newest matches. Latency stays
  flat as the log grows.

Ranking of messages: bm25 (body, the end of the turn before, speaker name; a compound word of
the query, "vault-3", also as a phrase; related words, `related.py`: a number's other spelling,
"3" for "three", a title's abbreviation, a kinship group's members, weighed as the group would
be as one word), plus a share of the score of the turns just before
and after (an answer sits next to its question), times the speaker's role weight, a mild recency
gain and a boost when the query names the speaker (a query in the first person names the person
whose memory it is). One session may take at most `session_share` of the results while other
sessions have hits.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..capture.secrets import mask
from ..config import RecallSettings
from ..log.store import Row
from ..log.tables import Statements
from .reach import Reach, Told
from .related import group_weight, idf, related_words
from .schema import PERSON_TEXT, log_texts, message_index
from .text import CONTEXT_CHARS, asks, match_any, name_words, quote
from .when import Moment, Span

__all__ = [
    "Hit",
    "MessageRow",
    "MessageSearch",
    "message_rows",
    "message_hit",
    "belief_hit",
    "belief_sources",
    "BELIEF_COLUMNS",
    "BELIEF_VISIBLE",
    "BeliefIndex",
    "FTS5_BELIEFS",
    "rank_beliefs",
    "rank_sections",
    "SECTIONS_FTS",
    "SectionCandidates",
    "fts5_section_candidates",
    "fuse",
    "snippet",
]

_DF_TTL_S = 120.0
SECTIONS_FTS = "recall_sections_fts"
_NEIGHBOUR_SOURCES = 30
_SNIPPET = 600


def _row_chunk(limit: int) -> int:
    """Candidate rows `MessageSearch.rank` reads at a time for `limit` results: twice the
    results, at least the strongest hits whose rows are read anyway (for their links), at most
    40. The ranking stops reading once no unread row can reach the results, which leaves them
    the same whatever the chunk; a larger one reads rows it may not need (at 1M, a default
    search read 40.1 rows with chunks of 40, 30.1 with 30, in as many statements)."""
    return max(_NEIGHBOUR_SOURCES, min(2 * limit, 40))


@dataclass
class Hit:
    """One search result. `id` is what the memory tools take ("m12", "b12.0", "s:chat/3-9").

    `raw` is the stored text, not yet masked; `text` is what may be shown: `raw` masked and cut
    (`snippet`), worked out when first read. A search ranks and pools many more hits than it
    shows (a `by_session` search pools a hundred to show ten), and only the shown are masked."""

    id: str
    kind: str  # message | belief | section
    score: float
    seq: int | None = None
    session: str | None = None
    time: str = ""
    raw: str = field(default="", repr=False)
    extra: dict[str, object] = field(default_factory=dict)
    _shown: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def text(self) -> str:
        if self._shown is None:
            self._shown = snippet(self.raw)
        return self._shown

    def rescored(self, score: float, extra: dict[str, object] | None = None) -> Hit:
        """This hit with another score (and `extra`), its text masked only if already shown."""
        hit = Hit(self.id, self.kind, score, self.seq, self.session, self.time, self.raw)
        hit.extra = self.extra if extra is None else extra
        hit._shown = self._shown
        return hit

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "id": self.id,
            "kind": self.kind,
            "seq": self.seq,
            "session": self.session,
            "time": self.time,
            "text": self.text,
            "score": round(self.score, 4),
        }
        out.update(self.extra)
        return out


def snippet(text: str, limit: int = _SNIPPET) -> str:
    # Indexed text was masked when it was folded; again here, for text folded by an older masker.
    # Only what can be shown is masked (with room for a credential that straddles the cut).
    text = mask((text or "")[: limit + 512])
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass
class MessageRow:
    """A captured message as search reads it: where it is, who said it, and its text."""

    seq: int
    session: str | None
    role: str
    speaker: str
    name: str
    ts: float
    at: str
    prev: int | None
    asks: bool  # a short question (`text.asks`), as the fold noted it in `recall_questions`
    body: str = ""
    person: str = ""


_ROW_SQL = (
    "SELECT m.seq, m.session, m.role, m.speaker, m.name, m.ts, m.at, m.prev,"
    " EXISTS (SELECT 1 FROM recall_questions q WHERE q.seq = m.seq){text}"
    " FROM recall_messages m WHERE m.seq IN ({marks}){scoped}"
    " AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = 'm' || m.seq)"
)
"""A row's `asks` is whether `recall_questions` holds it: the fold notes each short question
(`text.asks`) as it indexes it, so ranking reads no text to tell one."""


def message_rows(
    conn: Statements,
    seqs: Iterable[int],
    *,
    text: bool = True,
    scope: int | None = None,
) -> dict[int, MessageRow]:
    """The visible (not forgotten) messages among `seqs` (of `scope` alone, when given);
    without `text`, metadata only."""
    wanted = list(seqs)
    out: dict[int, MessageRow] = {}
    columns = f", m.body, {PERSON_TEXT}" if text else ""
    scoped = " AND +m.scope = ?" if scope is not None else ""  # a filter: see `_links`
    for i in range(0, len(wanted), 500):
        chunk = wanted[i : i + 500]
        sql = _ROW_SQL.format(text=columns, marks=",".join("?" * len(chunk)), scoped=scoped)
        for r in conn.execute(sql, [*chunk, scope] if scoped else chunk):
            seq, session, role, speaker, name, ts, at, prev, question = r[:9]
            body, person = (r[9], r[10]) if text else ("", "")
            out[seq] = MessageRow(
                seq, session, role, speaker, name, ts, at, prev, bool(question), body, person
            )
    if text:
        _from_log(conn, out.values())
    return out


def _from_log(conn: Statements, rows: Iterable[MessageRow]) -> None:
    """Fill in the text and time of visible rows that leave them to the log (their body or
    `at` is ''; see `schema.TEXT_FIELD`): a person's words are then the body too, as
    `PERSON_TEXT` says."""
    blank = {row.seq: row for row in rows if not row.body or not row.at}
    if not blank:
        return
    # A row forgotten since ranking read it (another thread or process) has its body blanked
    # too: it must stay blank, not be read back from the log.
    marks = ",".join("?" * len(blank))
    for (target,) in conn.execute(
        f"SELECT target FROM recall_hidden WHERE target IN ({marks})", [f"m{s}" for s in blank]
    ):
        blank.pop(int(str(target)[1:]), None)
    if not blank:
        return
    for seq, (body, at) in log_texts(conn, blank).items():
        row = blank[seq]
        row.at = row.at or at
        if not row.body:
            row.body = body
            if not row.person and row.speaker == "person":
                row.person = body


def _with_text(conn: Statements, rows: Iterable[MessageRow]) -> None:
    """Fill in the text of the rows read without it, in one query per 500 (and what they leave
    to the log, as `message_rows` does)."""
    rows = list(rows)
    missing = {row.seq: row for row in rows if not row.body}
    wanted = list(missing)
    for i in range(0, len(wanted), 500):
        chunk = wanted[i : i + 500]
        for seq, body, person in conn.execute(
            f"SELECT m.seq, m.body, {PERSON_TEXT} FROM recall_messages m"
            f" WHERE m.seq IN ({','.join('?' * len(chunk))})",
            chunk,
        ):
            missing[seq].body, missing[seq].person = body, person
    _from_log(conn, rows)


_FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself"})
"""A query in the first person speaks as the person whose memory this is: their own turns are
the evidence, as a speaker's are when a query names them."""


SectionCandidates = Callable[
    [Statements, Sequence[str], Sequence[str], "tuple[int, int] | None", int, int],
    Iterable[tuple[int, float]],
]
"""(conn, rare words, common words, span of `written` or None, budget, limit) -> the sections'
(written, score), best first: bm25 over the rare words, else the newest matches of the common.
May be lazy (an iterator whose rows are read as they are taken): `rank_sections` takes only as
many as it needs, and closes it."""


def fts5_section_candidates(
    conn: Statements,
    rare: Sequence[str],
    common: Sequence[str],
    span: tuple[int, int] | None,
    budget: int,
    limit: int,
) -> Iterable[tuple[int, float]]:
    """`SectionCandidates` from FTS5's index of the sections' prose, read as they are taken:
    newest matches are found walking the index from its newest row, so a walk that is not
    taken further stops there (a common word matches hundreds of sections; a search reads a
    dozen)."""
    table = SECTIONS_FTS
    narrow, params = "", []
    if span is not None:
        narrow, params = f" AND {table}.rowid BETWEEN ? AND ?", list(span)
    if rare:
        yield from _taken(
            conn.execute(
                f"SELECT rowid, -bm25({table}) FROM {table} WHERE {table} MATCH ?{narrow}"
                " ORDER BY 2 DESC LIMIT ?",
                (match_any(rare), *params, max(budget, limit)),
            )
        )
        return
    newest = (
        f"SELECT rowid, ? FROM {table} WHERE {table} MATCH ?{narrow} ORDER BY rowid DESC LIMIT ?"
    )
    seen: set[int] = set()
    for score, expression in (
        (2.0, " AND ".join(quote(w) for w in common)),
        (1.0, match_any(common)),
    ):
        for written, value in _taken(conn.execute(newest, (score, expression, *params, budget))):
            if written not in seen:
                seen.add(written)
                yield written, value
        if len(seen) >= budget:
            break


def _taken(rows: Iterable[Row]) -> Iterator[tuple[int, float]]:
    """The (rowid, score) rows of a cursor, one at a time; the cursor is closed when the taker
    stops (its statement reset, so it holds no read snapshot open)."""
    try:
        for written, value in rows:
            yield int(written), float(value)
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()


class MessageSearch:
    """Ranks one scope's messages for a query. Holds only a cache of document frequencies."""

    def __init__(self, tuning: RecallSettings) -> None:
        self.tuning = tuning
        self._df: dict[tuple[str, str], tuple[float, int]] = {}

    # -- full-text candidates ------------------------------------------------------------------

    def _frequencies(
        self, conn: Statements, table: str, words: Sequence[str], cap: int
    ) -> dict[str, int]:
        """How many rows of `table` contain each of `words`, counted up to `cap` (cached for a
        while); those not cached are counted together (`_counts`)."""
        now = time.monotonic()
        found: dict[str, int] = {}
        missing: list[str] = []
        for word in words:
            cached = self._df.get((table, word))
            if cached is not None and now - cached[0] < _DF_TTL_S:
                found[word] = cached[1]
            elif word not in missing:
                missing.append(word)
        if missing:
            counted = self._counts(conn, table, missing, cap)
            if len(self._df) > 50_000:
                self._df.clear()
            for word in missing:
                found[word] = counted.get(word, 0)
                self._df[(table, word)] = (now, found[word])
        return found

    def _counts(
        self, conn: Statements, table: str, words: Sequence[str], cap: int
    ) -> dict[str, int]:
        """How many rows of the full-text index `table` contain each of `words`, counted up to
        `cap`, in one statement (a count apiece, one after the other)."""
        one = f"SELECT ?, count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? LIMIT ?)"
        return {
            str(word): int(n)
            for word, n in conn.execute(
                " UNION ALL ".join([one] * len(words)),
                [value for word in words for value in (word, quote(word), cap)],
            )
        }

    def plan(
        self,
        conn: Statements,
        table: str,
        words: Sequence[str],
        budget: int | None = None,
    ) -> tuple[list[str], list[str]]:
        """Split the query's words into those bm25 can afford to rank (their matches add up to
        at most `budget`, `match_budget` unless given) and the common rest."""
        budget = max(self.tuning.match_budget if budget is None else budget, 1)
        frequency = self._frequencies(conn, table, words, budget + 1)
        rare: list[str] = []
        total = 0
        for w in sorted(words, key=lambda w: frequency[w]):
            if total + frequency[w] > budget:
                break
            rare.append(w)
            total += frequency[w]
        return rare, [w for w in words if w not in rare]

    def bm25(
        self,
        conn: Statements,
        scope: int,
        words: Sequence[str],
        reach: Reach | None = None,
    ) -> dict[int, float]:
        """seq -> relevance (higher is better) of the best `candidates` messages within `reach`.

        bm25 reads every match of every word it scores (for the word's idf), so the commonest
        words are left out of the ranking when rarer ones exist: they would cost the most and
        weigh the least. A query of common words only is answered from their newest matches,
        those with all of the words first."""
        if not words:
            return {}
        table = message_index(scope)
        t = self.tuning
        rare, common = self.plan(conn, table, words)
        # Narrowed, each match is checked against its message row before the LIMIT; the seq
        # span (a lineage's) bounds the index walk itself.
        source, narrow = table, ""
        params: list[str | int | float] = []
        if reach is not None and reach.narrowed:
            condition, params = reach.messages("m.seq", "m.session")
            source = f"{table} JOIN recall_messages m ON m.seq = {table}.rowid"
            narrow = f" AND {condition}"
            if reach.span is not None:
                narrow += f" AND {table}.rowid BETWEEN ? AND ?"
                params = [*params, *reach.span]
        if rare:
            sql = (
                f"SELECT {table}.rowid, -bm25({table}, {t.name_weight}, 1.0, {t.context_weight})"
                f" FROM {source} WHERE {table} MATCH ?{narrow} ORDER BY 2 DESC LIMIT ?"
            )
            return {
                int(seq): float(score)
                for seq, score in conn.execute(sql, (match_any(rare), *params, t.candidates))
            }
        scored: dict[int, float] = {}
        newest = (
            f"SELECT {table}.rowid FROM {source} WHERE {table} MATCH ?{narrow}"
            f" ORDER BY {table}.rowid DESC LIMIT ?"
        )
        all_of = " AND ".join(quote(w) for w in common)
        for (seq,) in conn.execute(newest, (all_of, *params, t.candidates)):
            scored[int(seq)] = 2.0
        if len(scored) < t.candidates:
            for (seq,) in conn.execute(newest, (match_any(common), *params, t.candidates)):
                scored.setdefault(int(seq), 1.0)
        return scored

    def index_key(self, scope: int) -> str:
        """What `plan` and `_frequencies` name a scope's message index by."""
        return message_index(scope)

    def documents(self, conn: Statements, scope: int) -> int:
        """How many messages a scope's index holds, as bm25 counts them: FTS5 keeps the count
        in the first varint of its averages record (rowid 1 of the `_data` table)."""
        row = conn.execute(f"SELECT block FROM {message_index(scope)}_data WHERE id = 1").fetchone()
        return _varint(bytes(row[0])) if row and row[0] else 0

    def _add_related(
        self,
        conn: Statements,
        scope: int,
        scored: dict[int, float],
        related: Mapping[str, str],
        reach: Reach | None,
    ) -> None:
        """Add to `scored` the bm25 of each query word's related words (`related.related_words`),
        each weighed by `group_weight`; a message holding several words related to one query word
        ("mother" and "father" for "parents") gains the best of them, not their sum, so it never
        passes a message of the same length holding the query word itself (each word once). A
        word too common for the match budget is left out: its newest matches carry no bm25 score
        to weigh, and a word that common would weigh next to nothing."""
        key = self.index_key(scope)
        budget = max(self.tuning.match_budget, 1)
        words = {*related, *related.values()}
        frequency = self._frequencies(conn, key, list(words), budget + 1)
        documents = self.documents(conn, scope)
        best: dict[str, dict[int, float]] = {}  # query word -> seq -> its best related score
        for form, source in related.items():
            if not 0 < frequency[form] <= budget:
                continue
            weight = group_weight(form, related, frequency, documents)
            gained = best.setdefault(source, {})
            for seq, score in self.bm25(conn, scope, [form], reach).items():
                gained[seq] = max(gained.get(seq, 0.0), weight * score)
        for gained in best.values():
            for seq, score in gained.items():
                scored[seq] = scored.get(seq, 0.0) + score

    def _add_time(
        self,
        conn: Statements,
        scope: int,
        scored: dict[int, float],
        words: Sequence[str],
        reach: Reach | None,
        moment: Moment | Span,
    ) -> None:
        """Score the time the query names as one more of its words, one that every message of
        that time holds: the time's own best matches of the query's words join `scored`, and
        each candidate of that time gains that word's bm25 (its idf, the idf of a word held by
        as many messages as the time holds, found once in a message of average length). A
        message of the time that matches none of the query's words is not a candidate, as in
        any search. The time boost (`_Lift`) still lifts the messages of the time after.

        A boost of the score alone cannot find an answer told in other words than the question
        ("I went to Woodhaven" for "Where did she travel in July 2022?"): its score is the
        speaker's name at most, which lifted is still below the matches of every other time.

        Like a word, the time is scored only when it is rare enough for the match budget: a
        time that holds more messages than `match_budget` is left to the boost alone, and
        counting it stops there (`_held`), so the cost stays flat as the memory grows. The
        count takes every message of the scope's time, forgotten ones and those in the model's
        window too, as a word's count takes every row of the index."""
        told = Told(scope, moment.stretches(lambda: _first_and_last(conn, scope)))
        budget = max(self.tuning.match_budget, 1)
        held = _held(conn, told, budget + 1)
        if not 0 < held <= budget:
            return
        weight = idf(self.documents(conn, scope), held)
        for seq, score in self.bm25(conn, scope, words, (reach or Reach()).within(told)).items():
            scored.setdefault(seq, score)
        # Each candidate's time is read by its seq and held against the time here: the time's
        # condition in SQL would let a planner without statistics walk the (scope, ts) index
        # for the scope alone when the time has several stretches (a month of any year), every
        # message of the scope for each chunk (180 ms a search at 1M messages).
        seqs = list(scored)
        for i in range(0, len(seqs), 500):
            chunk = seqs[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for seq, of, ts in conn.execute(
                f"SELECT seq, scope, ts FROM recall_messages WHERE seq IN ({marks})", chunk
            ):
                if of == scope and told.holds(float(ts)):
                    scored[int(seq)] += weight

    # -- sections -------------------------------------------------------------------------------

    sections_index = SECTIONS_FTS
    """The sections' full-text index, as `plan` names it."""

    section_candidates = staticmethod(fts5_section_candidates)
    """`SectionCandidates` of this store."""

    # -- ranking --------------------------------------------------------------------------------

    def rank(
        self,
        conn: Statements,
        scope: int,
        words: Sequence[str],
        query_tokens: set[str],
        *,
        keep: Callable[[MessageRow], bool] | None = None,
        reach: Reach | None = None,
        text: bool = False,
        limit: int = 10,
        moment: Moment | Span | None = None,
        pooling: bool = False,
    ) -> list[Hit]:
        """The best `limit` messages within `reach` that `keep` accepts. With `text`, rows reach
        `keep` with their text (read with them, in the same query). A `moment` the query names
        counts as one more of its words, which the messages of that time hold (`_add_time`),
        and lifts them. `pooling`: the ranking is pooled into sessions (`pool.pool_sessions`),
        so a short question keeps its whole score: it shows what its session spoke of."""
        size = _row_chunk(limit)
        relevance, known = self._relevance(conn, scope, words, reach, text, size, moment)
        if not relevance:
            return []
        lift = _Lift.of(conn, scope, self.tuning, query_tokens, moment, pooling=pooling)
        scored: list[tuple[float, MessageRow]] = []
        best: list[float] = []  # the `limit` best scores so far, a min-heap
        # Rows are read in relevance order, a chunk at a time, until no unread candidate can
        # reach the results: `lift` raises a score by at most its `ceiling`, so no unread row
        # scores above the next relevance times that. Once the `limit`-th best score is above it
        # (a heap: the cheap test) and so is every result `_spread` would pick (it may pass over
        # a session's surplus for another session's weaker rows), the rest cannot rank.
        ordered = sorted(relevance, key=lambda s: -relevance[s])
        for start in range(0, len(ordered), size):
            bound = relevance[ordered[start]] * lift.ceiling
            if (
                len(best) == limit
                and best[0] > bound
                and _settled(scored, limit, self.tuning, bound)
            ):
                break
            chunk = ordered[start : start + size]
            # In `scope` alone: a turn linked to a hit (the one before or after it, an answer) may
            # be another user's, as one session may hold several people's turns.
            unread = [seq for seq in chunk if seq not in known]
            rows = message_rows(conn, unread, text=text, scope=scope)
            rows.update((seq, known[seq]) for seq in chunk if seq in known)
            for row in (rows[seq] for seq in chunk if seq in rows):
                if reach is not None and not reach.admits(row.seq, row.session, row.ts):
                    continue  # a neighbour the candidate query did not vet
                if keep is not None and not keep(row):
                    continue
                score = lift.score(row, relevance[row.seq])
                scored.append((score, row))
                if len(best) < limit:
                    heapq.heappush(best, score)
                elif score > best[0]:
                    heapq.heapreplace(best, score)
        scored.sort(key=_by_score)
        chosen = _spread(scored, limit, self.tuning.session_share)
        corrections = _corrections(conn, [r.seq for _, r in chosen])
        _with_text(conn, [row for _, row in chosen])
        return [message_hit(row, score, corrections.get(row.seq)) for score, row in chosen]

    def _relevance(
        self,
        conn: Statements,
        scope: int,
        words: Sequence[str],
        reach: Reach | None,
        text: bool,
        first: int,
        moment: Moment | Span | None = None,
    ) -> tuple[dict[int, float], dict[int, MessageRow]]:
        """seq -> the query's relevance to it before any row is read (bm25, related words, the
        time the query names, and a share of the strongest hits' scores given to the turns just
        before and after them, and that share's share to the answer of a question asked right
        after them: `_answers`), and the rows read on the way (the strongest `first` hits', with
        their text when `text`). A linked turn may lie outside `scope`: ranking reads the scope's
        rows alone."""
        t = self.tuning
        base = self.bm25(conn, scope, words, reach)
        related = related_words(words)
        # Only beside real bm25 scores: when every query word is over the match budget, bm25 scores
        # holding all words 2.0 and any 1.0, which a related word's real bm25 would outweigh.
        if (related or moment) and self.plan(conn, self.index_key(scope), words)[0]:
            if related:
                self._add_related(conn, scope, base, related, reach)
            if moment:
                self._add_time(conn, scope, base, words, reach, moment)
        if not base or not t.neighbour_weight:
            return base, {}
        # Neighbours inherit from the strongest hits only: a weak hit's share is too small to
        # lift a turn into the results, and every link costs a lookup.
        strongest = sorted(base, key=lambda s: -base[s])
        sources = strongest[:_NEIGHBOUR_SOURCES]
        # The strongest hits' rows are read first, a chunk's worth (ranking reads at least one
        # chunk anyway): each row says the turn before it (`prev`), so a link costs a lookup of
        # the turn after only, and no index beside the rows is walked for it.
        known = message_rows(conn, strongest[: max(first, _NEIGHBOUR_SOURCES)], text=text)
        links, after = _links(conn, scope, sources, known)
        answers = _answers(conn, scope, after)
        relevance: dict[int, float] = defaultdict(float)
        share = t.neighbour_weight  # read once: a pydantic model's attribute is slow to read
        for seq, score in base.items():
            relevance[seq] += score
            for neighbour in links.get(seq, ()):
                relevance[neighbour] += share * score
            for answer in answers.get(seq, ()):
                relevance[answer] += share * share * score  # two links away
        return relevance, known


@dataclass(frozen=True)
class _Lift:
    """What a message row's relevance is multiplied by in the ranking: its speaker's role weight,
    a mild recency gain, `speaker_boost` when the query names its speaker (or speaks in the first
    person and the row is the person's), `time_boost` when it falls in the time the query names,
    `question_weight` when it is a short question (it holds the words of what it asks about,
    seldom the answer: that is the turn after it, which `_answers` links).
    `ceiling` is the most any row can be lifted by for this query. The settings it reads are
    copied out of `RecallSettings` once (`score` runs for every row read, and an attribute of a
    pydantic model is read by the slow, unspecialised path)."""

    role_weights: Mapping[str, float]
    recency_weight: float
    speaker_boost: float
    time_boost: float
    newest_ts: float
    query_tokens: set[str]
    speaks_as_person: bool
    moment: Moment | Span | None
    ceiling: float
    half_life: float
    question_weight: float

    @classmethod
    def of(
        cls,
        conn: Statements,
        scope: int,
        tuning: RecallSettings,
        query_tokens: set[str],
        moment: Moment | Span | None,
        *,
        pooling: bool = False,
    ) -> _Lift:
        newest = conn.execute(
            "SELECT ts FROM recall_messages WHERE scope = ? ORDER BY seq DESC LIMIT 1", (scope,)
        ).fetchone()
        speaks_as_person = bool(query_tokens & _FIRST_PERSON)
        ceiling = max([*tuning.role_weights.values(), 0.8]) * (
            1.0 + max(tuning.recency_weight, 0.0)
        )
        if speaks_as_person or _may_name(conn, query_tokens, tuning.speaker_boost):
            ceiling *= max(tuning.speaker_boost, 1.0)
        ceiling *= max(tuning.time_boost, 1.0) if moment else 1.0
        ceiling *= 1.0 if pooling else max(tuning.question_weight, 1.0)
        newest_ts = float(newest[0]) if newest else 0.0
        half_life = max(tuning.recency_half_life_days, 1e-6) * 86400.0
        return cls(
            tuning.role_weights,
            tuning.recency_weight,
            tuning.speaker_boost,
            tuning.time_boost,
            newest_ts,
            query_tokens,
            speaks_as_person,
            moment,
            ceiling,
            half_life,
            1.0 if pooling else tuning.question_weight,
        )

    def score(self, row: MessageRow, relevance: float) -> float:
        score = relevance * self.role_weights.get(row.speaker, 0.8)
        if self.recency_weight and row.ts and self.newest_ts:
            age = max(self.newest_ts - row.ts, 0.0)
            score *= 1.0 + self.recency_weight * 0.5 ** (age / self.half_life)
        named = bool(row.name and self.query_tokens & name_words(row.name))
        if named or (self.speaks_as_person and row.speaker == "person"):
            score *= self.speaker_boost
        if self.moment is not None and self.moment.holds(row.ts):
            score *= self.time_boost
        if self.question_weight != 1.0 and row.asks:
            score *= self.question_weight
        return score


def _held(conn: Statements, told: Told, cap: int) -> int:
    """How many messages `told` holds, counted up to `cap` in all (one statement: each stretch a
    range of the (scope, ts) index, read only until `cap` rows are counted)."""
    if not told.stretches:
        return 0
    one = "SELECT 1 FROM recall_messages WHERE scope = ? AND ts >= ? AND ts < ?"
    row = conn.execute(
        f"SELECT count(*) FROM ({' UNION ALL '.join([one] * len(told.stretches))} LIMIT ?) c",
        [*(v for lo, hi in told.stretches for v in (told.scope, lo, hi)), cap],
    ).fetchone()
    return int(row[0]) if row else 0


def _first_and_last(conn: Statements, scope: int) -> tuple[float, float] | None:
    """The times of a scope's oldest and newest message (0, a row with no time, left out),
    each read from an end of the (scope, ts) index or of its part on either side of 0."""
    row = conn.execute(
        "SELECT coalesce((SELECT min(ts) FROM recall_messages WHERE scope = ? AND ts < 0),"
        " (SELECT min(ts) FROM recall_messages WHERE scope = ? AND ts > 0)),"
        " coalesce((SELECT max(ts) FROM recall_messages WHERE scope = ? AND ts > 0),"
        " (SELECT max(ts) FROM recall_messages WHERE scope = ? AND ts < 0))",
        (scope, scope, scope, scope),
    ).fetchone()
    return None if row is None or row[0] is None else (float(row[0]), float(row[1]))


def _varint(data: bytes) -> int:
    """The SQLite varint `data` starts with (big-endian groups of 7 bits, the ninth byte whole)."""
    value = 0
    for i, byte in enumerate(data[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            break
    return value


def _may_name(conn: Statements, query_tokens: set[str], boost: float) -> bool:
    """Whether the speaker boost can lift any row for this query: a row is lifted when the
    query holds a word of its speaker's name, and `recall_name_words` holds every word of every
    name a row has (never fewer: a forgotten row's words stay), so when it holds none of the
    query's words no row is lifted, and the ranking's bound can leave the boost out."""
    if boost <= 1.0 or not query_tokens:
        return False
    words = sorted(query_tokens)
    found = conn.execute(
        f"SELECT 1 FROM recall_name_words WHERE word IN ({','.join('?' * len(words))}) LIMIT 1",
        words,
    ).fetchone()
    return found is not None


def message_hit(row: MessageRow, score: float, corrected_by: list[str] | None = None) -> Hit:
    extra: dict[str, object] = {"role": row.role, "speaker": row.speaker}
    if row.name:
        extra["name"] = row.name
    if corrected_by:
        extra["corrected_by"] = corrected_by
    return Hit(
        f"m{row.seq}",
        "message",
        score,
        seq=row.seq,
        session=row.session,
        time=row.at,
        raw=row.body,
        extra=extra,
    )


def _links(
    conn: Statements, scope: int, seqs: Iterable[int], known: Mapping[int, MessageRow]
) -> tuple[dict[int, list[int]], dict[int, tuple[int, str]]]:
    """seq -> the turns just before and after it in its session, and each turn after (of
    `scope`) -> (the seq it follows, the start of its text: '' once forgotten). The turn before
    is a row's `prev`: taken from `known` (rows already read), else read by seq; the turns after
    are found through the index on `prev`, the start of their text read with them (enough to
    tell a short question: a tool's output of megabytes is not carried for it)."""
    wanted = list(seqs)
    out: dict[int, list[int]] = {}
    unread = []
    for seq in wanted:
        row = known.get(seq)
        if row is None:
            unread.append(seq)
        else:
            out[seq] = [row.prev] if row.prev is not None else []
    for i in range(0, len(unread), 500):
        chunk = unread[i : i + 500]
        for seq, prev in conn.execute(
            f"SELECT seq, prev FROM recall_messages WHERE seq IN ({','.join('?' * len(chunk))})",
            chunk,
        ):
            out[seq] = [prev] if prev is not None else []
    # ("+m.scope": the scope only filters. Its equality would otherwise lead SQLite's planner,
    # without statistics, to recall_messages_by_time (scope, ts), reading every message of the
    # scope.)
    after: dict[int, tuple[int, str]] = {}
    for i in range(0, len(wanted), 500):
        chunk = wanted[i : i + 500]
        for seq, prev, body in conn.execute(
            "SELECT m.seq, m.prev, substr(t.body, 1, ?) FROM recall_messages m"
            " JOIN recall_message_text t ON t.seq = m.seq"
            f" WHERE m.prev IN ({','.join('?' * len(chunk))}) AND +m.scope = ?",
            (CONTEXT_CHARS + 1, *chunk, scope),
        ):
            after[int(seq)] = (int(prev), str(body or ""))
            if prev in out:
                out[prev].append(int(seq))
    return out, after


def _answers(
    conn: Statements, scope: int, after: Mapping[int, tuple[int, str]]
) -> dict[int, list[int]]:
    """seq -> the turns that answer a question asked just after it (`after`: each turn after
    one of the strongest hits -> (that hit, the turn's text)). When the turn after a hit is a
    short question (it asks, and is short enough for its answer's context tail to hold it
    whole), it asks about the hit, and the turn after it answers: "Last weekend I had a picnic
    with friends from church." / "Fun! What did you play?" / "Charades and a scavenger hunt!".
    The answer speaks of the hit in other words, two links from it. A forgotten question's
    text is '', which asks nothing."""
    asking = [seq for seq, (_, body) in after.items() if asks(body)]
    out: dict[int, list[int]] = {}
    for i in range(0, len(asking), 500):
        chunk = asking[i : i + 500]
        for seq, question in conn.execute(
            f"SELECT seq, prev FROM recall_messages WHERE prev IN ({','.join('?' * len(chunk))})"
            " AND +scope = ?",
            (*chunk, scope),
        ):
            out.setdefault(after[int(question)][0], []).append(int(seq))
    return out


def _by_score(item: tuple[float, MessageRow]) -> tuple[float, int]:
    return (-item[0], -item[1].seq)


def _spread(
    scored: list[tuple[float, MessageRow]], limit: int, share: float
) -> list[tuple[float, MessageRow]]:
    """The best `limit` of `scored` (best first), with no session taking more than `share` of
    them while others have hits; what a session could not place waits for leftover room, in
    score order."""
    head, waiting = _heads(scored, limit, share)
    return sorted(head + waiting[: limit - len(head)], key=_by_score)


def _heads(
    scored: list[tuple[float, MessageRow]], limit: int, share: float
) -> tuple[list[tuple[float, MessageRow]], list[tuple[float, MessageRow]]]:
    """`_spread`'s picks in score order, up to `limit`, and the rows it passed over as their
    session's surplus."""
    cap = max(1, int(limit * share + 0.999)) if share < 1 else limit
    taken: dict[str | None, int] = defaultdict(int)
    head: list[tuple[float, MessageRow]] = []
    waiting: list[tuple[float, MessageRow]] = []
    for item in scored:
        if len(head) == limit:
            break
        session = item[1].session
        if taken[session] < cap:
            taken[session] += 1
            head.append(item)
        else:
            waiting.append(item)
    return head, waiting


def _settled(
    scored: list[tuple[float, MessageRow]], limit: int, tuning: RecallSettings, bound: float
) -> bool:
    """Whether rows scoring at most `bound` can no longer change `_spread`'s results: its picks
    from the rows scored so far fill the results, every one above `bound` (an unread row would
    come after all of them, and the surplus waits only while the results are not full)."""
    head, _ = _heads(sorted(scored, key=_by_score), limit, tuning.session_share)
    return len(head) == limit and head[-1][0] > bound


def _corrections(conn: Statements, seqs: Sequence[int]) -> dict[int, list[str]]:
    if not seqs:
        return {}
    targets = [f"m{s}" for s in seqs]
    out: dict[int, list[str]] = defaultdict(list)
    for target, belief in conn.execute(
        f"SELECT c.target, c.belief FROM recall_corrections c WHERE c.target IN ({','.join('?' * len(targets))})"
        " AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = c.belief)",
        targets,
    ):
        out[int(target[1:])].append(belief)
    return dict(out)


BELIEF_COLUMNS = (
    "b.id, b.kind, b.key, b.value, b.polarity, b.text, b.origin, b.source_seq, b.session, b.at,"
    " b.supersedes"
)
BELIEF_VISIBLE = (
    "NOT EXISTS (SELECT 1 FROM recall_beliefs nx WHERE nx.supersedes = b.id)"
    " AND NOT EXISTS (SELECT 1 FROM recall_hidden h WHERE h.target = b.id)"
)


def belief_sources(conn: Statements, beliefs: Iterable[str]) -> dict[str, list[int]]:
    """belief id -> the seqs it was drawn from, in order, for all of `beliefs` at once."""
    wanted = list(dict.fromkeys(beliefs))
    out: dict[str, list[int]] = {b: [] for b in wanted}
    for i in range(0, len(wanted), 500):
        chunk = wanted[i : i + 500]
        for belief, seq in conn.execute(
            "SELECT belief, seq FROM recall_belief_sources"
            f" WHERE belief IN ({','.join('?' * len(chunk))}) ORDER BY belief, seq",
            chunk,
        ):
            out[belief].append(seq)
    return out


# A belief's row, as BELIEF_COLUMNS selects it.
BeliefRow = tuple[str, str, str, str, int, str, str, int, str | None, str, str | None]


def belief_hit(row: BeliefRow, score: float, sources: list[int]) -> Hit:
    bid, kind, key, value, polarity, text, origin, source_seq, session, at, supersedes = row
    extra: dict[str, object] = {
        "type": kind,
        "key": key,
        "value": mask(value),
        "origin": origin,
        "sources": sources,
    }
    if kind == "preference":
        extra["polarity"] = "likes" if polarity > 0 else "dislikes"
    if kind == "instruction":
        extra["polarity"] = "do" if polarity > 0 else "do not"
    if supersedes:
        extra["supersedes"] = supersedes
    return Hit(
        bid,
        "belief",
        score,
        seq=source_seq,
        session=session,
        time=at,
        raw=text,
        extra=extra,
    )


# A store's own bm25 of beliefs: (connection, the query's words, the conditions on
# `recall_beliefs b` and their parameters) -> {belief rowid: score} for every match.
BeliefScores = Callable[[Statements, Sequence[str], str, Sequence[object]], dict[int, float]]


@dataclass(frozen=True)
class BeliefIndex:
    """Where a store's full-text index of beliefs is and how it scores them: `source` joins it
    to `recall_beliefs b`, `match` (one `?`: `query(words)`) picks the rows, `score` (higher is
    better; each `?` in it is `query(words)` too) ranks them. A store whose database cannot
    score bm25 in SQL gives `scores` instead (then `score` is not used)."""

    source: str
    match: str
    score: str
    query: Callable[[Sequence[str]], str]
    scores: BeliefScores | None = None


FTS5_BELIEFS = BeliefIndex(
    source="recall_beliefs_fts JOIN recall_beliefs b ON b.rowid = recall_beliefs_fts.rowid",
    match="recall_beliefs_fts MATCH ?",
    score="-bm25(recall_beliefs_fts)",
    query=match_any,
)


def rank_beliefs(
    conn: Statements,
    scope: int,
    words: Sequence[str],
    *,
    limit: int,
    reach: Reach | None = None,
    origins: Sequence[str] | None = None,
    index: BeliefIndex = FTS5_BELIEFS,
) -> list[Hit]:
    query = index.query(words) if words else ""
    if not query:
        return []
    where = [index.match, "b.scope = ?", BELIEF_VISIBLE]
    params: list[str | int] = [query, scope]
    if origins:
        where.append(f"b.origin IN ({','.join('?' * len(origins))})")
        params.extend(origins)
    if reach is not None and reach.narrowed:
        condition, values = reach.beliefs("b")
        where.append(condition)
        params.extend(values)
    if index.scores is not None:
        rows = _scored_beliefs(conn, index.scores, words, where[1:], params[1:], limit)
    else:
        rows = conn.execute(
            f"SELECT {BELIEF_COLUMNS}, {index.score} AS s FROM {index.source}"
            f" WHERE {' AND '.join(where)} ORDER BY s DESC LIMIT ?",
            ([query] * index.score.count("?") + params + [limit]),
        ).fetchall()
    sources = belief_sources(conn, [row[0] for row in rows])
    return [belief_hit(row[:-1], float(row[-1]), sources[row[0]]) for row in rows]


def _scored_beliefs(
    conn: Statements,
    scores: BeliefScores,
    words: Sequence[str],
    where: Sequence[str],
    params: Sequence[object],
    limit: int,
) -> list[Row]:
    """The best `limit` beliefs by the store's own scores, as rows of BELIEF_COLUMNS and score
    (ties in insertion order, as FTS5 returns them)."""
    scored = scores(conn, words, " AND ".join(where), params)
    best = sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:limit]
    if not best:
        return []
    marks = ",".join("?" * len(best))
    found = {
        int(row[0]): row[1:]
        for row in conn.execute(
            f"SELECT b.rowid, {BELIEF_COLUMNS} FROM recall_beliefs b WHERE b.rowid IN ({marks})",
            [rowid for rowid, _ in best],
        )
    }
    return [(*found[rowid], score) for rowid, score in best if rowid in found]


_SECTION_SPARE = 2


def rank_sections(
    conn: Statements,
    scope: int,
    words: Sequence[str],
    *,
    limit: int,
    plan: Callable[[Statements, str, Sequence[str], int], tuple[list[str], list[str]]],
    budget: int,
    chronicles: set[str] | None = None,
    index: str = SECTIONS_FTS,
    candidates: SectionCandidates | None = None,
) -> list[Hit]:
    """The best `limit` current, visible sections of `scope` for `words`.

    Bounded like message search: bm25 scores only the words `plan` can afford (their matches add
    up to at most `budget`), in the full-text index alone; a query of common words only takes
    their newest matches. The candidates are then read in score order, a chunk at a time, each
    chunk's rows, successors, hidden marks and owners in one query apiece, until `limit` pass."""
    if not words:
        return []
    if chronicles is not None and not chronicles:
        return []
    rare, common = plan(conn, index, words, budget)
    span: tuple[int, int] | None = None
    if chronicles is not None:
        # A conversation's sections: the index walk is bounded by their span of rowids.
        marks = ",".join("?" * len(chronicles))
        row = conn.execute(
            f"SELECT min(written), max(written) FROM sections WHERE chronicle IN ({marks})",
            sorted(chronicles),
        ).fetchone()
        if row is None or row[0] is None:
            return []
        span = (int(row[0]), int(row[1]))
    ranked = iter((candidates or fts5_section_candidates)(conn, rare, common, span, budget, limit))
    hits: list[Hit] = []
    # The limit and a few more: one chunk answers unless several candidates are superseded,
    # forgotten or another user's. Each candidate read costs its row (prose, about two pages),
    # a probe for a successor and one for its first message: cold, a page read apiece.
    size = limit + _SECTION_SPARE
    try:
        while len(hits) < limit:
            chunk = list(itertools.islice(ranked, size))
            if not chunk:
                break
            hits.extend(_visible_sections(conn, scope, chunk, chronicles))
    finally:
        close = getattr(ranked, "close", None)
        if close is not None:
            close()
    return hits[:limit]


def _visible_sections(
    conn: Statements,
    scope: int,
    ranked: Sequence[tuple[int, float]],
    chronicles: set[str] | None,
) -> list[Hit]:
    """The sections of `ranked` (rowid, score; best first) that are current, not forgotten, of
    `chronicles` when given, and owned by `scope`: a section belongs to whoever said the messages
    it covers (its first message says who); one it cannot attribute is shown to no one."""
    marks = ",".join("?" * len(ranked))
    rows = {
        r[0]: r
        for r in conn.execute(
            "SELECT written, chronicle, section_id, from_seq, to_seq, prose, created_at"
            f" FROM sections WHERE written IN ({marks})",
            [written for written, _ in ranked],
        )
        if chronicles is None or r[1] in chronicles
    }
    if not rows:
        return []
    pairs = [(r[1], r[2]) for r in rows.values()]
    # one probe of (chronicle, supersedes) per pair; a row value IN (VALUES ...) scans the index
    either = " OR ".join("(chronicle = ? AND supersedes = ?)" for _ in pairs)
    superseded = set(
        conn.execute(
            f"SELECT chronicle, supersedes FROM sections WHERE {either}",
            [x for pair in pairs for x in pair],
        ).fetchall()
    )
    hidden = {
        target
        for (target,) in conn.execute(
            f"SELECT target FROM recall_hidden WHERE target IN ({','.join('?' * len(pairs))})",
            [f"s:{chronicle}/{section_id}" for chronicle, section_id in pairs],
        )
    }
    owners = _first_messages(conn, [(r[3], r[4]) for r in rows.values()])
    hits = []
    for written, score in ranked:
        row = rows.get(written)
        if row is None:
            continue
        _, chronicle, section_id, lo, hi, prose, created_at = row
        owner = owners.get(lo)
        if (chronicle, section_id) in superseded or f"s:{chronicle}/{section_id}" in hidden:
            continue
        if owner is None or owner[0] != scope:
            continue
        hits.append(
            Hit(
                f"s:{chronicle}/{section_id}",
                "section",
                float(score),
                seq=lo,
                session=owner[1],
                time=created_at,
                raw=prose,
                extra={"section_id": section_id, "chronicle": chronicle, "seq_range": [lo, hi]},
            )
        )
    return hits


def _first_messages(
    conn: Statements, ranges: Sequence[tuple[int, int]]
) -> dict[int, tuple[int, str | None]]:
    """from_seq -> (scope, session) of the first indexed message in each range. A range almost
    always starts at an indexed message (read for all at once); one that starts at a message
    recall keeps no row for is looked up on its own."""
    starts = sorted({lo for lo, _ in ranges})
    out: dict[int, tuple[int, str | None]] = {
        seq: (scope, session)
        for seq, scope, session in conn.execute(
            "SELECT seq, scope, session FROM recall_messages"
            f" WHERE seq IN ({','.join('?' * len(starts))})",
            starts,
        )
    }
    for lo, hi in ranges:
        if lo not in out:
            row = conn.execute(
                "SELECT scope, session FROM recall_messages WHERE seq BETWEEN ? AND ?"
                " ORDER BY seq LIMIT 1",
                (lo, hi),
            ).fetchone()
            if row is not None:
                out[lo] = (row[0], row[1])
    return out


def fuse(lists: Sequence[tuple[float, Sequence[Hit]]], *, k: int, limit: int) -> list[Hit]:
    """Weighted reciprocal rank fusion: an item's score is the sum of weight / (k + rank)."""
    scores: dict[str, float] = defaultdict(float)
    first: dict[str, Hit] = {}
    for weight, hits in lists:
        for rank, hit in enumerate(hits, start=1):
            scores[hit.id] += weight / (k + rank)
            first.setdefault(hit.id, hit)
    ordered = sorted(scores, key=lambda i: -scores[i])[:limit]
    return [first[i].rescored(scores[i]) for i in ordered]
