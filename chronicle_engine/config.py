"""Chronicle's configuration: one pydantic model per section of `chronicle:`, read once.

Invariants:
- Every setting is a field of a section model below, declared once with its default and its
  purpose (the field's description). `KEYS` and the README's reference table are generated from
  the models (docs/generate.py), so they cannot drift.
- Every field is read by shipped code through its attribute, or declared dormant with a reason
  (tests/test_config_honesty.py fails the build otherwise).
- An unknown key logs one warning naming it; a removed key logs a warning saying what replaced
  it, and a removed security-relevant key is an error (silently ignoring it would leave an
  operator believing in a protection that does not exist).
- A value of the wrong type, or out of range, falls back to the field's default with one warning
  naming the key: a hook must keep working whatever config.yaml says, and the operator must hear
  that the value was ignored.

Keys live under `chronicle:` in `$HERMES_HOME/config.yaml` (or `plugins.chronicle:`). The host's own
`compression:` section is read too, because Hermes does not pass it to plugin engines.
"""

# No `from __future__ import annotations`: pydantic reads the annotations below as each model is
# defined, and objects spare it parsing them from strings.
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal
from urllib.parse import parse_qs, urlsplit

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.json_schema import JsonDict

from .errors import UsageError
from .home import hermes_home as _hermes_home

__all__ = [
    "Key",
    "KEYS",
    "REMOVED",
    "Config",
    "ChronicleSettings",
    "CaptureSettings",
    "ContextSettings",
    "RecallSettings",
    "EmbeddingSettings",
    "MaintenanceSettings",
    "QueueSettings",
    "SweepSettings",
    "ConsolidationSettings",
    "EgressSettings",
    "DEFAULT_ROLE_WEIGHTS",
    "load_hermes_config",
    "default_db_path",
    "checked_store",
    "is_postgres",
]

log = logging.getLogger("chronicle_engine.config")


