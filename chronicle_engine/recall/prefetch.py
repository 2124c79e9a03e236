"""Per-turn memory: what enters a turn unasked, behind the relevance gate.

Invariants:
- Only the person's own words in past exchanges (their captured messages) and beliefs drawn from
  them are candidates; sections (summaries), the assistant's words, tool output and the agent's
  own notes never enter a turn unasked.
- Nothing already in the model's window comes back: the conversation's messages after its latest
  compaction, and the head that compaction kept (`window`). What a compaction folded out may
  return. The window is a seq range of the lineage tested in SQL, inside the candidate queries,
  so its cost does not grow with the conversation and a long live conversation cannot crowd
  the older matches out of the candidates.
- A scheduled job's turn gets nothing (`recall.prefetch_automation` lets it).
- Every item passes the gate (`gate.py`); a single shared word needs a vector to vouch for it.
- The block is masked (`capture.secrets.mask`) and bounded in items and characters.
- An item is not injected twice while it is still in the context (`injected.Injected`): it
  comes back only once a compaction has folded the turn that carried it out, and it is relevant
  again.
"""

from __future__ import annotations

import time

from ..capture.secrets import mask
from ..sessions.events import CompactionRecorded
from .gate import gate_words, passes
from .index import RecallIndex
from .reach import Window
from .search import Hit, MessageRow
from .vectors import cosine, unpack

__all__ = ["window", "automated", "prepare"]


def window(recall: RecallIndex, session_id: str) -> Window | None:
    """What the model has in its window for this conversation: after its latest recorded
    compaction, the kept head and every message of the lineage from the first kept one on; with
    no compaction, all of the lineage. What a compaction folded out, and every other
    conversation, is not in the window. None without a session.

    Read from the compaction records themselves (the log), not from the tree's active branch: a
    resumed process may continue on a branch the record is not on, and the window is still the
    one that compaction left."""
    if not session_id:
        return None
    sessions = tuple(recall.lineage(session_id))
    latest = recall.reader.latest(CompactionRecorded, sessions=sessions)
    if latest is None:
        return Window(sessions)
    record = latest.event
    start = record.first_kept_seq if record.first_kept_seq is not None else latest.seq
    placed = [*record.head_entries, *record.kept_entries]
    heads = recall.log.seqs_of(placed) if placed else {}
    return Window(sessions, start, frozenset(heads.values()))


def automated(recall: RecallIndex, session_id: str) -> bool:
    """Is this session a scheduled job's (cron) run?"""
    live = recall.identity(session_id)
    if "cron" in (live.get("agent_context") or "") or live.get("platform") == "cron":
        return True
    if session_id.startswith("cron"):
        return True
    with recall.reading("reading memory") as conn:
        row = conn.execute(
            "SELECT agent_context, speaker FROM recall_messages WHERE session = ?"
            " AND role = 'user' ORDER BY seq DESC LIMIT 1",
            (session_id,),
        ).fetchone()
    return row is not None and (row[0] == "cron" or row[1] == "automation")


def prepare(recall: RecallIndex, query: str, session_id: str) -> str:
    if not isinstance(query, str) or not query.strip():
        return ""
    t = recall.tuning
    if session_id and not t.prefetch_automation and automated(recall, session_id):
        return ""
    message = gate_words(query)
    if not message:
        return ""
    person_words: dict[int, set[str]] = {}
    seen = window(recall, session_id)

    def keep_message(row: MessageRow) -> bool:
        # The row comes with its text (read with the candidates), already outside the window.
        if row.speaker != "person" or not row.person:
            return False
        person_words[row.seq] = gate_words(row.person)
        return bool(message & person_words[row.seq])

    found = recall.hits(
        query,
        session_id=session_id or None,
        scope="all",
        limit=t.prefetch_limit * 4,
        keep_message=keep_message,
        message_text=True,
        outside=seen,
        belief_origins=("person", "correction"),
        use_vectors=False,
        sections=False,  # a section is a summary, not the person's own words
    )
    conversation = seen.sessions[0] if seen is not None and seen.sessions else ""
    if conversation:
        found = [h for h in found if not recall.injected.still_in_context(conversation, h.id, seen)]
    if not t.prefetch_relevance_gate:
        chosen = found[: t.prefetch_limit]
    else:
        chosen = _gate(recall, query, message, found, person_words)
    block = _format(recall, chosen)
    if block and conversation:
        # The block rides with the turn that follows: past every seq the log holds now.
        recall.injected.note(
            conversation, [h.id for h in chosen if f"[{h.id}" in block], recall.log.last_seq() + 1
        )
    return block


def _gate(
    recall: RecallIndex,
    query: str,
    message: set[str],
    found: list[Hit],
    person_words: dict[int, set[str]],
) -> list[Hit]:
    t = recall.tuning
    out: list[Hit] = []
    query_vector: list[float] | None = None
    on_the_spot = 4
    deadline = time.monotonic() + 1.5
    for hit in found:
        if hit.kind == "message" and hit.seq is not None:
            item = person_words.get(hit.seq, set())
        else:
            item = gate_words(f"{hit.extra.get('key', '')} {hit.extra.get('value', '')} {hit.text}")
        shared = len(message & item)
        similarity: float | None = None
        vectors = recall.embedder is not None and recall.embedder.available
        if 1 <= shared <= 3 and vectors and time.monotonic() < deadline:
            if query_vector is None:
                query_vector = recall.query_vector(query)
            if query_vector is not None:
                similarity = _similarity(recall, hit, query_vector, on_the_spot > 0)
                on_the_spot -= 1
        if passes(
            message,
            item,
            similarity=similarity,
            min_similarity=t.prefetch_min_similarity,
            pair_similarity=t.prefetch_pair_similarity,
        ):
            out.append(hit)
        if len(out) == t.prefetch_limit:
            break
    return out


def _similarity(
    recall: RecallIndex, hit: Hit, query_vector: list[float], may_embed: bool
) -> float | None:
    assert recall.embedder is not None
    with recall.reading("reading memory") as conn:
        row = conn.execute(
            "SELECT vec FROM recall_vectors WHERE target = ? AND model = ?",
            (hit.id, recall.embedder.model),
        ).fetchone()
    if row is not None:
        return cosine(query_vector, unpack(row[0]))
    if not may_embed:
        return None
    got = recall.embedder.embed([hit.text[:2000]])
    return cosine(query_vector, got[0]) if got else None


def _format(recall: RecallIndex, hits: list[Hit]) -> str:
    if not hits:
        return ""
    lines = ["Chronicle recalled this from earlier conversations (ids work with chronicle_search):"]
    budget = recall.tuning.prefetch_max_chars - len(lines[0])
    for hit in hits:
        day = (hit.time or "")[:10]
        if hit.kind == "belief":
            line = f"- [{hit.id}{' · ' + day if day else ''}] {hit.text}"
        else:
            who = hit.extra.get("name") or "the user"
            line = f"- [{hit.id}{' · ' + day if day else ''}] {who} said: {hit.text}"
        line = mask(line)
        if len(line) > budget:
            if budget > 80:
                lines.append(line[: budget - 1] + "…")
            break
        lines.append(line)
        budget -= len(line) + 1
    return "\n".join(lines) if len(lines) > 1 else ""
