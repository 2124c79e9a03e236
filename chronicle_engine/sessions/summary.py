"""Short extractive summaries of an abandoned branch (no model needed).

Invariant: built only from the entries' masked `text`, so a summary never carries a credential.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["abandoned_summary", "clip"]

_LIMIT = 600


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def abandoned_summary(texts: Sequence[tuple[str, str]]) -> str:
    """What was asked and what came back on a branch that was left: (role, masked text) pairs."""
    asked = [t for role, t in texts if role == "user" and t.strip()]
    said = [t for role, t in texts if role == "assistant" and t.strip()]
    pieces = [f"Abandoned branch of {len(texts)} message(s)."]
    if asked:
        pieces.append("Asked: " + " | ".join(clip(t, 160) for t in asked[:3]))
    if said:
        pieces.append("Last reply: " + clip(said[-1], 200))
    return clip(" ".join(pieces), _LIMIT)
