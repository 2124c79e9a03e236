"""ChronicleMemoryProvider: Hermes' memory-provider slot, as a thin adapter onto the core.

Invariants:
- Thin. Every hook translates to core calls (`core.capture`, `core.sessions`, `core.recall`,
  `core.scheduler`); nothing here decides what is remembered or how.
- Nothing escapes into Hermes' loop. Each hook is guarded: an exception is logged once per hook
  and kind, the hook returns its neutral value, and whatever was already captured stays.
- Thread-safe as Hermes calls it: `prefetch` on its own thread with `session_id=""`, `sync_turn`
  and `queue_prefetch` on the "mem-sync" worker, `on_session_end` possibly before the last
  `sync_turn` ran. Capture is idempotent, so on_session_end and on_pre_compress capture the
  list they are handed too, and the later sync_turn records nothing twice.
- One core per database: both Hermes loaders and every agent's provider reach the same
  `ChronicleCore.get(db_path)`; the last provider to shut down checkpoints the WAL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:  # the real base when Hermes is installed; a stand-in keeps the module importable without it
    from agent.memory_provider import MemoryProvider as _ProviderBase
except Exception:  # noqa: BLE001 - any import failure means "no Hermes here"

    class _ProviderBase:  # type: ignore[no-redef]
        """The part of Hermes' MemoryProvider interface Chronicle relies on."""

        def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None: ...


# The plugin's __init__ has made `chronicle_engine` importable (installed, or loaded from
# ./engine under that one name), so both Hermes loaders share its modules and cores.
from chronicle_engine import users as _users
from chronicle_engine.errors import ChronicleError, StoreError, UsageError
from chronicle_engine.host import HostGuard, fenced

if TYPE_CHECKING:
    # Imported where first used (initialize(), a tool, setup), not when Hermes loads the
    # plugin: a process that loads plugins but never runs this provider pays nothing for the
    # store, the settings' models or yaml.
    from chronicle_engine.config import Config
    from chronicle_engine.core import ChronicleCore
    from chronicle_engine.opening import Reopening
    from chronicle_engine.sessions.capture import Capture

__all__ = ["ChronicleMemoryProvider", "CheckpointFailed", "is_trivial_prompt"]

log = logging.getLogger("chronicle.provider")

SETUP_PASSWORD_ENV = "CHRONICLE_PG_PASSWORD"
"""The variable `hermes memory setup` keeps a PostgreSQL password in ($HERMES_HOME/.env)."""

try:  # newer hosts: the indicator's shape and the host's own trivial-prompt test
    from agent.memory_provider import RecallStatus as _RecallStatus
    from agent.memory_provider import is_trivial_prompt as _host_trivial
except Exception:  # noqa: BLE001 - Hermes 0.19.0 has neither
    _host_trivial = None

    @dataclasses.dataclass(frozen=True)
    class _RecallStatus:  # type: ignore[no-redef]
        provider_label: str
        count: int
        glyph: str = "🧠"


_ACKNOWLEDGEMENTS = frozenset(
    [
        "ok",
        "okay",
        "k",
        "y",
        "n",
        "yes",
        "no",
        "yep",
        "nope",
        "yeah",
        "nah",
        "sure",
        "thanks",
        "thx",
        "ty",
        "hi",
        "hey",
        "hello",
        "yo",
        "cool",
        "nice",
        "great",
        "done",
        "next",
        "continue",
        "proceed",
        "lgtm",
    ]
) | {"thank you", "go ahead", "do it", "got it"}


def is_trivial_prompt(text: str | None) -> bool:
    """A prompt with nothing to recall for: empty, a slash command, a bare greeting or
    acknowledgement. Newer hosts' own test when they have one, so the two never disagree."""
    if text is not None and not isinstance(text, str):
        return False  # not a prompt at all: recall's own input handling decides
    if _host_trivial is not None:
        return bool(_host_trivial(text))
    stripped = (text or "").strip()
    if not stripped or stripped.startswith("/"):
        return True
    return stripped.lower().strip(" \t!?.,:;~'\"()") in _ACKNOWLEDGEMENTS


class CheckpointFailed(ChronicleError, RuntimeError):
    """The messages could not be made durable before a compression that required it."""


_SWITCH_REASONS = {
    "compression": "compression",
    "resume": "resume",
    "branch": "branch",
    "reset": "reset",
    "new_session": "new",
    "new": "new",
}

