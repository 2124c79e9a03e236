"""Words, as recall sees them: the same words FTS5 indexes, and queries it can never misread.

Invariants:
- `tokens(text)` splits and folds text the way the index's tokenizer (`unicode61
  remove_diacritics 2`) does, and `stem` is the index's porter stem, so a word compared in Python
  matches exactly when FTS5 would match it. Text reaches a message index through `index_text`,
  which stands every CJK character apart (those scripts put no spaces between words, so the
  tokenizer alone would make a whole sentence one token); `tokens` splits them the same way.
- `query_words(text)` keeps what people ask about: one-character words (digits, "plan B"), and
  CJK text as phrases of two adjacent characters ("第 6", "柜 子"), which the quoted MATCH reads
  as a phrase of the index's single characters.
- `match_any(words)` quotes every word before it reaches MATCH: whatever the user typed
  (quotes, operators, column filters, NEAR, parentheses) is searched for as text, never parsed
  as FTS5 syntax.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import cache, lru_cache
from itertools import filterfalse

from .porter import stem

__all__ = [
    "STOPWORDS",
    "TOKENIZER",
    "normalize",
    "tokens",
    "content_words",
    "query_words",
    "compounds",
    "index_text",
    "index_row",
    "stems",
    "quote",
    "match_any",
]

TOKENIZER = "porter unicode61 remove_diacritics 2"

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_CHARACTERS = (  # a character class's body: Han, kana, Hangul, Bopomofo and their extensions
    "\u2e80-\u2fdf\u3005\u3006\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\U00020000-\U0003134f"
)


@cache
def _cjk() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(one CJK character, the pieces `_pieces` cuts), compiled on the first text that is not
    ASCII: the two classes cost ~12 ms to compile, which an English-only process never needs."""
    return (
        re.compile(f"[{_CJK_CHARACTERS}]"),
        re.compile(f"[{_CJK_CHARACTERS}]|[^{_CJK_CHARACTERS}]+"),
    )


_DIACRITIC = re.compile("[\u0300-\u036f]")
# In ASCII text `_WORD` matches exactly what `str.isalnum` holds: the runs of letters and digits.
# (A table over all 256 bytes, as bytes.translate takes; only the ASCII half is ever read.)
_ASCII_GAPS = bytes(c if c < 128 and chr(c).isalnum() else 32 for c in range(256))
# A contraction's tail ("it's", "don't", "I'd") is not a word someone asks about.
_CONTRACTION = re.compile(r"(?<=[^\W_])['\u2019](?:s|t|d|m|ll|ve|re)\b", re.IGNORECASE)

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
    """Lowercase with the Latin diacritics removed, as the tokenizer folds them. No compatibility
    folding (the tokenizer keeps "６" and "ﬁ" as they are); kana keep their voicing marks and
    Hangul syllables stay whole."""
    lowered = text.lower()
    if lowered.isascii():  # (O(1)) ASCII has no diacritic and is its own NFD and NFC
        return lowered
    decomposed = unicodedata.normalize("NFD", lowered)
    return unicodedata.normalize("NFC", _DIACRITIC.sub("", decomposed))


def index_text(text: str) -> str:
    """`text` as a message index reads it: every CJK character a word of its own."""
    if text.isascii():  # no CJK character is ASCII: most text needs no search (4 KB of it, often)
        return text
    cjk = _cjk()[0]
    return cjk.sub(r" \g<0> ", text) if cjk.search(text) else text


# A sentence ends at a stop followed by more text; the space after it goes with neither.
_SENTENCE_STOP = re.compile(r"[.!?\u3002\uff01\uff1f]\s*(?=\S)")


def _sentences(text: str) -> list[str]:
    """`text` cut after each stop that more text follows, the space between dropped: what
    `re.split(r"(?<=[.!?。！？])\\s*(?=\\S)", text)` gives. The search starts at a stop
    character rather than looking behind at every position (several times faster)."""
    out: list[str] = []
    start = 0
    for m in _SENTENCE_STOP.finditer(text):
        out.append(text[start : m.start() + 1])
        start = m.end()
    out.append(text[start:])
    return out


CONTEXT_WORDS = 25
"""How much of the turn before a message its index row carries: about two sentences."""


def context_tail(before: str, limit: int = CONTEXT_WORDS) -> str:
    """The end of the turn before a message: its last whole sentences that fit in `limit` words
    (the last sentence alone cut to its last `limit` words when it is longer). An answer is
    found by the question it answers, which ends the turn before; the rest of a long reply would
    only add its words."""
    text = before.strip()
    # A long message (a tool's output) is read from its end only: the answer is the same
    # unless the loop reaches the cut sentence undecided, and then the whole is read.
    if len(text) > _TAIL_CHARS:
        found = _sentences_tail(text[-_TAIL_CHARS:], limit, cut=True)
        if found is not None:
            return found
    return _sentences_tail(text, limit, cut=False) or ""


