"""A section as the handoff shows it: its block of text, and a stamp that says masking that
block changes nothing.

The handoff masks every block as it renders it (a section written before the masker knew a
shape still shows masked). Most blocks hold no credential, and scanning them is most of what
rendering costs: a compaction's first pass in a process scans every section it shows. So a
section is stamped when it is stored (`stamped`): a digest of its block's exact text, keyed by
the masker's own source (read when it was imported) and the Python that runs it, written into
its meta only when the masker finds nothing in that text. A section carried in (an import, a
migration) is stamped again by this masker, whatever stamp it came with. Rendering builds the
same text, and skips the scan when the stamp matches it (`masks_to_itself`).

Invariants:
- A stamp is trusted only for the text it was made from, by the masker that made it: another
  level, id, range, prose, meta or masker (a new release that knows another shape) gives
  another digest, and the block is masked as before. So skipping the scan always gives what
  masking would have given.
- Nothing is stamped that the masker would change.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from ..capture import secrets
from .sections import Section

__all__ = ["CLEAN_KEY", "block_text", "label_of", "masks_to_itself", "stamped"]

CLEAN_KEY = "clean"
"""The meta key of the stamp (its value: the block's digest under the masker's key)."""


def label_of(level: int, section_id: str) -> str:
    """How the handoff cites a section: its id, with its level before it above level 1."""
    return section_id if level <= 1 else f"L{level}:{section_id}"


def block_text(section: Section, level: int) -> str:
    """The section's block of the handoff, before masking: a header citing its label and seq
    range (and its size, level and focus), then its prose and the memory context it carries."""
    meta = section.meta or {}
    anchor = section.anchor
    count = meta.get("messages")
    parts = [f"## {label_of(level, anchor.section_id)} · seq {anchor.from_seq}–{anchor.to_seq}"]
    if isinstance(count, int):
        parts.append(f"{count} messages")
    if level > 1:
        parts.append(f"condensed from {meta.get('children_count', 'several')} sections")
    focus = meta.get("focus")
    if isinstance(focus, str) and focus:
        parts.append(f"focus: {focus}")
    text = " · ".join(parts) + "\n" + section.prose.strip()
    memory = meta.get("memory_context")
    if isinstance(memory, str) and memory.strip():
        text += "\nMemory recalled when this was folded:\n" + memory.strip()
    return text


def _masker_key() -> bytes | None:
    return secrets.MASKER_KEY


def _digest(text: str) -> str | None:
    key = _masker_key()
    if key is None:
        return None
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16, key=key).hexdigest()


def masks_to_itself(section: Section, text: str) -> bool:
    """Whether `section`'s stamp says masking `text` (its block) changes nothing."""
    stamp = section.meta.get(CLEAN_KEY) if section.meta else None
    return isinstance(stamp, str) and stamp == _digest(text)


def stamped(section: Section, level: int) -> Section:
    """`section` with its stamp in its meta when the masker finds nothing in its block at
    `level` (the level of the chronicle it is stored in); else `section` unchanged. A text the
    handoff has just rendered is found clean again by a dictionary lookup (`secrets.mask`)."""
    text = block_text(section, level)
    stamp = _digest(text) if secrets.mask(text) == text else None
    if stamp is None:  # (and a stamp it came with, from a file or another store, is not kept)
        if section.meta and CLEAN_KEY in section.meta:
            return replace(section, meta={k: v for k, v in section.meta.items() if k != CLEAN_KEY})
        return section
    return replace(section, meta={**section.meta, CLEAN_KEY: stamp})
