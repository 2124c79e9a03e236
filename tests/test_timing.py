"""Compaction timed by its net cost: a pass comes before the threshold only when the cache it
would throw away has expired (the next request pays for the whole prompt anyway), never later
than the threshold, and exactly as before when the host reports no cache figures."""

from __future__ import annotations

from typing import Any

from test_context_engine import core, engine, home  # noqa: F401 - fixtures

from chronicle_engine.compaction.timing import CACHE_TTL_SECONDS, CacheTiming


def test_the_rule_fires_only_for_an_expired_cache_past_the_midpoint() -> None:
    timing = CacheTiming()
    low, high = 4_000, 12_000
    timing.observe({"prompt_tokens": 9_000, "completion_tokens": 10}, now=0.0)
    assert not timing.early(10_000, low=low, high=high, now=1_000.0)  # no cache figures: as before
    timing.observe({"prompt_tokens": 9_000, "cache_read_tokens": 8_500}, now=0.0)
    assert not timing.early(10_000, low=low, high=high, now=10.0)  # warm: keep the cache
    assert timing.early(10_000, low=low, high=high, now=CACHE_TTL_SECONDS + 1)  # expired
    assert not timing.early(7_000, low=low, high=high, now=CACHE_TTL_SECONDS + 1)  # below midpoint
    assert not timing.early(
        12_000, low=low, high=high, now=CACHE_TTL_SECONDS + 1
    )  # the threshold's


def test_the_engine_brings_a_pass_forward_after_an_idle_gap(engine: Any) -> None:  # noqa: F811
    now = [0.0]
    engine.clock = lambda: now[0]
    policy = engine.policy
    high, low = policy.high_tokens, policy.low_tokens
    between = low + (high - low) * 3 // 4
    # No cache figures: today's timing.
    engine.update_from_response({"prompt_tokens": between, "completion_tokens": 20})
    now[0] += 10 * CACHE_TTL_SECONDS
    assert engine.should_compress(between) is False
    # The provider caches; while the cache is warm the threshold decides.
    engine.update_from_response(
        {"prompt_tokens": between, "completion_tokens": 20, "cache_read_tokens": between - 500}
    )
    engine.update_from_response(
        {"prompt_tokens": between, "completion_tokens": 20, "cache_read_tokens": between - 100}
    )
    now[0] += 30
    assert engine.should_compress(between) is False
    # The user comes back after the cache expired: the pass is due now.
    now[0] += CACHE_TTL_SECONDS + 1
    assert engine.should_compress(between) is True
    # At the threshold a pass is due whatever the cache holds.
    engine.update_from_response({"prompt_tokens": high, "cache_read_tokens": high - 100})
    assert engine.should_compress(high) is True
