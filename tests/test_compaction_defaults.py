"""With no `compression:` section in config.yaml, the policy is Hermes' own defaults, read from
the installed host (not a copy); the documented values only when Hermes is not importable."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from hermes_cli.config import DEFAULT_CONFIG

from chronicle_engine.compaction import policy as policy_module
from chronicle_engine.compaction.policy import host_compression_defaults, policy_from_config
from chronicle_engine.config import Config


@pytest.fixture(autouse=True)
def fresh_defaults() -> Iterator[None]:
    policy_module._host_defaults.cache_clear()
    yield
    policy_module._host_defaults.cache_clear()


def test_no_compression_section_means_hermes_defaults() -> None:
    hermes = DEFAULT_CONFIG["compression"]
    policy = policy_from_config(Config(), 128_000)
    threshold = max(hermes["threshold"], 0.75)  # Hermes' floor below a 512K window
    assert policy.high_percent == threshold
    assert policy.low_percent == pytest.approx(2 * threshold * hermes["target_ratio"])
    assert (policy.protect_first_n, policy.protect_last_n) == (
        hermes["protect_first_n"],
        hermes["protect_last_n"],
    )
    assert policy.sources["high"].startswith("Hermes' default compression.threshold")
    # The same as writing Hermes' defaults out by hand.
    spelled = policy_from_config(Config(compression=dict(hermes)), 128_000)
    assert (spelled.high_tokens, spelled.low_tokens) == (policy.high_tokens, policy.low_tokens)
    big = policy_from_config(Config(), 1_000_000)
    assert big.high_percent == hermes["threshold"]


def test_the_defaults_are_read_from_the_host_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    changed = dict(DEFAULT_CONFIG["compression"], threshold=0.8, target_ratio=0.25)
    monkeypatch.setitem(DEFAULT_CONFIG, "compression", changed)
    policy = policy_from_config(Config(), 128_000)
    assert policy.high_percent == 0.8
    assert policy.low_percent == pytest.approx(2 * 0.8 * 0.25)
    # A key the user gives wins over the host's default; the rest still come from the host.
    mixed = policy_from_config(Config(compression={"target_ratio": 0.1}), 128_000)
    assert mixed.low_percent == pytest.approx(2 * 0.8 * 0.1)
    assert mixed.sources["low"] == "2 x threshold x target_ratio (compression.target_ratio)"


def test_without_hermes_the_documented_defaults_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hermes_cli.config", None)  # import fails
    defaults, origin = host_compression_defaults()
    assert origin == "Hermes' documented default"
    assert (defaults["threshold"], defaults["target_ratio"]) == (0.5, 0.2)
    policy = policy_from_config(Config(), 128_000)
    assert (policy.high_percent, round(policy.low_percent, 4)) == (0.75, 0.3)
