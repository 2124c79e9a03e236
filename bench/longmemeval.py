"""LongMemEval_s retrieval benchmark: does chronicle_search find the turns that answer a question?

Reads the development split from where it is kept (never copied into the repo; MIT licence):
    /work/shared/data/longmemeval/longmemeval-s-dev.json  (or --data PATH)

Each question has its own haystack (~50 chat sessions of user and assistant turns) and gets its
own fresh database. Two ways in, each scored against plain FTS5 over the same turns:

- protocol: the benchmark's own retrieval protocol. Every haystack session is captured through
  `core.capture.capture_messages` with the session's date as the event time; the question goes to
  the chronicle_search tool (limit 10) through the tool dispatch.
- live: the haystack arrives as Hermes would hand it over. The memory provider is initialised in a
  temporary HERMES_HOME and every user/assistant pair goes through `sync_turn(user, assistant,
  session_id=, messages=<the live list>)`, session after session; the question is asked through
  the provider's `handle_tool_call("chronicle_search", {"query": ..., "limit": 10})` from a new
  session. The capture clock replays the dataset's session dates (a real capture carries real
  times; a replay carries the dataset's).

In both, the question is asked at its `question_date` (recall's clock, `RecallIndex.clock`), so a
relative time it names ("a week ago", "last Friday") counts from then, as it would live.

Scoring (the benchmark's src/retrieval): gold = the user turns marked `has_answer`; abstention
questions and questions with no gold user turn are skipped. Per question type: turn recall_any@10
(some gold turn in the top 10), turn recall_all@10 (all of them), and session recall_all@10 (the
top 10 results collapsed to their sessions must include every session that holds a gold turn:
the benchmark's `evaluate_retrieval_turn2session` strips the turn from the gold turn ids, and at
session granularity it relabels an answer session none of whose user turns has the answer as
not an answer). A result that is a belief counts as the turn it was drawn from. The stricter
answer-session recall_all@10 asks for every session in the dataset's `answer_session_ids`
instead; a few of those hold no gold turn (5 of the 79 scorable development questions have
one).

The baseline is plain SQLite FTS5 bm25 (default tokenizer) over the user and assistant turns of
the haystack, queried with an OR of quoted content words, scored the same way; a second baseline
row collapses its whole ranking to its first 10 distinct sessions (the dataset README's figure).

    python bench/longmemeval.py [--data PATH] [--variant protocol|live|both]
                                [--questions N] [--types T,...] [--half even|odd] [--keep DIR]
                                [--embeddings URL] [--postgres] [--out bench/out/longmemeval.json]

`--postgres` adds the protocol variant on PostgreSQL: the same capture into a schema of its own
on a throwaway cluster (bench/pg_setup.py), the question asked of recall's PostgreSQL index as
chronicle_search asks it.

Session-level recall is also measured as the benchmark does it at session granularity: the
question asked again with `by_session` (one result per session, the sessions holding the most
evidence first), against plain FTS5's whole ranking collapsed to its first 10 distinct sessions.

`--questions N` takes N questions spread evenly over the split (a bounded run on a shared
machine); the default is every scorable question.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import chronicle_engine.sessions.capture as capture_module  # noqa: E402
from chronicle_engine.core import ChronicleCore  # noqa: E402
from chronicle_engine.recall.index import RecallIndex  # noqa: E402
from chronicle_engine.recall.text import content_words, quote  # noqa: E402
from chronicle_engine.recall.tools import RECALL_TOOLS  # noqa: E402
from chronicle_engine.tools import dispatch  # noqa: E402
from provider import ChronicleMemoryProvider  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from pg_setup import PostgresCluster, ask_index, cluster, postgres_recall  # noqa: E402
from vector_setup import add_embeddings_option, embed_everything, vector_config  # noqa: E402

DEFAULT_DATA = Path("/work/shared/data/longmemeval/longmemeval-s-dev.json")
K = 10
METRICS = (
    "turn recall_any@10",
    "turn recall_all@10",
    "session recall_all@10",
    "answer-session recall_all@10",
)
SESSION_METRICS = METRICS[2:]


def dataset_time(text: str) -> datetime:
    """'2023/04/25 (Tue) 04:07' -> an aware datetime (UTC)."""
    day, _, clock = text.partition(")")
    moment = datetime.strptime(f"{day.split(' (')[0]} {clock.strip()}", "%Y/%m/%d %H:%M")
    return moment.replace(tzinfo=UTC)


@dataclass
class Question:
    qid: str
    kind: str
    text: str
    date: datetime
    sessions: list[tuple[str, datetime, list[dict[str, Any]]]]
    gold_turns: set[str]
    gold_sessions: set[str]
    """The sessions of the gold turns: the benchmark's session-level gold."""
    answer_sessions: set[str]
    """The dataset's answer_session_ids, a few of which hold no gold turn (stricter)."""


