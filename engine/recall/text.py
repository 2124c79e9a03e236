"""Words, as recall sees them: the same words FTS5 indexes, and queries it can never misread.

Invariants:
- `tokens(text)` splits and folds text the way the index's tokenizer (`unicode61
  remove_diacritics 2`) does, and `stem` is the index's porter stem, so a word compared in Python
  matches exactly when FTS5 would match it.
- `match_any(words)` quotes every word before it reaches MATCH: whatever the user typed
  (quotes, operators, column filters, NEAR, parentheses) is searched for as text, never parsed
  as FTS5 syntax.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

from .porter import stem

__all__ = [
    "STOPWORDS",
    "TOKENIZER",
    "normalize",
    "tokens",
    "content_words",
    "stems",
    "quote",
    "match_any",
]

TOKENIZER = "porter unicode61 remove_diacritics 2"

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

_STOPWORDS = """
    a about above after again against all almost also am an and any anyone anything are aren
    around as at away be because been before being below between both but by can cannot could
    couldn did didn do does doesn doing don done down during each either else enough even ever
    every few for from further get gets getting go goes going gone got gotten had hadn has hasn
    have haven having he her here hers herself him himself his how however i if in into is isn it
    its itself just let lets like likely ll maybe me might more most much must mustn my myself
    never no nor not now of off often oh ok okay on once one only or other ought our ours
    ourselves out over own per please quite rather re really s same say said says shall shan she
    should shouldn since so some something somewhat such sure t than that the their theirs them
    themselves then there these they thing things this those though through thus to too under
    until up upon us ve very was wasn way we well were weren what whatever when whenever where
    whether which while who whoever whom whose why will with within without won would wouldn yeah
    yes yet you your yours yourself yourselves d m
"""
STOPWORDS = frozenset(_STOPWORDS.split())
"""Function words and chat filler. Removed from queries and from the prefetch gate's word sets;
the index keeps every word (phrases still match, and a stopword costs almost nothing there)."""


def normalize(text: str) -> str:
    """Lowercase with diacritics removed, as the tokenizer folds them."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def tokens(text: str) -> list[str]:
    """The words of `text`, folded (not stemmed), in order."""
    return _WORD.findall(normalize(text))


def content_words(text: str, *, min_len: int = 2) -> list[str]:
    """Folded words that carry meaning: no stopwords, no single letters; each once, in order."""
    seen: dict[str, None] = {}
    for word in tokens(text):
        if len(word) < min_len or word in STOPWORDS:
            continue
        seen.setdefault(word, None)
    return list(seen)


def stems(words: Iterable[str]) -> set[str]:
    return {stem(w) for w in words}


def quote(word: str) -> str:
    """One FTS5 string: inside double quotes, a double quote is written twice. NUL ends a string
    for SQLite's parser, so it is dropped."""
    return '"' + word.replace("\x00", "").replace('"', '""') + '"'


def match_any(words: Sequence[str], *, columns: Sequence[str] = ()) -> str:
    """A MATCH expression for rows containing any of `words` (each quoted), optionally limited to
    `columns`. Empty `words` give an empty string: the caller must not run that query."""
    if not words:
        return ""
    body = " OR ".join(quote(w) for w in words)
    if columns:
        return "{" + " ".join(columns) + "} : (" + body + ")"
    return body
