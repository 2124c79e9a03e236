"""The passes' ledgers of one engine, from the record each pass writes to the count read back.

Invariants (what a ledger says is `ledger.py`'s):
- A pass records its ledger uncounted (`PassLedger.counted` False) in its own transaction, right
  after its `ContextCompacted`, and hands this book what counting it needs (`hold`); counting
  appends one count per ledger (a `PassLedger` whose `of` is the record's seq), and a reader
  sees the first count in place of the record (`merged`).
- A count reads what the pass held while this process has it, else the same text from the
  store (`logged`): the folded messages' logged content or the text the record kept (`own`),
  the handoff from the tree's compaction entry the pass wrote right after the ledger, the prose
  from its sections by id. Forgetting purges prose, so the engine counts before it redraws.
- A read counts only the ledgers of the conversation it reads (`count(sessions)`); an export and
  a forget count them all.
- A count the store refuses (read-only, busy) is kept in this process and counted again by the
  next one. A process counts each ledger once (a count appended leaves the pending ones at
  once, before its event is read back); two processes counting at once append two counts, of
  which readers take the first.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..capture.secrets import mask
from ..chronicle.sections import Section
from ..log.events import Decoded, EventReader
from ..sessions.events import CompactionRecorded
from .events import PassLedger
from .ledger import LEDGER_WORDS, ledger_of, scanned

_LISTS = ("in_handoff", "in_sections", "left_out")  # the entities a ledger lists by name

__all__ = ["LedgerBook", "LedgerInputs"]

log = logging.getLogger("chronicle_engine.compaction")

_HELD = 64  # passes whose inputs a process keeps until they are counted


@dataclass(frozen=True, slots=True)
class LedgerInputs:
    """What a pass's ledger is counted from: each folded message's `scanned` text by seq, the
    handoff's text and the prose of the pass's sections."""

    folded: list[tuple[int, str]]
    handoff: str
    prose: str


class _Sections(Protocol):
    def get(self, section_id: str) -> Section | None: ...


class LedgerBook:
    """The ledgers recorded and not counted yet, what this process's passes held for them, and
    counting them. One per `Compaction`; the engine tells it each `PassLedger` it reads (`seen`)."""

    def __init__(self, reader: EventReader, chronicle: Callable[[str], _Sections]) -> None:
        self._reader = reader
        self._chronicle = chronicle
        self._uncounted: dict[int, Decoded[PassLedger]] = {}  # by the record's seq
        self._held: dict[int, LedgerInputs] = {}
        self._kept: dict[int, PassLedger] = {}  # counts the store refused
        # (event, as shown) by the event's id: the event is kept, so its id is not reused
        self._checked: dict[int, tuple[PassLedger, PassLedger]] = {}
        self._lock = threading.Lock()
        self._counting = threading.Lock()

    def seen(self, seq: int, decoded: Decoded[PassLedger]) -> None:
        """A ledger event read from the log: a record to count, or the count of one."""
        ledger = decoded.event
        with self._lock:
            if ledger.of:
                self._uncounted.pop(ledger.of, None)
            elif not ledger.counted:
                self._uncounted[seq] = decoded

    def hold(self, seq: int, inputs: LedgerInputs) -> None:
        """What the pass whose ledger was recorded at `seq` read, until it is counted."""
        with self._lock:
            self._held[seq] = inputs
            while len(self._held) > _HELD:
                self._held.pop(next(iter(self._held)))

    def pending(self, sessions: Collection[str] | None = None) -> list[Decoded[PassLedger]]:
        """The ledgers recorded and not counted yet, oldest first (of `sessions`; None: all)."""
        with self._lock:
            found: Collection[Decoded[PassLedger]] = self._uncounted.values()
            if sessions is not None:
                found = [d for d in found if (d.envelope.session or "") in sessions]
            return sorted(found, key=lambda d: d.seq)

    def inputs(self, seq: int) -> LedgerInputs | None:
        """What this process's pass held for the ledger recorded at `seq` (None: not held)."""
        with self._lock:
            return self._held.get(seq)

    def merged(
        self, ledgers: list[Decoded[PassLedger]], counts: dict[int, PassLedger]
    ) -> list[Decoded[PassLedger]]:
        """`ledgers` (records) with each one's count in its place, where there is one."""
        with self._lock:
            counts = {**self._kept, **counts}
        return [Decoded(d.envelope, counts[d.seq]) if d.seq in counts else d for d in ledgers]

    def visible(
        self,
        ledgers: Sequence[Decoded[PassLedger]],
        forgotten_between: Callable[[int, int], set[int]] | None,
    ) -> list[Decoded[PassLedger]]:
        """The ledgers as a reader may see them: one whose range holds a forgotten message
        (`forgotten_between`, None: nothing is known forgotten) no longer lists entities by name
        (its counts stay; the words may be the forgotten ones), and none lists a credential (a
        count recorded by a build that did not mask what it read loses those words)."""
        out: list[Decoded[PassLedger]] = []
        for d in ledgers:
            event = d.event
            if (
                forgotten_between is not None
                and event.folded_messages
                and forgotten_between(event.from_seq, event.to_seq)
            ):
                event = event.model_copy(update=dict.fromkeys(LEDGER_WORDS, []))
            else:
                event = self._masked(event)
            out.append(Decoded(d.envelope, event))
        return out

    def _masked(self, event: PassLedger) -> PassLedger:
        """`event` without the listed entities masking would change (a count recorded by a
        build that listed unmasked words), checked once per event: events never change, and a
        status read goes over every pass's lists."""
        with self._lock:
            found = self._checked.get(id(event))
        if found is not None and found[0] is event:
            return found[1]
        clean = event
        if any(mask(e) != e for k in _LISTS for e in getattr(event, k)):
            clean = event.model_copy(
                update={k: [e for e in getattr(event, k) if mask(e) == e] for k in _LISTS}
            )
        with self._lock:
            self._checked[id(event)] = (event, clean)
        return clean

    def count(self, sessions: Collection[str] | None = None) -> int:
        """Count the pending ledgers of `sessions` (None: every one) and append the counts;
        returns how many were counted."""
        counted = 0
        store, types = self._reader.store, self._reader.types
        with self._counting:
            for d in self.pending(sessions):
                with self._lock:
                    if d.seq in self._kept:
                        continue
                    inputs = self._held.pop(d.seq, None)
                inputs = inputs or self.logged(d)
                if inputs is None:
                    continue
                found = ledger_of(
                    d.event.chronicle, inputs.folded, handoff=inputs.handoff, prose=inputs.prose
                )
                count = found.model_copy(update={"of": d.seq})
                try:
                    store.append([types.pending(count, session=d.envelope.session)])
                except Exception:  # read-only or busy: the count stays in this process
                    log.warning("could not record the count of ledger %s", d.seq, exc_info=True)
                    with self._lock:
                        self._kept[d.seq] = count
                else:  # counted: not pending again, though its event is not read back yet
                    with self._lock:
                        self._uncounted.pop(d.seq, None)
                counted += 1
        return counted

    def logged(self, d: Decoded[PassLedger]) -> LedgerInputs | None:
        """A ledger's inputs as the store holds them, for a pass another process ran: each
        folded message's logged content (or the text the pass recorded, `own`), the handoff of
        the tree's compaction entry written right after the ledger in the pass's transaction,
        and the prose of its sections. None when one of them cannot be read."""
        ledger, store = d.event, self._reader.store
        own = {seq: str(json.loads(quoted)) for seq, quoted in ledger.own}
        seqs = [s for lo, hi in ledger.folded for s in range(lo, hi + 1)]
        logged = store.get_many([s for s in seqs if s not in own])
        folded: list[tuple[int, str]] = []
        for seq in seqs:
            text = own.get(seq)
            if text is None:
                event = logged.get(seq)
                message = event.payload.get("message") if event is not None else None
                if not isinstance(message, dict):
                    log.warning("ledger %s: message %s is not in the log", d.seq, seq)
                    return None
                text = scanned(message)
            folded.append((seq, text))
        entry = store.get(d.seq + 1)
        recorded = self._reader.decode(entry) if entry is not None else None
        if (
            not isinstance(recorded, CompactionRecorded)
            or entry is None
            or entry.envelope.session != d.envelope.session
        ):
            log.warning("ledger %s: the pass's compaction entry is not where it was written", d.seq)
            return None
        chronicle = self._chronicle(ledger.chronicle)
        prose: list[str] = []
        for section_id in ledger.sections:
            section = chronicle.get(section_id)
            if section is None:
                log.warning("ledger %s: section %s is not in the chronicle", d.seq, section_id)
                return None
            prose.append(section.prose)
        return LedgerInputs(folded, recorded.summary, "\n".join(prose))
