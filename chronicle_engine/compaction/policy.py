"""When to compact and how far: the user's `compression:` settings, applied to the live window.

Hermes does not hand its `compression:` settings to a plugin engine, so they are read from
`$HERMES_HOME/config.yaml` (through `Config.compression`). A setting the file does not give is
Hermes' own default, read from the installed host (`hermes_cli.config.DEFAULT_CONFIG`), so
Chronicle folds as deep as the built-in compressor out of the box; Hermes' documented values
stand in only when the host is not importable. Chronicle's own
`context.high_watermark_percent` / `context.low_watermark_percent` win when set. Every number in
force says where it came from, so `chronicle_context_status` can show it.

Invariants: 0 < low < high < 1; the handoff budget is positive and smaller than the low
watermark; a `Policy` is immutable (a model switch builds a new one).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..config import Config
from ..messages import chars_for_tokens

__all__ = [
    "Policy",
    "policy_from_config",
    "host_compression_defaults",
    "model_threshold",
    "DEFAULT_CONTEXT_LENGTH",
]

DEFAULT_CONTEXT_LENGTH = 128_000
_SMALL_WINDOW = 512_000  # Hermes raises a low threshold to 0.75 below this window
_SMALL_WINDOW_FLOOR = 0.75
RESTORE_TOKENS = 8_000
"""The budget of one expand when the caller names none (the context engine's tool names one
from the room between the low mark and the threshold)."""

RESTORE_MAX_TOKENS = 20_000
"""The largest budget one expand serves: ~80,000 characters of messages, under the 100,000
characters of a tool result Hermes passes on whole."""


# Hermes' documented `compression:` defaults: used only when the host is not importable.
_DOCUMENTED_DEFAULTS: Mapping[str, float] = {
    "threshold": 0.50,
    "target_ratio": 0.20,
    "protect_first_n": 3,
    "protect_last_n": 20,
    "hygiene_hard_message_limit": 5000,
}
_HANDOFF_SHARE = 0.05
_STANDING_SHARE = 0.10
_HANDOFF_MIN = 2_000
_HANDOFF_MAX = 12_000
_HYGIENE_DEFAULT = 5_000


@dataclass(frozen=True, slots=True)
class Policy:
    """When a conversation is compacted and how much of it stays: the window's limits in tokens."""

    context_length: int
    high_percent: float
    low_percent: float
    protect_first_n: int
    protect_last_n: int
    handoff_tokens: int
    max_kept_messages: int | None = None
    standing_tokens: int = 0  # standing instructions carried, and pins kept (each)
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

    def describe(self) -> dict[str, object]:
        return {
            "context_length": self.context_length,
            "high_watermark_percent": round(self.high_percent, 4),
            "high_watermark_tokens": self.high_tokens,
            "low_watermark_percent": round(self.low_percent, 4),
            "low_watermark_tokens": self.low_tokens,
            "protect_first_n": self.protect_first_n,
            "protect_last_n": self.protect_last_n,
            "handoff_budget_tokens": self.handoff_tokens,
            "standing_budget_tokens": self.standing_tokens,
            "max_kept_messages": self.max_kept_messages,
            "sources": dict(self.sources),
        }


def _fraction(value: object) -> float | None:
    """A share of the window from the host's own `compression:` values (0.75, or 75 meant as a
    percentage); None when it is not one."""
    if not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if number > 1.0 and number <= 100.0:  # "75" meant as a percentage
        number /= 100.0
    return number if 0.0 < number < 1.0 else None


def _count(value: object, default: int) -> int:
    if not isinstance(value, int | float | str):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return max(0, number)


@functools.cache
def _host_defaults() -> tuple[tuple[tuple[str, object], ...], str]:
    try:
        # The host's own defaults, not a copy (already imported inside Hermes).
        module = sys.modules.get("hermes_cli.config") or importlib.import_module(
            "hermes_cli.config"
        )
        found = module.DEFAULT_CONFIG.get("compression")
        if isinstance(found, Mapping) and found:
            return tuple(found.items()), "Hermes' default"
    except Exception:  # Hermes not installed (the CLI, tests without the host)
        pass
    return tuple(_DOCUMENTED_DEFAULTS.items()), "Hermes' documented default"


def host_compression_defaults() -> tuple[dict[str, object], str]:
    """Hermes' `compression:` defaults and where they came from: the installed host's
    `DEFAULT_CONFIG`, or its documented values when Hermes is not importable."""
    items, origin = _host_defaults()
    return dict(items), origin


