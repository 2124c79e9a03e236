"""Compaction at the limits: how far a pass folds under the host's count, and when not to fold.

The host counts the whole prompt (`current_tokens`: system prompt, tool schemas, messages). What
it counted beyond the messages is overhead no pass can remove, so a pass aims the messages at the
low watermark minus that overhead, down to the protected tail alone when the overhead eats the
whole low watermark (then it keeps half the room left under the threshold, so a pass is
followed by turns before the next one).

Invariants:
- The host's count is trusted: the overhead is `current_tokens - the messages' own estimate`,
  bounded only by the window (a count larger than the window is not a prompt the host sent).
- A pass that cannot end under the threshold (or cannot fold at all) is reported once per stall,
  and `ThrashGuard` holds the next automatic pass until the prompt has grown by a step of new
  content AND a number of model calls has passed that doubles with each futile pass (the
  frequency dimension): a stalled conversation is compacted at most once per step, never on
  every turn. Near the window, growth alone re-opens the guard.
- Pins keep messages in place only within their budget (`bound_pins`), newest first.
- A pass that made room resets the guard; the least number of model calls between two automatic
  passes that both made room is `floor_calls` unless the prompt is near the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .planner import MessageFacts

__all__ = ["host_overhead", "message_budget", "bound_pins", "ThrashGuard", "NEAR_WINDOW"]

NEAR_WINDOW = 0.95
"""The share of the window past which a request may no longer fit: the guard never holds on
frequency alone there."""

_MAX_BACKOFF_CALLS = 64


def host_overhead(current_tokens: int | None, messages_tokens: int, window: int) -> int:
    """The prompt's tokens beyond the messages, as the host counted them (0 without a count)."""
    if not current_tokens:
        return 0
    return max(0, min(int(current_tokens), window) - int(messages_tokens))


def message_budget(low_tokens: int, high_tokens: int, overhead: int) -> int:
    """Tokens the messages may keep after a pass: the low watermark less the overhead. When the
    overhead eats the low watermark, half the room left under the threshold (so the next
    turns have room before the next pass); zero when there is none: the protected tail alone,
    which the planner shortens to fit what it can."""
    budget = low_tokens - overhead
    if budget > 0:
        return budget
    return max(0, (high_tokens - overhead) // 2)


def bound_pins(facts: Sequence[MessageFacts], budget_tokens: int) -> list[MessageFacts]:
    """Pins keep their messages in place within `budget_tokens`, newest first; older pinned
    messages past it fold like any other turn (the pin stays recorded, expand returns them)."""
    out = list(facts)
    used = 0
    for i in range(len(out) - 1, -1, -1):
        f = out[i]
        if not f.pinned:
            continue
        used += f.tokens
        if used > budget_tokens:
            out[i] = f._replace(protected=False, pinned=False)
    return out


@dataclass(slots=True)
class ThrashGuard:
    """Per-agent memory of the last automatic passes (copied with the engine, never shared)."""

    floor_calls: int = 2
    last_call: int | None = None  # the model-call count when the last pass ran
    last_after: int = 0  # the prompt's tokens after it (overhead included)
    stalled: bool = False
    backoff: int = 0  # model calls to wait after a futile pass (doubles per futile pass)
    warned: bool = False
    reason: str = ""

    def passed(self, *, call: int, after: int, high: int) -> str | None:
        """Record a pass that ended at `after` tokens. Returns the warning to give, once per
        stall, when the pass could not get under the threshold."""
        self.last_call = call
        self.last_after = after
        if after < high:
            self.stalled = self.warned = False
            self.backoff = 0
            self.reason = ""
            return None
        return self._stall(
            f"a compaction ended at ~{after:,} tokens, still over the threshold of {high:,}: "
            "the system prompt, tool schemas and the protected part leave no more to fold"
        )

    def failed(self, *, call: int, tokens: int, why: str) -> str | None:
        """Record a pass that changed nothing while the prompt was over the threshold."""
        self.last_call = call
        self.last_after = tokens
        return self._stall(f"a compaction at ~{tokens:,} tokens could not fold anything ({why})")

    def _stall(self, reason: str) -> str | None:
        self.stalled = True
        self.backoff = min(_MAX_BACKOFF_CALLS, max(2, self.backoff * 2))
        self.reason = reason
        if self.warned:
            return None
        self.warned = True
        return reason

    def hold(self, *, call: int, tokens: int, high: int, window: int) -> str | None:
        """Why an automatic pass should not run now (None: let it run)."""
        if tokens < high or self.last_call is None:
            return None
        since = call - self.last_call
        near = tokens >= int(window * NEAR_WINDOW)
        if not self.stalled:
            if near or since >= self.floor_calls:
                return None
            return (
                f"compacted {since} model call(s) ago; the next automatic pass waits for "
                f"{self.floor_calls}"
            )
        step = max(1_000, (window - high) // 4)
        grown = tokens - self.last_after
        if grown >= step and (near or since >= self.backoff):
            return None
        return (
            f"{self.reason}; the next automatic pass waits until ~{step:,} more tokens arrive "
            f"and {self.backoff} model calls have passed"
        )