def turn_id(session: str, index: int) -> str:
    return f"{session}#{index}"


def load(data: Path) -> list[Question]:
    out = []
    for q in json.loads(data.read_text(encoding="utf-8")):
        if str(q["question_id"]).endswith("_abs"):
            continue
        sessions = []
        gold: set[str] = set()
        for sid, date, turns in zip(
            q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"], strict=True
        ):
            sessions.append((str(sid), dataset_time(date), list(turns)))
            for i, t in enumerate(turns):
                if t.get("has_answer") and t.get("role") == "user":
                    gold.add(turn_id(str(sid), i))
        if not gold:
            continue
        haystack = {s for s, _, _ in sessions}
        out.append(
            Question(
                str(q["question_id"]),
                str(q["question_type"]),
                str(q["question"]),
                dataset_time(q["question_date"]),
                sessions,
                gold,
                {t.split("#")[0] for t in gold},
                {str(s) for s in q["answer_session_ids"] if str(s) in haystack},
            )
        )
    return out


def half_of(qid: str) -> int:
    return int(hashlib.sha1(qid.encode()).hexdigest(), 16) % 2


def spread(questions: list[Question], n: int | None) -> list[Question]:
    if not n or n >= len(questions):
        return questions
    step = len(questions) / n
    return [questions[int(i * step)] for i in range(n)]


# -- scoring ------------------------------------------------------------------------------------


@dataclass
class Score:
    by_type: dict[str, dict[str, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    latency: list[float] = field(default_factory=list)

    def add(
        self, q: Question, ranked: Sequence[str], seconds: float = 0.0, sessions_ranked=None
    ) -> None:
        top = list(dict.fromkeys(t for t in ranked if t))[:K]
        if sessions_ranked is None:
            sessions_ranked = [t.split("#")[0] for t in top]
        sessions = set(list(dict.fromkeys(sessions_ranked))[:K])
        row = self.by_type[q.kind]
        row["turn recall_any@10"].append(float(bool(q.gold_turns & set(top))))
        row["turn recall_all@10"].append(float(q.gold_turns <= set(top)))
        row["session recall_all@10"].append(float(q.gold_sessions <= sessions))
        row["answer-session recall_all@10"].append(float(q.answer_sessions <= sessions))
        self.latency.append(seconds)

    def mean(self, metric: str, kind: str | None = None) -> float:
        values = (
            self.by_type[kind][metric]
            if kind
            else [v for row in self.by_type.values() for v in row[metric]]
        )
        return sum(values) / len(values) if values else 0.0

    def count(self, kind: str | None = None) -> int:
        if kind:
            return len(self.by_type[kind][METRICS[0]])
        return sum(len(row[METRICS[0]]) for row in self.by_type.values())

    def p95_ms(self) -> float:
        if not self.latency:
            return 0.0
        ordered = sorted(self.latency)
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)] * 1000


# -- the baseline -------------------------------------------------------------------------------


class Baseline:
    """Plain FTS5 bm25 (default tokenizer) over the user and assistant turns, OR of quoted
    content words."""

    def __init__(self, q: Question) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE turns USING fts5(tid UNINDEXED, text)")
        self.db.executemany(
            "INSERT INTO turns(tid, text) VALUES (?, ?)",
            [
                (turn_id(sid, i), str(t.get("content") or ""))
                for sid, _, turns in q.sessions
                for i, t in enumerate(turns)
            ],
        )

    def search(self, question: str, k: int | None = K) -> list[str]:
        words = content_words(question)
        if not words:
            return []
        expr = " OR ".join(quote(w) for w in words)
        return [
            r[0]
            for r in self.db.execute(
                "SELECT tid FROM turns WHERE turns MATCH ? ORDER BY bm25(turns) LIMIT ?",
                (expr, -1 if k is None else k),
            )
        ]


