"""The model-facing context of a session: a projection of its active branch.

Invariant: `project` is a pure function of the path (root first) and the entries' stored
payloads, so the same log gives the same context: after a restart, after a fold rebuild, after an
export and import.

Steps, as the seed describes them: walk the path; apply the latest compaction (its protected
head, then its summary in place of the folded entries, then the older messages it kept after the
summary, then the entries from the first one it kept); apply context edits (per target, the latest edit on the path wins; an edit off the path
does not count, so going back before an edit brings the original back); turn entries into
messages, dropping those that are not context (labels, names, usage).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..capture.events import HANDOFF_MARKER
from .paths import PathEntry

__all__ = ["project", "BRANCH_SUMMARY_MARKER", "compaction_summary"]

BRANCH_SUMMARY_MARKER = "[BRANCH SUMMARY — REFERENCE ONLY]"

Payloads = Callable[[Sequence[int]], Mapping[int, Mapping[str, object]]]


def _ids(value: object) -> list[str]:
    """A stored list of entry or section ids (absent or malformed: none)."""
    return [str(v) for v in value] if isinstance(value, list) else []


def compaction_summary(payload: Mapping[str, object]) -> str:
    summary = str(payload.get("summary") or "")
    if summary:
        return summary
    ids = ", ".join(_ids(payload.get("section_ids")))
    return f"{HANDOFF_MARKER} Earlier messages are in chronicle sections {ids or '(none)'}."


def project(
    path: Sequence[PathEntry], payloads: Payloads, *, branch_summaries: bool = True
) -> list[dict[str, object]]:
    latest = None
    for i in range(len(path) - 1, -1, -1):
        if path[i].kind == "compaction":
            latest = i
            break
    wanted = [
        e.seq for e in path if e.kind in ("message", "compaction", "context_edit", "branch_summary")
    ]
    data = payloads(wanted)

    edits: dict[str, dict[str, object] | None] = {}
    if latest is not None:
        # The copies the compaction cut to fit stand in for their originals; an edit after it wins.
        cut = data.get(path[latest].seq, {}).get("shortened")
        if isinstance(cut, dict):
            edits.update((str(k), v) for k, v in cut.items() if isinstance(v, dict))
    for entry in path:
        if entry.kind == "context_edit" and entry.target:
            replacement = data.get(entry.seq, {}).get("replacement")
            edits[entry.target] = replacement if isinstance(replacement, dict) else None

    ordered: list[PathEntry | dict[str, object]] = []
    if latest is None:
        ordered.extend(path)
    else:
        compaction = data.get(path[latest].seq, {})
        by_id = {e.entry_id: e for e in path[:latest]}
        head_ids = _ids(compaction.get("head_entries"))
        for head_id in head_ids:
            head = by_id.get(head_id)
            if head is not None:
                ordered.append(head)
        ordered.append({"role": "user", "content": compaction_summary(compaction)})
        kept_ids = _ids(compaction.get("kept_entries"))
        for kept_id in kept_ids:
            kept_entry = by_id.get(kept_id)
            if kept_entry is not None:
                ordered.append(kept_entry)
        first = compaction.get("first_kept_entry")
        start = next((i for i in range(latest) if path[i].entry_id == first), latest)
        placed = set(head_ids) | set(kept_ids)
        ordered.extend(e for e in path[start:latest] if e.entry_id not in placed)
        ordered.extend(path[latest + 1 :])

    out: list[dict[str, object]] = []
    for item in ordered:
        if isinstance(item, dict):
            out.append(item)
            continue
        if item.kind == "message":
            if item.entry_id in edits:
                replacement = edits[item.entry_id]
                if replacement is not None:
                    out.append(dict(replacement))
                continue
            message = data.get(item.seq, {}).get("message")
            if isinstance(message, dict):
                out.append(message)
        elif item.kind == "branch_summary" and branch_summaries:
            summary = str(data.get(item.seq, {}).get("summary") or "")
            if summary:
                out.append({"role": "user", "content": f"{BRANCH_SUMMARY_MARKER} {summary}"})
    return out
