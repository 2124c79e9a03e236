"""The context-engine slot: Hermes' calls translated into calls on the shared core. Thin.

Invariants:
- No hook or method lets an exception reach Hermes: each logs once and degrades (compress then
  returns the host's own list, which Hermes reads as "no progress").
- Hermes deep-copies the engine for every agent. A copy shares the core (one per database, found
  through `ChronicleCore.get`) and copies only its own counters, so the copy can never fail.
- The host's token bookkeeping lives here (it reads these attributes directly); everything about
  conversations lives in the core, keyed by lineage.
- Every call borrows the core (`users`): a memory provider shutting down mid-call leaves
  the closing to the call. A core that was shut down is never reopened just to end a session.
- The engine follows the host's session: `bind_session_state` (/new, /resume, /branch) and
  `on_session_start` rebind it; only a compression rotation links two sessions into one lineage.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from chronicle_engine import users as _users
from chronicle_engine.compaction.limits import ThrashGuard, host_overhead
from chronicle_engine.compaction.timing import CacheTiming
from chronicle_engine.errors import StoreError
from chronicle_engine.host import HostGuard, fenced

if TYPE_CHECKING:
    # Imported where first used (a session's start, the first token count), not when Hermes
    # loads the plugin: a process that loads plugins but never runs this engine pays nothing
    # for the store, the settings' models or the tools' schemas.
    from chronicle_engine.compaction.policy import Policy
    from chronicle_engine.config import Config
    from chronicle_engine.core import ChronicleCore
    from chronicle_engine.opening import Reopening

try:  # Hermes' ABC when the host is installed; a minimal stand-in otherwise (tests, CLI)
    from agent.context_engine import ContextEngine as _Base
except Exception:  # pragma: no cover - exercised only without hermes-agent installed

    class _Base:  # type: ignore[no-redef]
        last_prompt_tokens: int = 0
        last_completion_tokens: int = 0
        last_total_tokens: int = 0
        threshold_tokens: int = 0
        context_length: int = 0
        compression_count: int = 0
        threshold_percent: float = 0.75
        protect_first_n: int = 3
        protect_last_n: int = 6

        def get_status(self) -> dict[str, Any]:
            last = self.last_prompt_tokens if self.last_prompt_tokens > 0 else 0
            return {
                "last_prompt_tokens": last,
                "threshold_tokens": self.threshold_tokens,
                "context_length": self.context_length,
                "usage_percent": min(100, last / self.context_length * 100)
                if self.context_length
                else 0,
                "compression_count": self.compression_count,
            }


__all__ = ["ChronicleContextEngine"]

log = logging.getLogger("chronicle.context")
_GUARD = HostGuard(log)
"""One fence for every copy of the engine (Hermes deep-copies it per agent)."""


def _unchanged(self: Any, messages: Any = None, *args: Any, **kwargs: Any) -> Any:
    return messages


def _empty_list(*_: Any, **__: Any) -> list[Any]:
    return []


def _empty_dict(*_: Any, **__: Any) -> dict[str, Any]:
    return {}


class ChronicleContextEngine(_Base):
    """Lossless compaction into chronicle sections plus a verbatim tail."""

    name = "chronicle"
    clock = staticmethod(time.monotonic)  # when responses came (the cache's lifetime runs on it)

    @staticmethod
    def load() -> None:
        """Import what the hooks import on first use. The plugin's register() calls it when
        config.yaml selects this engine: an engine whose modules cannot load (a damaged
        install, an older `chronicle_engine` installed beside this checkout) then fails to
        register and Hermes keeps its own compressor, instead of a selected engine that never
        compacts because every hook fails behind the fence."""
        from chronicle_engine.compaction.engine import Compaction  # the core's, on first use
        from chronicle_engine.compaction.policy import policy_from_config
        from chronicle_engine.compaction.prune import prune_tool_results
        from chronicle_engine.compaction.tools import CONTEXT_TOOLS
        from chronicle_engine.config import load_hermes_config
        from chronicle_engine.core import ChronicleCore
        from chronicle_engine.log.store import MAIN_THREAD_PATIENCE_MS
        from chronicle_engine.messages import estimate_list_tokens
        from chronicle_engine.opening import Reopening
        from chronicle_engine.tools import dispatch, schemas

        del Compaction, policy_from_config, prune_tool_results, CONTEXT_TOOLS
        del load_hermes_config, ChronicleCore, MAIN_THREAD_PATIENCE_MS, estimate_list_tokens
        del Reopening, dispatch, schemas

    def __init__(
        self, core: ChronicleCore | None = None, *, hermes_home: str | None = None
    ) -> None:
        self._core = core
        self._hermes_home = hermes_home
        # Set while no store could be opened: what to open, when to retry, where turns wait.
        self._opening: Reopening | None = None
        self._session_id = ""
        self._env_session = os.environ.get("HERMES_SESSION_ID", "")
        self._platform: str | None = None
        self._user_id: str | None = None
        self._policy: Policy | None = None
        self._real_tokens = 0  # the provider's count (or our own after a compaction)
        self._real_known = False
        self.last_prompt_tokens = 0
        self.last_completion_tokens = 0
        self.last_total_tokens = 0
        self.last_real_prompt_tokens = 0
        self.last_compression_rough_tokens = 0
        self.awaiting_real_usage_after_compression = False
        self.compression_count = 0
        self.context_length = 0
        self.threshold_tokens = 0
        self._last_compression_made_progress = False
        self._last_compress_aborted = False
        self._last_summary_error: str | None = None
        self._warming = False  # the compaction engine is being built (or was) off the host's thread
        self._model = ("", "")  # (model, provider) of the last update_model
        self._calls = 0  # model calls seen (update_from_response): the guard's clock
        self._thrash = ThrashGuard()
        self._cache = CacheTiming()  # the provider's cache, from the host's usage reports

    # -- the shared core ---------------------------------------------------------------------

    @property
    def core(self) -> ChronicleCore:
        """The shared core, opened the way the memory slot opens it (`opening.Reopening`: a
        busy store retried, a damaged file moved aside, turns that waited replayed), so the
        engine alone, with no memory slot, is as safe. A store that would not open is tried
        again on a later call after a backoff; until then this raises StoreError at once."""
        core = self._open_core()
        if core is not None:
            return core
        opening = self._opening
        first = opening is None
        if opening is None:
            from chronicle_engine.config import load_hermes_config
            from chronicle_engine.opening import Reopening

            opening = self._opening = Reopening(load_hermes_config(self._hermes_home))
        core = opening.open(patient=first)
        self._core, self._opening = core, None
        return core

    def _config(self) -> Config:
        """The settings: the core's, or those of the store that has not opened yet."""
        try:
            return self.core.config
        except StoreError as exc:
            if self._opening is None:
                raise
            _GUARD.failed("open", exc, None)  # the first failure says where turns wait
            return self._opening.config

    def _core_or_keep(self, session: str, messages: object) -> ChronicleCore:
        """The core; when the store will not open, `messages` wait on disk until it does (and
        the StoreError goes on to the fence, which says so once)."""
        try:
            return self.core
        except StoreError:
            if self._opening is not None:
                self._opening.keep(session, messages, self._identity())
            raise

    def _identity(self) -> dict[str, str | None]:
        return {"user_id": self._user_id, "platform": self._platform}

    def _open_core(self) -> ChronicleCore | None:
        """The bound core if it is open (None: not bound yet, or shut down by its last user)."""
        core = self._core
        return core if core is not None and not getattr(core, "_closed", False) else None

    def _borrowed(self) -> contextlib.AbstractContextManager[None]:
        core = self._open_core()
        return _users.borrowing(core) if core is not None else contextlib.nullcontext()

    def __deepcopy__(self, memo: dict[int, Any]) -> ChronicleContextEngine:
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            # The core (store, connections, locks) is shared; the rest is plain per-agent state.
            shared = ("_core", "_policy", "_opening")
            clone.__dict__[key] = value if key in shared else copy.copy(value)
        return clone

    def _tick(self, hook: str) -> None:
        # Named "context.<hook>": these calls run on the agent's own thread (compaction included),
        # so they only let the scheduler schedule; queued jobs drain on the memory slot's hooks.
        try:
            core = self.core
        except Exception:  # no core to tick: the hook itself says why, once
            return
        _GUARD.tick(core, "context." + hook)

    # -- the fence (chronicle_engine/host.py) -----------------------------------------------------------

    @property
    def guard(self) -> HostGuard:
        return _GUARD

    def fence_core(self) -> ChronicleCore | None:
        return self._core

    def fence_scope(self) -> contextlib.AbstractContextManager[None]:
        return self._borrowed()

    @property
    def policy(self) -> Policy:
        if self._policy is None:
            from chronicle_engine.compaction.policy import policy_from_config

            model, provider = self._model
            # Newer hosts assign `model_thresholds` (compression.model_thresholds, resolved)
            # before the first update_model; without it, config.yaml's map applies.
            thresholds = getattr(self, "model_thresholds", None)
            self._apply_policy(
                policy_from_config(
                    self._config(),
                    self.context_length or None,
                    model=model,
                    provider=provider,
                    model_thresholds=thresholds if isinstance(thresholds, dict) else None,
                )
            )
        assert self._policy is not None
        return self._policy

    def _apply_policy(self, policy: Policy) -> None:
        self._policy = policy
        self.context_length = policy.context_length
        self.threshold_percent = policy.high_percent
        self.threshold_tokens = policy.high_tokens
        self.protect_first_n = policy.protect_first_n
        self.protect_last_n = policy.protect_last_n

    def _session(self) -> str:
        return self._session_id or os.environ.get("HERMES_SESSION_ID", "") or "default"

    # -- token bookkeeping -------------------------------------------------------------------

    @fenced(None)
    def update_from_response(self, usage: dict[str, Any]) -> None:
        usage = usage or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        self.last_prompt_tokens = prompt
        self.last_completion_tokens = completion
        self.last_total_tokens = int(usage.get("total_tokens") or prompt + completion)
        self._calls += 1
        self._cache.observe(usage, self.clock())
        if prompt > 0:
            self._real_tokens = prompt
            self._real_known = True
            self.last_real_prompt_tokens = prompt
        self.awaiting_real_usage_after_compression = False

    @fenced(False)
    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """From the provider's real count once there is one; the host's cheap estimate only
        before the first response (and when it says the request would not fit at all). A
        conversation whose passes cannot get under the threshold is held by the anti-thrash
        guard (`should_compress_info` says why)."""
        return self._due(prompt_tokens)[0]

    @fenced((False, None))
    def should_compress_info(self, prompt_tokens: int | None = None) -> tuple[bool, str | None]:
        """Newer hosts: (due, why not) so a held pass is reported instead of silently skipped."""
        return self._due(prompt_tokens)

    def _due(self, prompt_tokens: int | None) -> tuple[bool, str | None]:
        policy = self.policy
        high = policy.high_tokens
        estimate = int(prompt_tokens or 0)
        if self._real_known:
            tokens = self._real_tokens
            if estimate >= policy.context_length:
                tokens = max(tokens, estimate)
        else:
            tokens = estimate or max(self.last_prompt_tokens, 0)
        if tokens < high:
            # Earlier only when the pass pays for itself: the cache it would throw away has
            # expired (timing.py); never within two model calls of the last pass.
            last = self._thrash.last_call
            if (last is None or self._calls - last >= 2) and self._cache.early(
                tokens, low=policy.low_tokens, high=high, now=self.clock()
            ):
                return True, None
            return False, None
        held = self._thrash.hold(
            call=self._calls, tokens=tokens, high=high, window=policy.context_length
        )
        return held is None, held

    @fenced(False)
    def should_defer_preflight_to_real_usage(self, rough_tokens: int) -> bool:
        return (
            self._real_known
            and self._real_tokens < self.policy.high_tokens
            and int(rough_tokens) < self.policy.context_length
        )

    @fenced(None)
    def update_model(
        self,
        model: str = "",
        context_length: int = 0,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
        **_: Any,
    ) -> None:
        self.context_length = int(context_length or 0)
        self._model = (str(model or ""), str(provider or ""))
        self._policy = None
        self._apply_policy(self.policy)
        self._thrash = ThrashGuard()  # the old window's stalls say nothing about the new one
        # The counts were the old model's; the new one's first response sets them again.
        self._real_known = False
        self._real_tokens = 0
        self.last_prompt_tokens = 0

    # -- compaction --------------------------------------------------------------------------

    @fenced(_unchanged)
    def compress(
        self,
        messages: list[dict[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[dict[str, Any]]:
        from chronicle_engine.log.store import MAIN_THREAD_PATIENCE_MS

        self._last_compression_made_progress = False
        self._last_compress_aborted = False
        self._last_summary_error = None
        core = self._core_or_keep(self._session(), messages)
        policy = self.policy
        counted = current_tokens or (self._real_tokens if self._real_known else None)
        # On Hermes' main thread: a lock held elsewhere costs a short wait, then no compaction.
        with core.store.patience(MAIN_THREAD_PATIENCE_MS):
            self._tick("compress")
            outcome = core.compaction.compress(
                self._session(),
                messages,
                policy=policy,
                current_tokens=counted,
                focus_topic=focus_topic,
                force=force,
                memory_context=memory_context or "",
                user_id=self._user_id,
                platform=self._platform,
            )
        overhead = host_overhead(counted, outcome.tokens_before, policy.context_length)
        if outcome.messages is None:
            log.info("chronicle: no compaction (%s)", outcome.reason)
            if not force and (counted or 0) >= policy.high_tokens:
                self._warn(
                    self._thrash.failed(call=self._calls, tokens=counted or 0, why=outcome.reason)
                )
            return messages
        self.compression_count += 1
        self._last_compression_made_progress = True
        if outcome.fell_back:
            self._last_summary_error = None  # the extractive prose stood in; nothing was lost
        self._real_tokens = overhead + outcome.tokens_after
        self._real_known = True
        if not force:  # the guard paces automatic passes; a /compress is the person's call
            self._warn(
                self._thrash.passed(
                    call=self._calls, after=self._real_tokens, high=policy.high_tokens
                )
            )
        return outcome.messages

    def _warn(self, reason: str | None) -> None:
        # Once per stall (the guard says when): the host's log is where an operator looks.
        if reason:
            log.warning("chronicle: %s. Compaction is held until new content arrives.", reason)

    @fenced(lambda self, messages, *_, **__: (messages, 0))
    def prune_tool_results_only(
        self, messages: list[dict[str, Any]], current_tokens: int | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Newer hosts: trim old tool output without a model call (the shortening a pass
        does, on tool results only). Everything is captured first, so each cut result stays
        one chronicle_expand away; the head and the protected tail are left as they are."""
        from chronicle_engine.compaction.prune import prune_tool_results

        session = self._session()
        capture = self._core_or_keep(session, messages).capture
        if not messages or not capture.capturing(capture.identity(session).get("agent_context")):
            return messages, 0
        seqs = list(
            capture.capture_messages(
                session, messages, user_id=self._user_id, platform=self._platform
            )
        )
        policy = self.policy
        out, pruned = prune_tool_results(
            messages,
            seqs,
            protect_first_n=policy.protect_first_n,
            protect_last_n=policy.protect_last_n,
        )
        return (out, pruned) if pruned else (messages, 0)

    @fenced(None)
    def on_turn_complete(
        self, messages: list[dict[str, Any]], usage: dict[str, Any] | None = None, **_: Any
    ) -> None:
        """Newer hosts: a finished turn. Only lets the scheduler schedule (the memory slot
        captures the turn; the list is the host's and is never changed here)."""
        self._tick("on_turn_complete")

    def clone_for_agent(self) -> ChronicleContextEngine:
        """Newer hosts: the engine for one more agent. Shares the core (store, connections,
        locks) and copies the per-agent budget state: the same as the deep copy 0.19.0 makes."""
        return copy.deepcopy(self)

    @fenced(True)
    def has_content_to_compress(self, messages: list[dict[str, Any]]) -> bool:
        return self.core.compaction.has_content(messages, self.policy)

    @fenced(False)
    def should_compress_preflight(self, messages: list[dict[str, Any]]) -> bool:
        from chronicle_engine.messages import estimate_list_tokens

        return (
            not self._real_known and estimate_list_tokens(list(messages)) >= self.policy.high_tokens
        )

    # -- session lifecycle -------------------------------------------------------------------

    @fenced(None)
    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        home = kwargs.get("hermes_home")
        if home and self._core is None:
            self._hermes_home = str(home)
        self._platform = kwargs.get("platform") or self._platform
        self._user_id = kwargs.get("user_id") or self._user_id
        old = kwargs.get("old_session_id") or ""
        reason = kwargs.get("boundary_reason") or ""
        if session_id:
            if reason != "compression" and str(session_id) != self._session_id:
                self._thrash = ThrashGuard()  # another conversation: its own stalls
            self._bind(str(session_id))
        try:
            core = self.core  # bound now, so the session's end never opens a core of its own
        except StoreError:
            if self._opening is not None and session_id and old and reason == "compression":
                self._opening.keep_switch(str(session_id), str(old), reason)
            raise
        # Only a compression continues the same conversation; an unlabelled start with an old
        # id is a /new-like transition. The memory slot hears the same rotation; recording a
        # switch is idempotent, so whichever slot comes first records it.
        if session_id and old and old != session_id and reason == "compression":
            core.sessions.switch(session_id, parent_session_id=old, reason="compression")
        self._warm(core)
        self._tick("on_session_start")

    def _warm(self, core: ChronicleCore) -> None:
        """Build the compaction engine on a thread of its own, once: the first compress runs on
        the host's thread, mid-turn, and would otherwise pay for it (its imports; the event
        models it writes are built as the core opens). Building reads and writes nothing; a
        failure is left to that compress."""
        if self._warming:
            return
        self._warming = True

        def build() -> None:
            try:
                if not getattr(core, "_closed", False):
                    core.compaction  # noqa: B018 (built on first access)
            except Exception:
                log.debug(
                    "chronicle: the compaction engine could not be built ahead", exc_info=True
                )

        threading.Thread(target=build, name="chronicle-warm-compaction", daemon=True).start()

    def _bind(self, session_id: str) -> None:
        if session_id != self._session_id:
            # The counts were the previous conversation's; the new one's first response sets them.
            self._real_known = False
            self._real_tokens = 0
            self.last_prompt_tokens = self.last_completion_tokens = self.last_total_tokens = 0
        self._session_id = session_id
        self._env_session = os.environ.get("HERMES_SESSION_ID", "")

    @fenced(None)
    def bind_session_state(self, session_db: Any, session_id: str) -> None:
        """Hermes' rebind on /new, /resume and /branch (no on_session_start runs on those
        paths): later compress calls, tools and the session's end follow the new session."""
        if session_id:
            if str(session_id) != self._session_id:
                self._thrash = ThrashGuard()
            self._bind(str(session_id))

    @fenced(None)
    def on_session_switch(self, session_id: str, **kwargs: Any) -> None:
        self.on_session_start(
            session_id,
            old_session_id=kwargs.get("parent_session_id") or "",
            boundary_reason=kwargs.get("reason") or "",
        )

    @fenced(None)
    def on_session_end(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        core = self._open_core()
        if core is None and self._opening is not None:
            # This engine's store never opened: one more attempt, else the list waits on disk.
            core = self._core_or_keep(session_id or self._session(), messages)
        if core is None:
            # At exit Hermes shuts the memory slot down first; it captured this list already.
            log.debug("chronicle: the core is closed; nothing to do at the session's end")
            return
        # Make sure the log holds the session's messages even without the memory slot
        # (capture is idempotent: the provider may have recorded them already).
        session = session_id or self._session()
        capture = core.capture
        if messages and capture.capturing(capture.identity(session).get("agent_context")):
            capture.capture_messages(
                session, messages, user_id=self._user_id, platform=self._platform
            )
        self._tick("on_session_end")
        if not _users.held(core):
            # No memory slot will shut it down: flush the WAL now, once the scheduler's
            # background thread has done what this hook asked (a context hook only schedules,
            # so it is short; bounded all the same).
            core.scheduler.wait_background(1.0)
            core.store.checkpoint()

    @fenced(None)
    def on_session_reset(self) -> None:
        self.last_prompt_tokens = self.last_completion_tokens = self.last_total_tokens = 0
        self.compression_count = 0
        self._real_known = False
        self._real_tokens = 0
        self._thrash = ThrashGuard()
        # /new and /reset name the new session in the environment before resetting. Only a
        # change counts: in a gateway the variable may name another agent's session.
        current = os.environ.get("HERMES_SESSION_ID", "")
        if current and current != self._env_session and current != self._session_id:
            self._bind(current)

    # -- tools and status --------------------------------------------------------------------

    @fenced(_empty_list)
    def get_tool_schemas(self) -> list[dict[str, Any]]:
        from chronicle_engine.compaction.tools import CONTEXT_TOOLS
        from chronicle_engine.tools import schemas

        return schemas(CONTEXT_TOOLS)

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        try:
            from chronicle_engine.compaction.tools import CONTEXT_TOOLS
            from chronicle_engine.log.store import MAIN_THREAD_PATIENCE_MS
            from chronicle_engine.tools import dispatch

            core = self.core
            policy = self.policy
            compaction = core.compaction
        except Exception as exc:  # noqa: BLE001 - a tool call never raises into Hermes
            _GUARD.failed(f"tool {name}", exc, None)
            return json.dumps(
                {"error": "Chronicle's store is not open yet; try again in a moment"}
                if isinstance(exc, StoreError)
                else {"error": f"Chronicle is unavailable: {type(exc).__name__}"}
            )
        with _users.borrowing(core), core.store.patience(MAIN_THREAD_PATIENCE_MS):
            self._tick("tool")
            return dispatch(
                CONTEXT_TOOLS,
                compaction,
                name,
                args,
                session_id=self._session(),
                messages=kwargs.get("messages"),
                policy=policy,
            )

    @fenced(_empty_dict)
    def get_status(self) -> dict[str, Any]:
        status = dict(super().get_status())
        status["engine"] = self.name
        status["policy"] = self.policy.describe()
        return status
