"""`Compaction`: one pass folds old turns of a conversation into chronicle sections.

Invariants:
- Nothing leaves the context unless it is in the log and inside the seq range of a section the
  handoff cites: every message is captured first (`Capture.capture_messages`), and a pass
  that cannot capture returns nothing (the host keeps its list).
- The sections of one conversation (one lineage) tile the folded range without overlap: a pass
  reuses sections already written over its range (background consolidation) and writes new ones
  only for the gaps, in the conversation's chronicle (`SessionTree.chronicle_name`).
- A message leaves the context only when a section the handoff cites covers its seq: the first
  pass's range starts at the first message after the head, each later one where the last
  stopped, and a message below the view that no section covers stays (`message_facts`).
- Model calls happen before the one write transaction of a pass, within a total time cap
  (`context.summarizer_pass_seconds`); the transaction writes the new sections, the condensed
  ones, the `ContextCompacted` record and the session tree's compaction entry together.
- Background consolidation may write over a pass's range between its plan and its write; the
  write re-reads the range under the write lock and the pass plans again once (`_Raced`).
- The output satisfies the host's contract (`contract.violations`) or is not returned.
- Everything keyed by a conversation follows the lineage, so a compaction's new session id still
  reaches every section cited before it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from ..capture import shortened
from ..capture.align import plain_json, wire_message
from ..capture.events import NAMESPACE as CHAT_NAMESPACE
from ..capture.secrets import MASK_MARK, mask
from ..chronicle.forget import Rederived, rederive
from ..chronicle.sections import Section
from ..chronicle.store import SQLiteChronicleStore
from ..chronicle.stores import chronicle_of
from ..chronicle.write import draw
from ..chronicle.writers import SectionWriter, writer_from_config
from ..config import Config
from ..errors import ChronicleFork, UsageError
from ..log.events import Decoded, DomainEvent, EventReader
from ..log.store import StoredEvent
from ..messages import (
    content_text,
    estimate_tokens,
    is_own_handoff,
    latest_own_handoff,
)
from ..sessions.capture import Capture
from ..sessions.tree import CHRONICLE_PREFIX, SessionTree
from ..storable import escape_text
from .assemble import assemble
from .contract import violations
from .events import (
    NAMESPACE,
    ContextCompacted,
    ContextFocused,
    ContextPinned,
    ContextUnpinned,
    PassLedger,
)
from .expand import Expanded, by_budget, by_page, chars_of
from .facts import message_facts
from .handoff import ViewSection, cited, handoff_message, handoff_tokens, parse_label, render
from .instructions import Carried, render_instructions
from .ledger import folded_of, ledger_totals, runs
from .ledgers import LedgerBook, LedgerInputs
from .limits import bound_pins, host_overhead, message_budget
from .planner import MessageFacts, Plan, plan, total_tokens
from .policy import Policy, policy_from_config
from .status import status_of
from .view import Condensed, level_name, rebase

__all__ = ["Compaction", "Outcome", "message_facts"]

log = logging.getLogger("chronicle_engine.compaction")

_INSTRUCTION = attrgetter("instruction")  # of a MessageFacts


@dataclass(slots=True)
class Outcome:
    """What one pass did. `messages` is None when there was nothing to do (or it failed)."""

    messages: list[object] | None
    reason: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    written: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    view: list[str] = field(default_factory=list)
    rebased: bool = False
    model_calls: int = 0
    fell_back: bool = False
    duration_ms: float = 0.0
    capture_ms: float = 0.0  # of duration_ms, the time capture took to make the list durable


@dataclass(slots=True)
class _Lineage:
    """What the context events say about one conversation (by session id, read incrementally)."""

    pins: dict[tuple[int, int], str] = field(default_factory=dict)
    focus: str = ""
    passes: list[Decoded[ContextCompacted]] = field(default_factory=list)
    ledgers: list[Decoded[PassLedger]] = field(default_factory=list)


@dataclass(slots=True)
class _Pass:
    """A pass planned: the cut, and what drawing its sections needs."""

    session_id: str
    name: str  # the conversation's chronicle
    messages: list[object]
    seqs: list[int | None]
    policy: Policy
    plan: Plan
    previous: list[ViewSection]  # the view the list's handoff already carries
    through: int  # the last seq that view covers
    focus: str | None
    memory_context: str  # masked
    deadline: float | None  # for model calls
    tokens_before: int
    instructions: list[int] = field(default_factory=list)  # indices of standing instructions
    standing_before: Carried = field(default_factory=Carried)  # what the last pass carried


@dataclass(slots=True)
class _Drawn:
    """A pass drawn: the sections it writes or reuses, the view and the handoff's text."""

    new_sections: list[ViewSection] = field(default_factory=list)
    reused: list[ViewSection] = field(default_factory=list)
    condensed: list[Condensed] = field(default_factory=list)
    view: list[ViewSection] = field(default_factory=list)
    shown: set[str] = field(default_factory=set)  # labels the previous view showed
    text: str = ""
    rebased: bool = False
    reach: tuple[int, int] | None = None  # the range whose sections the plan read
    model_calls: int = 0
    fell_back: bool = False
    carried: Carried = field(default_factory=Carried)  # the standing instructions shown


