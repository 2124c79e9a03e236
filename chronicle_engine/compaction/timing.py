"""When a pass pays for itself: compaction timed by its net cost where the host reports cache
figures.

A provider's prompt cache keeps what a request sent for a while (`CACHE_TTL_SECONDS`); the next
request reads that prefix at a fraction of the input price (`READ_PRICE`) and writes the rest at
a premium (`WRITE_PRICE`). A pass rewrites the prompt after its head, so the request after it
writes the new prompt instead of reading the old one. For the next request, with `T` tokens now,
`L` after a pass and `C` of them still cached:

    without a pass:  READ_PRICE * C + WRITE_PRICE * (T - C)
    with a pass:     WRITE_PRICE * L

so a pass is cheaper when the tokens it removes outweigh the cache it throws away:
`WRITE_PRICE * (T - L) > (WRITE_PRICE - READ_PRICE) * C`. With a warm cache (`C` about `T`) that
never holds; after an idle gap longer than the cache lives (`C` = 0) it always does: the next
request pays for the whole prompt either way, so a pass then costs nothing the conversation
would not pay anyway, and it puts off the pass the threshold would force later, on a warm cache.

Invariants:
- Never later than today: at or above the threshold a pass is due as before; this only brings a
  pass forward, and only past the midpoint between the low mark and the threshold (a pass there
  still folds a useful amount).
- With no cache figures reported (a provider without prompt caching, or a host that does not
  pass them), the timing is exactly the threshold's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CACHE_TTL_SECONDS", "READ_PRICE", "WRITE_PRICE", "CacheTiming"]

CACHE_TTL_SECONDS = 300.0
"""How long a provider keeps a prompt's prefix cached after a request (Anthropic's default
five minutes; OpenAI's automatic cache lasts five to ten)."""

READ_PRICE = 0.1
"""A cached input token's price, as a share of an uncached one (Anthropic's cache reads)."""

WRITE_PRICE = 1.25
"""A cache write's price, as a share of an uncached input token (Anthropic's five-minute
writes). With a provider that charges no write premium the rule is stricter, not looser."""


def _count(usage: Mapping[str, object], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass
class CacheTiming:
    """What the host's usage reports say about the provider's cache, and the early-pass rule."""

    reported: bool = False  # any cache figure seen: the provider caches and the host says so
    cached: int = 0  # tokens the provider holds after the last request (read + written)
    at: float | None = None  # when the last response came (the clock the engine uses)

    def observe(self, usage: Mapping[str, object], now: float) -> None:
        read = _count(usage, "cache_read_tokens")
        written = _count(usage, "cache_write_tokens")
        if read or written:
            self.reported = True
        self.cached = read + written
        self.at = now

    def still_cached(self, now: float) -> int:
        """What the next request may read from the cache (0 once it has expired)."""
        if self.at is None or now - self.at > CACHE_TTL_SECONDS:
            return 0
        return self.cached

    def early(self, tokens: int, *, low: int, high: int, now: float) -> bool:
        """Whether a pass now, below the threshold, costs less than the next request without
        it (see the module docstring). False without cache figures."""
        if not self.reported or tokens >= high or tokens <= low + (high - low) // 2:
            return False
        removed = tokens - low
        return WRITE_PRICE * removed > (WRITE_PRICE - READ_PRICE) * self.still_cached(now)