CONTEXT_CHARS = 300
"""What `CONTEXT_WORDS` words are rarely longer than."""

_TAIL_CHARS = CONTEXT_CHARS  # of a long message, read first


def asks(text: str) -> bool:
    """Whether `text` is a short question: a question mark, and at most `CONTEXT_WORDS` words
    (what a context tail holds: the turn after it is indexed with it whole) in at most
    `CONTEXT_CHARS` characters. A turn that asks holds the words of what it asks about and
    seldom the answer, which the turn after it gives."""
    return (
        len(text) <= CONTEXT_CHARS
        and "?" in text
        and len(text.split(None, CONTEXT_WORDS)) <= CONTEXT_WORDS
    )


def _sentences_tail(text: str, limit: int, *, cut: bool) -> str | None:
    """`context_tail` of `text`; when `cut` (`text` is the end of a longer one, so its first
    sentence may be only the end of a sentence), None where the answer depends on how that
    sentence began. A cut sentence has at most the words of the whole one: more than `limit`
    of them, or more than the room left, decides as the whole one would."""
    kept: list[str] = []
    count = 0
    pieces = _sentences(text)
    for i in range(len(pieces) - 1, -1, -1):
        sentence = pieces[i]
        words = index_text(sentence).split()
        if not kept and len(words) > limit:
            return " ".join(words[-limit:])
        if count + len(words) > limit:
            break
        if cut and i == 0:
            return None
        kept.append(sentence)
        count += len(words)
    return " ".join(reversed(kept))


def index_row(name: str, body: str, before: str) -> tuple[str, str, str]:
    """A message index's columns for one message: the speaker's name, the text, and the end of
    the turn before it (`context_tail`)."""
    tail = context_tail(before) if before else ""
    return index_text(name), index_text(body), index_text(tail)


def _words(text: str) -> list[str]:
    """`_WORD.findall(text)`. ASCII text (most of it) is split at every character that is not a
    letter or a digit instead: one pass of a byte table, several times cheaper than the regular
    expression, with the same words."""
    if text.isascii():
        return text.encode("ascii").translate(_ASCII_GAPS).decode("ascii").split()
    return _WORD.findall(text)


def tokens(text: str) -> list[str]:
    """The words of `text`, folded (not stemmed), in order, as the message index holds them."""
    return _words(index_text(normalize(text)))


@lru_cache(maxsize=4096)
def name_words(name: str) -> frozenset[str]:
    """The words of a speaker's name, as ranking matches a query's words against them."""
    return frozenset(tokens(name))


def _pieces(word: str) -> list[str]:
    """A word of the tokenizer split the way `index_text` splits it: each CJK character alone,
    the runs of other characters between them kept whole."""
    if word.isascii():
        return [word]
    cjk, piece = _cjk()
    return piece.findall(word) if cjk.search(word) else [word]


def content_words(text: str, *, min_len: int = 2) -> list[str]:
    """Folded words that carry meaning, each once, in order: no stopwords, no words shorter
    than `min_len`. A run of CJK text gives its pairs of adjacent characters ("柜 子"; a lone
    character stands alone), so a CJK sentence is compared by its two-character words."""
    if text.isascii():  # no CJK pairs and nothing to fold but case: the same words, filtered
        words = _words(text.lower())
        return list(dict.fromkeys(w for w in words if len(w) >= min_len and w not in STOPWORDS))
    seen: dict[str, None] = {}
    for word in _words(normalize(text)):
        pieces = _pieces(word)
        if len(pieces) > 1:
            for pair in zip(pieces, pieces[1:], strict=False):
                seen.setdefault(" ".join(pair), None)
            continue
        if len(word) < min_len or word in STOPWORDS:
            continue
        seen.setdefault(word, None)
    return list(seen)


def query_words(text: str) -> list[str]:
    """The words a query searches for: its content words, one-character words included ("locker
    6", "plan B", "vitamin D"); a lone "a" or "i" counts only as a capital after the first word
    ("plan A"). A query of stopwords only searches for them. Each is one MATCH string: a CJK
    pair is a phrase of two index words, a compound word ("vault-3") a phrase too. A common
    irregular verb brings its other forms ("buy": "bought")."""
    text = text or ""
    if "'" in text or "\u2019" in text:  # what `_CONTRACTION` needs: most queries have neither
        text = _CONTRACTION.sub(" ", text)
    kept = _ascii_kept(text) if text.isascii() and "A" not in text else _kept(text)
    if not kept:
        kept = dict.fromkeys(_words(normalize(text)))
    for phrase in compounds(text):
        kept.setdefault(phrase, None)
    if not IRREGULAR.keys().isdisjoint(kept):
        for word in list(kept):
            for form in IRREGULAR.get(word, ()):
                kept.setdefault(form, None)
    return list(kept)


