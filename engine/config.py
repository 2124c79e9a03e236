"""Chronicle's configuration: every key declared once, here, with its default and its purpose.

Invariants:
- Every declared key is read by shipped code, or declared dormant with a reason
  (tests/test_config_honesty.py fails the build otherwise). The README's reference table is
  generated from these declarations, so it cannot drift.
- An unknown key logs one warning naming it; a removed key logs a warning saying what replaced
  it, and a removed security-relevant key is an error (silently ignoring it would leave an
  operator believing in a protection that does not exist).

Keys live under `chronicle:` in `$HERMES_HOME/config.yaml` (or `plugins.chronicle:`). The host's own
`compression:` section is read too, because Hermes does not pass it to plugin engines.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import UsageError

__all__ = ["Key", "KEYS", "REMOVED", "Config", "load_hermes_config", "default_db_path"]

log = logging.getLogger("chronicle_engine.config")


@dataclass(frozen=True, slots=True)
class Key:
    path: str
    default: Any
    doc: str
    dormant: str | None = None  # a reason, when nothing reads the key yet
    security: bool = False


KEYS: tuple[Key, ...] = (
    # -- storage ------------------------------------------------------------------------------
    Key("db_path", None, "SQLite database file. Default: $HERMES_HOME/chronicle/chronicle.db."),
    Key(
        "busy_timeout_ms",
        5000,
        "How long a write waits for another process's lock before degrading.",
    ),
    # -- capture (memory-provider slot) -----------------------------------------------------------
    Key(
        "capture.enabled",
        True,
        "Record every message of every turn into the log. false leaves the memory slot "
        "recall-only: nothing new is captured, existing memory is still searched.",
    ),
    Key(
        "capture.skip_agent_contexts",
        [],
        "Hermes agent contexts whose turns are not captured at all (e.g. [flush]). Turns of "
        "cron, subagent and flush agents are otherwise captured, marked as automation, and "
        "never become memory about the user.",
    ),
    # -- context engine ----------------------------------------------------------------------------
    Key(
        "context.high_watermark_percent",
        None,
        "Compact when the prompt passes this share of the window. Default: the host's "
        "compression.threshold (raised to 0.75 under 512K windows, as Hermes does), else 0.75.",
    ),
    Key(
        "context.low_watermark_percent",
        None,
        "What a compaction folds the prompt down to. Default: 2 x threshold x "
        "compression.target_ratio, else 0.55; always below the high watermark.",
    ),
    Key(
        "context.handoff_max_tokens",
        0,
        "Budget of the handoff message. 0: 5% of the window, between 2,000 and 12,000 tokens. "
        "Past it, sections are condensed into higher-level sections in one rebase.",
    ),
    Key(
        "context.summarizer",
        "extractive",
        "Who writes section prose: 'extractive' (offline, deterministic), 'auxiliary' (Hermes' "
        "auxiliary compression model) or 'endpoint' (an OpenAI-compatible server). A failed "
        "or slow model call falls back to the extractive summary.",
    ),
    Key(
        "context.summarizer_base_url",
        "",
        "Base URL of the OpenAI-compatible server for summarizer 'endpoint' "
        "(e.g. http://127.0.0.1:8080/v1).",
    ),
    Key("context.summarizer_model", "", "Model name sent to the summarizer endpoint."),
    Key(
        "context.summarizer_api_key_env",
        "",
        "Name of the environment variable holding the endpoint's API key (never the key itself).",
    ),
    Key(
        "context.summarizer_allow_remote",
        False,
        "Allow the summarizer endpoint to be off this host or its private network. Off by "
        "default: summaries carry conversation content.",
    ),
    Key(
        "context.summarizer_timeout_seconds",
        30,
        "How long one summary call may take before the extractive summary is used instead.",
    ),
    Key(
        "context.summarizer_pass_seconds",
        60,
        "Total time one compaction pass may wait on summary model calls (one per new section, "
        "plus condensation), on Hermes' main thread. Past it, the pass's remaining sections get "
        "the extractive summary. 0: no cap beyond each call's own timeout.",
    ),
    # -- recall ------------------------------------------------------------------------------------
    Key(
        "recall.search_limit",
        10,
        "Results chronicle_search returns when the caller names no limit.",
    ),
    Key(
        "recall.candidates",
        100,
        "Full-text candidates per query that are re-ranked (recency, role, neighbours).",
    ),
    Key(
        "recall.match_budget",
        1500,
        "Matches bm25 may score for one query. Words whose matches would exceed it (the commonest) "
        "are left out of the ranking when rarer ones exist; a query of only such words is answered "
        "from their newest matches. Search time stays flat as memory grows.",
    ),
    Key("recall.name_weight", 0.2, "bm25 weight of the speaker's name (a message's `name`)."),
    Key(
        "recall.context_weight",
        0.4,
        "bm25 weight of the previous turn's words, indexed beside each message.",
    ),
    Key(
        "recall.neighbour_weight",
        0.4,
        "Share of a hit's score given to the turns just before and after it.",
    ),
    Key("recall.speaker_boost", 2.0, "Score factor for a message whose speaker the query names."),
    Key(
        "recall.recency_weight",
        0.1,
        "How much newer messages gain: score x (1 + w x 2^(-age/half-life)).",
    ),
    Key(
        "recall.recency_half_life_days",
        30.0,
        "Age (relative to the user's newest message) at which the recency gain halves.",
    ),
    Key(
        "recall.role_weights",
        {"person": 1.0, "assistant": 0.85, "tool": 0.7, "automation": 0.7, "host": 0.5},
        "Score factor per speaker kind; the person's own words rank first.",
    ),
    Key(
        "recall.session_share",
        0.6,
        "Largest share of one search's results a single session may take while others have hits.",
    ),
    Key(
        "recall.rrf_k",
        60,
        "k of reciprocal rank fusion (full text with vectors; messages with beliefs and sections).",
    ),
    Key(
        "recall.prefetch_relevance_gate",
        True,
        "Per-turn recall only for items sharing content words with the message (two when it has more than three).",
    ),
    Key("recall.prefetch_automation", False, "Per-turn recall on scheduled-job (cron) turns too."),
    Key("recall.prefetch_limit", 5, "Items one per-turn recall injects at most."),
    Key("recall.prefetch_max_chars", 1500, "Characters one per-turn recall injects at most."),
    Key(
        "recall.prefetch_min_similarity",
        0.65,
        "Vector similarity a single shared word needs to pass the gate (no vectors: left out).",
    ),
    Key(
        "recall.prefetch_pair_similarity",
        0.60,
        "Vector similarity two or three shared words need when vectors exist.",
    ),
    Key(
        "recall.answer_min_coverage",
        0.6,
        "Share of the question's content words the best evidence must contain; below it chronicle_answer abstains.",
    ),
    Key(
        "recall.embeddings.url",
        "",
        "OpenAI-compatible embedding endpoint (e.g. http://127.0.0.1:11434/v1). Empty: full-text recall only.",
    ),
    Key("recall.embeddings.model", "", "Embedding model name sent to the endpoint."),
    Key(
        "recall.embeddings.allow_remote",
        False,
        "Permit sending memory excerpts to an embedding endpoint off this host and its private network.",
        security=True,
    ),
    Key(
        "recall.embeddings.timeout_s",
        1.5,
        "Timeout of one embedding request; a slow server turns vectors off for a minute.",
    ),
    Key(
        "recall.vector_scan",
        500,
        "Newest vectors of a user compared per query (brute force, no index).",
    ),
    # -- scheduler and maintenance -------------------------------------------------------------------
    # No daemon: every key here is consulted from inside a hook call (engine/scheduler/).
    Key(
        "maintenance.enabled",
        True,
        "Master switch for hook-driven scheduling. false: hooks never schedule or run background "
        "jobs (no consolidation, reaping or maintenance).",
    ),
    Key(
        "maintenance.budget_ms",
        5,
        "Wall-clock ceiling (ms) for one hook call's scheduling decision. The first due schedule "
        "is always tried; one that does not fit after it waits for the next hook call.",
    ),
    Key(
        "maintenance.drain_hooks",
        ["sync_turn", "queue_prefetch"],
        "Hooks that also run queued jobs. The default lists the two hooks Hermes runs on its "
        "background memory thread (a claimed job runs to its end, model summaries included); "
        "every other hook, on_session_end and on_session_switch among them, runs on the agent's "
        "own thread and only schedules.",
    ),
    Key("maintenance.drain_per_hook", 4, "Jobs one draining hook call may run, shared by weight."),
    Key(
        "maintenance.drain_budget_ms",
        5,
        "A draining hook call claims no new job once it has spent this long (ms) running jobs.",
    ),
    Key(
        "maintenance.schedules.consolidate",
        "* * * * *",
        'Cron (5 fields, UTC) for consolidating closed units into chronicle sections. "" disables.',
    ),
    Key(
        "maintenance.schedules.reap",
        "*/5 * * * *",
        'Cron (UTC) for closing idle conversations as units. "" disables.',
    ),
    Key(
        "maintenance.schedules.fts_optimize",
        "30 3 * * *",
        "Cron (UTC) for merging the full-text index's segments (recall's optimize hook). \"\" disables.",
    ),
    Key(
        "maintenance.schedules.belief_sweep",
        "0 4 * * *",
        'Cron (UTC) for recall\'s belief decay and consistency sweep. "" disables.',
    ),
    Key(
        "maintenance.schedules.queue_retention",
        "15 * * * *",
        'Cron (UTC) for pruning finished job rows. "" disables (the job table then grows).',
    ),
    Key(
        "maintenance.schedules.wal_checkpoint",
        "*/15 * * * *",
        'Cron (UTC) for a passive WAL checkpoint (never waits for readers). "" disables.',
    ),
    Key(
        "maintenance.schedules.integrity",
        "45 4 * * *",
        "Cron (UTC) for the integrity check: every current section's range lies in the log and "
        'no two current sections of a chronicle overlap. "" disables.',
    ),
    Key(
        "queue.lease_seconds",
        600,
        "How long a claimed job may run before it counts as abandoned (its process died) and is "
        "re-armed. Keep it above your slowest job, or the job runs twice.",
    ),
    Key(
        "queue.max_attempts",
        5,
        "Claims one job may use before it is failed with its last reason. A lease that expires "
        "counts as an attempt.",
    ),
    Key("queue.shares.consolidation", 0.5, "Relative drain weight of consolidation jobs."),
    Key("queue.shares.reaping", 0.2, "Relative drain weight of idle-session reaping jobs."),
    Key(
        "queue.shares.maintenance",
        0.3,
        "Relative drain weight of maintenance sweeps. The shares are normalised; a positive share "
        "too small to round to a whole job still gets one per drain, so no class starves.",
    ),
    Key(
        "queue.retention.days",
        7,
        "Finished job rows older than this are pruned. 0: no age bound. Pending and running rows, "
        "and rows a pending job depends on, are never pruned.",
    ),
    Key(
        "queue.retention.max_rows",
        5000,
        "At most this many finished job rows are kept (newest first). 0: no count bound.",
    ),
    Key(
        "sweeps.row_budget",
        2000,
        "Rows one run of a maintenance sweep may visit; the sweep keeps a cursor and resumes.",
    ),
    Key(
        "sweeps.budgets.consolidate",
        100,
        "Events one consolidation run may fold (its own budget: a closed unit may need a summary).",
    ),
    Key(
        "consolidation.unit_turns",
        20,
        "A unit closes before the user message that would start its (N+1)th turn. 0: no turn bound.",
    ),
    Key(
        "consolidation.idle_gap_minutes",
        30,
        "A silence longer than this closes a unit: between two messages, or (through the reaper) "
        "after the last one. 0: no idle boundary and no reaping.",
    ),
    Key(
        "consolidation.close_on_session_end",
        True,
        "A recorded session end closes the conversation's open unit.",
    ),
)

# Keys that existed once. Value: what to do instead. Security-relevant ones are errors.
REMOVED: dict[str, tuple[str, bool]] = {}


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and not any(k.path == path for k in KEYS):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


class Config:
    """Declared keys with the user's values over the defaults."""

    def __init__(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        compression: Mapping[str, Any] | None = None,
        hermes_home: str | os.PathLike[str] | None = None,
        raw: Mapping[str, Any] | None = None,
    ) -> None:
        self.declared = {k.path: k for k in KEYS}
        self.values: dict[str, Any] = {k.path: k.default for k in KEYS}
        self.compression = dict(compression or {})
        self.hermes_home = Path(hermes_home) if hermes_home else None
        self.raw = dict(raw or {})
        self.unknown: list[str] = []
        for path, value in _flatten(values or {}).items():
            if path in REMOVED:
                instead, security = REMOVED[path]
                if security:
                    raise UsageError(
                        f"config key chronicle.{path} was removed and is security-relevant: "
                        f"{instead}. Remove it from config.yaml."
                    )
                log.warning("config key chronicle.%s was removed: %s", path, instead)
                continue
            if path not in self.declared:
                self.unknown.append(path)
                log.warning(
                    "config key chronicle.%s is not a Chronicle setting and is ignored; "
                    "`chronicle doctor` lists the valid keys",
                    path,
                )
                continue
            self.values[path] = value

    def get(self, path: str) -> Any:
        try:
            return self.values[path]
        except KeyError:
            raise UsageError(f"chronicle.{path} is not a declared config key") from None

    def __getitem__(self, path: str) -> Any:
        return self.get(path)

    def db_path(self) -> Path:
        configured = self.get("db_path")
        if configured:
            return Path(os.path.expanduser(str(configured)))
        return default_db_path(self.hermes_home)