_PROMPT = (
    "Chronicle keeps every message of your conversations with this user in a local log, "
    "including what was compacted out of the context. Relevant memory may be added to the "
    "user's message inside <memory-context>; it is background, not a new request."
)


def _no_tools(*_: Any, **__: Any) -> list[dict[str, Any]]:
    return []


class ChronicleMemoryProvider(_ProviderBase):
    """Chronicle as Hermes' memory provider: capture everything, recall what is relevant."""

    def __init__(self) -> None:
        self._core: ChronicleCore | None = None
        self._session_id = ""
        self._platform: str | None = None
        self._agent_context = "primary"
        self._user_id: str | None = None
        self._profile: str | None = None
        self._hermes_home: str | None = None
        self._guard = HostGuard(log)
        self._lock = threading.Lock()
        # Set from initialize() until a store opens: what to open, and when to try again.
        self._reopening: Reopening | None = None
        self._recalled: int | None = None  # memories the last prefetch injected
        # Turns handed to sync_turn without `messages` (older hosts): the list we rebuild.
        self._pairs: dict[str, list[dict[str, Any]]] = {}

    @staticmethod
    def load() -> None:
        """Import what the hooks import on first use. The plugin's register() calls it when
        config.yaml selects this provider: one whose modules cannot load is then not
        registered (Hermes says so), instead of a selected provider that keeps no turn and
        answers every tool with "unavailable" behind the fence."""
        from chronicle_engine.config import (
            ChronicleSettings,
            checked_store,
            default_db_path,
            load_hermes_config,
        )
        from chronicle_engine.core import ChronicleCore
        from chronicle_engine.log.store import MAIN_THREAD_PATIENCE_MS
        from chronicle_engine.opening import Reopening
        from chronicle_engine.recall.recall import Recall  # the core's, on first use
        from chronicle_engine.recall.tools import RECALL_TOOLS
        from chronicle_engine.sessions.capture import Capture  # the core's, on first use
        from chronicle_engine.tools import dispatch, schemas

        del ChronicleSettings, checked_store, default_db_path, load_hermes_config
        del ChronicleCore, MAIN_THREAD_PATIENCE_MS, Reopening, Recall, RECALL_TOOLS
        del Capture, dispatch, schemas

    # -- identity -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return "chronicle"

    def is_available(self) -> bool:
        return True  # local SQLite: no account, key or service to check

    def __deepcopy__(self, memo: dict[int, Any]) -> ChronicleMemoryProvider:
        return self  # holds a shared core and locks; a copy must be the same provider

    # -- the fence (chronicle_engine/host.py) ---------------------------------------------------------

    @property
    def guard(self) -> HostGuard:
        return self._guard

    def fence_core(self) -> ChronicleCore | None:
        return self._core

    def fence_scope(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    # -- lifecycle ------------------------------------------------------------------------

    @fenced(None)
    def initialize(self, session_id: str, **kwargs: Any) -> None:
        from chronicle_engine.config import load_hermes_config
        from chronicle_engine.opening import Reopening

        hermes_home = kwargs.get("hermes_home")
        # Who this provider serves is set before the store opens: a turn kept while it cannot
        # open, and every later call (tools included), acts for this identity and no other.
        self._hermes_home = str(hermes_home) if hermes_home else None
        self._session_id = str(session_id or "")
        self._platform = kwargs.get("platform")
        self._agent_context = str(kwargs.get("agent_context") or "primary")
        self._user_id = kwargs.get("user_id")
        self._profile = kwargs.get("agent_identity")
        self._reopening = Reopening(load_hermes_config(hermes_home))
        self._open(patient=True)
        self._tick("initialize")

    def _open(self, *, patient: bool) -> ChronicleCore:
        """Open the store initialize() named (retried with backoff until it opens); raises
        StoreError saying where turns wait meanwhile."""
        reopening = self._reopening
        assert reopening is not None
        core = reopening.open(patient=patient)
        with self._lock:
            if self._core is not core:
                if self._core is not None and _users.release(self._core):
                    self._core.shutdown()
                _users.acquire(core)
                self._core = core
            self._reopening = None
        self._remember(self._session_id)
        return core

    @fenced(None)
    def shutdown(self) -> None:
        with self._lock:
            core, self._core = self._core, None
        if core is not None and _users.release(core):
            core.shutdown()

    # -- internals ------------------------------------------------------------------------

    @property
    def core(self) -> ChronicleCore:
        core = self._core
        if core is None:
            reopening = self._reopening
            if reopening is None:
                raise RuntimeError("the Chronicle memory provider was not initialised")
            core = self._open(patient=False)
        return core

    def _closed_store(self) -> Reopening | None:
        """The pending reopening when the store is not open (None when it is)."""
        if self._core is not None:
            return None
        reopening = self._reopening
        if reopening is None:
            return None
        try:
            _ = self.core  # retries the open when its backoff is over
        except StoreError:
            return self._reopening
        return None

    def _keep_waiting(self, session: str, messages: Any) -> None:
        """The store is not open: keep the live list on disk until it is (capture/waiting.py)."""
        if self._reopening is not None:
            self._reopening.keep(session, messages, self._live())

    def _tool_core(self) -> ChronicleCore:
        """The core for a tool call. Hermes indexes memory tools when the provider is added,
        before initialize(), so a tool may arrive first: open the core HERMES_HOME names, as
        initialize() would. After initialize() the tool acts for initialize()'s identity: a
        store that did not open is retried, never opened for nobody."""
        if self._reopening is not None:
            return self.core
        with self._lock:
            if self._core is None:
                from chronicle_engine.config import load_hermes_config
                from chronicle_engine.core import ChronicleCore

                config = load_hermes_config(None)
                opened = ChronicleCore.get(config.location(), config=config)
                _users.acquire(opened)
                self._core = opened
            return self._core

    def _config(self) -> Config:
        return self.core.config

    def _capturing(self) -> bool:
        return bool(self.core.capture.capturing(self._agent_context))

    def _capture(self, session_id: str, messages: Any) -> int:
        """Capture the live list; returns how many messages were new."""
        if not self._capturing() or not messages:
            return 0
        capture: Capture = self.core.capture
        return capture.capture_turn(
            session_id,
            messages,
            user_id=self._user_id,
            profile=self._profile,
            agent_context=self._agent_context,
            platform=self._platform,
        )

    def _remember(self, session_id: str) -> None:
        """Tell capture who this session serves: the context engine's captures (compress runs
        mid-turn, before sync_turn) name nobody and take this identity."""
        if session_id and self._core is not None:
            self._core.capture.remember_identity(
                session_id,
                user_id=self._user_id,
                profile=self._profile,
                agent_context=self._agent_context,
                platform=self._platform,
            )

    def _tick(self, hook: str) -> None:
        self._guard.tick(self._core, hook)

    def _live(self) -> dict[str, Any]:
        """Who this agent serves, for recall's gates (an automation turn gets no memory)."""
        return {
            "user_id": self._user_id,
            "profile": self._profile,
            "agent_context": self._agent_context,
            "platform": self._platform,
        }

    # -- the turn ---------------------------------------------------------------------------

    @fenced(None)
    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        self.core.capture.record_turn_start(
            self._session_id,
            turn_number,
            message,
            model=kwargs.get("model"),
            platform=kwargs.get("platform") or self._platform,
        )
        self._tick("on_turn_start")

    @fenced("")
    def prefetch(self, query: str, *, session_id: str = "") -> str:
        self._recalled = None  # recall_status reflects this prefetch only
        if is_trivial_prompt(query):
            return ""
        found = str(
            self.core.recall.prefetch(
                query, session_id=session_id or self._session_id, **self._live()
            )
            or ""
        )
        if found.strip():
            self._recalled = sum(1 for line in found.splitlines() if line.startswith("- ["))
        return found

    @fenced(None)
    def recall_status(self) -> Any:
        """Newer hosts: what the last prefetch injected (None: nothing), for the indicator."""
        if self._recalled is None:
            return None
        return _RecallStatus(provider_label="Chronicle", count=self._recalled)

    @fenced(None)
    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        if is_trivial_prompt(query):
            return
        self.core.recall.queue_prefetch(
            query, session_id=session_id or self._session_id, **self._live()
        )

    @fenced(None)
    def sync_turn(
        self,
        user_content: str,
        assistant_content: str,
        *,
        session_id: str = "",
        messages: list[dict[str, Any]] | None = None,
    ) -> None:
        session = str(session_id or self._session_id)
        if messages is None:
            # An older host without the live list: rebuild it from the turns we were given.
            pairs = self._pairs.setdefault(session, [])
            pairs += [
                {"role": "user", "content": user_content},
                {"role": "assistant", "content": assistant_content},
            ]
            messages = pairs
        if self._closed_store() is not None:
            self._keep_waiting(session, messages)
            return
        self._remember(session)
        self._capture(session, messages)
        self._tick("sync_turn")

    # -- session boundaries -------------------------------------------------------------------

    @fenced(None)
    def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        # May run before the last sync_turn did: capture the final list here as well.
        if self._closed_store() is not None:
            self._keep_waiting(self._session_id, messages)
            return
        new = self._capture(self._session_id, messages)
        self.core.capture.record_session_end(self._session_id, len(messages or ()), new)
        self._tick("on_session_end")

    @fenced(None)
    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str = "",
        reset: bool = False,
        rewound: bool = False,
        **kwargs: Any,
    ) -> None:
        reason = _SWITCH_REASONS.get(str(kwargs.get("reason") or ""))
        if rewound:
            reason = "rewound"
        elif reason is None:
            reason = "new" if reset or not parent_session_id else "resume"
        # The host has switched whether or not the switch can be recorded (a busy store keeps
        # the record aside): the next hooks belong to the new session.
        old_session = self._session_id
        self._session_id = str(new_session_id)
        reopening = self._closed_store()
        if reopening is not None:
            if reason in ("compression", "branch"):
                reopening.keep_switch(
                    self._session_id, str(parent_session_id or old_session), reason
                )
            return
        self._remember(self._session_id)
        if reason == "rewound":
            self.core.capture.rewound(new_session_id)
        self.core.sessions.switch(
            str(new_session_id), parent_session_id=str(parent_session_id or ""), reason=reason
        )
        self._tick("on_session_switch")

    # Newer hosts: every successful on_pre_compress is a durable checkpoint (the append-only
    # log holds each message before the host compresses), and a failure raises when the host
    # requires one, so it keeps the uncompressed transcript.
    pre_compress_checkpoint_api_version = 2

    def on_pre_compress(
        self, messages: list[dict[str, Any]], *, require_checkpoint: bool = False, **_: Any
    ) -> str:
        try:
            if require_checkpoint and messages and not self._capturing():
                raise UsageError(
                    "capture is off for this agent (capture.enabled, capture.skip_agent_contexts)"
                )
            with self.fence_scope():
                return self._pre_compress(messages)
        except Exception as exc:  # noqa: BLE001 - fenced unless the host requires the checkpoint
            if require_checkpoint:
                raise CheckpointFailed(
                    f"Chronicle could not record the messages before compression ({exc}); "
                    "keep the transcript uncompressed"
                ) from exc
            self.guard.failed("on_pre_compress", exc, self.fence_core())
            return ""

    def _pre_compress(self, messages: list[dict[str, Any]]) -> str:
        """Capture everything about to be compressed, then give the host's compression prompt a
        short note of what memory holds (nothing when Chronicle is the context engine too: it
        compacts with the whole log at hand, and the note would be summarised twice)."""
        if self._closed_store() is not None:
            self._keep_waiting(self._session_id, messages)
            return ""
        new = self._capture(self._session_id, messages)
        self.core.capture.record_compression_ahead(self._session_id, len(messages or ()), new)
        self._tick("on_pre_compress")
        context = self._config().raw.get("context")
        if isinstance(context, dict) and context.get("engine") == "chronicle":
            return ""
        count = self.core.sessions.message_count(self._session_id)
        note = (
            f"Chronicle has every message of this conversation in its log ({count} so far); "
            "anything summarised away can be searched and restored verbatim."
        )
        last_user = next(
            (
                m.get("content")
                for m in reversed(messages or [])
                if isinstance(m, dict)
                and m.get("role") == "user"
                and isinstance(m.get("content"), str)
            ),
            "",
        )
        if last_user:
            remembered = str(
                self.core.recall.prefetch(last_user, session_id=self._session_id) or ""
            )
            if remembered.strip():
                note += "\nRelevant memory:\n" + remembered.strip()
        return note

    # -- what the host mirrors to us ------------------------------------------------------------

    @fenced(None)
    def on_memory_write(
        self,
        action: str,
        target: str,
        content: str,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        session = str((metadata or {}).get("session_id") or self._session_id)
        self.core.capture.record_memory_write(session, action, target, content, metadata)
        self._tick("on_memory_write")

    @fenced(None)
    def on_delegation(
        self, task: str, result: str, *, child_session_id: str = "", **kwargs: Any
    ) -> None:
        self.core.capture.record_delegation(self._session_id, task, result, child_session_id)
        self._tick("on_delegation")

    # -- tools and prompt ---------------------------------------------------------------------

    @fenced("")
    def system_prompt_block(self) -> str:
        if self._core is None:
            return _PROMPT
        return str(self._core.recall.system_prompt_block())

    @fenced(_no_tools)
    def get_tool_schemas(self) -> list[dict[str, Any]]:
        # Static: Hermes indexes memory tools in MemoryManager.add_provider(), BEFORE
        # initialize_all(), so the schemas must not depend on an open core.
        from chronicle_engine.recall.tools import RECALL_TOOLS
        from chronicle_engine.tools import schemas

        return schemas(RECALL_TOOLS)

    @fenced('{"error": "Chronicle memory is unavailable right now"}')
    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        from chronicle_engine.log.store import MAIN_THREAD_PATIENCE_MS
        from chronicle_engine.recall.tools import RECALL_TOOLS
        from chronicle_engine.tools import dispatch

        # Memory tools get no kwargs from Hermes: the slot says whose memory the call reads.
        context = {"session_id": self._session_id, **self._live(), **kwargs}
        core = self._tool_core()
        # On Hermes' main thread: a lock held elsewhere costs a short wait, then a clear error.
        with core.store.patience(MAIN_THREAD_PATIENCE_MS):
            result = dispatch(RECALL_TOOLS, core.recall, tool_name, args, **context)
        self._tick("handle_tool_call")
        return result

    # -- setup (hermes memory setup) -----------------------------------------------------------

    @fenced(_no_tools)
    def get_config_schema(self) -> list[dict[str, Any]]:
        """`hermes memory setup`'s questions: the settings' own descriptions (config.py). A
        password is never asked into config.yaml: the operator names the variable that holds
        it, and when that is `SETUP_PASSWORD_ENV` Hermes asks for it next, masked, and keeps it
        in $HERMES_HOME/.env, which Hermes loads into the environment at start."""
        from chronicle_engine.config import ChronicleSettings

        described = ChronicleSettings.model_fields
        return [
            {
                "key": "store",
                "description": described["store"].description,
                "required": False,
                "default": "",
            },
            {
                "key": "store_password_env",
                "description": f"{described['store_password_env'].description} Answer "
                f"{SETUP_PASSWORD_ENV} to type the password next (kept in $HERMES_HOME/.env).",
                "required": False,
                "default": "",
            },
            {
                "key": "store_password",
                "description": "PostgreSQL password",
                "secret": True,
                "env_var": SETUP_PASSWORD_ENV,
                "when": {"store_password_env": SETUP_PASSWORD_ENV},
            },
            {
                "key": "db_path",
                "description": described["db_path"].description,
                "required": False,
                "default": "",
            },
        ]

    @fenced(None)
    def save_config(self, values: dict[str, Any], hermes_home: str) -> None:
        """Write the answers under `chronicle:` in $HERMES_HOME/config.yaml, keeping the rest.
        A store holding a password is refused (logged, nothing written); a blank answer removes
        the setting."""
        import yaml

        from chronicle_engine.config import checked_store

        answers: dict[str, str] = {}
        for key in ("store", "store_password_env", "db_path"):
            if key in values:
                value = values[key]
                answers[key] = checked_store(value) if key == "store" else str(value or "")
        path = Path(hermes_home) / "config.yaml"
        data: dict[str, Any] = {}
        if path.exists():
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if isinstance(loaded, dict):
                data = loaded
        section = data.get("chronicle")
        if not isinstance(section, dict):
            section = {}
        for key, value in answers.items():
            if value:
                section[key] = value
            else:
                section.pop(key, None)
        data["chronicle"] = section
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".yaml.chronicle-tmp")
        tmp.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
        os.replace(tmp, path)

    def backup_paths(self) -> list[str]:
        """The database files when they live outside HERMES_HOME (`hermes backup` only walks
        HERMES_HOME). Resolved from config and environment only."""
        try:
            from chronicle_engine.config import default_db_path, load_hermes_config

            home = Path(self._hermes_home) if self._hermes_home else None
            config = load_hermes_config(home)
            db = config.db_path().expanduser().resolve()
            root = (config.hermes_home or default_db_path().parent.parent).expanduser().resolve()
            if db.is_relative_to(root):
                return []
            return [str(db), str(db) + "-wal", str(db) + "-shm"]
        except Exception as exc:  # noqa: BLE001 - backup must not fail because of us
            self._guard.failed("backup_paths", exc, self._core)
            return []
