"""The prefetch gate: what may enter a turn unasked.

Invariants:
- An item passes only with real overlap with the new message: at least one shared content word
  (compared by porter stem, so book/booked and city/cities match, but a mere prefix does not),
  and two when the message has more than three content words.
- A single shared word is too often a coincidence: it needs a vector similarity of at least
  `min_similarity`; with no vector to vouch for it, the item is left out. Two or three shared
  words need `pair_similarity` when vectors exist; without vectors the words decide.
- Only the person's words count: URLs, short numbers and the host's framing are not words here.
"""

from __future__ import annotations

import re

from .text import content_words, stems

__all__ = ["gate_words", "passes"]

_URL = re.compile(r"\b(?:https?|ftp)://\S+|\bwww\.\S+", re.IGNORECASE)
_FRAME = re.compile(r"\[System note:[^\]]*\]|<memory-context>[\s\S]*?</memory-context>", re.I)


def gate_words(text: str) -> set[str]:
    """The stems the gate compares: content words, no URLs, no numbers under three digits."""
    cleaned = text or ""
    # Each pattern is tried at every position of the text; most texts hold neither's literal
    # part ("[" or "<"; "://" or "www." in any case: no other character matches w, W or those
    # marks under IGNORECASE), so most skip both.
    if "[" in cleaned or "<" in cleaned:
        cleaned = _FRAME.sub(" ", cleaned)
    if "://" in cleaned or "www." in cleaned.lower():
        cleaned = _URL.sub(" ", cleaned)
    words = [w for w in content_words(cleaned) if not (w.isdigit() and len(w) < 3)]
    return stems(words)


def passes(
    message: set[str],
    item: set[str],
    *,
    similarity: float | None,
    min_similarity: float,
    pair_similarity: float,
) -> bool:
    shared = len(message & item)
    need = 2 if len(message) > 3 else 1
    if shared < need or shared == 0:
        return False
    if shared == 1:
        return similarity is not None and similarity >= min_similarity
    if shared <= 3 and similarity is not None:
        return similarity >= pair_similarity
    return True
