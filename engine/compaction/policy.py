"""When to compact and how far: the user's `compression:` settings, applied to the live window.

Hermes does not hand its `compression:` settings to a plugin engine, so they are read from
`$HERMES_HOME/config.yaml` (through `Config.compression`). Chronicle's own
`context.high_watermark_percent` / `context.low_watermark_percent` win when set. Every number in
force says where it came from, so `chronicle_context_status` can show it.

Invariants: 0 < low < high < 1; the handoff budget is positive and smaller than the low
watermark; a `Policy` is immutable (a model switch builds a new one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from .messages import chars_for_tokens

__all__ = ["Policy", "policy_from_config", "DEFAULT_CONTEXT_LENGTH"]

DEFAULT_CONTEXT_LENGTH = 128_000
_SMALL_WINDOW = 512_000  # Hermes raises a low threshold to 0.75 below this window
_SMALL_WINDOW_FLOOR = 0.75
_FALLBACK_HIGH = 0.75
_FALLBACK_LOW = 0.55
_HOST_THRESHOLD_DEFAULT = 0.50
_HOST_TARGET_RATIO_DEFAULT = 0.20
_HANDOFF_SHARE = 0.05
_HANDOFF_MIN = 2_000
_HANDOFF_MAX = 12_000
_HYGIENE_DEFAULT = 5_000


@dataclass(frozen=True, slots=True)
class Policy:
    context_length: int
    high_percent: float
    low_percent: float
    protect_first_n: int
    protect_last_n: int
    handoff_tokens: int
    max_kept_messages: int | None = None
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def high_tokens(self) -> int:
        return int(self.context_length * self.high_percent)

    @property
    def low_tokens(self) -> int:
        return int(self.context_length * self.low_percent)

    @property
    def section_tokens(self) -> int:
        """Most prose one section may carry into the handoff."""
        return max(400, self.handoff_tokens // 4)

    @property
    def section_chars(self) -> int:
        """The same budget in characters: what a section writer is given."""
        return chars_for_tokens(self.section_tokens)

    def describe(self) -> dict[str, Any]:
        return {
            "context_length": self.context_length,
            "high_watermark_percent": round(self.high_percent, 4),
            "high_watermark_tokens": self.high_tokens,
            "low_watermark_percent": round(self.low_percent, 4),
            "low_watermark_tokens": self.low_tokens,
            "protect_first_n": self.protect_first_n,
            "protect_last_n": self.protect_last_n,
            "handoff_budget_tokens": self.handoff_tokens,
            "max_kept_messages": self.max_kept_messages,
            "sources": dict(self.sources),
        }


def _fraction(value: Any) -> float | None:
    """A share of the window from the host's own `compression:` values (0.75, or 75 meant as a
    percentage); None when it is not one."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if number > 1.0 and number <= 100.0:  # "75" meant as a percentage
        number /= 100.0
    return number if 0.0 < number < 1.0 else None


def _count(value: Any, default: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return max(0, number)


def policy_from_config(config: Config, context_length: int | None = None) -> Policy:
    """The policy for a window of `context_length` tokens under the user's settings."""
    window = int(context_length or 0) or DEFAULT_CONTEXT_LENGTH
    host = config.compression or {}
    sources: dict[str, str] = {}

    threshold = _fraction(host.get("threshold"))
    ratio = _fraction(host.get("target_ratio"))
    host_has_threshold = threshold is not None
    if threshold is None:
        threshold = _HOST_THRESHOLD_DEFAULT
    if ratio is None:
        ratio = _HOST_TARGET_RATIO_DEFAULT
    if window < _SMALL_WINDOW:
        threshold = max(threshold, _SMALL_WINDOW_FLOOR)

    high = config.settings.context.high_watermark_percent
    if high is not None:
        sources["high"] = "chronicle.context.high_watermark_percent"
    elif host_has_threshold:
        high = threshold
        sources["high"] = "compression.threshold" + (
            " (floored at 0.75 below a 512K window)" if window < _SMALL_WINDOW else ""
        )
    else:
        high = _FALLBACK_HIGH
        sources["high"] = "default"

    low = config.settings.context.low_watermark_percent
    if low is not None:
        sources["low"] = "chronicle.context.low_watermark_percent"
    elif host_has_threshold:
        low = 2 * threshold * ratio
        sources["low"] = "2 x compression.threshold x compression.target_ratio"
    else:
        low = _FALLBACK_LOW
        sources["low"] = "default"
    if low >= high:
        low = high * 0.8
        sources["low"] += " (lowered below the high watermark)"

    first_n = _count(host.get("protect_first_n"), 3)
    last_n = _count(host.get("protect_last_n"), 20)
    sources["protect_first_n"] = "compression" if "protect_first_n" in host else "default"
    sources["protect_last_n"] = "compression" if "protect_last_n" in host else "default"

    configured = config.settings.context.handoff_max_tokens
    if configured:
        handoff = configured
        sources["handoff"] = "chronicle.context.handoff_max_tokens"
    else:
        handoff = min(_HANDOFF_MAX, max(_HANDOFF_MIN, int(window * _HANDOFF_SHARE)))
        sources["handoff"] = "5% of the window"
    handoff = max(200, min(handoff, int(window * low) // 2))

    # The gateway compacts on message count past this limit; fold to half of it so one pass ends
    # its loop.
    hygiene = _count(host.get("hygiene_hard_message_limit"), _HYGIENE_DEFAULT)
    max_kept = hygiene // 2 if hygiene else None

    return Policy(
        context_length=window,
        high_percent=high,
        low_percent=low,
        protect_first_n=first_n,
        protect_last_n=last_n,
        handoff_tokens=handoff,
        max_kept_messages=max_kept,
        sources=sources,
    )
