"""A short soak (bench/soak.py at CI size): both slots as Hermes loads and rotates them, in
the three shapes, hold the bench's targets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "chronicle_bench_soak", ROOT / "bench" / "soak.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("shape", "turns"), [("instructions", 230), ("tools", 75), ("overhead", 60)]
)
def test_a_short_soak_meets_the_targets(shape: str, turns: int) -> None:
    soak = _bench()
    result = soak.soak(soak.SHAPES[shape], turns, max_seconds=300)
    assert not result.stopped_early
    assert result.passes >= 2, soak.report(result)
    assert result.failures() == [], soak.report(result)
    assert result.originals == 4 * turns and result.restorable == result.originals
    assert all(after < result.high for after in result.after)
    assert result.largest_prompt < soak.SHAPES[shape].window
