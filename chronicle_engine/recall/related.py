"""Related words: other ways of writing what a query word names, searched beside it at a lower
weight: a number in words and in digits ("three" and "3", "second" and "2nd").

Invariants:
- A closed list of the language, not fitted to any data: the numbers the way English writes them
  in words and in digits. (Synonyms and a kinship word's members were tried and left out: the
  entries that helped came from reading the development sets' misses, which is fitting them; a
  general thesaurus, WordNet, does not relate "siblings" to "sister", and its narrower words
  run to hundreds for a common noun.)
- Matched by the word as the query wrote it (lower-cased), not by its stem: a stem brings other
  senses ("seconds" of time would bring "2nd", "tens" "10"). The related word is then searched as
  the index matches words.
- A related word never weighs more than the word the query wrote: ranking scores it as if the
  query word and all its related words were one word (their document frequencies added up), so
  a related word is discounted by how much more often the group matches than it does (see
  `group_weight`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .porter import stem

__all__ = ["related_words", "group_weight", "idf"]

_NUMBERS = """
    zero 0; two 2; three 3; four 4; five 5; six 6; seven 7; eight 8; nine 9; ten 10;
    eleven 11; twelve 12; thirteen 13; fourteen 14; fifteen 15; sixteen 16; seventeen 17;
    eighteen 18; nineteen 19; twenty 20; thirty 30; forty 40; fifty 50; hundred 100;
    first 1st; second 2nd; third 3rd; fourth 4th; fifth 5th; sixth 6th; seventh 7th;
    eighth 8th; ninth 9th; tenth 10th
"""
"""Each number as a word and in digits ("one" is a stopword, so it is not here)."""


def _pairs(spec: str) -> dict[str, tuple[str, ...]]:
    """'a b; c d' -> each word -> the other words of its group."""
    out: dict[str, tuple[str, ...]] = {}
    for group in (g.split() for g in spec.split(";")):
        for word in group:
            out[word] = tuple(other for other in group if other != word)
    return out


RELATED: dict[str, tuple[str, ...]] = _pairs(_NUMBERS)
"""A word as written -> the words searched beside it."""


def related_words(words: Sequence[str]) -> dict[str, str]:
    """The related words of a query's `words` that the query does not already hold: each -> the
    query word it stands for (the first, when two query words bring it)."""
    held = set(words) | {stem(w) for w in words}
    out: dict[str, str] = {}
    for word in words:
        for form in RELATED.get(word.lower(), ()):
            if form not in held and stem(form) not in held:
                out.setdefault(form, word)
    return out


def idf(documents: int, matches: int) -> float:
    """bm25's inverse document frequency as FTS5 computes it (never below 1e-6)."""
    ratio = (documents - matches + 0.5) / (matches + 0.5)
    value = math.log(ratio) if ratio > 0.0 else 0.0
    return value if value > 0.0 else 1e-6


def group_weight(
    form: str, related: Mapping[str, str], frequency: Mapping[str, int], documents: int
) -> float:
    """What a related word's bm25 is multiplied by: the idf the whole group (the query word
    and every word related to it) would have as one word, over the word's own. A word rarer
    than its group is discounted (its own idf would overrate it); the factor is at most 1."""
    source = related[form]
    group = [source, *(other for other, word in related.items() if word == source)]
    own = idf(documents, frequency[form])
    together = idf(documents, sum(frequency[w] for w in group))
    return min(1.0, together / own)
