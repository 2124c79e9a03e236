"""Recall's settings, read once from the declared config keys (engine/config.py, recall block)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Tuning", "DEFAULT_ROLE_WEIGHTS"]

DEFAULT_ROLE_WEIGHTS: dict[str, float] = {
    "person": 1.0,
    "assistant": 0.85,
    "tool": 0.7,
    "automation": 0.7,
    "host": 0.5,
}


@dataclass(frozen=True)
class Tuning:
    limit: int = 10
    candidates: int = 100
    match_budget: int = 1500
    name_weight: float = 0.2
    context_weight: float = 0.4
    neighbour_weight: float = 0.4
    speaker_boost: float = 2.0
    recency_weight: float = 0.1
    recency_half_life_days: float = 30.0
    session_share: float = 0.6
    rrf_k: int = 60
    role_weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ROLE_WEIGHTS))
    prefetch_gate: bool = True
    prefetch_automation: bool = False
    prefetch_limit: int = 5
    prefetch_max_chars: int = 1500
    prefetch_min_similarity: float = 0.65
    prefetch_pair_similarity: float = 0.60
    vector_scan: int = 500
    answer_min_coverage: float = 0.6

    @classmethod
    def from_config(cls, config: Any) -> Tuning:
        weights = dict(DEFAULT_ROLE_WEIGHTS)
        configured = config.get("recall.role_weights")
        if isinstance(configured, dict):
            for k, v in configured.items():
                try:
                    weights[str(k)] = float(v)
                except (TypeError, ValueError):
                    continue
        return cls(
            limit=int(config.get("recall.search_limit")),
            candidates=int(config.get("recall.candidates")),
            match_budget=int(config.get("recall.match_budget")),
            name_weight=float(config.get("recall.name_weight")),
            context_weight=float(config.get("recall.context_weight")),
            neighbour_weight=float(config.get("recall.neighbour_weight")),
            speaker_boost=float(config.get("recall.speaker_boost")),
            recency_weight=float(config.get("recall.recency_weight")),
            recency_half_life_days=float(config.get("recall.recency_half_life_days")),
            session_share=float(config.get("recall.session_share")),
            rrf_k=int(config.get("recall.rrf_k")),
            role_weights=weights,
            prefetch_gate=bool(config.get("recall.prefetch_relevance_gate")),
            prefetch_automation=bool(config.get("recall.prefetch_automation")),
            prefetch_limit=int(config.get("recall.prefetch_limit")),
            prefetch_max_chars=int(config.get("recall.prefetch_max_chars")),
            prefetch_min_similarity=float(config.get("recall.prefetch_min_similarity")),
            prefetch_pair_similarity=float(config.get("recall.prefetch_pair_similarity")),
            vector_scan=int(config.get("recall.vector_scan")),
            answer_min_coverage=float(config.get("recall.answer_min_coverage")),
        )
