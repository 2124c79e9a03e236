"""Ranking ideas tried on both development sets and left out, each reproducible on both halves.

Each probe changes one part of the ranking for the length of a run (by wrapping it in this
process; the plugin's code is not changed) and asks every question of both development sets as
the recall benches ask it: LoCoMo (`chronicle_search`, scope messages; halves: conversations 1-3
and 4-5) and LongMemEval_s (`chronicle_search`, as `bench/longmemeval.py --variant protocol`;
halves by the sha1 of the question id), each also with `by_session`.

    python bench/longmemeval.py --variant protocol --keep DIR_LME    # the haystacks, once
    python bench/ranking_probes.py --lme DIR_LME [--probes base,cover-0.25,...]

Probes:
- `cover-MIX`: coverage-aware choice of the ten (xQuAD, Santos, Macdonald and Ounis, WWW 2010,
  with the query's words as its aspects, each weighed by its idf): greedily, after the best hit,
  the next is the candidate with the most (1 - MIX) x its score over the best's + MIX x the idf
  share of the query words it holds that the results so far do not; among the best 30
  candidates (all 100 for `by_session`), the session share kept.
- `bm25-plus`, `bm25-l`, `bm25-f`, `bm25-fb`: FTS5's candidates re-scored in Python with a
  variant of bm25's length normalisation: BM25+ (Lv and Zhai, CIKM 2011; delta 1), BM25L (Lv
  and Zhai, 2011; delta 0.5), BM25F (Robertson, Zaragoza and Taylor, CIKM 2004: each column's
  frequency normalised by its own length over its own average, b 0.75 each) and BM25F with
  b 0 for the name and the turn before (b 0.75 for the text). k1 1.2, b 0.75 and the column
  weights as the index has them. (`bm25-std` is FTS5's own formula computed the same way: it
  should give the base figures.)
- `pool-cover`, `pool-fuse`, `pool-mul`: `by_session` with each session's evidence taken as the
  distinct query words its candidates hold, weighed by idf: alone (ties by the pooled rank),
  fused with the pooled ranking by reciprocal rank (k 10), or the pooled weight times
  (1 + the covered idf share).
- `wn-first`, `wn-nouns`, `wn-all`: a general thesaurus beside the number words of
  `recall/related.py`: each query word's WordNet 3.0 synonyms (`bench/wordnet.py`; its most
  frequent sense as a noun, a verb and an adjective, the noun sense alone, or every sense),
  searched and weighed as related words are (`related.group_weight`: never above the word the
  query wrote). Needs WordNet's database files (`--wordnet DIR`; Debian's wordnet-base).
- `kinds-1`, `kinds-2`: in a search pooled by session (`by_session`) only, each query noun's
  WordNet synonyms and its kinds one or two levels down (hyponyms and instances of its most
  frequent sense: "siblings" -> "twin" at one, "brother" at two), the nearest 40, searched and
  weighed as related words. Needs `--wordnet DIR`.
- `related-numbers`, `related-titles`, `related-kin`: the closed lists of `recall/related.py`
  cut back: numbers alone (the plugin before titles and kinship words), numbers and titles,
  numbers and kinship words.
- `qa-off`, `qa-end`, `qa-long`: the answer to a question asked right after a hit
  (`search._answers`) not linked; linked only when the question ends with its question mark;
  linked whatever the question's length.
- `ask-W`, `askall-W`: a short question's score factor (`question_weight`) is W (`ask-1`: no
  factor), the pooled ranking of `by_session` counting it in full as the plugin does; in
  `askall-W`, W there too.

Printed per probe: LoCoMo recall@10 (categories 1-4) and LongMemEval turn recall_all@10 on each
half, every evidence session among the ten of `by_session` on each half, and the mean process CPU
time of one plain search on each set (the probe's own work included). Then how deep the base
ranking holds the evidence, and how many of each set's turns, and of its evidence turns, are
short questions (`text.asks`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import locomo  # noqa: E402
import longmemeval  # noqa: E402
from wordnet import DEFAULT_DIR, WordNet  # noqa: E402

import chronicle_engine.recall.recall as recall_module  # noqa: E402
import chronicle_engine.recall.related as related_module  # noqa: E402
import chronicle_engine.recall.search as search_module  # noqa: E402
from chronicle_engine.core import ChronicleCore  # noqa: E402
from chronicle_engine.recall.porter import stem  # noqa: E402
from chronicle_engine.recall.related import RELATED, idf  # noqa: E402
from chronicle_engine.recall.schema import message_index  # noqa: E402
from chronicle_engine.recall.search import Hit, MessageSearch  # noqa: E402
from chronicle_engine.recall.text import IRREGULAR, asks, index_row, query_words, tokens  # noqa: E402
from chronicle_engine.recall.tools import RECALL_TOOLS  # noqa: E402
from chronicle_engine.tools import dispatch  # noqa: E402

K1, B = 1.2, 0.75
COVER_POOL = 30
PROBES = (
    "base",
    "cover-0.1",
    "cover-0.25",
    "cover-0.5",
    "bm25-std",
    "bm25-plus",
    "bm25-l",
    "bm25-f",
    "bm25-fb",
    "pool-cover",
    "pool-fuse",
    "pool-mul",
    "wn-first",
    "wn-nouns",
    "wn-all",
    "kinds-1",
    "kinds-2",
    "related-numbers",
    "related-titles",
    "related-kin",
    "qa-off",
    "qa-end",
    "qa-long",
    "ask-1",
    "ask-0.5",
    "ask-0.6",
    "ask-0.7",
    "ask-0.8",
    "ask-0.85",
    "ask-0.9",
    "askall-0.75",
)
THESAURUS = {
    "first": {"parts": "nva", "first_sense": True},
    "nouns": {"parts": "n", "first_sense": True},
    "all": {"parts": "nva", "first_sense": False},
}

# -- the query's words as aspects ------------------------------------------------------------------


def aspects(words: Sequence[str]) -> dict[str, frozenset[str]]:
    """Each single query word -> the stems that cover it (its own, its other forms')."""
    out: dict[str, frozenset[str]] = {}
    taken: set[str] = set()
    for word in words:
        if " " in word or word in taken:
            continue
        forms = {word, *IRREGULAR.get(word, ()), *RELATED.get(word, ())}
        taken.update(forms)
        out[word] = frozenset(stem(f) for f in forms)
    return out


def covered(hit: Hit, wanted: Mapping[str, frozenset[str]]) -> frozenset[str]:
    held = {stem(w) for w in {*tokens(hit.raw), *tokens(str(hit.extra.get("name") or ""))}}
    return frozenset(a for a, forms in wanted.items() if not forms.isdisjoint(held))


def idf_weights(
    search: MessageSearch, conn: Any, scope: int, wanted: Mapping[str, object]
) -> dict[str, float]:
    budget = search.tuning.match_budget + 1
    frequency = search._frequencies(conn, search.index_key(scope), list(wanted), budget)
    documents = search.documents(conn, scope)
    return {a: idf(documents, frequency[a]) for a in wanted}


# -- probe: coverage-aware choice of the results ---------------------------------------------------


def choose_covering(
    hits: Sequence[Hit],
    limit: int,
    weights: Mapping[str, float],
    held: Mapping[str, frozenset[str]],
    cap: int,
    mix: float,
) -> list[Hit]:
    """xQuAD's greedy choice with binary coverage (see the module's docstring)."""
    if not hits:
        return []
    top = max(hits[0].score, 1e-9)
    total = sum(weights.values()) or 1.0
    left = dict(weights)
    taken: Counter[object] = Counter()
    waiting, chosen = list(hits), []
    while waiting and len(chosen) < limit:
        best, at = -1.0, -1
        for i, hit in enumerate(waiting):
            if taken[hit.session or hit.id] >= cap:
                continue
            gain = sum(left.get(a, 0.0) for a in held[hit.id])
            value = (1.0 - mix) * hit.score / top + mix * gain / total
            if value > best:
                best, at = value, i
            if not left:
                break  # every word covered: score order
        if at < 0:
            break
        hit = waiting.pop(at)
        chosen.append(hit)
        taken[hit.session or hit.id] += 1
        for a in held[hit.id]:
            left.pop(a, None)
    return chosen + waiting[: limit - len(chosen)]


@contextlib.contextmanager
def cover(mix: float) -> Iterator[None]:
    rank = MessageSearch.rank

    def covering_rank(
        self: MessageSearch,
        conn: Any,
        scope: int,
        words: Sequence[str],
        query_tokens: set[str],
        **kw: Any,
    ) -> list[Hit]:
        limit = int(kw.pop("limit", 10))
        wanted = aspects(words)
        if len(wanted) < 2:  # one word: covered by the best hit, the rest by score as before
            return rank(self, conn, scope, words, query_tokens, **kw, limit=limit)
        hits = rank(self, conn, scope, words, query_tokens, **kw, limit=max(limit, COVER_POOL))
        weights = idf_weights(self, conn, scope, wanted)
        held = {h.id: covered(h, wanted) for h in hits}
        cap = max(1, int(limit * self.tuning.session_share + 0.999))
        return choose_covering(hits, limit, weights, held, cap, mix)

    MessageSearch.rank = covering_rank  # type: ignore[method-assign]
    try:
        yield
    finally:
        MessageSearch.rank = rank  # type: ignore[method-assign]


# -- probe: bm25's length normalisation --------------------------------------------------------------


def _varints(data: bytes) -> list[int]:
    out, i = [], 0
    while i < len(data):
        value = 0
        for j in range(9):
            byte = data[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out


def _frequencies(tokens_: list[str], phrase: list[str]) -> int:
    if len(phrase) == 1:
        return tokens_.count(phrase[0])
    n = len(phrase)
    return sum(1 for i in range(len(tokens_) - n + 1) if tokens_[i : i + n] == phrase)


def _term(
    mode: str,
    f: float,
    per: Sequence[float],
    lens: Sequence[int],
    averages: Sequence[float],
    weights: Sequence[float],
    length: int,
    average: float,
) -> float:
    """One word's bm25 factor (times its idf) under `mode`."""
    norm = 1.0 - B + B * length / average
    if mode in ("std", "plus"):
        if not f:
            return 0.0
        return f * (K1 + 1) / (f + K1 * norm) + (1.0 if mode == "plus" else 0.0)
    if mode == "l":
        ctd = f / norm
        return (K1 + 1) * (ctd + 0.5) / (K1 + ctd + 0.5) if ctd > 0 else 0.0
    bs = (B, B, B) if mode == "f" else (0.0, B, 0.0)
    tf = sum(
        w * x / (1.0 - b + b * n / a)
        for w, x, n, a, b in zip(weights, per, lens, averages, bs, strict=True)
        if a
    )
    return tf * (K1 + 1) / (K1 + tf) if tf else 0.0


@contextlib.contextmanager
def bm25_variant(mode: str) -> Iterator[None]:
    bm25 = MessageSearch.bm25

    def rescored(
        self: MessageSearch, conn: Any, scope: int, words: Sequence[str], reach: Any = None
    ) -> dict[int, float]:
        found = bm25(self, conn, scope, words, reach)
        rare, _ = self.plan(conn, self.index_key(scope), words)
        if not found or not rare:
            return found  # a query of common words: newest matches, no bm25 to vary
        table = message_index(scope)
        record = conn.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
        counts = _varints(bytes(record[0]))
        documents, totals = counts[0], counts[1:4]
        averages = [t / documents for t in totals]
        average = sum(totals) / documents
        marks = ",".join("?" * len(found))
        rows = {
            seq: index_row(name, body, ctx)
            for seq, name, body, ctx in conn.execute(
                f"SELECT seq, name, body, ctx FROM recall_message_text WHERE seq IN ({marks})",
                list(found),
            )
        }
        frequency = self._frequencies(conn, table, list(rare), 10**9)
        weights_ = (self.tuning.name_weight, 1.0, self.tuning.context_weight)
        phrases = {w: [stem(t) for t in tokens(w)] for w in rare}
        out: dict[int, float] = {}
        for seq, score in found.items():
            if seq not in rows:
                out[seq] = score
                continue
            columns = [[stem(t) for t in tokens(c)] for c in rows[seq]]
            lens = [len(c) for c in columns]
            total = 0.0
            for word, phrase in phrases.items():
                per = [_frequencies(c, phrase) for c in columns]
                f = sum(w * x for w, x in zip(weights_, per, strict=True))
                factor = _term(mode, f, per, lens, averages, weights_, sum(lens), average)
                total += idf(documents, frequency[word]) * factor
            out[seq] = total
        return out

    MessageSearch.bm25 = rescored  # type: ignore[method-assign]
    try:
        yield
    finally:
        MessageSearch.bm25 = bm25  # type: ignore[method-assign]


# -- probe: sessions by the query words they cover ---------------------------------------------------

ASKING: dict[str, Any] = {}  # the question being asked: core, query, user (the pool needs them)


@contextlib.contextmanager
def pool_variant(mode: str) -> Iterator[None]:
    pool_sessions = recall_module.pool_sessions

    def pooled(hits: Sequence[Hit], *, k: int, limit: int) -> list[Hit]:
        index = ASKING["core"].recall.index
        wanted = aspects(query_words(ASKING["query"])[:50])
        with index.reading("probing") as conn:
            scope = index.scope(conn, None, ASKING["user"], None)
            weights = idf_weights(index._messages, conn, scope, wanted) if scope else {}
        rrf: dict[str, float] = defaultdict(float)
        held: dict[str, set[str]] = defaultdict(set)
        best: dict[str, Hit] = {}
        for rank, hit in enumerate(hits, start=1):
            key = hit.session or hit.id
            rrf[key] += 1.0 / (k + rank)
            held[key] |= covered(hit, wanted)
            best.setdefault(key, hit)
        total = sum(weights.values()) or 1.0
        share = {key: sum(weights.get(a, 0.0) for a in held[key]) / total for key in rrf}
        by_pool = sorted(rrf, key=lambda s: -rrf[s])
        by_cover = sorted(rrf, key=lambda s: (-share[s], -rrf[s]))
        if mode == "cover":
            order = by_cover
        elif mode == "fuse":
            first = {s: i for i, s in enumerate(by_pool, start=1)}
            second = {s: i for i, s in enumerate(by_cover, start=1)}
            order = sorted(rrf, key=lambda s: -(1 / (k + first[s]) + 1 / (k + second[s])))
        else:
            order = sorted(rrf, key=lambda s: -rrf[s] * (1.0 + share[s]))
        return [best[s] for s in order[:limit]]

    recall_module.pool_sessions = pooled  # type: ignore[assignment]
    try:
        yield
    finally:
        recall_module.pool_sessions = pool_sessions


class _Thesaurus(dict[str, tuple[str, ...]]):
    """`related.RELATED` with WordNet's synonyms for every word it does not list itself."""

    def __init__(self, wordnet: WordNet, how: Mapping[str, Any]) -> None:
        super().__init__(related_module.RELATED)
        self.wordnet, self.how = wordnet, how

    def get(self, word: str, default: Any = ()) -> Any:
        if word not in self:
            self[word] = tuple(self.wordnet.synonyms(word, **self.how))
        return self[word] or default


WORDNET: dict[str, WordNet] = {}  # the reader, once `main` has the folder


@contextlib.contextmanager
def thesaurus(how: Mapping[str, Any]) -> Iterator[None]:
    listed = related_module.RELATED
    related_module.RELATED = _Thesaurus(WORDNET["reader"], how)
    try:
        yield
    finally:
        related_module.RELATED = listed


@contextlib.contextmanager
def kinds(levels: int, cap: int = 40) -> Iterator[None]:
    """`kinds-L`: in a search pooled by session only, each query noun's WordNet synonyms and
    the kinds up to L levels below it ("siblings" -> "sister" at two), nearest first, at most
    `cap`, searched and weighed as related words are."""
    reader = WORDNET["reader"]
    pooling = [False]
    plain_related = search_module.related_words
    rank = MessageSearch.rank

    def related(words: Sequence[str]) -> dict[str, str]:
        out = plain_related(words)
        if not pooling[0]:
            return out
        held = set(words) | {stem(w) for w in words}
        for word in words:
            if " " in word:
                continue
            for form in reader.kinds(word, levels=levels)[:cap]:
                if form not in held and stem(form) not in held:
                    out.setdefault(form, word)
        return out

    def ranked(self: MessageSearch, *args: Any, **kwargs: Any) -> Any:
        pooling[0] = bool(kwargs.get("pooling"))
        try:
            return rank(self, *args, **kwargs)
        finally:
            pooling[0] = False

    search_module.related_words = related  # type: ignore[assignment]
    MessageSearch.rank = ranked  # type: ignore[method-assign]
    try:
        yield
    finally:
        search_module.related_words = plain_related
        MessageSearch.rank = rank  # type: ignore[method-assign]


@contextlib.contextmanager
def related_lists(which: str) -> Iterator[None]:
    """`related-numbers`: the related words before the closed lists of titles and kinship
    words (numbers alone); `related-titles`, `related-kin`: the numbers and that one list."""
    listed = related_module.RELATED
    numbers = related_module._pairs(related_module._NUMBERS)
    titles = related_module._pairs(related_module._TITLES)
    extra = {
        "numbers": {},
        "titles": {**titles, **related_module._plurals(titles)},
        "kin": related_module._groups(related_module._KIN),
    }[which]
    related_module.RELATED = {**numbers, **extra}
    try:
        yield
    finally:
        related_module.RELATED = listed


# -- probe: the answer to a short question asked after a hit ---------------------------------------


def _asks_variant(how: str, short_question: Callable[[str], bool]) -> Callable[[str], bool]:
    def asks(text: str) -> bool:
        if how == "off":
            return False
        if how == "end":
            return text.rstrip().endswith("?") and short_question(text)
        return "?" in text  # "long": a question of any length

    return asks


@contextlib.contextmanager
def answers_variant(how: str) -> Iterator[None]:
    """`qa-off`: no answer links; `qa-end`: only a short turn that ends with its question;
    `qa-long`: a turn that asks, whatever its length."""
    asks = search_module.asks
    search_module.asks = _asks_variant(how, asks)
    try:
        yield
    finally:
        search_module.asks = asks


# -- probe: a short question tells less than it asks ------------------------------------------------


@contextlib.contextmanager
def asking_variant(weight: float, pooled: bool) -> Iterator[None]:
    """`ask-W`: a short question's score factor (`question_weight`, 0.75 in the plugin) is W,
    its score counted in full when pooled by session (as the plugin does); `askall-W`: W in
    the pooled ranking too."""
    of = search_module._Lift.of

    def weighed(cls: type, *args: Any, **kwargs: Any) -> Any:
        lift = of(*args, **kwargs)
        if kwargs.get("pooling") and not pooled:
            return lift
        return dataclasses.replace(lift, question_weight=weight)

    search_module._Lift.of = classmethod(weighed)  # type: ignore[assignment]
    try:
        yield
    finally:
        search_module._Lift.of = of  # type: ignore[method-assign]


def probe(name: str) -> contextlib.AbstractContextManager[None]:
    kind, _, arg = name.partition("-")
    if kind in ("ask", "askall"):
        return asking_variant(float(arg), pooled=kind == "askall")
    if kind == "qa" and arg in ("off", "end", "long"):
        return answers_variant(arg)
    if kind == "wn" and arg in THESAURUS:
        return thesaurus(THESAURUS[arg])
    if kind == "related" and arg in ("numbers", "titles", "kin"):
        return related_lists(arg)
    if kind == "kinds" and arg.isdigit():
        return kinds(int(arg))
    if kind == "cover":
        return cover(float(arg))
    if kind == "bm25":
        return bm25_variant(arg)
    if kind == "pool":
        return pool_variant(arg)
    if name == "base":
        return contextlib.nullcontext()
    raise SystemExit(f"unknown probe {name!r}; known: {', '.join(PROBES)}")


# -- asking ----------------------------------------------------------------------------------------


def ask(core: ChronicleCore, query: str, user: str | None, **args: Any) -> list[dict[str, Any]]:
    ASKING.update(core=core, query=query, user=user)
    who = {"user_id": user} if user else {}
    answer = json.loads(
        dispatch(RECALL_TOOLS, core.recall, "chronicle_search", {"query": query, **args}, **who)
    )
    if "error" in answer:
        raise RuntimeError(f"chronicle_search failed: {answer['error']}")
    return list(answer["results"])


Figures = dict[str, dict[str, list[float]]]  # probe -> figure -> values


DEPTHS = (10, 30, 100)


def _depths(
    row: dict[str, list[float]],
    label: str,
    ranked: Sequence[str],
    score: Callable[[set[str]], float],
) -> None:
    """How much of a question's evidence the ranking holds at each of `DEPTHS` (the candidates
    as `by_session` ranks them, 100 deep: its first ten may differ from a plain search's by the
    session share)."""
    for depth in DEPTHS:
        row[f"{label}@{depth}"].append(score(set(ranked[:depth])))


def run_locomo(
    data: Path, probes: Sequence[str], out: Figures, depth: dict[str, list[float]]
) -> None:
    samples = json.loads(data.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="probe-locomo-") as tmp:
        core = ChronicleCore.get(Path(tmp) / "locomo.db")
        try:
            dia = {str(s["sample_id"]): locomo.ingest(core, s) for s in samples}
            core.recall.catch_up()
            for n, sample in enumerate(samples, start=1):
                user = str(sample["sample_id"])
                half = "LoCoMo 1-3" if n <= 3 else "LoCoMo 4-5"
                for _, question, relevant in locomo.questions(sample):
                    deep = core.recall.index.hits(
                        question, scope="messages", user_id=user, limit=DEPTHS[-1], pooling=True
                    )
                    _depths(
                        depth,
                        "LoCoMo recall",
                        [dia[user].get(h.seq or 0, "") for h in deep],
                        lambda top, rel=relevant: len(rel & top) / len(rel),
                    )
                    for name in probes:
                        with probe(name):
                            started = time.process_time()
                            results = ask(core, question, user, scope="messages", limit=10)
                            out[name]["LoCoMo CPU ms"].append(
                                1000 * (time.process_time() - started)
                            )
                            grouped = ask(
                                core, question, user, scope="messages", limit=10, by_session=True
                            )
                        ranked = {dia[user].get(r["seq"], "") for r in results}
                        sessions = {locomo.dataset_session(r["session"]) for r in grouped}
                        row = out[name]
                        row[f"{half} r@10"].append(len(relevant & ranked) / len(relevant))
                        row[f"{half} by_session"].append(
                            float(locomo.session_of(relevant) <= sessions)
                        )
        finally:
            core.shutdown()


def run_lme(
    folder: Path, data: Path, probes: Sequence[str], out: Figures, depth: dict[str, list[float]]
) -> None:
    for q in longmemeval.load(data):
        path = folder / f"{q.qid}.db"
        if not path.exists():
            raise SystemExit(f"{path} is missing: run bench/longmemeval.py --keep {folder}")
        half = "LME even" if longmemeval.half_of(q.qid) == 0 else "LME odd"
        core = ChronicleCore.get(path)
        try:
            turn_of = longmemeval.turn_map(core.recall.index, q)
            core.recall.index.clock = q.date.timestamp
            deep = core.recall.index.hits(q.text, limit=DEPTHS[-1], pooling=True)
            _depths(
                depth,
                "LME recall_all",
                longmemeval.ranked_turns([h.as_dict() for h in deep], turn_of),
                lambda found, gold=q.gold_turns: float(gold <= found),
            )
            for name in probes:
                with probe(name):
                    started = time.process_time()
                    results = ask(core, q.text, None, limit=10)
                    out[name]["LME CPU ms"].append(1000 * (time.process_time() - started))
                    grouped = ask(core, q.text, None, limit=10, by_session=True)
                top = set(longmemeval.ranked_turns(results, turn_of))
                sessions = {str(r.get("session") or "") for r in grouped}
                row = out[name]
                row[f"{half} all@10"].append(float(q.gold_turns <= top))
                row[f"{half} by_session"].append(float(q.gold_sessions <= sessions))
        finally:
            core.shutdown()


def short_questions(locomo_data: Path, lme_data: Path) -> dict[str, tuple[int, int, int, int]]:
    """Per set: (turns, short questions among them (`text.asks`), evidence turns, short
    questions among those), over LoCoMo's conversations (its evidence: the turns questions of
    categories 1-4 cite) and LongMemEval's scored haystacks (its evidence: the user turns
    marked `has_answer`). The grounds of `question_weight`, counted from the datasets."""
    turns = asked = gold = gold_asked = 0
    for sample in json.loads(locomo_data.read_text(encoding="utf-8")):
        cited = {d for _, _, rel in locomo.questions(sample) for d in rel}
        conversation = sample["conversation"]
        for n in locomo.session_numbers(conversation):
            for turn in conversation[f"session_{n}"]:
                question = asks(locomo.turn_text(turn))
                turns, asked = turns + 1, asked + question
                if turn["dia_id"] in cited:
                    gold, gold_asked = gold + 1, gold_asked + question
    out = {"LoCoMo": (turns, asked, gold, gold_asked)}
    turns = asked = gold = gold_asked = 0
    for q in longmemeval.load(lme_data):
        for sid, _, session in q.sessions:
            for i, turn in enumerate(session):
                question = asks(str(turn.get("content") or ""))
                turns, asked = turns + 1, asked + question
                if longmemeval.turn_id(sid, i) in q.gold_turns:
                    gold, gold_asked = gold + 1, gold_asked + question
    out["LongMemEval"] = (turns, asked, gold, gold_asked)
    return out


COLUMNS = (
    "LoCoMo 1-3 r@10",
    "LoCoMo 4-5 r@10",
    "LME even all@10",
    "LME odd all@10",
    "LoCoMo 1-3 by_session",
    "LoCoMo 4-5 by_session",
    "LME even by_session",
    "LME odd by_session",
    "LoCoMo CPU ms",
    "LME CPU ms",
)


def report(out: Figures) -> None:
    print(f"{'probe':12}" + "".join(f"{c:>23}" for c in COLUMNS))
    for name, row in out.items():
        cells = "".join(f"{sum(row[c]) / len(row[c]):>23.3f}" for c in COLUMNS)
        print(f"{name:12}{cells}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lme", type=Path, required=True, help="bench/longmemeval.py --keep DIR")
    parser.add_argument("--lme-data", type=Path, default=longmemeval.DEFAULT_DATA)
    parser.add_argument("--locomo-data", type=Path, default=locomo.DEFAULT_DATA)
    parser.add_argument(
        "--probes", default=",".join(p for p in PROBES if not p.startswith(("wn-", "kinds-")))
    )
    parser.add_argument(
        "--wordnet", type=Path, default=DEFAULT_DIR, help="WordNet 3.0's database (wn-* probes)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "ranking_probes.json")
    args = parser.parse_args(argv)
    probes = args.probes.split(",")
    for name in probes:
        probe(name)  # an unknown name stops here, before any work
    if any(name.startswith(("wn-", "kinds-")) for name in probes):
        WORDNET["reader"] = WordNet(args.wordnet)
    out: Figures = {name: defaultdict(list) for name in probes}
    load = [os.getloadavg()[0]]
    depth: dict[str, list[float]] = defaultdict(list)
    run_locomo(args.locomo_data, probes, out, depth)
    run_lme(args.lme, args.lme_data, probes, out, depth)
    load.append(os.getloadavg()[0])
    report(out)
    reach = {key: sum(values) / len(values) for key, values in depth.items()}
    print(
        "\nthe base ranking's evidence by depth: "
        + ", ".join(f"{k} {v:.3f}" for k, v in reach.items())
    )
    questions = short_questions(args.locomo_data, args.lme_data)
    for name, (turns, asked, gold, gold_asked) in questions.items():
        print(
            f"{name}: {asked:,} of {turns:,} turns are short questions ({asked / turns:.3f}),"
            f" {gold_asked:,} of {gold:,} evidence turns ({gold_asked / gold:.3f})"
        )
    print(f"load average (1 min) at the start and the end: {load[0]:.1f}, {load[1]:.1f}")
    document = {
        "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs",
        "command": "python bench/ranking_probes.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "load average at start and end": load,
        "evidence by depth (base ranking)": reach,
        "short questions (turns, short questions, evidence turns, short questions)": questions,
        "figures": {
            name: {c: sum(row[c]) / len(row[c]) for c in COLUMNS} for name, row in out.items()
        },
    }
    return longmemeval.write_document(args.out, document)


if __name__ == "__main__":
    raise SystemExit(main())