class Compaction:
    """The context engine's core: compress, expand, pin, focus, status. One per core."""

    def __init__(
        self,
        reader: EventReader,
        config: Config,
        sessions: SessionTree,
        capture: Capture,
        forgotten: Callable[[Sequence[int]], set[int]],
        forgotten_between: Callable[[int, int], set[int]] | None = None,
    ) -> None:
        self._reader = reader
        self._store = reader.store
        self._types = reader.types
        self._config = config
        self._sessions = sessions
        self.capture = capture
        """Where every message of a list is captured before a pass folds it (the pin tool too)."""
        self._hidden_seqs = forgotten
        # What a new section must not summarise (cheap: asked once per pass that draws).
        self._forgotten_between = forgotten_between
        self._chronicles: dict[str, SQLiteChronicleStore] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._writer: SectionWriter | None = None
        # Context events, read once and then incrementally by seq: of every conversation up to
        # `_events_through`, and of a session further up to `_session_through[session]` (a
        # pass reads its own lineage's only, so its cost does not grow with other conversations).
        self._events_through = 0
        self._session_through: dict[str, int] = {}
        self._events_by_session: dict[str, list[Decoded[DomainEvent]]] = {}
        self._events_lock = threading.Lock()
        # the last range expanded (reading a range page by page must not read, measure and
        # check every message of it again for each page)
        self._expanded: Expanded | None = None
        self._instruction_texts: dict[int, str] = {}  # seq -> text (the log never changes)
        self.ledgers_book = LedgerBook(reader, self.chronicle)
        """The passes' ledgers not counted yet, and counting them (`count_ledgers`)."""

    # -- wiring ------------------------------------------------------------------------------

    @property
    def writer(self) -> SectionWriter:
        if self._writer is None:
            self._writer = writer_from_config(self._config, self._store, self._types)
        return self._writer

    @writer.setter
    def writer(self, value: SectionWriter) -> None:
        self._writer = value

    def chronicle(self, name: str) -> SQLiteChronicleStore:
        found = self._chronicles.get(name)
        if found is None:
            found = chronicle_of(self._store, name)
            self._chronicles[name] = found
        return found

    def _lock_for(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    # -- the lineage's context events --------------------------------------------------------

    def _refresh_events(self, sessions: Sequence[str] | None = None) -> None:
        """Read the context events appended since the last read: of every conversation, or
        of `sessions` only."""
        with self._events_lock:
            reader = self._reader
            end = 0
            if sessions is None:
                events = reader.read(after=self._events_through, namespaces=[NAMESPACE])
            else:
                after = min(self._through(s) for s in sessions)
                end = self._store.last_seq()  # read up to it, so the sessions are read through it
                events = reader.read(
                    after=after, upto=end, sessions=sessions, namespaces=[NAMESPACE]
                )
            last = None
            for event in events:
                last = event.seq
                env = event.envelope
                if event.seq <= self._through(env.session or ""):
                    continue  # read before, by a read of its own session's
                if reader.types.knows(env.namespace, env.type):  # decoded once, kept
                    decoded = Decoded(env, reader.decode(event))
                    self._events_by_session.setdefault(env.session or "", []).append(decoded)
                    if isinstance(decoded.event, PassLedger):
                        self.ledgers_book.seen(event.seq, Decoded(env, decoded.event))
            if sessions is None:
                if last is not None:
                    self._events_through = last
            else:
                for session in sessions:
                    self._session_through[session] = max(self._through(session), end)

    def _through(self, session: str) -> int:
        return max(self._events_through, self._session_through.get(session, 0))

    def lineage_state(self, session_id: str, lineage: Sequence[str] = ()) -> _Lineage:
        """Pins, focus and passes of the conversation (`lineage`: its sessions, when known)."""
        sessions = list(lineage) or self._sessions.lineage(session_id) or [session_id]
        self._refresh_events(list(dict.fromkeys(sessions)))
        events: list[Decoded[DomainEvent]] = []
        with self._events_lock:
            for sid in dict.fromkeys(sessions):
                events.extend(self._events_by_session.get(sid, ()))
        events.sort(key=lambda e: e.seq)
        state = _Lineage()
        counts: dict[int, PassLedger] = {}
        for event in events:
            match event.event:
                case ContextPinned(from_seq=lo, to_seq=hi, note=note):
                    state.pins[(lo, hi)] = note
                case ContextUnpinned(from_seq=lo, to_seq=hi):
                    state.pins.pop((lo, hi), None)
                case ContextFocused(topic=topic):
                    state.focus = topic
                case ContextCompacted() as compacted:
                    state.passes.append(Decoded(event.envelope, compacted))
                case PassLedger(of=of) as ledger if of:
                    counts.setdefault(of, ledger)  # the first count of a pass's ledger
                case PassLedger() as ledger:
                    state.ledgers.append(Decoded(event.envelope, ledger))
        if state.ledgers:
            state.ledgers = self.ledgers_book.merged(state.ledgers, counts)
        return state

    def _record(self, session_id: str, event: DomainEvent) -> StoredEvent:
        (stored,) = self._store.append([self._types.pending(event, session=session_id)])
        return stored

    def pin(self, session_id: str, from_seq: int, to_seq: int, note: str = "") -> None:
        if from_seq < 1 or to_seq < from_seq:
            raise UsageError(f"pin range {from_seq}..{to_seq} is empty; give from_seq <= to_seq")
        # Isolation: the log's seqs are shared by every session and user; a pin may name only
        # this conversation's own messages, at both ends of its range.
        for seq in dict.fromkeys((from_seq, to_seq)):
            if not self._sessions.message_events(session_id, seq, seq):
                raise UsageError(
                    f"seq {seq} is not a message of this conversation; pin a message it holds "
                    "(by a phrase it contains, or a seq from chronicle_expand or the handoff)"
                )
        self._record(session_id, ContextPinned(from_seq=from_seq, to_seq=to_seq, note=note))

    def unpin(self, session_id: str, from_seq: int, to_seq: int) -> None:
        self._record(session_id, ContextUnpinned(from_seq=from_seq, to_seq=to_seq))

    def edit_context(self, session_id: str, seq: int, content: str | None) -> dict[str, object]:
        """Hide (`content` None) or replace a message in the session's context from now on; the
        log keeps the original. Returns the message as the context holds it now."""
        return self._sessions.edit_message(session_id, seq, content)

    def set_focus(self, session_id: str, topic: str) -> None:
        self._record(session_id, ContextFocused(topic=topic.strip()))

    # -- sections ----------------------------------------------------------------------------

    def section(self, name: str, level: int, section_id: str) -> Section | None:
        """The current generation of a section, by its level and id."""
        chronicle = self.chronicle(level_name(name, level))
        found = chronicle.get(section_id)
        if found is None:
            return None
        current = chronicle.current_of(section_id)
        return found if current == section_id else chronicle.get(current)

    def _find(self, names: Sequence[str], level: int, section_id: str) -> Section | None:
        """A section from the first of `names` that holds it (a branch's handoff cites its
        parent's sections, which stay in the parent's chronicle)."""
        for name in names:
            found = self.section(name, level, section_id)
            if found is not None:
                return found
        return None

    def resolve(self, name: str | Sequence[str], label: str) -> ViewSection | None:
        """The section a label names, in `name` or the first of several chronicles."""
        parsed = parse_label(label)
        if parsed is None:
            return None
        level, section_id = parsed
        found = self._find([name] if isinstance(name, str) else name, level, section_id)
        return ViewSection(level, found) if found is not None else None

    def derive_view(self, name: str, through: int) -> list[ViewSection]:
        """The covering of 1..through by the highest-level sections (when no handoff says)."""
        levels: list[int] = [1]
        while len(self.chronicle(level_name(name, levels[-1] + 1))) > 0:
            levels.append(levels[-1] + 1)
        chosen: list[ViewSection] = []
        for level in reversed(levels):
            for section in self.chronicle(level_name(name, level)).current(to_seq=through):
                a = section.anchor
                if a.to_seq > through:
                    continue
                if any(not (a.to_seq < c.from_seq or a.from_seq > c.to_seq) for c in chosen):
                    continue
                chosen.append(ViewSection(level, section))
        return sorted(chosen, key=lambda v: v.from_seq)

    def _marked(self, lo: int, hi: int) -> set[int]:
        """Seqs in [lo, hi] whose captured text had a credential masked. Capture masks every
        message it records, so the others need no second scan before a summariser reads them."""
        try:
            return set(self._store.seqs_containing(lo, hi, CHAT_NAMESPACE, MASK_MARK))
        except Exception:  # unreadable: every message is masked again, as if none were known
            log.warning("could not read which folded messages hold credentials", exc_info=True)
            return set(range(lo, hi + 1))

    def _hidden(self, lo: int, hi: int) -> set[int]:
        """Seqs in [lo, hi] the user had forgotten, as far as this process's recall knows
        (`forgotten_between`, handed in by the wiring: nothing when recall is not running)."""
        if self._forgotten_between is None:
            return set()
        try:
            return self._forgotten_between(lo, hi)
        except Exception:  # recall unavailable: the range is drawn as the log holds it
            log.debug("compaction: recall could not say what was forgotten", exc_info=True)
            return set()

    def _previous_view(
        self, names: Sequence[str], messages: Sequence[object]
    ) -> tuple[list[ViewSection], str | None, int]:
        """The view the latest handoff in `messages` shows, its role, and how far it reaches.
        `names`: the conversation's chronicle first, then those of the sessions it branched from."""
        latest = latest_own_handoff(messages)
        if latest is None:
            return [], None, 0
        citations = cited(content_text(latest))
        through = max((hi for _, _, _, hi in citations), default=0)
        said = latest.get("role")
        role = said if isinstance(said, str) else None
        view: list[ViewSection] = []
        for level, section_id, _, _ in citations:
            found = self._find(names, level, section_id)
            if found is None:
                log.warning(
                    "the handoff cites %s, which %s no longer holds; rebuilding the view",
                    section_id,
                    names[0],
                )
                return self.derive_view(names[0], through), role, through
            view.append(ViewSection(level, found))
        return view, role, through

    # -- compress ----------------------------------------------------------------------------

    def compress(
        self,
        session_id: str,
        messages: Sequence[object],
        *,
        policy: Policy,
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
        user_id: str | None = None,
        platform: str | None = None,
    ) -> Outcome:
        started = time.perf_counter()
        messages = list(messages)
        if not messages:
            return Outcome(None, "nothing to compact")
        agent_context = self.capture.identity(session_id).get("agent_context")
        if not self.capture.capturing(agent_context):
            # Folding needs every message in the log; this agent's turns are not to be recorded.
            return Outcome(
                None,
                "capture is off for this agent (capture.enabled, capture.skip_agent_contexts),"
                " so nothing can be folded without losing it",
            )
        seqs = list(
            self.capture.capture_messages(session_id, messages, user_id=user_id, platform=platform)
        )
        captured = time.perf_counter()
        if len(seqs) != len(messages):
            raise UsageError(
                f"capture returned {len(seqs)} seqs for {len(messages)} messages; refusing to fold"
            )
        # The lineage once per pass: the chronicle's name is its first session's.
        lineage = self._sessions.lineage(session_id) or [session_id]
        name = CHRONICLE_PREFIX + lineage[0]
        with self._lock_for(name):
            for attempt in (1, 2):
                try:
                    outcome = self._compress(
                        session_id,
                        name,
                        lineage,
                        messages,
                        seqs,
                        policy=policy,
                        current_tokens=current_tokens,
                        focus_topic=focus_topic,
                        force=force,
                        memory_context=memory_context,
                    )
                    break
                except _Raced as raced:
                    # Background consolidation wrote over the range since this pass read it:
                    # plan again once, reusing what it wrote.
                    log.info("compaction of %s raced consolidation (%s)", session_id, raced)
                    if attempt == 2:
                        outcome = Outcome(None, f"raced background consolidation: {raced}")
                except (ValueError, TypeError, RecursionError):
                    # A message the planner cannot read (a lone surrogate, a cycle, nesting
                    # too deep): fold the list as the log holds it, that message escaped or
                    # marked (`wire_message`), rather than not at all.
                    stored = [m if plain_json(m) else wire_message(m) for m in messages]
                    if attempt == 2 or all(a is b for a, b in zip(stored, messages, strict=True)):
                        raise
                    log.info(
                        "compaction of %s folds the stored form of unreadable messages", session_id
                    )
                    messages = stored
        outcome.duration_ms = (time.perf_counter() - started) * 1000
        outcome.capture_ms = (captured - started) * 1000
        return outcome

    def _standing(
        self, before: Carried, policy: Policy, folded: Sequence[tuple[int | None, str]]
    ) -> tuple[str, Carried]:
        """The standing-instructions part of the handoff: those the last pass carried
        (`before`), and `folded` ((seq, text) of instruction turns this pass lets go)."""
        items = {seq: text for seq, text in folded if seq is not None}
        for seq in before.shown:
            if seq not in items:
                found = self._instruction_texts.get(seq)
                if found is None:
                    event = self._store.get(seq)
                    message = event.payload.get("message") if event is not None else None
                    found = content_text(message) if isinstance(message, dict) else ""
                    self._instruction_texts[seq] = found
                if found:
                    items[seq] = found
        return render_instructions(
            list(items.items()),
            policy.standing_tokens,
            Carried((), before.older, before.older_from, before.older_to),
        )

    def _original(self, seq: int, message: object) -> object:
        """What a section summarises: the logged original of a copy an earlier pass cut."""
        if isinstance(message, dict) and not message.get("tool_calls"):
            content = message.get("content")
            if not isinstance(content, str) or not content.endswith("]"):
                return message  # (no note ends its text, no call's arguments carry one: `origin`)
        if shortened.origin(message) != seq:
            return message
        event = self._store.get(seq)
        return event.payload.get("message", message) if event is not None else message

    def plan_for(
        self,
        facts: Sequence[MessageFacts],
        *,
        policy: Policy,
        current_tokens: int | None,
        reserve: int,
        force: bool,
    ) -> Plan:
        before = total_tokens(facts)
        # The prompt also holds the system prompt and tool schemas: the host's count says how
        # much, and a pass folds to the low watermark counting all of it (`limits`).
        overhead = host_overhead(current_tokens, before, policy.context_length)
        return plan(
            facts,
            protect_first_n=policy.protect_first_n,
            protect_last_n=policy.protect_last_n,
            budget=message_budget(policy.low_tokens, policy.high_tokens, overhead),
            reserve=reserve,
            force=force,
            max_kept=policy.max_kept_messages,
        )

    def _compress(
        self,
        session_id: str,
        name: str,
        lineage: Sequence[str],
        messages: list[object],
        seqs: list[int | None],
        *,
        policy: Policy,
        current_tokens: int | None,
        focus_topic: str | None,
        force: bool,
        memory_context: str,
    ) -> Outcome:
        """One pass: plan the cut, draw the sections it needs (outside the write lock), then
        commit the sections, the pass's record and the tree's entry in one transaction."""
        started = time.perf_counter()
        planned = self._plan_pass(
            session_id,
            name,
            lineage,
            messages,
            seqs,
            policy=policy,
            current_tokens=current_tokens,
            focus_topic=focus_topic,
            force=force,
            memory_context=memory_context,
        )
        if isinstance(planned, Outcome):
            return planned
        return self._commit_pass(planned, self._draw_pass(planned), started)

    def _plan_pass(
        self,
        session_id: str,
        name: str,
        lineage: Sequence[str],
        messages: list[object],
        seqs: list[int | None],
        *,
        policy: Policy,
        current_tokens: int | None,
        focus_topic: str | None,
        force: bool,
        memory_context: str,
    ) -> _Pass | Outcome:
        """The cut (or an Outcome saying there is nothing to fold)."""
        # Another provider's memory context may quote a credential; sections keep it masked.
        memory_context = mask(escape_text(str(memory_context or "")))
        focus_topic = escape_text(focus_topic) if isinstance(focus_topic, str) else None
        cap = self._config.settings.context.summarizer_pass_seconds
        deadline = time.monotonic() + cap if cap > 0 else None  # for model calls, this pass
        state = self.lineage_state(session_id, lineage)
        focus = (focus_topic or "").strip() or state.focus or None
        names = [name, *(n for n in self._sessions.chronicle_names(session_id) if n != name)]
        previous, _, through = self._previous_view(names, messages)
        covered = [(v.from_seq, v.to_seq) for v in previous]
        facts = message_facts(
            messages, seqs, through=through, pins=list(state.pins), covered=covered
        )
        facts = bound_pins(facts, policy.standing_tokens)
        tokens_before = total_tokens(facts)
        previous_tokens = handoff_tokens(render(previous))
        reserve = min(policy.handoff_tokens, previous_tokens + policy.section_tokens)
        # Room for the standing instructions the handoff may carry (at most their budget).
        instructions = [
            i
            for i in itertools.compress(itertools.count(), map(_INSTRUCTION, facts))
            if seqs[i] is not None
        ]
        last = state.passes[-1].event if state.passes else None
        before = (
            Carried.from_record(last.instructions, last.instructions_older)
            if last is not None
            else Carried()
        )
        most, _ = self._standing(
            before, policy, [(seqs[i], _text(messages[i])) for i in instructions]
        )
        reserve += handoff_tokens(most) if most else 0
        the_plan = self.plan_for(
            facts, policy=policy, current_tokens=current_tokens, reserve=reserve, force=force
        )
        if not the_plan.changed:
            return Outcome(
                None, "nothing to fold: the whole list is protected or fits", tokens_before
            )
        return _Pass(
            session_id,
            name,
            messages,
            seqs,
            policy,
            the_plan,
            previous,
            through,
            focus,
            memory_context,
            deadline,
            tokens_before,
            instructions,
            before,
        )

    def _draw_pass(self, p: _Pass) -> _Drawn:
        """The sections the cut needs and the handoff's text. Model calls happen here, outside
        the write lock; nothing is written."""
        d = _Drawn()
        self._draw_sections(p, d)
        self._draw_view(p, d)
        self._draw_text(p, d)
        return d

    def _draw_sections(self, p: _Pass, d: _Drawn) -> None:
        """The sections over the newly folded range: those written before (`d.reused`) and one
        drawn for each gap between them (`d.new_sections`)."""
        # The newly folded range of the log: from where the last pass stopped (so anything of
        # this conversation logged in between is covered too) to the last folded message. The
        # first pass starts at the first message after the head, so what it keeps below its
        # last folded message (pins, bridges, the request after the head) is covered too and a
        # later pass may let it go: the view covers one unbroken range.
        seqs, messages, policy = p.seqs, p.messages, p.policy
        folded_seqs = [s for i in p.plan.fold if (s := seqs[i]) is not None]
        if not folded_seqs:
            return
        head = set(p.plan.head)
        body_seqs = [s for i, s in enumerate(seqs) if s is not None and i not in head]
        chronicle = self.chronicle(p.name)
        lo = p.through + 1 if p.through else min(body_seqs)
        hi = max(folded_seqs)
        d.reach = (lo, hi)
        existing = chronicle.current(from_seq=lo, to_seq=hi)
        d.reused = [ViewSection(1, s) for s in existing]
        gaps = _gaps(lo, hi, [(s.anchor.from_seq, s.anchor.to_seq) for s in existing])
        if not gaps:  # (consolidation wrote every section the range needs: nothing to draw)
            return
        in_range = [
            (s, self._original(s, m))
            for s, m in zip(seqs, messages, strict=True)
            if s is not None and lo <= s <= hi
        ]
        marked = self._marked(lo, hi)
        hidden = self._hidden(lo, hi)
        for index, (g_lo, g_hi) in enumerate(gaps):
            # (one gap over the whole range, as on a first pass: every pair is in it)
            whole = g_lo == lo and g_hi == hi
            pairs = in_range if whole else [(s, m) for s, m in in_range if g_lo <= s <= g_hi]
            if not pairs:
                pairs = [
                    (e.seq, e.payload.get("message", {}))
                    for e in self._sessions.message_events(p.session_id, g_lo, g_hi)
                ]
            if not pairs:
                continue
            if hidden:  # a forgotten message is folded (it leaves) but never summarised
                pairs = [(s, m) for s, m in pairs if s not in hidden]
            # As the log holds them: a lone surrogate escaped, a cycle marked (`wire_message`).
            members = [
                m if isinstance(m, dict) and plain_json(m) else wire_message(m) for _, m in pairs
            ]
            extra = (
                {"memory_context": p.memory_context.strip()}
                if p.memory_context.strip() and index == len(gaps) - 1
                else None
            )
            section, drawn = draw(
                self.writer,
                g_lo,
                g_hi,
                members,
                budget_chars=policy.section_chars,
                focus=p.focus,
                deadline=p.deadline,
                clean=frozenset(
                    range(len(pairs))
                    if not marked
                    else (i for i, (s, _) in enumerate(pairs) if s not in marked)
                ),
                meta=extra,
            )
            d.model_calls += drawn.model_calls
            d.fell_back = d.fell_back or drawn.fell_back
            d.new_sections.append(ViewSection(1, section))

    def _draw_view(self, p: _Pass, d: _Drawn) -> None:
        """The view the handoff shows (condensed into levels when it is over its budget) and
        its rendered text."""
        policy = p.policy
        d.shown = {v.label for v in p.previous}
        added = sorted(
            [v for v in d.reused + d.new_sections if v.label not in d.shown],
            key=lambda v: v.from_seq,
        )
        d.view = p.previous + added
        d.text = render(d.view)  # (masks every block: rendered again only if the view changes)
        if handoff_tokens(d.text) > policy.handoff_tokens:
            d.view, d.condensed = rebase(
                d.view,
                budget_tokens=policy.handoff_tokens,
                section_chars=policy.section_chars,
                writer=self.writer,
                focus=p.focus,
                existing=lambda level, sid: self.chronicle(level_name(p.name, level)).get(sid),
                deadline=p.deadline,
            )
            d.rebased = True
            d.model_calls += sum(c.drawn.model_calls for c in d.condensed)
            d.fell_back = d.fell_back or any(c.drawn.fell_back for c in d.condensed)
            d.text = render(d.view)

    def _draw_text(self, p: _Pass, d: _Drawn) -> None:
        """What follows the view in the handoff: the standing instructions, then the memory
        recalled at this compaction when no new section carries it."""
        dropped = set(p.plan.drop)
        standing, d.carried = self._standing(
            p.standing_before,
            p.policy,
            [(p.seqs[i], _text(p.messages[i])) for i in p.instructions if i in dropped],
        )
        if standing:
            d.text += "\n\n" + standing  # after the settled prefix, like the memory below
        memory = p.memory_context.strip()
        if memory and not any(
            v.section.meta.get("memory_context") == memory for v in d.new_sections
        ):
            # Every folded part was already a section (written by consolidation), so no new
            # section carries this pass's memory context: it rides at the end of the handoff,
            # after the settled prefix, for this pass only.
            d.text += "\n\nMemory recalled at this compaction:\n" + memory

    def _commit_pass(self, p: _Pass, d: _Drawn, started: float) -> Outcome:
        """Assemble the list, check it against the host's contract, and write the sections,
        the pass's record and the tree's compaction entry in one transaction."""
        messages, session_id = p.messages, p.session_id
        role = p.plan.handoff_role
        output, rewritten = assemble(messages, p.plan, handoff_message(d.text, role), p.seqs)
        problems = violations(messages, output, rewritten)
        if problems:
            log.error(
                "compaction of %s produced an invalid list (%s); keeping the input",
                session_id,
                "; ".join(problems),
            )
            return Outcome(None, "invalid output: " + "; ".join(problems), p.tokens_before)

        tokens_after = sum(estimate_tokens(m) for m in output)
        record = self._pass_record(p, d, len(output), tokens_after, started)
        ledger, inputs = self._pass_ledger(p, d)
        at = self._write_pass(p, d, output, record, ledger)
        self.ledgers_book.hold(at, inputs)  # counted on the first read (`count_ledgers`)
        log.info(
            "chronicle compaction: session=%s messages %d->%d tokens ~%d->~%d sections +%s%s",
            session_id,
            len(messages),
            len(output),
            p.tokens_before,
            tokens_after,
            ",".join(record.written) or "none",
            " (rebased)" if d.rebased else "",
        )
        return Outcome(
            output,
            "compacted",
            p.tokens_before,
            tokens_after,
            written=record.written,
            reused=record.reused,
            view=record.view,
            rebased=d.rebased,
            model_calls=d.model_calls,
            fell_back=d.fell_back,
        )

    def _pass_record(
        self, p: _Pass, d: _Drawn, messages_after: int, tokens_after: int, started: float
    ) -> ContextCompacted:
        """The pass's record: what it folded, wrote, reused and shows, and what it cost."""
        return ContextCompacted(
            chronicle=p.name,
            from_seq=min((v.from_seq for v in d.new_sections + d.reused), default=0),
            to_seq=max((v.to_seq for v in d.new_sections + d.reused), default=0),
            written=[v.label for v in d.new_sections] + [c.view.label for c in d.condensed],
            reused=[v.label for v in d.reused if v.label not in d.shown],
            view=[v.label for v in d.view],
            rebased=d.rebased,
            tokens_before=p.tokens_before,
            tokens_after=tokens_after,
            messages_before=len(p.messages),
            messages_after=messages_after,
            handoff_tokens=handoff_tokens(d.text),
            model_calls=d.model_calls,
            fell_back=d.fell_back,
            writer=self.writer.name,
            focus=p.focus or "",
            duration_ms=round((time.perf_counter() - started) * 1000, 2),
            instructions=list(d.carried.shown),
            instructions_older=d.carried.as_record(),
        )

    def _pass_ledger(self, p: _Pass, d: _Drawn) -> tuple[PassLedger, LedgerInputs]:
        """The pass's ledger as it records it (`ledger.py`): cheap and exact, the counting left
        for later; and what counting it needs, while this process holds it."""
        folded, own = folded_of(p.messages, p.seqs, p.plan.fold)
        sections = d.new_sections + d.reused
        folded_seqs = [seq for seq, _ in folded]
        record = PassLedger(
            chronicle=p.name,
            from_seq=min(folded_seqs, default=0),
            to_seq=max(folded_seqs, default=0),
            folded_messages=len(folded),
            counted=False,
            folded=runs(folded_seqs),
            sections=[v.section.anchor.section_id for v in sections],
            own=own,
        )
        prose = "\n".join(v.section.prose for v in sections)
        return record, LedgerInputs(folded, d.text, prose)

    def _write_pass(
        self,
        p: _Pass,
        d: _Drawn,
        output: list[object],
        record: ContextCompacted,
        ledger: PassLedger,
    ) -> int:
        """Write the pass: its sections, its record and ledger, and the tree's entry. Returns
        the ledger's seq."""
        seqs, the_plan, session_id = p.seqs, p.plan, p.session_id
        # For the session tree: the verbatim tail starts at first_kept_seq (capture aligns the next
        # live list from it); the head goes before the handoff and the protected copies kept
        # before the tail right after it, so the tree's projection holds what the model holds,
        # in its order.
        tail = [s for s in (seqs[i] for i in the_plan.keep if i >= the_plan.cut) if s is not None]
        head_seqs = [s for s in (seqs[i] for i in the_plan.head) if s is not None]
        kept_seqs = [
            s for s in (seqs[i] for i in the_plan.keep if i < the_plan.cut) if s is not None
        ]
        cut_copies = {s: wire_message(m) for m in output if (s := shortened.origin(m)) is not None}
        # One transaction: the sections, the pass's record and the tree's compaction entry, so
        # a crash leaves all of them or none. The range is read again under the write lock:
        # consolidation (another thread) may have written over it since the plan read it.
        chronicle = self.chronicle(p.name)
        try:
            with self._store.atomic() as conn:
                if d.reach is not None:
                    r_lo, r_hi = d.reach
                    now = chronicle.current(conn, from_seq=r_lo, to_seq=r_hi)
                    if {x.anchor.section_id for x in now} != {
                        v.section.anchor.section_id for v in d.reused
                    }:
                        raise _Raced(f"the sections over {r_lo}..{r_hi} changed")
                for v in d.new_sections:
                    chronicle.append(v.section, conn)
                for c in d.condensed:
                    self.chronicle(level_name(p.name, c.view.level)).append(c.view.section, conn)
                # the record and its ledger, one right after the other, then the tree's entry
                _, written = self._store.append(
                    [
                        self._types.pending(record, session=session_id),
                        self._types.pending(ledger, session=session_id),
                    ]
                )
                self._sessions.record_compaction(
                    session_id,
                    section_ids=[v.label for v in d.view],
                    first_kept_seq=tail[0] if tail else None,
                    tokens_before=p.tokens_before,
                    tokens_after=record.tokens_after,
                    summary=d.text,
                    head_seqs=head_seqs,
                    kept_seqs=kept_seqs,
                    shortened=cut_copies,
                )
        except ChronicleFork as fork:
            raise _Raced(str(fork)) from fork
        return written.seq

    # -- the ledgers, counted ----------------------------------------------------------------

    def count_ledgers(self, sessions: Collection[str] | None = None) -> int:
        """Count every pass's ledger recorded and not counted yet (`ledgers.py`) of `sessions`
        (None: of every conversation), appending each count to the log; returns how many were
        counted. Reading a conversation's ledgers counts its own first, and a forget counts
        every one before it redraws any prose."""
        self._refresh_events()
        counted = self.ledgers_book.count(sessions)
        if counted:
            self._refresh_events()
        return counted

    def forget_messages(self, seqs: Collection[int]) -> list[Rederived]:
        """Forgetting hid these message seqs: redraw every section holding one without them,
        with this engine's writer, and purge the older generations' words."""

        def messages(name: str, lo: int, hi: int) -> list[StoredEvent]:
            root = name.removeprefix(CHRONICLE_PREFIX)
            latest = (self._sessions.lineage(root) or [root])[-1]
            return list(self._sessions.message_events(latest, lo, hi))

        try:  # the ledgers still to count read prose this redraw purges: count them first
            self.count_ledgers()
        except Exception:
            log.warning("could not count the ledgers before a forget", exc_info=True)
        budget = policy_from_config(self._config).section_chars
        return rederive(
            self._store, self._reader, self.writer, set(seqs), messages, budget_chars=budget
        )

    # -- reading back ------------------------------------------------------------------------

    def expand(
        self,
        session_id: str,
        *,
        section_id: str | None = None,
        from_seq: int | None = None,
        to_seq: int | None = None,
        page: int | None = None,
        page_size: int | None = None,
        max_tokens: int | None = None,
        continue_from: int | None = None,
    ) -> dict[str, object]:
        """The original messages of a section or a seq range, byte for byte.

        By budget (the default): as many messages as fit `max_tokens` (the default budget, at
        most what one tool result carries whole), from `continue_from` (a seq) or the start;
        `next` then says where the rest continues and `rest` how big it is, so "the rest of this
        section" is one more call, and a section that fits the budget is one call. By page
        (`page` or `page_size` given, as before): page N of messages at most `page_size` each."""
        names = self._sessions.chronicle_names(session_id)
        result: dict[str, object] = {}
        if section_id:
            view = self.resolve(names, section_id)
            if view is None:
                raise UsageError(
                    f"no section {section_id!r} in this conversation; the handoff lists the ids "
                    "(e.g. '12-31' or 'L2:1-90')"
                )
            lo, hi = view.from_seq, view.to_seq
            result.update(section_id=view.label, prose=view.section.prose)
            children = (view.section.meta or {}).get("children")
            if children:
                result["children"] = children
        elif from_seq is not None:
            lo, hi = int(from_seq), int(to_seq if to_seq is not None else from_seq)
            if hi < lo:
                raise UsageError(f"from_seq {lo} is after to_seq {hi}; give from_seq <= to_seq")
        else:
            raise UsageError("give section_id, or from_seq (and to_seq) to expand")
        expanded = self._range(session_id, lo, hi)
        if page is None and page_size is None:
            return by_budget(result, expanded, lo, hi, max_tokens, continue_from)
        return by_page(result, expanded, lo, hi, page, page_size)

    def _forgotten(self, seqs: list[int]) -> set[int]:
        try:
            return set(self._hidden_seqs(seqs))
        except Exception:  # recall unavailable: show the log as it is rather than nothing
            log.debug("chronicle expand: recall could not say what was forgotten", exc_info=True)
            return set()

    def _range(self, session_id: str, lo: int, hi: int) -> Expanded:
        """The lineage's messages in lo..hi that are not forgotten, measured and paged once and
        kept for the next pages while the log is unchanged (a forget appends to it)."""
        lineage = tuple(self._sessions.lineage(session_id) or [session_id])
        key = (lineage, lo, hi, self._store.last_seq())
        with self._guard:
            if self._expanded is not None and self._expanded.key == key:
                return self._expanded
        events = list(self._sessions.message_events(session_id, lo, hi))
        hidden = self._forgotten([e.seq for e in events])
        if hidden:
            events = [e for e in events if e.seq not in hidden]
        expanded = Expanded(key, events, {e.seq: chars_of(e) for e in events}, len(hidden))
        with self._guard:
            self._expanded = expanded
        return expanded

    def status(self, session_id: str, policy: Policy | None = None) -> dict[str, object]:
        self._count_quietly(session_id)
        state = self.lineage_state(session_id)
        carried: list[ViewSection] = []
        if state.passes:
            names = self._sessions.chronicle_names(session_id)
            for label in state.passes[-1].event.view:
                found = self.resolve(names, label)
                if found is not None:
                    carried.append(found)
        return status_of(
            state.passes,
            state.pins,
            state.focus,
            carried,
            policy=policy,
            summarizer=self.writer.name,
            ledger=ledger_totals(self.ledgers_book.visible(state.ledgers, self._forgotten_between)),
        )

    def ledgers(self, session_id: str) -> list[dict[str, object]]:
        """Each pass's ledger over the conversation, oldest first: what it folded, and what its
        prose kept and left out, by entity and by message."""
        self._count_quietly(session_id)
        return [
            {"seq": d.seq, "session": d.envelope.session, **d.event.model_dump(exclude=_RECORDED)}
            for d in self.ledgers_book.visible(
                self.lineage_state(session_id).ledgers, self._forgotten_between
            )
        ]

    def _count_quietly(self, session_id: str) -> None:
        """`count_ledgers` for a read of one conversation (its lineage's sessions): a ledger
        that cannot be counted reads as recorded."""
        try:
            self.count_ledgers(self._sessions.lineage(session_id) or [session_id])
        except Exception:
            log.warning("could not count the ledgers of the passes", exc_info=True)

    def has_content(self, messages: Sequence[object], policy: Policy) -> bool:
        """Whether a forced pass would fold anything (the gateway's `/compress` preflight).
        Nothing is captured: every message is taken as recorded and not yet folded."""
        seqs: list[int | None] = [
            None if is_own_handoff(m) or (isinstance(m, dict) and m.get("role") == "system") else 1
            for m in messages
        ]
        facts = message_facts(messages, seqs, through=0)
        return self.plan_for(
            facts, policy=policy, current_tokens=None, reserve=0, force=True
        ).changed


_RECORDED = {"of", "folded", "sections", "own"}  # what a ledger records to be counted


class _Raced(Exception):
    """The sections over a pass's range changed between its plan and its write."""


def _gaps(lo: int, hi: int, covered: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of lo..hi that no (from, to) range covers."""
    gaps: list[tuple[int, int]] = []
    position = lo
    for a, b in sorted(covered):
        if a > position:
            gaps.append((position, min(a - 1, hi)))
        position = max(position, b + 1)
        if position > hi:
            break
    if position <= hi:
        gaps.append((position, hi))
    return [(a, b) for a, b in gaps if a <= b]


def _text(message: object) -> str:
    """A standing instruction's words (`is_standing_instruction` holds only for a dict)."""
    return content_text(message) if isinstance(message, dict) else ""
