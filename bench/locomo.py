"""LoCoMo retrieval benchmark: does chronicle_search find the turns that answer a question?

Reads the dataset from where it is kept (never copied into the repo; CC BY-NC 4.0):
    /work/shared/data/locomo/locomo-dev.json  (or --data PATH)

Each conversation is one user's memory (user_id = sample id). Every turn goes in through the
real capture path, `core.capture.capture_messages`, one call per dataset session: the turn is a
user message with the speaker's name (`name`) and the text (an image the speaker shared is the
dataset's own caption, "[image: ...]"), and the session's date is the event time. The dataset's
model-written `observation`, `session_summary` and `event_summary` fields are never read.

`--postgres` runs the protocol variant a second time on PostgreSQL: a throwaway cluster
(tests/postgres_support.py: initdb + pg_ctl in a temp directory, 127.0.0.1, stopped at the end),
or the empty database `--store postgresql://...` names. The same capture, then recall's PostgreSQL
index (`recall.postgres.PostgresRecallIndex`: tsvector + GIN, bm25 computed as FTS5's) asked as
chronicle_search asks it (`hits(scope="messages")`, pooled by session for sessions@10).

A second way in, `--variant live`, captures each conversation as Hermes would hand it over: a
memory provider in a temporary HERMES_HOME, the conversation's first speaker as the user and the
second as the assistant, every exchange through `sync_turn(user, assistant, session_id=,
messages=<the live list>)`, one Hermes session per dataset session. Nothing carries a name or a
dataset time (every turn is stamped with the real clock, all within the same minute), and the
question goes through the provider's `handle_tool_call("chronicle_search", ...)`.

For every question of categories 1-4 (5, adversarial, has no evidence to find) it asks
chronicle_search (scope "messages", the user's memory) and scores the evidence turns found:
recall@5 and recall@10 (partial credit: the share of a question's evidence turns retrieved),
nDCG@10 (binary relevance), and the search latency. The baseline, computed here on the same
turns and questions, is plain SQLite FTS5 bm25 over the turns with an OR of quoted content words
("speaker: text"; beside the live variant also over the text alone, which is what it captures).

sessions@10 is session-level recall: whether the 10 sessions Chronicle returns when asked for one
result per session (`by_session`) hold every evidence turn's session, against plain FTS5's whole
ranking collapsed to its first 10 distinct sessions.

    python bench/locomo.py [--data PATH] [--db DIR] [--limit-samples N] [--samples A-B]
                           [--show-misses N] [--variant protocol|live|both]
                           [--embeddings URL] [--postgres | --store postgresql://...]
                           [--out bench/out/locomo.json]

Writes the figures as JSON for bench/plots.py (recall@10 per category as the plotted metric;
recall@5, nDCG@10 and latency beside it).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

# This checkout's code, not an installed one (an older checkout's bench measures its own code).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from pg_setup import ask_index, cluster, postgres_recall  # noqa: E402
from vector_setup import add_embeddings_option, embed_everything, vector_config  # noqa: E402

from chronicle_engine.core import ChronicleCore  # noqa: E402
from chronicle_engine.recall.text import content_words, quote  # noqa: E402
from chronicle_engine.recall.tools import RECALL_TOOLS  # noqa: E402
from chronicle_engine.sessions.capture import Capture  # noqa: E402
from chronicle_engine.tools import dispatch  # noqa: E402
from provider import ChronicleMemoryProvider  # noqa: E402

DEFAULT_DATA = Path("/work/shared/data/locomo/locomo-dev.json")
CATEGORIES = (1, 2, 3, 4)
NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def session_numbers(conversation: dict[str, Any]) -> list[int]:
    return sorted(int(k.split("_")[1]) for k in conversation if re.fullmatch(r"session_\d+", k))


def session_time(text: str) -> str:
    """'1:56 pm on 8 May, 2023' -> ISO 8601 (UTC)."""
    moment = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return moment.replace(tzinfo=UTC).isoformat()


def turn_text(turn: dict[str, Any]) -> str:
    text = str(turn.get("text") or "")
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [image: {caption}]"
    return text


def evidence_ids(raw: Sequence[str]) -> set[str]:
    """Normalise the dataset's evidence strings ("D8:6; D9:17", "D:11:26", "D30:05")."""
    out: set[str] = set()
    for item in raw:
        for part in re.split(r"[;,\s]+", str(item)):
            m = re.fullmatch(r"D:?(\d+):0*(\d+)", part.strip())
            if m:
                out.add(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


# -- ingest ------------------------------------------------------------------------------------


class Captures(Protocol):
    """A core, or the session tree and capture over a PostgreSQL store (`postgres_recall`)."""

    @property
    def capture(self) -> Capture: ...


def ingest(core: Captures, sample: dict[str, Any]) -> dict[int, str]:
    """Capture one conversation; returns seq -> dia_id."""
    conversation = sample["conversation"]
    user = str(sample["sample_id"])
    by_seq: dict[int, str] = {}
    for n in session_numbers(conversation):
        turns = conversation[f"session_{n}"]
        messages = [
            {"role": "user", "name": str(t["speaker"]), "content": turn_text(t)} for t in turns
        ]
        seqs = core.capture.capture_messages(
            f"{user}-session-{n}",
            messages,
            user_id=user,
            platform="locomo",
            created_at=session_time(conversation[f"session_{n}_date_time"]),
        )
        for turn, seq in zip(turns, seqs, strict=True):
            if seq is not None:
                by_seq[seq] = str(turn["dia_id"])
    return by_seq


def ingest_live(
    home: Path, sample: dict[str, Any]
) -> tuple[ChronicleMemoryProvider, dict[int, str]]:
    """Play one conversation through a memory provider's `sync_turn`, the first speaker as the
    user and the second as the assistant; returns the provider and seq -> dia_id."""
    conversation = sample["conversation"]
    first = str(conversation.get("speaker_a") or "")
    numbers = session_numbers(conversation)
    provider = ChronicleMemoryProvider()
    provider.initialize(f"live-{numbers[0]}", hermes_home=str(home), platform="cli")
    order: list[tuple[str, list[str]]] = []
    for k, n in enumerate(numbers):
        sid = f"live-{n}"
        if k:
            provider.on_session_switch(sid, reset=True)
        live: list[dict[str, Any]] = []
        pending: list[dict[str, Any]] = []
        ids: list[str] = []
        for turn in conversation[f"session_{n}"]:
            text = turn_text(turn)
            if not text.strip():
                continue
            role = "user" if str(turn["speaker"]) == first else "assistant"
            pending.append({"role": role, "content": text})
            ids.append(str(turn["dia_id"]))
            if role == "assistant":
                live += pending
                user = "\n".join(m["content"] for m in pending if m["role"] == "user")
                provider.sync_turn(user, text, session_id=sid, messages=list(live))
                pending = []
        if pending:
            live += pending
            provider.sync_turn(pending[-1]["content"], "", session_id=sid, messages=list(live))
        order.append((sid, ids))
    core = provider.core
    core.recall.catch_up()
    by_seq: dict[int, str] = {}
    with core.store.reading() as conn:
        for sid, ids in order:
            seqs = [
                seq
                for (seq,) in conn.execute(
                    "SELECT seq FROM recall_messages WHERE session = ? ORDER BY seq", (sid,)
                )
            ]
            if len(seqs) != len(ids):
                raise RuntimeError(f"{sid}: {len(seqs)} messages captured for {len(ids)} turns")
            by_seq.update(zip(seqs, ids, strict=True))
    return provider, by_seq


def ask_live(
    provider: ChronicleMemoryProvider, question: str, *, by_session: bool = False
) -> list[dict[str, Any]]:
    args = {"query": question, "scope": "messages", "limit": 10, "by_session": by_session}
    answer = json.loads(provider.handle_tool_call("chronicle_search", args))
    if "error" in answer:
        raise RuntimeError(f"chronicle_search failed: {answer['error']}")
    return list(answer["results"])


# -- the baseline ------------------------------------------------------------------------------


class Baseline:
    """Plain FTS5 bm25 over the turns (default tokenizer), OR of quoted content words."""

    def __init__(self, sample: dict[str, Any], *, names: bool = True) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE turns USING fts5(dia_id UNINDEXED, text)")
        conversation = sample["conversation"]
        for n in session_numbers(conversation):
            for t in conversation[f"session_{n}"]:
                self.db.execute(
                    "INSERT INTO turns(dia_id, text) VALUES (?, ?)",
                    (t["dia_id"], f"{t['speaker']}: {turn_text(t)}" if names else turn_text(t)),
                )

    def search(self, question: str, k: int) -> list[str]:
        words = content_words(question)
        if not words:
            return []
        expr = " OR ".join(quote(w) for w in words)
        return [
            r[0]
            for r in self.db.execute(
                "SELECT dia_id FROM turns WHERE turns MATCH ? ORDER BY bm25(turns) LIMIT ?",
                (expr, k),
            )
        ]


# -- scoring -----------------------------------------------------------------------------------


def ask(
    core: ChronicleCore, question: str, user: str, *, by_session: bool = False
) -> list[dict[str, Any]]:
    """The agent's own tool call: chronicle_search through the tool dispatch, JSON and all."""
    args = {"query": question, "scope": "messages", "limit": 10, "by_session": by_session}
    answer = json.loads(dispatch(RECALL_TOOLS, core.recall, "chronicle_search", args, user_id=user))
    if "error" in answer:
        raise RuntimeError(f"chronicle_search failed: {answer['error']}")
    return list(answer["results"])


def score_questions(
    samples: Sequence[dict[str, Any]],
    dia: dict[str, dict[int, str]],
    ask_one: Callable[..., list[dict[str, Any]]],
    score: Score,
    misses: list[tuple[str, list[str], set[str]]],
    show_misses: int,
) -> None:
    """Ask every question of `samples` through `ask_one(question, user, by_session=)`."""
    for sample in samples:
        user = str(sample["sample_id"])
        for category, question, relevant in questions(sample):
            t0 = time.perf_counter()
            results = ask_one(question, user)
            elapsed = time.perf_counter() - t0
            ranked = [dia[user].get(r["seq"], "") for r in results]
            score.add(category, ranked, relevant, elapsed)
            grouped = ask_one(question, user, by_session=True)
            score.add_sessions(category, [dataset_session(r["session"]) for r in grouped], relevant)
            if len(misses) < show_misses and not relevant & set(ranked):
                misses.append((question, ranked, relevant))


def session_of(dia_ids: set[str]) -> set[str]:
    """'D9:11' -> 'D9'."""
    return {d.split(":")[0] for d in dia_ids}


def dataset_session(session: str | None) -> str:
    """A captured session id ('conv-26-session-9', 'live-9') -> the dataset's session ('D9')."""
    return f"D{session.rsplit('-', 1)[1]}" if session else ""


def ndcg(ranked: Sequence[str], relevant: set[str], k: int = 10) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal if ideal else 0.0


class Score:
    def __init__(self) -> None:
        self.r5: dict[int, list[float]] = defaultdict(list)
        self.r10: dict[int, list[float]] = defaultdict(list)
        self.ndcg: dict[int, list[float]] = defaultdict(list)
        self.sessions: dict[int, list[float]] = defaultdict(list)
        self.latency: list[float] = []

    def add(self, category: int, ranked: list[str], relevant: set[str], seconds: float) -> None:
        self.r5[category].append(len(relevant & set(ranked[:5])) / len(relevant))
        self.r10[category].append(len(relevant & set(ranked[:10])) / len(relevant))
        self.ndcg[category].append(ndcg(ranked, relevant))
        self.latency.append(seconds)

    def add_sessions(self, category: int, ranked: Sequence[str], relevant: set[str]) -> None:
        """Whether the first 10 distinct sessions of `ranked` ("D9") hold every evidence turn's."""
        top = list(dict.fromkeys(s for s in ranked if s))[:10]
        self.sessions[category].append(float(session_of(relevant) <= set(top)))

    @staticmethod
    def _mean(values: Sequence[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    def row(self, table: dict[int, list[float]]) -> list[float]:
        cells = [self._mean(table[c]) for c in CATEGORIES]
        cells.append(self._mean([v for c in CATEGORIES for v in table[c]]))
        return cells

    def latency_ms(self) -> tuple[float, float]:
        if not self.latency:
            return 0.0, 0.0
        ordered = sorted(self.latency)
        p95 = ordered[min(len(ordered) - 1, int(math.ceil(0.95 * len(ordered))) - 1)]
        return statistics.median(ordered) * 1000, p95 * 1000


def report(name: str, score: Score) -> None:
    counts = [len(score.r10[c]) for c in CATEGORIES]
    header = "".join(f"{f'{c} {NAMES[c]}':>16}" for c in CATEGORIES) + f"{'all 1-4':>12}"
    print(f"\n{name}")
    print(f"{'':12}{header}")
    print(f"{'questions':12}" + "".join(f"{n:>16}" for n in counts) + f"{sum(counts):>12}")
    tables = [("recall@5", score.r5), ("recall@10", score.r10), ("nDCG@10", score.ndcg)]
    if score.sessions:
        tables.append(("sessions@10", score.sessions))
    for label, table in tables:
        cells = score.row(table)
        print(f"{label:12}" + "".join(f"{v:>16.3f}" for v in cells[:-1]) + f"{cells[-1]:>12.3f}")
    p50, p95 = score.latency_ms()
    print(f"{'latency':12}p50 {p50:.2f} ms, p95 {p95:.2f} ms ({len(score.latency)} queries)")


def as_json(score: Score) -> dict[str, Any]:
    labels = [f"{c} {NAMES[c]}" for c in CATEGORIES] + ["all 1-4"]
    p50, p95 = score.latency_ms()
    return {
        "recall@5": dict(zip(labels, score.row(score.r5), strict=True)),
        "recall@10": dict(zip(labels, score.row(score.r10), strict=True)),
        "ndcg@10": dict(zip(labels, score.row(score.ndcg), strict=True)),
        "session recall_all@10": dict(zip(labels, score.row(score.sessions), strict=True)),
        "latency_ms": {"p50": p50, "p95": p95, "queries": len(score.latency)},
    }


def write(
    out: Path, data: Path, ours: dict[str, Score], bases: dict[str, Score], argv: Sequence[str]
) -> None:
    names = {
        "protocol": "Chronicle chronicle_search",
        "live": "Chronicle chronicle_search (live sync_turn)",
        "postgres": "Chronicle chronicle_search on PostgreSQL",
    }
    systems = {names[variant]: as_json(score) for variant, score in ours.items()}
    systems["FTS5 bm25 baseline"] = as_json(bases["names"])
    if "live" in ours:
        systems["FTS5 bm25 baseline (text alone)"] = as_json(bases["text"])
    document = {
        "machine": f"{platform.machine()} {platform.system()}, Python {platform.python_version()}",
        "command": "python bench/locomo.py " + " ".join(argv),
        "dataset": str(data),
        "metric": "recall@10 (share of evidence turns retrieved)",
        "systems": {name: figures["recall@10"] for name, figures in systems.items()},
        "details": systems,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1), encoding="utf-8")
    print(f"\nwrote {out}")


def questions(sample: dict[str, Any]) -> list[tuple[int, str, set[str]]]:
    out = []
    for qa in sample["qa"]:
        category = int(qa.get("category", 0))
        relevant = evidence_ids(qa.get("evidence") or [])
        if category in CATEGORIES and relevant:
            out.append((category, str(qa["question"]), relevant))
    return out


def run(
    data: Path,
    db_dir: Path,
    *,
    limit_samples: int | None,
    show_misses: int,
    pick: tuple[int, int] | None = None,
    variants: Sequence[str] = ("protocol",),
    embeddings: str = "",
    store: str = "",
) -> tuple[dict[str, Score], dict[str, Score]]:
    samples = json.loads(data.read_text(encoding="utf-8"))
    if pick:
        samples = samples[pick[0] - 1 : pick[1]]
    if limit_samples:
        samples = samples[:limit_samples]
    ours = {variant: Score() for variant in variants}
    bases = {"names": Score(), "text": Score()}
    misses: list[tuple[str, list[str], set[str]]] = []
    for sample in samples:
        for kind, baseline in (
            ("names", Baseline(sample)),
            ("text", Baseline(sample, names=False)),
        ):
            for category, question, relevant in questions(sample):
                t0 = time.perf_counter()
                plain = baseline.search(question, 10)
                bases[kind].add(category, plain, relevant, time.perf_counter() - t0)
                whole = baseline.search(question, -1)
                bases[kind].add_sessions(category, [d.split(":")[0] for d in whole], relevant)
    if "protocol" in variants:
        config = vector_config(embeddings) if embeddings else None
        core = ChronicleCore.get(db_dir / "locomo.db", config=config)
        try:
            started = time.perf_counter()
            dia: dict[str, dict[int, str]] = {}
            for sample in samples:
                dia[str(sample["sample_id"])] = ingest(core, sample)
            core.recall.catch_up()
            turns = sum(len(v) for v in dia.values())
            print(
                f"ingested {turns} turns of {len(samples)} conversations through capture in "
                f"{time.perf_counter() - started:.1f} s"
            )
            if embeddings:
                started = time.perf_counter()
                embedded = embed_everything(core)
                print(f"embedded {embedded} turns in {time.perf_counter() - started:.1f} s")
                if embedded < turns:
                    raise RuntimeError(f"only {embedded} of {turns} turns have a vector")
            score_questions(
                samples,
                dia,
                lambda q, u, **kw: ask(core, q, u, **kw),
                ours["protocol"],
                misses,
                show_misses,
            )
        finally:
            core.shutdown()
    if "postgres" in variants:
        with cluster(store) as server, postgres_recall(server, store) as (parts, index):
            started = time.perf_counter()
            dia = {str(sample["sample_id"]): ingest(parts, sample) for sample in samples}
            index.catch_up()
            print(
                f"postgres: ingested {sum(len(v) for v in dia.values())} turns through capture "
                f"and folded them in {time.perf_counter() - started:.1f} s"
            )
            score_questions(
                samples,
                dia,
                lambda q, u, **kw: ask_index(index, q, user=u, scope="messages", **kw),
                ours["postgres"],
                misses,
                show_misses,
            )
    if "live" in variants:
        started = time.perf_counter()
        for n, sample in enumerate(samples):
            home = db_dir / f"live-{n}"
            home.mkdir(parents=True, exist_ok=True)
            provider, by_seq = ingest_live(home, sample)
            try:
                for category, question, relevant in questions(sample):
                    t0 = time.perf_counter()
                    results = ask_live(provider, question)
                    elapsed = time.perf_counter() - t0
                    ranked = [by_seq.get(r["seq"], "") for r in results]
                    ours["live"].add(category, ranked, relevant, elapsed)
                    grouped = ask_live(provider, question, by_session=True)
                    ours["live"].add_sessions(
                        category, [dataset_session(r["session"]) for r in grouped], relevant
                    )
            finally:
                provider.shutdown()
        print(
            f"live: {len(samples)} conversations through sync_turn in "
            f"{time.perf_counter() - started:.1f} s"
        )
    for question, ranked, relevant in misses:
        print(f"miss: {question!r} wanted {sorted(relevant)} got {ranked}")
    return ours, bases


def _span(text: str) -> tuple[int, int]:
    first, _, last = text.partition("-")
    return int(first), int(last or first)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--db", type=Path, default=None, help="directory for the database (default: a temp dir)"
    )
    parser.add_argument("--limit-samples", type=int, default=None)
    parser.add_argument(
        "--samples",
        default="",
        metavar="A-B",
        help="only conversations A to B (1-based, inclusive): a half of the split, to tune on "
        "one half and check on the other",
    )
    parser.add_argument("--show-misses", type=int, default=0)
    parser.add_argument("--variant", choices=("protocol", "live", "both"), default="both")
    add_embeddings_option(parser)
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="also run the protocol variant on PostgreSQL (a throwaway cluster unless --store)",
    )
    parser.add_argument(
        "--store",
        default="",
        metavar="postgresql://...",
        help="the empty PostgreSQL database --postgres uses (implies --postgres)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "out" / "locomo.json"
    )
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"no dataset at {args.data}; pass --data", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="chronicle-locomo-") as tmp:
        db_dir = args.db or Path(tmp)
        db_dir.mkdir(parents=True, exist_ok=True)
        variants = ("protocol", "live") if args.variant == "both" else (args.variant,)
        if args.postgres or args.store:
            variants = (*variants, "postgres")
        ours, bases = run(
            args.data,
            db_dir,
            limit_samples=args.limit_samples,
            show_misses=args.show_misses,
            pick=_span(args.samples) if args.samples else None,
            variants=variants,
            embeddings=args.embeddings,
            store=args.store,
        )
    titles = {
        "protocol": "chronicle_search (scope=messages, no model, no network)"
        if not args.embeddings
        else f"chronicle_search (scope=messages, full text + vectors from {args.embeddings})",
        "live": "chronicle_search, captured live through sync_turn (no names, no dataset times)",
        "postgres": "chronicle_search on PostgreSQL (scope=messages; tsvector + GIN, bm25 as FTS5's)",
    }
    for variant, score in ours.items():
        report(titles[variant], score)
    report("baseline: FTS5 bm25 over 'speaker: text', OR of quoted content words", bases["names"])
    if "live" in ours:
        report("baseline over the text alone (what the live capture holds)", bases["text"])
    write(args.out, args.data, ours, bases, sys.argv[1:] if argv is None else argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