def model_threshold(model: str, thresholds: object, provider: str = "") -> tuple[float, str] | None:
    """The per-model threshold of `compression.model_thresholds` (newer Hermes): the longest
    key that is a substring of the model name wins; a "provider:substring" key applies only on
    that provider and outranks a bare key of the same length. None when no key matches."""
    if not thresholds or not model or not isinstance(thresholds, Mapping):
        return None
    route = (provider or "").strip().lower()
    best: tuple[tuple[int, int], str] | None = None
    for key in thresholds:
        scope, sep, part = str(key).partition(":")
        if not sep:
            rank = (len(key), 0) if key in model else None
        else:
            rank = (len(part), 1) if scope.strip().lower() == route and part in model else None
        if rank is not None and (best is None or rank > best[0]):
            best = (rank, str(key))
    if best is None:
        return None
    value = _fraction(thresholds[best[1]])
    return (value, best[1]) if value is not None else None


def policy_from_config(
    config: Config,
    context_length: int | None = None,
    *,
    model: str = "",
    provider: str = "",
    model_thresholds: Mapping[str, object] | None = None,
) -> Policy:
    """The policy for a window of `context_length` tokens under the user's settings.
    `model_thresholds`: the map a newer host assigns to the engine (default: the one in
    config.yaml); a key matching `model` sets the threshold for that model."""
    window = int(context_length or 0) or DEFAULT_CONTEXT_LENGTH
    host = config.compression or {}
    defaults, origin = host_compression_defaults()
    sources: dict[str, str] = {}

    def setting(key: str) -> tuple[object, str]:
        if key in host:
            return host[key], "compression." + key
        return defaults.get(key, _DOCUMENTED_DEFAULTS.get(key)), f"{origin} compression.{key}"

    threshold, threshold_from = _fraction_setting(setting, "threshold")
    ratio, ratio_from = _fraction_setting(setting, "target_ratio")
    per_model = model_threshold(
        model,
        model_thresholds if model_thresholds is not None else host.get("model_thresholds"),
        provider,
    )
    if per_model is not None:
        threshold, threshold_from = per_model[0], f"compression.model_thresholds[{per_model[1]}]"
    if window < _SMALL_WINDOW and threshold < _SMALL_WINDOW_FLOOR:
        threshold_from += " (floored at 0.75 below a 512K window)"
        threshold = _SMALL_WINDOW_FLOOR
    high, low = _watermarks(config, threshold, threshold_from, ratio, ratio_from, sources)

    raw_first, sources["protect_first_n"] = setting("protect_first_n")
    raw_last, sources["protect_last_n"] = setting("protect_last_n")
    handoff, standing = _budgets(config, window, low, sources)
    # The gateway compacts on message count past this limit; fold to half of it so one pass ends
    # its loop.
    hygiene = _count(setting("hygiene_hard_message_limit")[0], _HYGIENE_DEFAULT)
    return Policy(
        context_length=window,
        high_percent=high,
        low_percent=low,
        protect_first_n=_count(raw_first, 3),
        protect_last_n=_count(raw_last, 20),
        handoff_tokens=handoff,
        max_kept_messages=hygiene // 2 if hygiene else None,
        standing_tokens=standing,
        sources=sources,
    )


def _fraction_setting(setting: Callable[[str], tuple[object, str]], key: str) -> tuple[float, str]:
    """A fraction of the host's compression settings and where it came from; the documented
    default when it is missing or not a fraction."""
    raw, source = setting(key)
    value = _fraction(raw)
    if value is None:
        return _DOCUMENTED_DEFAULTS[key], "documented default"
    return value, source


def _watermarks(
    config: Config,
    threshold: float,
    threshold_from: str,
    ratio: float,
    ratio_from: str,
    sources: dict[str, str],
) -> tuple[float, float]:
    """(high, low): Chronicle's own settings, else the host's threshold and twice threshold x
    target_ratio; low always below high."""
    high = config.settings.context.high_watermark_percent
    if high is not None:
        sources["high"] = "chronicle.context.high_watermark_percent"
    else:
        high, sources["high"] = threshold, threshold_from
    low = config.settings.context.low_watermark_percent
    if low is not None:
        sources["low"] = "chronicle.context.low_watermark_percent"
    else:
        low = 2 * threshold * ratio
        sources["low"] = f"2 x threshold x target_ratio ({ratio_from})"
    if low >= high:
        low = high * 0.8
        sources["low"] += " (lowered below the high watermark)"
    return high, low


def _budgets(config: Config, window: int, low: float, sources: dict[str, str]) -> tuple[int, int]:
    """(handoff, standing) tokens: each configured or a share of the window, and each within
    the low watermark, or a pass could never end under it."""
    configured = config.settings.context.handoff_max_tokens
    if configured:
        handoff = configured
        sources["handoff"] = "chronicle.context.handoff_max_tokens"
    else:
        handoff = min(_HANDOFF_MAX, max(_HANDOFF_MIN, int(window * _HANDOFF_SHARE)))
        sources["handoff"] = "5% of the window"
    handoff = max(200, min(handoff, int(window * low) // 2))
    share = _fraction(config.settings.context.standing_share_percent) or _STANDING_SHARE
    sources["standing"] = f"chronicle.context.standing_share_percent ({share:g})"
    standing = max(200, min(int(window * share), int(window * low) // 3))
    return handoff, standing
