"""A short soak (bench/soak.py at CI size): both slots as Hermes loads and rotates them, in
the three shapes, hold the bench's targets."""

from __future__ import annotations

import pytest
from test_compaction_support import load_bench


@pytest.mark.parametrize(
    ("shape", "turns"), [("instructions", 230), ("tools", 75), ("overhead", 60)]
)
def test_a_short_soak_meets_the_targets(shape: str, turns: int) -> None:
    soak = load_bench("soak")
    result = soak.soak(soak.SHAPES[shape], turns, max_seconds=300)
    assert not result.stopped_early
    assert result.passes >= 2, soak.report(result)
    assert result.failures() == [], soak.report(result)
    assert result.originals == 4 * turns and result.restorable == result.originals
    assert all(after < result.high for after in result.after)
    assert result.largest_prompt < soak.SHAPES[shape].window
