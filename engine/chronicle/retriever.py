"""The Retriever port: ranked retrieval over sections belongs to a real index, not here.

`substring_retriever` is deliberately naive (case-insensitive substring, most recent first) and is
named for what it is. Chronicle's own ranked search lives in the recall package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .sections import Section

__all__ = ["Retriever", "substring_retriever"]


class Retriever(Protocol):
    def __call__(self, sections: Sequence[Section], query: str) -> list[Section]: ...


def substring_retriever(sections: Sequence[Section], query: str) -> list[Section]:
    needle = query.casefold()
    hits = [s for s in sections if needle in s.prose.casefold()]
    return sorted(hits, key=lambda s: s.anchor.to_seq, reverse=True)
