"""Related words: other ways of writing what a query word names, searched beside it at a lower
weight: a number in words and in digits ("three" and "3", "second" and "2nd"), a title and its
abbreviation ("doctor" and "dr"), and a kinship word that names a group with the words for its
members ("siblings": "brother", "sister").

Invariants:
- Lists of the language with no weight of their own: the numbers the way English writes them in
  words and in digits (the whole list); the usual titles and ranks written before a person's
  name with their usual abbreviation (not every rank there is; left out where the title is also
  a common word of another sense: "general", "major", "private"); the kinship words that name a
  group of relatives, each with the words, formal and everyday, for its members (not "bro" and
  "sis", as often a form of address as a sibling: a review's chat of "thanks bro" turns lost the
  sisters to them). A group word
  brings its members, not the other way: "my sister" does not search for "brother". Not here:
  synonyms in general, and the narrower words of a general thesaurus (WordNet 3.0's synonyms,
  and its kinds one and two levels down in a search by session, lowered figures on both
  development sets: docs/benchmarks.md).
- An abbreviation or a kinship word can have another sense ("dr" for Drive, "rev" for a
  revision, "child" for a process): what protects the ranking is the weight, which is the
  group's idf, so a related word common in the memory in its other sense weighs little.
- How the titles and kinship words came here, told as it was: first as the two entries ("dr",
  "siblings") that misses of the development sets asked for, left out then as fitted to them;
  then written out as lists and measured on both sets' halves (docs/benchmarks.md, "Titles and
  kinship words"): the titles find one more LongMemEval question's sessions in a search by
  session, the kinship words one of LongMemEval's and one of LoCoMo's; no whole figure or half
  of either set fell (one LoCoMo single-hop question lost its evidence to turns about a son).
- Matched by the word as the query wrote it (lower-cased), not by its stem: a stem brings other
  senses ("seconds" of time would bring "2nd", "tens" "10"). The related word is then searched as
  the index matches words.
- A related word never weighs more than the word the query wrote: ranking scores it as if the
  query word and all its related words were one word (their document frequencies added up), so
  a related word is discounted by how much more often the group matches than it does (see
  `group_weight`); a message holding several words related to one query word gains the best of
  them, not their sum (`search.MessageSearch._add_related`).
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


_TITLES = """
    doctor dr; professor prof; mister mr; reverend rev; saint st; senator sen; governor gov;
    captain capt; lieutenant lt; sergeant sgt; corporal cpl; colonel col; commander cmdr;
    admiral adm
"""
"""A title and its abbreviation: each brings the other, and the title's plural ("doctors")
brings the abbreviation."""

_KIN = """
    siblings sibling: brother sister;
    parents parent: mother father mom mum dad mommy daddy;
    children child kids kid offspring: son daughter;
    grandparents grandparent: grandmother grandfather grandma grandpa granny nana;
    grandchildren grandchild grandkids grandkid: grandson granddaughter;
    spouse spouses: husband wife
"""
"""A kinship word naming a group, and its other forms: the words for its members."""


def _pairs(spec: str) -> dict[str, tuple[str, ...]]:
    """'a b; c d' -> each word -> the other words of its group."""
    out: dict[str, tuple[str, ...]] = {}
    for group in (g.split() for g in spec.split(";")):
        for word in group:
            out[word] = tuple(other for other in group if other != word)
    return out


def _groups(spec: str) -> dict[str, tuple[str, ...]]:
    """'a b: c d; ...' -> a and b each -> c, d (one way)."""
    out: dict[str, tuple[str, ...]] = {}
    for group in spec.split(";"):
        names, _, members = group.partition(":")
        for name in names.split():
            out[name] = tuple(members.split())
    return out


def _plurals(pairs: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Each title's plural (all of them add an s) -> its abbreviation."""
    if any(len(other) != 1 for other in pairs.values()):
        raise ValueError("a title pairs with one abbreviation")
    return {title + "s": (short,) for short, (title,) in pairs.items() if len(title) > len(short)}


RELATED: dict[str, tuple[str, ...]] = {
    **_pairs(_NUMBERS),
    **_pairs(_TITLES),
    **_plurals(_pairs(_TITLES)),
    **_groups(_KIN),
}
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