def default_db_path(hermes_home: str | os.PathLike[str] | None = None) -> Path:
    home = Path(hermes_home) if hermes_home else _hermes_home()
    return home / "chronicle" / "chronicle.db"


def _hermes_home() -> Path:
    env = os.environ.get("HERMES_HOME")
    return Path(env) if env else Path.home() / ".hermes"


def load_hermes_config(hermes_home: str | os.PathLike[str] | None = None) -> Config:
    """Read `$HERMES_HOME/config.yaml`: the `chronicle:` section (or `plugins.chronicle:`) and the
    host's `compression:` section. A missing or unreadable file gives the defaults, with a warning
    for the unreadable case."""
    home = Path(hermes_home) if hermes_home else _hermes_home()
    path = home / "config.yaml"
    data: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if isinstance(loaded, dict):
                data = loaded
            else:
                log.warning("%s is not a mapping; using Chronicle's defaults", path)
        except (OSError, yaml.YAMLError) as exc:
            log.warning("could not read %s (%s); using Chronicle's defaults", path, exc)
    section = data.get("chronicle")
    if not isinstance(section, dict):
        plugins = data.get("plugins")
        section = plugins.get("chronicle") if isinstance(plugins, dict) else None
    if not isinstance(section, dict):
        section = {}
    compression = data.get("compression")
    return Config(
        section,
        compression=compression if isinstance(compression, dict) else {},
        hermes_home=home,
        raw=data,
    )
