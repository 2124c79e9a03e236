"""The words recall compares in Python are the words FTS5 indexes, and any query is quoted."""

from __future__ import annotations

import re
import sqlite3
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from chronicle_engine.recall import text as text_module
from chronicle_engine.recall.porter import stem
from chronicle_engine.recall.text import (
    TOKENIZER,
    compounds,
    content_words,
    context_tail,
    index_text,
    match_any,
    normalize,
    query_words,
    quote,
    stems,
    tokens,
)

_db = sqlite3.connect(":memory:")
_db.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{TOKENIZER}')")
_db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")


def indexed(text: str) -> list[str]:
    _db.execute("DELETE FROM t")
    _db.execute("INSERT INTO t(x) VALUES (?)", (text,))
    return [r[0] for r in _db.execute("SELECT term FROM v ORDER BY offset")]


@settings(max_examples=400)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=24))
def test_porter_agrees_with_sqlite(word):
    assert indexed(word) == [stem(word)]


@settings(max_examples=200)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_tokens_then_stem_agree_with_the_index(text):
    assert [stem(w) for w in tokens(text)] == indexed(text)


def test_diacritics_fold_as_the_index_folds_them():
    text = "Café naïve résumé Ångström façade"
    assert [stem(w) for w in tokens(text)] == indexed(text)


def test_cjk_and_other_scripts_split_as_the_index_splits_them():
    text = "我把钥匙放在第6号柜子里 열쇠는 6번 사물함에 カギは６番 ﬁle Ångström"
    assert [stem(w) for w in tokens(text)] == indexed(index_text(text))


def test_query_words_keep_one_character_words():
    assert query_words("vault code locker 6") == ["vault", "code", "locker", "6"]
    assert query_words("plan B") == ["plan", "b"]
    assert query_words("plan A, vitamin D") == ["plan", "a", "vitamin", "d"]
    # a contraction's tail and a lone article are not what anyone asks about
    assert query_words("A dog I don't know") == ["dog", "know", "knew", "known"]
    assert query_words("第6") == ["第 6"]
    assert query_words("柜子里") == ["柜 子", "子 里"]


def test_an_irregular_verb_brings_its_other_forms():
    assert query_words("what did I buy") == ["buy", "bought"]
    assert query_words("how did she feel when they met") == ["feel", "met", "felt", "meet"]
    assert stems(["bought"]) != stems(["buy"])  # why: the porter stem does not join them


def test_a_compound_word_is_also_searched_as_a_phrase():
    assert query_words("vault-3 code") == ["vault", "3", "code", "vault 3"]
    assert compounds("the gpt-4o model in node_modules/x/y/z.js, and U.S. law") == [
        "gpt 4o",
        "x y z js",
        "u s",
    ]
    assert compounds("plain words only, 柜子-6") == []


def test_the_context_column_keeps_the_end_of_the_turn_before():
    before = (
        "We drove up the coast for a week, stopping at every little harbour town we found on the"
        " map along the way. Did you ever go? Which town would you pick?"
    )
    assert context_tail(before) == "Did you ever go? Which town would you pick?"
    assert context_tail("Short one. Really short?") == "Short one. Really short?"
    long_sentence = " ".join(f"w{i}" for i in range(40))
    assert context_tail(long_sentence).split() == [f"w{i}" for i in range(15, 40)]


_PIECES = ["a", "word", "longerword", "\u67dc", ".", "!", "?", " ", "  ", "\n", ". ", "? "]


@given(
    text=st.lists(st.sampled_from(_PIECES), max_size=120).map("".join),
    limit=st.integers(1, 8),
    tail=st.integers(1, 40),
)
def test_a_long_turn_read_from_its_end_keeps_what_the_whole_turn_gives(
    text: str, limit: int, tail: int
) -> None:
    whole = text_module._sentences_tail(text.strip(), limit, cut=False) or ""
    default = text_module._TAIL_CHARS
    text_module._TAIL_CHARS = tail  # so short texts are cut too
    try:
        assert context_tail(text, limit) == whole
    finally:
        text_module._TAIL_CHARS = default


_SPLIT_PIECES = [*_PIECES, "\u3002", "\uff01", "\uff1f", "\t", "\u3000", "\u00a0", "x.", ".y"]


@given(text=st.lists(st.sampled_from(_SPLIT_PIECES), max_size=60).map("".join))
def test_sentences_are_cut_where_the_look_behind_split_cuts_them(text: str) -> None:
    look_behind = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s*(?=\S)")
    assert text_module._sentences(text) == look_behind.split(text)


def test_inflections_share_a_stem_and_prefixes_do_not():
    assert stems(["booked", "cities"]) == stems(["book", "city"])
    assert stem("cat") != stem("category")


@settings(max_examples=300)
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=6))
def test_quoted_words_never_break_match(words):
    _db.execute("DELETE FROM t")
    _db.execute("INSERT INTO t(x) VALUES ('plain text')")
    _db.execute("SELECT rowid FROM t WHERE t MATCH ?", (match_any(words),)).fetchall()
    _db.execute(
        "SELECT rowid FROM t WHERE t MATCH ?", (match_any(words, columns=["x"]),)
    ).fetchall()


def test_quote_doubles_quotes_and_drops_nul():
    assert quote('say "hi"') == '"say ""hi"""'
    assert quote("a\x00b") == '"ab"'


def test_content_words_drop_function_words():
    assert content_words("What did Caroline research about the adoption agencies?") == [
        "caroline",
        "research",
        "adoption",
        "agencies",
    ]
    assert match_any([]) == ""


