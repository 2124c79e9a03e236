"""The ledger of a pass: what it folded, and what its prose kept and left out.

Invariant: a ledger is a function of the pass alone (the text of the messages it folded as the
pass held them, the prose of the sections the handoff shows for them, the handoff's text); nothing
rewrites it. The log keeps every original, so "left out" means "not named in prose": one
`chronicle_expand` away.

Two events, so that reading every folded message stays off the pass's hot path: the pass records
in its own transaction, right after its `ContextCompacted`, a `PassLedger` that is only what is
cheap and exact (the folded seqs, the sections whose prose counts, and the text of each folded
message the log does not hold as the pass held it: `needs_own`); the by-entity breakdown is
counted later (`Compaction.count_ledgers`: on the first read, and before a forget redraws any
prose) and appended as a second `PassLedger` whose `of` names the first. The count reads what the
pass held when the process that ran it still has it, else the same text from the log (the
message's logged content, or the text the skeleton recorded), the handoff from the tree's
compaction entry of the same transaction and the prose from the sections by id; both give the
same result (tests/test_ledger.py). PARTIAL: a message the host rewrote in place whose seq
capture still gave it (aligned by position, `capture/plan.py`) is not among those recorded: a
count in another process reads the log's original of it, the pass's own process the rewrite.

Entities are the identifier-like words the extractive writer calls facts (ids such as tickets,
paths, numbers, dates, URLs), read from each folded message's text with every credential masked
(as the writers read it: a ledger never lists a credential). An entity is *in the handoff*
when the handoff the model sees names it, *in the sections* when only the prose of the pass's
sections does (one expand of the section away), and *left out* otherwise. A message is *kept*
when the prose names one of its entities or quotes its opening words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ..capture.align import plain_json, wire_message
from ..capture.events import HANDOFF_OPENING
from ..capture.secrets import mask
from ..capture.shortened import origin
from ..chronicle.extractive import STRIP, facts_in
from ..log.events import Decoded
from ..messages import content_text, handoff_kind
from ..storable import SURROGATE
from .events import PassLedger

__all__ = [
    "ledger_of",
    "ledger_totals",
    "scanned",
    "held",
    "folded_of",
    "runs",
    "LISTED",
    "LEDGER_WORDS",
]

LEDGER_WORDS = ("in_handoff", "in_sections", "left_out", "own")
"""The fields of a `PassLedger` that hold words of the folded messages: a reader (and an export,
`sessions/redact.py`) leaves them out once a message of the ledger's range is forgotten."""

LISTED = 200
# (LEDGER_WORDS: `own` holds the text of folded messages the log does not hold as the pass did.)
"""Entities a ledger lists by name in each of its lists (the counts are always whole)."""

_SCAN_CHARS = 1600  # of each folded message, read for entities (as the writer reads facts)
_OPENING_CHARS = 48  # a message whose opening words the prose quotes is kept
_ENTITIES = 12  # of each folded message at most
# What an ASCII text that is a handoff starts with: the marker, or whitespace (`handoff_kind`).
_HANDOFF_LEADS = frozenset([HANDOFF_OPENING, *(c for c in map(chr, range(128)) if c.isspace())])


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


def runs(seqs: Sequence[int]) -> list[list[int]]:
    """`seqs` as sorted [from, to] runs of consecutive seqs."""
    out: list[list[int]] = []
    for seq in sorted(seqs):
        if out and seq == out[-1][1] + 1:
            out[-1][1] = seq
        else:
            out.append([seq, seq])
    return out


