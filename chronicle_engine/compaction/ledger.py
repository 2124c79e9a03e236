"""The ledger of a pass: what it folded, and what its prose kept and left out.

Invariant: a ledger is a function of the pass alone (the messages it folded, the prose of the
sections the handoff shows for them, the handoff's text) and is recorded in the pass's own
transaction as a `PassLedger` event beside its `ContextCompacted`; nothing rewrites it. The log
keeps every original, so "left out" means "not named in prose": one `chronicle_expand` away.

Entities are the identifier-like words the extractive writer calls facts (ids such as tickets,
paths, numbers, dates, URLs), read from each folded message's text. An entity is *in the handoff*
when the handoff the model sees names it, *in the sections* when only the prose of the pass's
sections does (one expand of the section away), and *left out* otherwise. A message is *kept*
when the prose names one of its entities or quotes its opening words.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..chronicle.extractive import STRIP, facts_in
from ..log.events import Decoded
from ..messages import content_text
from .events import PassLedger

__all__ = ["ledger_of", "ledger_totals", "LISTED", "LEDGER_WORDS"]

LEDGER_WORDS = ("in_handoff", "in_sections", "left_out")
"""The fields of a `PassLedger` that hold words of the folded messages: a reader (and an export,
`sessions/redact.py`) leaves them out once a message of the ledger's range is forgotten."""

LISTED = 200
"""Entities a ledger lists by name in each of its lists (the counts are always whole)."""

_SCAN_CHARS = 1600  # of each folded message, read for entities (as the writer reads facts)
_OPENING_CHARS = 48  # a message whose opening words the prose quotes is kept
_ENTITIES = 12  # of each folded message at most


def _opening(text: str) -> str:
    """The first words of a message, whitespace-normalised and lower-cased: the prose quoting
    them keeps the message."""
    return " ".join(text[: _OPENING_CHARS * 4].split())[:_OPENING_CHARS].lower()


def _words(text: str) -> set[str]:
    """The words of `text` as an entity is read (split at whitespace, stripped of the same
    punctuation), lower-cased: an entity is named when it is one of them. One pass over the
    text, so checking thousands of entities does not scan the prose once for each."""
    # Lower-cased whole (no letter lower-cases across whitespace, or into punctuation), and
    # each distinct word stripped once: prose repeats its words.
    return _lowered_words(text.lower())


def _lowered_words(lowered: str) -> set[str]:
    """`_words` of a text already lower-cased (`ledger_of` lower-cases each text once)."""
    return {w.strip(STRIP) for w in set(lowered.split())}


def _pieces(lowered: str) -> set[str]:
    """The runs of `lowered` between single spaces: a text holds " w " (w without whitespace)
    only when w is one of them, so an opening whose inner word is missing cannot be quoted."""
    return set(lowered.split(" "))


def _quoted(opening: str, lowered: str, pieces: set[str]) -> bool:
    """Whether `lowered` holds `opening` (whitespace-normalised, so its words are separated by
    single spaces). The words strictly inside the opening are checked against `pieces` first:
    a miss needs no scan of the whole text (the first and last words may be partial)."""
    inner = opening.split(" ")[1:-1]
    return all(w in pieces for w in inner) and opening in lowered


def _ranges(seqs: Sequence[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for seq in sorted(seqs):
        if out and seq == out[-1][1] + 1:
            out[-1][1] = seq
        else:
            out.append([seq, seq])
    return out


def ledger_of(
    chronicle: str,
    folded: Sequence[tuple[int, dict[str, object]]],
    *,
    handoff: str,
    prose: str,
) -> PassLedger:
    """The ledger of a pass that folded `folded` ((seq, wire message) pairs), whose sections'
    prose is `prose` and whose handoff reads `handoff`."""
    lowered_handoff, lowered_prose = handoff.lower(), prose.lower()
    shown = _lowered_words(lowered_handoff)
    written = _lowered_words(lowered_prose)
    handoff_pieces, prose_pieces = _pieces(lowered_handoff), _pieces(lowered_prose)
    order: dict[str, str] = {}  # lower-cased entity -> as first seen
    kept: list[int] = []
    left: list[int] = []
    quotable = len(lowered_handoff) >= 12 or len(lowered_prose) >= 12
    for seq, message in folded:
        # The scan of each folded message (inline: this loop runs for every message a pass folds)
        content = message.get("content")
        text = content if isinstance(content, str) else content_text(message)
        if len(text) <= _SCAN_CHARS:
            scanned = text
        elif message.get("role") == "tool":
            scanned = text[: _SCAN_CHARS // 2] + "\n" + text[-_SCAN_CHARS // 2 :]
        else:
            scanned = text[:_SCAN_CHARS]
        named = False
        for entity in facts_in(scanned, limit=_ENTITIES):
            key = entity.lower()
            if key not in order:
                order[key] = entity
            if not named and (key in shown or key in written):
                named = True
        if named:
            kept.append(seq)
            continue
        # The opening is read only for a message no entity of which is named.
        opening = _opening(text) if quotable else ""
        if len(opening) >= 12 and (
            _quoted(opening, lowered_handoff, handoff_pieces)
            or _quoted(opening, lowered_prose, prose_pieces)
        ):
            kept.append(seq)
        else:
            left.append(seq)
    in_handoff = [v for k, v in order.items() if k in shown]
    in_sections = [v for k, v in order.items() if k not in shown and k in written]
    left_out = [v for k, v in order.items() if k not in shown and k not in written]
    seqs = [seq for seq, _ in folded]
    return PassLedger(
        chronicle=chronicle,
        from_seq=min(seqs, default=0),
        to_seq=max(seqs, default=0),
        folded_messages=len(folded),
        entities=len(order),
        entities_in_handoff=len(in_handoff),
        entities_in_sections=len(in_sections),
        entities_left_out=len(left_out),
        in_handoff=in_handoff[:LISTED],
        in_sections=in_sections[:LISTED],
        left_out=left_out[:LISTED],
        messages_kept=len(kept),
        messages_left_out=_ranges(left),
    )


def ledger_totals(ledgers: Sequence[Decoded[PassLedger]]) -> dict[str, object] | None:
    """The ledgers of a conversation added up, with the last pass's lists (None: no pass)."""
    if not ledgers:
        return None
    last = ledgers[-1].event
    totals = {
        key: sum(getattr(d.event, key) for d in ledgers)
        for key in (
            "folded_messages",
            "messages_kept",
            "entities",
            "entities_in_handoff",
            "entities_in_sections",
            "entities_left_out",
        )
    }
    return {
        "passes": len(ledgers),
        **totals,
        "last_pass": {
            "from_seq": last.from_seq,
            "to_seq": last.to_seq,
            "folded_messages": last.folded_messages,
            "messages_kept": last.messages_kept,
            "messages_left_out": last.messages_left_out[:20],
            "in_handoff": last.in_handoff[:20],
            "in_sections": last.in_sections[:20],
            "left_out": last.left_out[:20],
        },
    }
