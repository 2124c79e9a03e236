"""The host's contract for a compacted list, checked before anything is returned to Hermes.

From hermes-agent 0.19.0 (DESIGN.md): the list is non-empty and differs from the input; every
assistant `tool_calls` entry is followed by its tool results; no tool result lacks its call; the
latest user message is present; a message whose content was rewritten carries no `api_content`;
no message carries `_db_persisted`. A latest user message too long for the whole budget may be
shortened (it then starts with the original's first words and says how to restore it).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import content_text, is_real_user, tool_call_ids

__all__ = ["violations"]

_PREFIX = 120


def violations(
    before: Sequence[object], after: Sequence[object], rewritten: Sequence[int] = ()
) -> list[str]:
    """What is wrong with `after` as the compaction of `before` (empty: nothing)."""
    problems: list[str] = []
    if not after:
        return ["the compacted list is empty"]
    if list(after) == list(before):
        problems.append("the compacted list equals the input")
    i, n = 0, len(after)
    while i < n:
        m = after[i]
        if not isinstance(m, dict):
            i += 1
            continue
        if m.get("_db_persisted"):
            problems.append(f"message {i} carries _db_persisted")
        if m.get("role") == "tool":
            problems.append(f"message {i} is a tool result with no call before it")
            i += 1
            continue
        ids = tool_call_ids(m) if m.get("role") == "assistant" else ()
        j = i + 1
        if ids:
            found: set[str] = set()
            while j < n:
                result = after[j]
                if not (isinstance(result, dict) and result.get("role") == "tool"):
                    break
                result_id = result.get("tool_call_id")
                if result_id not in ids:
                    problems.append(f"message {j} answers a call its assistant did not make")
                found.add(str(result_id))
                if result.get("_db_persisted"):
                    problems.append(f"message {j} carries _db_persisted")
                j += 1
            missing = set(ids) - found
            if missing:
                problems.append(f"message {i} lost the results of {sorted(missing)}")
        i = j
    for index in rewritten:
        message = after[index] if 0 <= index < n else None
        if isinstance(message, dict) and "api_content" in message:
            problems.append(f"message {index} was rewritten but kept api_content")
    latest = next((m for m in reversed(before) if is_real_user(m)), None)
    if isinstance(latest, dict):
        text = content_text(latest)
        shortened = {i for i in rewritten if 0 <= i < n}
        present = any(
            isinstance(m, dict)
            and m.get("role") == "user"
            and (
                content_text(m) == text
                or (i in shortened and content_text(m).startswith(text[:_PREFIX].rstrip()))
            )
            # (from the end: where the latest request usually stands)
            for i, m in zip(range(n - 1, -1, -1), reversed(after), strict=True)
        )
        if not present:
            problems.append("the latest user message is missing")
    return problems