@given(st.text(alphabet=st.sampled_from("aZ é\u0301\u212aİ柜6"), max_size=12))
def test_normalize_folds_as_the_unicode_definition_does(text: str) -> None:
    decomposed = unicodedata.normalize("NFD", text.lower())
    assert normalize(text) == unicodedata.normalize(
        "NFC", re.sub("[\u0300-\u036f]", "", decomposed)
    )


# -- query_words and compounds against their plain definitions ------------------------------------


def _query_words_by_definition(text: str) -> list[str]:
    """`query_words` as first written: every word through `content_words` (the function takes
    ASCII words and single-word chunks by a shorter path, which must give the same words)."""
    text = text_module._CONTRACTION.sub(" ", text or "")
    kept: dict[str, None] = {}
    raw = text_module._WORD.findall(text)
    for position, original in enumerate(raw):
        if len(original) == 1 and not text_module._cjk()[0].match(original):
            if original not in "aAiI" or (original == "A" and position > 0):
                kept.setdefault(text_module.normalize(original), None)
            continue
        for word in _content_words_by_definition(original, min_len=1):
            kept.setdefault(word, None)
    if not kept:
        for word in text_module._WORD.findall(text_module.normalize(text)):
            kept.setdefault(word, None)
    for phrase in _compounds_by_definition(text):
        kept.setdefault(phrase, None)
    for word in list(kept):
        for form in text_module.IRREGULAR.get(word, ()):
            kept.setdefault(form, None)
    return list(kept)


def _content_words_by_definition(text: str, *, min_len: int = 2) -> list[str]:
    seen: dict[str, None] = {}
    for word in text_module._WORD.findall(text_module.normalize(text)):
        pieces = text_module._pieces(word)
        if len(pieces) > 1:
            for pair in zip(pieces, pieces[1:], strict=False):
                seen.setdefault(" ".join(pair), None)
            continue
        if len(word) < min_len or word in text_module.STOPWORDS:
            continue
        seen.setdefault(word, None)
    return list(seen)


def _compounds_by_definition(text: str) -> list[str]:
    out: dict[str, None] = {}
    for chunk in text.split():
        parts = text_module._WORD.findall(text_module.normalize(chunk))
        if len(parts) < 2 or any(text_module._cjk()[0].match(p) for p in parts):
            continue
        out.setdefault(" ".join(parts[-text_module._COMPOUND :]), None)
    return list(out)


_QUERY_PIECES = st.sampled_from(
    [
        "The", "vault", "path", "is", "kv/heron/staging", "I", "A", "a", "bought", "buy",
        "don't", "Ünïcödé", "İstanbul", "ǅemal", "x²", "ﬁle", "東京", "柜子", "vault-3",
        "gpt-4o", "node_modules", "v2.1", "e\u0301t\u00e9", "क्षत्रिय", "_", "-", "?", "42",
        "Dr.", "O'Neil", "ŞİRKET", "ß", "ΣΊΣΥΦΟΣ",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(_QUERY_PIECES, st.text(min_size=1, max_size=12)), min_size=0, max_size=12),
    st.sampled_from([" ", "  ", "\n", "", "-"]),
)
def test_query_words_and_compounds_give_what_their_definitions_give(
    pieces: list[str], sep: str
) -> None:
    text = sep.join(pieces)
    assert text_module.compounds(text) == _compounds_by_definition(text)
    assert text_module.query_words(text) == _query_words_by_definition(text)
    for min_len in (1, 2):
        assert text_module.content_words(text, min_len=min_len) == _content_words_by_definition(
            text, min_len=min_len
        )


# -- the ASCII split against the word pattern -------------------------------------------------------

_ASCII_PIECES = st.sampled_from(
    ["word", "Word", "x2", "42", "_", "a_b", "it's", "don't", "vault-3", "\t", "\x1c", "\x7f", "."]
)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(alphabet=st.characters(max_codepoint=127), max_size=80),
        st.lists(_ASCII_PIECES, max_size=12).map(" ".join),
        st.text(max_size=40),
    )
)
def test_words_are_what_the_word_pattern_finds(text: str) -> None:
    assert text_module._words(text) == text_module._WORD.findall(text)
    normalized = text_module.normalize(text)
    assert text_module.tokens(text) == text_module._WORD.findall(text_module.index_text(normalized))


def test_every_ascii_character_splits_as_the_word_pattern_splits_it() -> None:
    for code in range(128):
        text = f"ab{chr(code)}cd"
        assert text_module._words(text) == text_module._WORD.findall(text), repr(chr(code))


_ASCII_QUERY_PIECES = st.sampled_from(
    [
        "The", "the", "plan", "B", "b", "s", "t", "d", "m", "I", "i", "a", "A", "an", "AN", "it's",
        "don't", "we'll", "bought", "buy", "vault-3", "gpt-4o", "v2.1", "node_modules", "?", "42",
        "7", "Dr.", "x_y", "turn 12:", "What", "WHAT", "did", "go", "went", "_", "-", "a-b-c-d-e",
    ]
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.lists(_ASCII_QUERY_PIECES, max_size=14),
        st.lists(st.text(alphabet=st.characters(max_codepoint=127), max_size=6), max_size=8),
    ),
    st.sampled_from([" ", "  ", "\n", "", "-", "'"]),
)
def test_ascii_queries_give_what_the_definitions_give(pieces: list[str], sep: str) -> None:
    text = sep.join(pieces)
    assert text_module.query_words(text) == _query_words_by_definition(text)
    assert text_module.content_words(text) == _content_words_by_definition(text)