def _kept(text: str) -> dict[str, None]:
    """The words `query_words` keeps of `text`, in order, before compounds and verb forms."""
    kept: dict[str, None] = {}
    for position, original in enumerate(_words(text)):
        if len(original) == 1 and (original.isascii() or not _cjk()[0].match(original)):
            if original not in "aAiI" or (original == "A" and position > 0):
                kept.setdefault(normalize(original), None)
            continue
        if original.isascii():
            # `content_words` of one ASCII word, inline (a query's every word comes here): it
            # folds to its lower case, stays one word, and is kept unless it is a stopword.
            word = original.lower()
            if word not in STOPWORDS:
                kept.setdefault(word, None)
            continue
        for word in content_words(original, min_len=1):
            kept.setdefault(word, None)
    return kept


_NEVER_KEPT = frozenset(w for w in STOPWORDS if len(w) > 1) | {"a", "i"}
"""What `_kept` drops of an ASCII text with no capital A, wherever it stands: every stopword
but the one-letter ones other than "a" and "i" (a single letter is kept, "plan B"), and "a"
and "i" (only a capital "A" after the first word is kept)."""


def _ascii_kept(text: str) -> dict[str, None]:
    """`_kept(text)` for ASCII text with no capital A: each word is then kept wherever it stands
    or nowhere, so the words in order of first use, less those never kept, are the same."""
    kept = dict.fromkeys(_words(text.lower()))
    for word in _NEVER_KEPT.intersection(kept):
        del kept[word]
    return kept


_IRREGULAR_VERBS = """
    become became; begin began begun; break broke broken; bring brought;
    build built; buy bought; catch caught; choose chose chosen; come came; cost; cut;
    draw drew drawn; drink drank drunk; drive drove driven; eat ate eaten; fall fell fallen;
    feed fed; feel felt; fight fought; find found; fly flew flown; forget forgot forgotten;
    get got gotten; give gave given; go went gone; grow grew grown; hear heard;
    hide hid hidden; hold held; hurt; keep kept; know knew known; lead led; leave left;
    lend lent; lose lost; make made; mean meant; meet met; pay paid; put; read; ride rode ridden;
    ring rang rung; rise rose risen; run ran; say said; see saw seen; sell sold; send sent;
    set; shoot shot; show showed shown; shut; sing sang sung; sit sat; sleep slept; speak spoke
    spoken; spend spent; stand stood; steal stole stolen; swim swam swum; take took taken;
    teach taught; tear tore torn; tell told; think thought; throw threw thrown;
    understand understood; wake woke woken; wear wore worn; win won; write wrote written
"""
IRREGULAR: dict[str, tuple[str, ...]] = {
    form: tuple(other for other in forms if other != form)
    for forms in (group.split() for group in _IRREGULAR_VERBS.split(";"))
    for form in forms
    if len(forms) > 1
}
"""Each form of a common irregular English verb -> its other forms ("buy" -> "bought"): the
porter stem joins "visited" to "visit" but not "bought" to "buy". A query word brings its other
forms along, each a word of its own that bm25 weighs by its own rarity. The auxiliaries (be,
do, have) are left out: they are function words."""


_COMPOUND = 4


def compounds(text: str) -> list[str]:
    """The query's compound words as phrases of the index's words: "vault-3", "gpt-4o",
    "node_modules", "v2.1" written without a space are one name, and a message that holds them
    together ("vault-3_token") is a better match than one holding "vault" here and "3" there.
    The quoted MATCH reads each as a phrase, which bm25 weighs by its own rarity. Each once, at
    most `_COMPOUND` words long (a longer run, a path or a URL, keeps its last words)."""
    out: dict[str, None] = {}
    # a chunk of one run of word characters is one word, no compound (most chunks: skipped in C)
    for chunk in filterfalse(str.isalnum, text.split()):
        parts = _words(normalize(chunk))
        if len(parts) < 2 or any(not p.isascii() and _cjk()[0].match(p) for p in parts):
            continue
        out.setdefault(" ".join(parts[-_COMPOUND:]), None)
    return list(out)


def stems(words: Iterable[str]) -> set[str]:
    return set(map(stem, words))


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