# -- Chronicle ----------------------------------------------------------------------------------


def ranked_turns(results: Sequence[dict[str, Any]], turn_of: dict[int, str]) -> list[str]:
    """The turns the results stand for: a message its own, a belief the turn it was drawn from."""
    out = []
    for r in results:
        seq = r.get("seq")
        if r.get("kind") == "belief" and r.get("sources"):
            seq = r["sources"][0]
        out.append(turn_of.get(seq, "") if isinstance(seq, int) else "")
    return out


def turn_map(index: RecallIndex, q: Question) -> dict[int, str]:
    """seq -> turn id, from the captured messages of each session in order."""
    index.catch_up()
    out: dict[int, str] = {}
    with index.reading("reading the haystack") as conn:
        for sid, _, turns in q.sessions:
            seqs = [
                s
                for (s,) in conn.execute(
                    "SELECT seq FROM recall_messages WHERE session = ? ORDER BY seq", (sid,)
                )
            ]
            kept = [i for i, t in enumerate(turns) if str(t.get("content") or "").strip()]
            if len(seqs) != len(kept):
                raise RuntimeError(f"{q.qid}/{sid}: {len(seqs)} messages for {len(kept)} turns")
            out.update(zip(seqs, (turn_id(sid, i) for i in kept), strict=True))
    return out


