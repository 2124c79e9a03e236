"""The handoff: the one message that stands in the context for everything folded.

Invariants:
- Its first line is `HANDOFF_MARKER`, its second starts with `HANDOFF_SIGNATURE`; capture never
  records it (it is derived from the log, not part of it).
- It is a pure function of the sections it shows (their levels, ids, ranges, prose and meta), and
  it is append-only in them: a static header, then one block per section, oldest first. So a pass
  that only adds sections produces a message whose bytes start with the previous one's, and the
  provider's prompt cache survives. Only a rebase (condensation) changes earlier bytes.
- It holds no credential: each block is masked as it is rendered (a section written before the
  masker knew a shape still shows masked), which keeps it a pure function of the section; a
  block whose stamp says the masker finds nothing in it is shown as it is (`chronicle/blocks.py`).
- It says it is reference only, cites every section's id and seq range, carries the memory context
  a pass was given, and says how to get the originals back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..capture.events import HANDOFF_MARKER
from ..capture.secrets import mask
from ..chronicle.blocks import block_text, label_of, masks_to_itself
from ..chronicle.sections import Section
from ..messages import HANDOFF_SIGNATURE, content_text, estimate_tokens

__all__ = [
    "ViewSection",
    "HEADER",
    "label_of",
    "parse_label",
    "render",
    "render_block",
    "cited",
    "handoff_message",
    "handoff_tokens",
    "text_of",
]

HEADER = (
    f"{HANDOFF_MARKER}\n"
    f"{HANDOFF_SIGNATURE} into the sections below; each cites the range of the conversation "
    "log it covers. This message is reference only, not a new request: act on the latest user "
    "message after it. The user's standing instructions and pinned messages are kept verbatim "
    "after this message and remain in force.\n"
    'Nothing was deleted: chronicle_expand(section_id="<id>") returns the original messages of '
    "a section byte for byte (as many as fit max_tokens; its 'next' continues), and "
    "chronicle_expand(from_seq=a, to_seq=b) any range of the log."
)

_BLOCK = re.compile(r"^## (?:L(\d+):)?(\d+-\d+(?:#\d+)?) · seq (\d+)–(\d+)", re.MULTILINE)
_LABEL = re.compile(r"^(?:L(\d+):)?(\d+-\d+(?:#\d+)?)$")


@dataclass(frozen=True, slots=True)
class ViewSection:
    """A section as the handoff shows it: level 1 is written by a pass, 2+ by condensation."""

    level: int
    section: Section

    @property
    def label(self) -> str:
        return label_of(self.level, self.section.anchor.section_id)

    @property
    def from_seq(self) -> int:
        return self.section.anchor.from_seq

    @property
    def to_seq(self) -> int:
        return self.section.anchor.to_seq


def parse_label(label: str) -> tuple[int, str] | None:
    """'L2:1-90' -> (2, '1-90'); '12-31#2' -> (1, '12-31#2'); anything else -> None."""
    match = _LABEL.match(label.strip())
    if match is None:
        return None
    return (int(match.group(1)) if match.group(1) else 1), match.group(2)


def render_block(view: ViewSection) -> str:
    """The section's block (`blocks.block_text`), masked: unless the section's stamp says
    masking it changes nothing, which spares the scan (`blocks.masks_to_itself`)."""
    text = block_text(view.section, view.level)
    return text if masks_to_itself(view.section, text) else mask(text)


def render(view: Sequence[ViewSection]) -> str:
    return HEADER + "".join("\n\n" + render_block(v) for v in view)


def cited(text: str) -> list[tuple[int, str, int, int]]:
    """(level, section id, from_seq, to_seq) of every section a handoff's text cites."""
    return [
        (int(m.group(1)) if m.group(1) else 1, m.group(2), int(m.group(3)), int(m.group(4)))
        for m in _BLOCK.finditer(text)
    ]


def handoff_message(text: str, role: str) -> dict[str, str]:
    return {"role": role, "content": text}


def handoff_tokens(text: str) -> int:
    return estimate_tokens({"role": "user", "content": text})


def text_of(message: object) -> str:
    return content_text(message) if isinstance(message, dict) else ""