def _not_a_flag(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number here")
    return value


def _a_flag(value: object) -> object:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {type(value).__name__}")
    return value


def _share_of_window(value: object) -> object:
    """0.75, or 75 meant as a percentage; strictly between 0 and 1 once read."""
    if value is None:
        return None
    checked = _not_a_flag(value)
    if not isinstance(checked, int | float | str):
        raise ValueError(f"expected a number, got {type(checked).__name__}")
    number = float(checked)
    if 1.0 < number <= 100.0:
        number /= 100.0
    if not 0.0 < number < 1.0:
        raise ValueError("a share of the window lies between 0 and 1 (or 0 and 100 percent)")
    return number


def _lower_word(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


def _hook_names(value: object) -> object:
    if isinstance(value, str):
        raise ValueError("expected a list of hook names")
    return value


Flag = Annotated[bool, BeforeValidator(_a_flag)]
Count = Annotated[int, BeforeValidator(_not_a_flag), Field(ge=0)]
Number = Annotated[float, BeforeValidator(_not_a_flag), Field(ge=0)]
Share = Annotated[float | None, BeforeValidator(_share_of_window)]

DEFAULT_ROLE_WEIGHTS: dict[str, float] = {
    "person": 1.0,
    "assistant": 0.85,
    "tool": 0.7,
    "automation": 0.7,
    "host": 0.5,
}


def _role_weights(value: object) -> object:
    """The user's weights over the defaults; an entry that is not a number is left out."""
    if not isinstance(value, Mapping):
        raise ValueError("expected a mapping of speaker kind to weight")
    weights = dict(DEFAULT_ROLE_WEIGHTS)
    for kind, weight in value.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float | str):
            continue
        try:
            weights[str(kind)] = float(weight)
        except (TypeError, ValueError):
            continue
    return weights


def _dormant(reason: str) -> JsonDict:
    return {"dormant": reason}


_SECURITY: JsonDict = {"security": True}


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", validate_default=False, defer_build=True)


class CaptureSettings(_Section):
    enabled: Flag = Field(
        True,
        description="Record every message of every turn into the log. false leaves the memory "
        "slot recall-only: nothing new is captured, existing memory is still searched.",
    )
    skip_agent_contexts: tuple[str, ...] = Field(
        (),
        description="Hermes agent contexts whose turns are not captured at all (e.g. [flush]). "
        "Turns of cron, subagent and flush agents are otherwise captured, marked as automation, "
        "and never become memory about the user.",
    )


class ContextSettings(_Section):
    high_watermark_percent: Share = Field(
        None,
        description="Compact when the prompt passes this share of the window. Default: the "
        "host's compression.threshold (raised to 0.75 under 512K windows, as Hermes does), "
        "else Hermes' own default threshold.",
    )
    low_watermark_percent: Share = Field(
        None,
        description="What a compaction folds the prompt down to. Default: 2 x threshold x "
        "compression.target_ratio (each Hermes' own default when config.yaml leaves it out); "
        "always below the high watermark.",
    )
    standing_share_percent: Share = Field(
        0.10,
        description="Share of the window for what is kept whatever its age: the standing "
        "instructions the handoff carries, and pinned messages (each within this share; past "
        "it the oldest instructions are condensed to one cited line, the oldest pins fold like "
        "any turn).",
    )
    handoff_max_tokens: Count = Field(
        0,
        description="Budget of the handoff message. 0: 5% of the window, between 2,000 and "
        "12,000 tokens. Past it, sections are condensed into higher-level sections in one rebase.",
    )
    summarizer: Annotated[
        Literal["extractive", "auxiliary", "endpoint"], BeforeValidator(_lower_word)
    ] = Field(
        "extractive",
        description="Who writes section prose: 'extractive' (offline, deterministic), "
        "'auxiliary' (Hermes' auxiliary compression model) or 'endpoint' (an OpenAI-compatible "
        "server). A failed or slow model call falls back to the extractive summary.",
    )
    summarizer_base_url: str = Field(
        "",
        description="Base URL of the OpenAI-compatible server for summarizer 'endpoint' "
        "(e.g. http://127.0.0.1:8080/v1).",
    )
    summarizer_model: str = Field("", description="Model name sent to the summarizer endpoint.")
    summarizer_api_key_env: str = Field(
        "",
        description="Name of the environment variable holding the endpoint's API key (never "
        "the key itself).",
    )
    summarizer_allow_remote: Flag = Field(
        False,
        description="Allow the summarizer endpoint to be off this host or its private network. "
        "Off by default: summaries carry conversation content.",
    )
    summarizer_timeout_seconds: Number = Field(
        30,
        description="How long one summary call may take before the extractive summary is used "
        "instead.",
    )
    summarizer_pass_seconds: Number = Field(
        60,
        description="Total time one compaction pass may wait on summary model calls (one per new "
        "section, plus condensation), on Hermes' main thread. Past it, the pass's remaining "
        "sections get the extractive summary. 0: no cap beyond each call's own timeout.",
    )


class EmbeddingSettings(_Section):
    url: str = Field(
        "",
        description="OpenAI-compatible embedding endpoint (e.g. http://127.0.0.1:11434/v1). "
        "Empty: full-text recall only. Set: a search by session fuses the nearest messages with "
        "full text; a plain search adds them after its full-text hits when those are fewer than "
        "asked for.",
    )
    model: str = Field("", description="Embedding model name sent to the endpoint.")
    allow_remote: Flag = Field(
        False,
        description="Permit sending memory excerpts to an embedding endpoint off this host and "
        "its private network.",
        json_schema_extra=_SECURITY,
    )
    timeout_s: Number = Field(
        1.5,
        description="Timeout of one embedding request; a slow server turns vectors off for a "
        "minute.",
    )


class RecallSettings(_Section):
    held_as: ClassVar[tuple[str, ...]] = ("tuning", "t")  # recall's own names for it

    search_limit: Count = Field(
        10, description="Results chronicle_search returns when the caller names no limit."
    )
    candidates: Count = Field(
        100,
        description="Full-text candidates per query that are re-ranked (recency, role, "
        "neighbours).",
    )
    match_budget: Count = Field(
        1500,
        description="Matches bm25 may score for one query over messages (chronicle sections get a "
        "fifth of it). Words whose matches would exceed it (the commonest) are left out of the "
        "ranking when rarer ones exist; a query of only such words is answered from their newest "
        "matches. A time the query names is scored as a word only while it holds no more "
        "messages than this. Search time stays flat as memory grows.",
    )
    name_weight: Number = Field(
        0.2, description="bm25 weight of the speaker's name (a message's `name`)."
    )
    context_weight: Number = Field(
        0.4, description="bm25 weight of the previous turn's words, indexed beside each message."
    )
    neighbour_weight: Number = Field(
        0.4, description="Share of a hit's score given to the turns just before and after it."
    )
    speaker_boost: Number = Field(
        2.0,
        description="Score factor for a message whose speaker the query names; a query in the "
        "first person (I, my, me) names the person whose memory it is.",
    )
    time_boost: Number = Field(
        2.0,
        description="Score factor for a message from the time the query names (a date, a month "
        "or a year written out, '21 May, 2023' or '2023-05-21'; or counted from when it is "
        "asked: '5 days ago', 'last Friday', 'last month'). The time also counts as a word of "
        "the query that its messages hold, weighed by how few they are.",
    )
    question_weight: Number = Field(
        0.75,
        description="Score factor for a short question (a question mark, at most 25 words in at "
        "most 300 characters): it holds the words of what it asks about, seldom the answer, "
        "which the turn after it gives. A search pooled by session (by_session) counts it in "
        "full.",
    )
    recency_weight: Number = Field(
        0.1, description="How much newer messages gain: score x (1 + w x 2^(-age/half-life))."
    )
    recency_half_life_days: Number = Field(
        30.0,
        description="Age (relative to the user's newest message) at which the recency gain halves.",
    )
    role_weights: Annotated[dict[str, float], BeforeValidator(_role_weights)] = Field(
        default_factory=lambda: dict(DEFAULT_ROLE_WEIGHTS),
        description="Score factor per speaker kind; the person's own words rank first.",
    )
    session_share: Number = Field(
        0.6,
        description="Largest share of one search's results a single session may take while "
        "others have hits.",
    )
    rrf_k: Count = Field(
        60,
        description="k of reciprocal rank fusion (full text with vectors in a search by "
        "session; messages with beliefs and sections).",
    )
    prefetch_relevance_gate: Flag = Field(
        True,
        description="Per-turn recall only for items sharing content words with the message (two "
        "when it has more than three).",
    )
    prefetch_automation: Flag = Field(
        False, description="Per-turn recall on scheduled-job (cron) turns too."
    )
    prefetch_limit: Count = Field(5, description="Items one per-turn recall injects at most.")
    prefetch_max_chars: Count = Field(
        1500, description="Characters one per-turn recall injects at most."
    )
    prefetch_min_similarity: Number = Field(
        0.65,
        description="Vector similarity a single shared word needs to pass the gate (no vectors: "
        "left out).",
    )
    prefetch_pair_similarity: Number = Field(
        0.60, description="Vector similarity two or three shared words need when vectors exist."
    )
    answer_min_coverage: Number = Field(
        0.6,
        description="Share of the question's content words the best evidence must contain; "
        "below it chronicle_answer abstains.",
    )
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    vector_scan: Count = Field(
        500, description="Newest vectors of a user compared per query (brute force, no index)."
    )


class Schedules(_Section):
    consolidate: str = Field(
        "* * * * *",
        description="Cron (5 fields, UTC) for consolidating closed units into chronicle "
        'sections. "" disables.',
    )
    reap: str = Field(
        "*/5 * * * *",
        description='Cron (UTC) for closing idle conversations as units. "" disables.',
    )
    fts_optimize: str = Field(
        "30 3 * * *",
        description='Cron (UTC) for merging the full-text index\'s segments. "" disables.',
    )
    belief_sweep: str = Field(
        "0 4 * * *",
        description='Cron (UTC) for recall\'s belief decay and consistency sweep. "" disables.',
    )
    queue_retention: str = Field(
        "15 * * * *",
        description='Cron (UTC) for pruning finished job rows. "" disables (the job table then '
        "grows).",
    )
    wal_checkpoint: str = Field(
        "*/15 * * * *",
        description='Cron (UTC) for a passive WAL checkpoint (never waits for readers). "" '
        "disables.",
    )
    integrity: str = Field(
        "45 4 * * *",
        description="Cron (UTC) for the integrity check: every current section's range lies in "
        'the log and no two current sections of a chronicle overlap. "" disables.',
    )


class MaintenanceSettings(_Section):
    # No timer: every key here is consulted when a hook calls (chronicle_engine/scheduler/), on
    # the hook's thread or, with `background`, on the scheduler's background thread it nudges.
    enabled: Flag = Field(
        True,
        description="Master switch for hook-driven scheduling. false: hooks never schedule or "
        "run background jobs (no consolidation, reaping or maintenance).",
    )
    budget_ms: Number = Field(
        5,
        description="Wall-clock ceiling (ms) for one hook call's scheduling decision. The first "
        "due schedule is always tried; one that does not fit after it waits for the next hook "
        "call.",
    )
    background: Flag = Field(
        True,
        description="Run what a hook finds due (scheduling, and the jobs of a draining hook) on "
        "the scheduler's own background thread (one per database the slots use), so the hook "
        "returns at once. false: on the hook's "
        "own thread, before it returns.",
    )
    drain_hooks: Annotated[tuple[str, ...], BeforeValidator(_hook_names)] = Field(
        ("sync_turn", "queue_prefetch"),
        description="Hooks that also run queued jobs, a bounded batch each (on the background "
        "thread; with background false, on the hook's own thread, where a claimed job runs to "
        "its end, model summaries included, so the default lists the two hooks Hermes runs on "
        "its background memory thread). Every other hook, on_session_end and on_session_switch "
        "among them, only schedules.",
    )
    drain_per_hook: Count = Field(
        4, description="Jobs one draining hook call may run, shared by weight."
    )
    drain_budget_ms: Number = Field(
        5,
        description="A draining hook call claims no new job once it has spent this long (ms) "
        "running jobs (its first job is always claimed).",
    )
    schedules: Schedules = Field(default_factory=Schedules)


class Shares(_Section):
    consolidation: Number = Field(0.5, description="Relative drain weight of consolidation jobs.")
    reaping: Number = Field(0.2, description="Relative drain weight of idle-session reaping jobs.")
    maintenance: Number = Field(
        0.3,
        description="Relative drain weight of maintenance sweeps. The shares are normalised; a "
        "positive share too small to round to a whole job still gets one per drain, so no class "
        "starves.",
    )


class Retention(_Section):
    days: Number = Field(
        7,
        description="Finished job rows older than this are pruned. 0: no age bound. Pending and "
        "running rows, and rows a pending job depends on, are never pruned.",
    )
    max_rows: Count = Field(
        5000,
        description="At most this many finished job rows are kept (newest first). 0: no count "
        "bound.",
    )


class QueueSettings(_Section):
    lease_seconds: Number = Field(
        600,
        description="How long a claimed job may run before it counts as abandoned (its process "
        "died) and is re-armed. Keep it above your slowest job, or the job runs twice.",
    )
    max_attempts: Count = Field(
        5,
        description="Claims one job may use before it is failed with its last reason. A lease "
        "that expires counts as an attempt.",
    )
    shares: Shares = Field(default_factory=Shares)
    retention: Retention = Field(default_factory=Retention)


class SweepBudgets(_Section):
    consolidate: Count = Field(
        100,
        description="Events one consolidation run may fold (its own budget: a closed unit may "
        "need a summary).",
    )


class SweepSettings(_Section):
    row_budget: Count = Field(
        2000,
        description="Rows one run of a maintenance sweep may visit; the sweep keeps a cursor and "
        "resumes.",
    )
    budgets: SweepBudgets = Field(default_factory=SweepBudgets)


class ConsolidationSettings(_Section):
    unit_turns: Count = Field(
        20,
        description="A unit closes before the user message that would start its (N+1)th turn. "
        "0: no turn bound.",
    )
    idle_gap_minutes: Number = Field(
        30,
        description="A silence longer than this closes a unit: between two messages, or "
        "(through the reaper) after the last one. 0: no idle boundary and no reaping.",
    )
    close_on_session_end: Flag = Field(
        True, description="A recorded session end closes the conversation's open unit."
    )


class EgressSettings(_Section):
    allow_env_proxy: Flag = Field(
        False,
        description="Send requests to an endpoint allowed off this network (allow_remote) "
        "through the proxy named in HTTPS_PROXY/HTTP_PROXY/ALL_PROXY. Off: the environment's "
        "proxy is never used. Endpoints on this host or its private network never go through "
        "a proxy.",
        json_schema_extra=_SECURITY,
    )


class ChronicleSettings(_Section):
    """Everything under `chronicle:`, typed. Built once per core from config.yaml."""

    db_path: str | None = Field(
        None,
        description="SQLite database file. Default: $HERMES_HOME/chronicle/chronicle.db. With a "
        "PostgreSQL store, this host's spill and waiting files are kept beside it.",
    )
    store: str = Field(
        "",
        description="Where the log lives. Empty: SQLite at db_path. A postgresql:// URI or a "
        "libpq connection string (host=... dbname=...) selects PostgreSQL, shared by every host "
        "that names it. Never a password here: it is refused (see store_password_env).",
        json_schema_extra=_SECURITY,
    )
    store_password_env: str = Field(
        "",
        description="Name of the environment variable holding the PostgreSQL password (e.g. "
        "CHRONICLE_PG_PASSWORD). Empty: libpq's own PGPASSWORD or ~/.pgpass.",
    )
    busy_timeout_ms: Count = Field(
        5000, description="How long a write waits for another process's lock before degrading."
    )
    capture: CaptureSettings = Field(default_factory=CaptureSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    recall: RecallSettings = Field(default_factory=RecallSettings)
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    queue: QueueSettings = Field(default_factory=QueueSettings)
    sweeps: SweepSettings = Field(default_factory=SweepSettings)
    consolidation: ConsolidationSettings = Field(default_factory=ConsolidationSettings)
    egress: EgressSettings = Field(default_factory=EgressSettings)


@dataclass(frozen=True, slots=True)
class Key:
    """One setting as the docs and the audit see it: its dotted path under `chronicle:`."""

    path: str
    default: object
    doc: str
    dormant: str | None = None  # a reason, when nothing reads the key yet
    security: bool = False


def _walk(model: type[BaseModel], prefix: str = "") -> Iterator[Key]:
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _walk(annotation, f"{prefix}{name}.")
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        default = info.get_default(call_default_factory=True)
        yield Key(
            f"{prefix}{name}",
            list(default) if isinstance(default, tuple) else default,
            info.description or "",
            dormant=str(extra["dormant"]) if extra.get("dormant") else None,
            security=bool(extra.get("security")),
        )


KEYS: tuple[Key, ...] = tuple(_walk(ChronicleSettings))

# Keys that existed once. Value: what to do instead. Security-relevant ones are errors.
REMOVED: dict[str, tuple[str, bool]] = {}


def _flatten(data: Mapping[str, object], declared: set[str], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and path not in declared:
            out.update(_flatten(value, declared, path + "."))
        else:
            out[path] = value
    return out


def _nest(flat: Mapping[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for path, value in flat.items():
        *parents, leaf = path.split(".")
        node = out
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):  # (a declared key's value is never descended into)
                child = node[part] = {}
            node = child
        node[leaf] = value
    return out


def _declared_path(loc: tuple[int | str, ...], declared: set[str]) -> str | None:
    parts = [str(p) for p in loc]
    for end in range(len(parts), 0, -1):
        path = ".".join(parts[:end])
        if path in declared:
            return path
    return None


def _validate(flat: dict[str, object], declared: set[str]) -> ChronicleSettings:
    """The settings, each unusable value replaced by its default with a warning naming it."""
    defaults = {k.path: k.default for k in KEYS}
    for _ in range(len(flat) + 1):
        try:
            return ChronicleSettings.model_validate(_nest(flat))
        except ValidationError as exc:
            dropped = False
            for error in exc.errors():
                path = _declared_path(error["loc"], declared)
                if path is None or path not in flat:
                    continue
                log.warning(
                    "chronicle.%s = %r is not usable (%s); using %r",
                    path,
                    flat.pop(path),
                    error["msg"],
                    defaults[path],
                )
                dropped = True
            if not dropped:
                break
    return ChronicleSettings()


class Config:
    """What config.yaml says: Chronicle's typed settings (`settings`), the host's `compression:`
    section, and the whole file (`raw`) for the few host keys Chronicle looks at."""

    def __init__(
        self,
        values: Mapping[str, object] | None = None,
        *,
        compression: Mapping[str, object] | None = None,
        hermes_home: str | os.PathLike[str] | None = None,
        raw: Mapping[str, object] | None = None,
    ) -> None:
        declared = {k.path for k in KEYS}
        self.compression: dict[str, object] = dict(compression or {})
        self.hermes_home = Path(hermes_home) if hermes_home else None
        self.raw: dict[str, object] = dict(raw or {})
        self.unknown: list[str] = []
        self.store_refused: UsageError | None = None
        """Why `chronicle.store` was refused (a password in it, or no store it names)."""
        accepted: dict[str, object] = {}
        for path, value in _flatten(values or {}, declared).items():
            if path in REMOVED:
                instead, security = REMOVED[path]
                if security:
                    raise UsageError(
                        f"config key chronicle.{path} was removed and is security-relevant: "
                        f"{instead}. Remove it from config.yaml."
                    )
                log.warning("config key chronicle.%s was removed: %s", path, instead)
                continue
            if path not in declared:
                self.unknown.append(path)
                log.warning(
                    "config key chronicle.%s is not a Chronicle setting and is ignored; "
                    "`chronicle doctor` lists the valid keys",
                    path,
                )
                continue
            if path == "store":
                try:
                    value = checked_store(value)  # refused here: the value is never logged
                except UsageError as exc:
                    # Kept, not raised: opening raises it (`location`), so the slots keep
                    # turns waiting on disk, as for any store that will not open.
                    self.store_refused = exc
                    continue
            accepted[path] = value
        self.settings = _validate(accepted, declared)

    def values(self) -> dict[str, object]:
        """Every key's value in force, by dotted path (for reports, not for reading a setting)."""
        return _flatten(self.settings.model_dump(), {k.path for k in KEYS})

    @property
    def postgres(self) -> bool:
        """Whether `chronicle.store` selects PostgreSQL (or names a store that was refused:
        never SQLite in its place, which would split one memory between two places)."""
        return bool(self.settings.store) or self.store_refused is not None

    def location(self) -> str:
        """What a core is opened by (`ChronicleCore.get`): the PostgreSQL connection string
        `chronicle.store` names, else the SQLite file. A refused `chronicle.store` raises its
        UsageError here."""
        if self.store_refused is not None:
            raise self.store_refused
        return self.settings.store if self.postgres else str(self.db_path())

    def store_password(self) -> str | None:
        """The PostgreSQL password from the variable `store_password_env` names (None: libpq
        finds its own, from PGPASSWORD or ~/.pgpass). A named variable that is not set is an
        error: the operator said where the password is."""
        name = self.settings.store_password_env.strip()
        if not name:
            return None
        value = os.environ.get(name)
        if value is None:
            raise UsageError(
                f"chronicle.store_password_env names {name}, which is not set in this "
                "process's environment"
            )
        return value

    def db_path(self) -> Path:
        configured = self.settings.db_path
        if configured:
            return Path(os.path.expanduser(configured))
        return default_db_path(self.hermes_home)


_URI_SCHEMES = ("postgresql://", "postgres://")


# libpq's connection keywords (PostgreSQL 15's list): a libpq string starts with one of them,
# so a SQLite path that holds an "=" ("/srv/home=work/chronicle.db") is still a path.
_LIBPQ_KEYWORDS = frozenset(
    [
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "replication",
        "gssencmode",
        "sslmode",
        "requiressl",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "krbsrvname",
        "gsslib",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
    ]
)
_LIBPQ_START = re.compile(r"\s*([a-z_]+)\s*=")


def is_postgres(location: str) -> bool:
    """Whether a core's location names PostgreSQL (a `postgresql://` URI, or a libpq string,
    which starts with one of libpq's keywords and an "=") rather than a SQLite file."""
    text = location.strip()
    if text.startswith(_URI_SCHEMES):
        return True
    first = _LIBPQ_START.match(text)
    return first is not None and first.group(1) in _LIBPQ_KEYWORDS


def _holds_password(dsn: str) -> bool:
    if dsn.startswith(_URI_SCHEMES):
        parts = urlsplit(dsn)
        try:
            if parts.password is not None:
                return True
        except ValueError:
            return True  # a netloc urlsplit cannot read: refuse rather than guess
        return "password" in {k.strip().lower() for k in parse_qs(parts.query)}
    return re.search(r"(?:^|\s)password\s*=", dsn, re.IGNORECASE) is not None


def checked_store(value: object) -> str:
    """`chronicle.store` as written, or UsageError. A password in it is refused (and the value
    is never repeated in the error or the log); so is anything that names no store, since
    falling back to SQLite would split one memory between two places."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UsageError(
            f"chronicle.store must be a postgresql:// URI or a libpq connection string, not a "
            f"{type(value).__name__}; leave it out for SQLite at chronicle.db_path"
        )
    text = value.strip()
    if text in ("", "sqlite"):
        return ""
    if not is_postgres(text):
        raise UsageError(
            "chronicle.store must be a postgresql:// URI or a libpq connection string "
            "(host=... dbname=...); leave it out for SQLite at chronicle.db_path"
        )
    if _holds_password(text):
        raise UsageError(
            "chronicle.store holds a password; config.yaml must not. Remove it and put the "
            "password in PGPASSWORD, ~/.pgpass, or the environment variable named by "
            "chronicle.store_password_env"
        )
    return text


def default_db_path(hermes_home: str | os.PathLike[str] | None = None) -> Path:
    home = Path(hermes_home) if hermes_home else _hermes_home()
    return home / "chronicle" / "chronicle.db"


def load_hermes_config(hermes_home: str | os.PathLike[str] | None = None) -> Config:
    """Read `$HERMES_HOME/config.yaml`: the `chronicle:` section (or `plugins.chronicle:`) and the
    host's `compression:` section. A missing or unreadable file gives the defaults, with a warning
    for the unreadable case."""
    home = Path(hermes_home) if hermes_home else _hermes_home()
    path = home / "config.yaml"
    data: dict[str, object] = {}
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