def scanned(message: Mapping[str, object]) -> str:
    """What the ledger reads of a folded message: its text, or of a long one the part the
    writer reads for facts (a tool result's head and tail). Its opening (the first
    `_OPENING_CHARS * 4` characters of the text) is always the start of this."""
    content = message.get("content")
    text = content if isinstance(content, str) else content_text(message)
    if len(text) <= _SCAN_CHARS:
        return text
    if message.get("role") == "tool":
        return text[: _SCAN_CHARS // 2] + "\n" + text[-_SCAN_CHARS // 2 :]
    return text[:_SCAN_CHARS]


def held(message: object) -> tuple[str, bool]:
    """`scanned` of a folded message as the pass holds it, and whether the log may hold the
    message otherwise, so the pass's ledger records that text (`PassLedger.own`): a copy
    compaction cut or the agent edited (it stands for its original), text with a lone surrogate
    (the log holds it escaped), content that is not plain JSON or a long text's role that is
    not a string, anything not a dict.
    Otherwise the log's message has the same role and content (capture stores the host's dict
    as it is), so `scanned` of it is the same."""
    if not isinstance(message, dict):
        return scanned(wire_message(message)), True
    content = message.get("content")
    if type(content) is str:
        own = (not content.isascii() and SURROGATE.search(content) is not None) or (
            content.endswith("]") and origin(message) is not None
        )
    else:
        own = content is not None and (type(content) is not list or not plain_json(content))
    # The role says what is read of a long text only (a tool result's head and tail).
    whole = content if isinstance(content, str) else content_text(message)
    long = len(whole) > _SCAN_CHARS
    return scanned(message), own or (long and type(message.get("role")) is not str)


def folded_of(
    messages: Sequence[object], seqs: Sequence[int | None], fold: Sequence[int]
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """What a pass's ledger reads of the messages it folds (`messages[i]` for i in `fold`, in
    order; the handoffs and the messages without a seq left out): their (seq, `scanned`) pairs,
    and of those `held` says the log may hold otherwise, (seq, JSON of that text), so a lone
    surrogate reads back as it was. One loop, every check inline for the common message (a
    dict whose text is ASCII, not long, not led by whitespace or a handoff's marker and not
    ending in a bracket): it runs for every message a pass folds, in the pass."""
    folded: list[tuple[int, str]] = []
    own: list[tuple[int, str]] = []
    for i in fold:
        seq = seqs[i]
        if seq is None:
            continue
        m = messages[i]
        if type(m) is dict:
            content = m.get("content")
            if (
                type(content) is str
                and len(content) <= _SCAN_CHARS  # (then the role does not change what is read)
                and content.isascii()
                and content[:1] not in _HANDOFF_LEADS
                and not content.endswith("]")
            ):
                folded.append((seq, content))
                continue
        if handoff_kind(m):
            continue
        text, differs = held(m)
        folded.append((seq, text))
        if differs:
            own.append((seq, json.dumps(text)))
    return folded, own


def ledger_of(
    chronicle: str,
    folded: Sequence[tuple[int, str]],
    *,
    handoff: str,
    prose: str,
) -> PassLedger:
    """The ledger of a pass that folded `folded` ((seq, `scanned` text) pairs), whose sections'
    prose is `prose` and whose handoff reads `handoff`."""
    lowered_handoff, lowered_prose = handoff.lower(), prose.lower()
    shown = _lowered_words(lowered_handoff)
    written = _lowered_words(lowered_prose)
    handoff_pieces, prose_pieces = _pieces(lowered_handoff), _pieces(lowered_prose)
    order: dict[str, str] = {}  # lower-cased entity -> as first seen
    kept: list[int] = []
    left: list[int] = []
    quotable = len(lowered_handoff) >= 12 or len(lowered_prose) >= 12
    for seq, raw in folded:
        # Read as the writers read it (a masked view): a credential is neither listed nor
        # counted, and an opening the prose quotes is compared masked as the prose holds it.
        text = mask(raw)
        named = False
        for entity in facts_in(text, limit=_ENTITIES):
            key = entity.lower()
            if key not in order:
                order[key] = entity
            if not named and (key in shown or key in written):
                named = True
        if named:
            kept.append(seq)
            continue
        # The opening is read only for a message no entity of which is named (`scanned`
        # starts with every character an opening reads).
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
        messages_left_out=runs(left),
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