def wire(turns: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": str(t["role"]), "content": str(t.get("content") or "")} for t in turns]


Run = tuple[list[str], float, list[str]]
"""The turns chronicle_search ranked, its latency, and the sessions of its `by_session` call."""

BY_SESSION = {"limit": K, "by_session": True}


def run_protocol(q: Question, db_dir: Path, embeddings: str = "") -> Run:
    path = db_dir / f"{q.qid}.db"
    captured = path.exists()  # kept from an earlier run (--keep): the same haystack
    core = ChronicleCore.get(path, config=vector_config(embeddings) if embeddings else None)
    try:
        for sid, date, turns in [] if captured else q.sessions:
            core.capture.capture_messages(
                sid, wire(turns), platform="longmemeval", created_at=date.isoformat()
            )
        turn_of = turn_map(core.recall.index, q)
        if embeddings:
            embed_everything(core)
        core.recall.index.clock = q.date.timestamp  # asked on the question's date
        args = {"query": q.text, "limit": K}
        t0 = time.perf_counter()
        answer = json.loads(dispatch(RECALL_TOOLS, core.recall, "chronicle_search", args))
        elapsed = time.perf_counter() - t0
        grouped = json.loads(
            dispatch(RECALL_TOOLS, core.recall, "chronicle_search", {"query": q.text} | BY_SESSION)
        )
    finally:
        core.shutdown()
    return checked(answer, turn_of, elapsed, grouped)


def run_postgres(q: Question, server: PostgresCluster) -> Run:
    """The protocol variant on PostgreSQL: the same capture into a schema of its own on
    `server`, the question asked of recall's PostgreSQL index as chronicle_search asks it."""
    with postgres_recall(server) as (parts, index):
        for sid, date, turns in q.sessions:
            parts.capture.capture_messages(
                sid, wire(turns), platform="longmemeval", created_at=date.isoformat()
            )
        turn_of = turn_map(index, q)
        index.clock = q.date.timestamp
        t0 = time.perf_counter()
        answer = {"results": ask_index(index, q.text, limit=K)}
        elapsed = time.perf_counter() - t0
        grouped = {"results": ask_index(index, q.text, limit=K, by_session=True)}
    return checked(answer, turn_of, elapsed, grouped)


def checked(
    answer: dict[str, Any], turn_of: dict[int, str], elapsed: float, grouped: dict[str, Any]
) -> Run:
    for reply in (answer, grouped):
        if "error" in reply:
            raise RuntimeError(f"chronicle_search failed: {reply['error']}")
    sessions = [str(r.get("session") or "") for r in grouped["results"]]
    return ranked_turns(answer["results"], turn_of), elapsed, sessions


@contextmanager
def replayed_clock() -> Iterator[Callable[[datetime], None]]:
    """Capture's clock, replaying the dataset's times: each call to the returned setter moves
    it to a moment; every stamp taken after it is a second later than the one before."""
    now = [datetime(2000, 1, 1, tzinfo=UTC)]

    def stamp() -> str:
        now[0] += timedelta(seconds=1)
        return now[0].isoformat(timespec="microseconds")

    def set_to(moment: datetime) -> None:
        now[0] = moment

    real = capture_module.utc_now
    capture_module.utc_now = stamp  # type: ignore[assignment]
    try:
        yield set_to
    finally:
        capture_module.utc_now = real  # type: ignore[assignment]


def run_live(q: Question, home: Path) -> Run:
    provider = ChronicleMemoryProvider()
    with replayed_clock() as set_clock:
        first = q.sessions[0][0]
        provider.initialize(first, hermes_home=str(home), platform="cli")
        try:
            for n, (sid, date, turns) in enumerate(q.sessions):
                set_clock(date)
                if n:
                    provider.on_session_switch(sid, reset=True)
                live: list[dict[str, Any]] = []
                pending: list[dict[str, Any]] = []
                for message in wire(turns):
                    pending.append(message)
                    if message["role"] == "assistant":
                        live += pending
                        user = next((m["content"] for m in pending if m["role"] == "user"), "")
                        provider.sync_turn(
                            user, message["content"], session_id=sid, messages=list(live)
                        )
                        pending = []
                if pending:  # a session that ends on the user's turn
                    live += pending
                    provider.sync_turn(pending[-1]["content"], "", session_id=sid, messages=live)
            turn_of = turn_map(provider.core.recall.index, q)
            set_clock(q.date)
            provider.core.recall.index.clock = q.date.timestamp
            provider.on_session_switch(f"{q.qid}-question", reset=True)
            t0 = time.perf_counter()
            answer = json.loads(
                provider.handle_tool_call("chronicle_search", {"query": q.text, "limit": K})
            )
            elapsed = time.perf_counter() - t0
            grouped = json.loads(
                provider.handle_tool_call("chronicle_search", {"query": q.text} | BY_SESSION)
            )
        finally:
            provider.shutdown()
    return checked(answer, turn_of, elapsed, grouped)


# -- report -------------------------------------------------------------------------------------


def report(title: str, rows: dict[str, Score], kinds: Sequence[str]) -> None:
    print(f"\n{title}")
    width = max(len(k) for k in [*kinds, "all"]) + 2
    for metric in METRICS:
        print(f"  {metric}")
        print(f"    {'':{width}}{'n':>5}" + "".join(f"{name:>22}" for name in rows))
        for kind in [*kinds, None]:
            label = kind or "all"
            n = next(iter(rows.values())).count(kind)
            cells = "".join(f"{s.mean(metric, kind):>22.3f}" for s in rows.values())
            print(f"    {label:{width}}{n:>5}{cells}")
    for name, score in rows.items():
        if score.latency and any(score.latency):
            print(f"  {name}: search p95 {score.p95_ms():.1f} ms")


def report_sessions(rows: dict[str, Score], kinds: Sequence[str]) -> None:
    """Session recall of the session-level calls: Chronicle's `by_session` search (one result
    per session) against plain FTS5's ranking collapsed to its first 10 distinct sessions."""
    width = max(len(k) for k in [*kinds, "all"]) + 2
    for metric in SESSION_METRICS:
        print(f"\n  {metric}, one result per session")
        print(f"    {'':{width}}{'n':>5}" + "".join(f"{name:>34}" for name in rows))
        for kind in [*kinds, None]:
            n = next(iter(rows.values())).count(kind)
            cells = "".join(f"{s.mean(metric, kind):>34.3f}" for s in rows.values())
            print(f"    {kind or 'all':{width}}{n:>5}{cells}")


def as_json(score: Score, kinds: Sequence[str]) -> dict[str, Any]:
    return {
        metric: {kind or "all": score.mean(metric, kind) for kind in [*kinds, None]}
        for metric in METRICS
    } | {"questions": score.count(), "search_p95_ms": score.p95_ms()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--variant", choices=("protocol", "live", "both"), default="both")
    parser.add_argument("--questions", type=int, default=None, help="a spread subset of N")
    parser.add_argument("--types", default="", help="comma-separated question types")
    parser.add_argument(
        "--half",
        choices=("even", "odd"),
        default=None,
        help="only the questions whose sha1(question_id) is even (or odd): tune on one half, "
        "check on the other",
    )
    parser.add_argument("--show-misses", type=int, default=0)
    add_embeddings_option(parser)
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="also run the protocol variant on PostgreSQL (a throwaway cluster, a schema a "
        "question; bench/pg_setup.py)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep the protocol variant's databases in DIR and reuse them (ranking experiments)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "out" / "longmemeval.json"
    )
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:  # the PostgreSQL cluster, when asked for
        return run(args, stack, argv)


def run(args: argparse.Namespace, stack: contextlib.ExitStack, argv: Sequence[str] | None) -> int:
    if not args.data.exists():
        print(f"no dataset at {args.data}; pass --data", file=sys.stderr)
        return 2
    questions = load(args.data)
    if args.types:
        wanted = set(args.types.split(","))
        questions = [q for q in questions if q.kind in wanted]
    if args.half:
        parity = 0 if args.half == "even" else 1
        questions = [q for q in questions if half_of(q.qid) == parity]
    questions = spread(questions, args.questions)
    kinds = sorted({q.kind for q in questions})
    variants = ("protocol", "live") if args.variant == "both" else (args.variant,)
    if args.postgres:
        variants = (*variants, "postgres")
    server = stack.enter_context(cluster("")) if args.postgres else None
    ours = {v: Score() for v in variants}
    pooled = {v: Score() for v in variants}  # the by_session call: only its session figure
    base, base_sessions = Score(), Score()
    misses: list[str] = []
    started = time.perf_counter()
    for n, q in enumerate(questions, start=1):
        baseline = Baseline(q)
        base.add(q, baseline.search(q.text))
        whole = baseline.search(q.text, None)
        base_sessions.add(q, whole, sessions_ranked=[t.split("#")[0] for t in whole])
        for variant in variants:
            if variant == "protocol" and args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                ranked, elapsed, sessions = run_protocol(q, args.keep, args.embeddings)
            else:
                with tempfile.TemporaryDirectory(prefix="chronicle-lme-") as tmp:
                    if variant == "postgres" and server is not None:
                        ranked, elapsed, sessions = run_postgres(q, server)
                    elif variant == "protocol":
                        ranked, elapsed, sessions = run_protocol(q, Path(tmp), args.embeddings)
                    else:
                        ranked, elapsed, sessions = run_live(q, Path(tmp))
            ours[variant].add(q, ranked, elapsed)
            pooled[variant].add(q, [], sessions_ranked=sessions)
            top = set(ranked[:K])
            if (
                variant == variants[0]
                and not q.gold_turns <= top
                and len(misses) < args.show_misses
            ):
                misses.append(f"{q.qid} [{q.kind}] {q.text!r}: missed {sorted(q.gold_turns - top)}")
        if n % 10 == 0:
            print(f"  {n}/{len(questions)} questions, {time.perf_counter() - started:.0f} s")
    print(f"{len(questions)} questions in {time.perf_counter() - started:.0f} s")
    for line in misses:
        print("miss:", line)
    rows: dict[str, Score] = {f"chronicle ({v})": ours[v] for v in variants}
    rows["plain FTS5"] = base
    report(f"LongMemEval_s dev ({args.data.name}), top {K}", rows, kinds)
    session_rows: dict[str, Score] = {f"chronicle ({v}) by_session": pooled[v] for v in variants}
    session_rows["plain FTS5, first 10 sessions"] = base_sessions
    report_sessions(session_rows, kinds)
    document = {
        "machine": f"{platform.machine()} {platform.system()}, Python {platform.python_version()}"
        f", {os.cpu_count()} CPUs",
        "command": "python bench/longmemeval.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "dataset": str(args.data),
        "systems": {name: as_json(score, kinds) for name, score in rows.items()}
        | {"plain FTS5 (first 10 distinct sessions)": as_json(base_sessions, kinds)}
        | {
            f"chronicle ({v}) by_session": {
                metric: as_json(pooled[v], kinds)[metric] for metric in SESSION_METRICS
            }
            for v in variants
        },
    }
    return write_document(args.out, document)


def write_document(path: Path, document: dict[str, Any]) -> int:
    """A bench's figures as JSON at `path` (its folder made); 0, the exit status."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
