"""Who writes a section's prose: the extractive default, or a model through pydantic-ai.

Invariants:
- A `ModelWriter` never fails a compaction: any error, an empty answer or a timeout falls back to
  the extractive prose, and the result says so (`fell_back`, `error`).
- Every model draw goes through `PinnedModel` with a `PinLedger`, so it is keyed on the whole
  request and recorded in the log (`PinPromoted`) for a word-for-word replay. The prompt renders
  message content only, never seq numbers, ids or timestamps, so a replay hits the same pins.
- Draws happen before the caller opens any write transaction: a slow model never holds the lock.
  The draw runs on a worker thread with its own event loop, bounded by the timeout and by the
  caller's deadline (`FoldInput.deadline`, `condense(deadline=)`: a compaction pass caps its total
  time for model calls); past the deadline the model is not asked.
- One `PinLedger` and one small thread pool per writer: the pin history is read once and then
  incrementally, and a draw that hangs past its timeout holds one of `_WORKERS` threads, never
  a new thread per call.
- No credential reaches a section's prose or a model's prompt: the writers read `masked_view`s
  of the messages and masked children, and mask what they write (a section written before the
  masker knew a shape is masked again when condensed). The log keeps the exact messages.
- A model that failed is not asked again for a cooldown (`COOLDOWN_SECONDS`, at least twice the
  timeout): a dead or hanging endpoint costs one timeout, not one per section or per pass.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..capture.secrets import mask
from ..config import Config
from ..egress import host_of, post_json, route
from ..errors import SummaryFailed, UsageError
from ..log.events import EventTypeRegistry
from ..log.store import SQLiteEventStore
from ..messages import content_text, masked_view, tool_calls
from .extractive import condense_prose, summarize_messages

if TYPE_CHECKING:  # pydantic-ai is imported only where a model is called (it costs ~0.7 s)
    import concurrent.futures

    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.models import Model
    from pydantic_ai.models.function import AgentInfo, FunctionModel

__all__ = [
    "FoldInput",
    "Drawn",
    "SectionWriter",
    "ExtractiveWriter",
    "ModelWriter",
    "auxiliary_model",
    "endpoint_model",
    "writer_from_config",
]

log = logging.getLogger("chronicle_engine.chronicle.writers")

_MODEL_INPUT_CHARS = 120_000
COOLDOWN_SECONDS = 60.0
_WORKERS = 2  # compaction (main thread) and consolidation (mem-sync) may each draw at once
_PER_MESSAGE_CHARS = 2_000

_INSTRUCTIONS = (
    "You write the compaction record of a conversation between a person and an AI agent. "
    "Keep the person's requests in their own words, every decision and its reason, one line per "
    "tool step (what was run and what came of it), and every identifier, path, number, date and "
    "name exactly as written. Use short lines with these prefixes: 'User:', 'Decision:', "
    "'Step:', 'Assistant:', and a final 'Facts:' line listing identifiers. No preamble."
)


@dataclass(frozen=True, slots=True)
class FoldInput:
    """What a writer summarises: a fold's messages, its label and focus, and its budget."""

    messages: Sequence[dict[str, object]]
    label: str
    focus: str | None
    budget_chars: int
    deadline: float | None = None  # time.monotonic() past which no model is asked
    # Indices of `messages` whose capture found no credential: read as they are, not masked
    # again (masking is most of what reading a long fold costs).
    clean: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Drawn:
    """A writer's summary: the prose, the pinned model calls it made, and whether it fell back."""

    prose: str
    pins: tuple[str, ...] = ()
    model_calls: int = 0
    fell_back: bool = False
    error: str | None = None
    writer: str = "extractive"


class SectionWriter(Protocol):
    name: str

    def summarize(self, fold: FoldInput) -> Drawn: ...

    def condense(
        self,
        children: Sequence[tuple[str, str]],
        *,
        label: str,
        focus: str | None,
        budget_chars: int,
        deadline: float | None = None,
    ) -> Drawn: ...


class _TimedOut(SummaryFailed):
    """The draw did not answer within its timeout."""


def _restore(label: str) -> str:
    return f'chronicle_expand(section_id="{label}")'


def _masked_children(children: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(label, mask(prose)) for label, prose in children]


def _extractive(fold: FoldInput) -> Drawn:
    """The extractive prose of a fold (it reads masked views of the messages it uses)."""
    prose = summarize_messages(
        fold.messages,
        budget_chars=fold.budget_chars,
        focus=fold.focus,
        restore=_restore(fold.label),
        clean=fold.clean,
    )
    return Drawn(mask(prose))


class ExtractiveWriter:
    """The embedded default: no model, deterministic prose."""

    name = "extractive"

    def summarize(self, fold: FoldInput) -> Drawn:
        return _extractive(fold)

    def condense(
        self,
        children: Sequence[tuple[str, str]],
        *,
        label: str,
        focus: str | None,
        budget_chars: int,
        deadline: float | None = None,
    ) -> Drawn:
        prose = condense_prose(
            _masked_children(children),
            budget_chars=budget_chars,
            focus=focus,
            restore=_restore(label),
        )
        return Drawn(mask(prose))


def _render_for_model(
    messages: Sequence[dict[str, object]], clean: frozenset[int] = frozenset()
) -> str | None:
    """The conversation as the model reads it, masked; None once it is longer than the model
    may be sent (messages past that point are not masked for nothing)."""
    lines: list[str] = []
    length = 0
    for index, raw in enumerate(messages):
        m = raw if index in clean else masked_view(raw)
        role = str(m.get("role") or "message")
        text = content_text(m)
        if len(text) > _PER_MESSAGE_CHARS:
            text = (
                text[:_PER_MESSAGE_CHARS] + f" […{len(text) - _PER_MESSAGE_CHARS} more characters]"
            )
        calls = "; ".join(f"{name}({args[:300]})" for _, name, args in tool_calls(m))
        if calls:
            text = (text + "\n" if text else "") + "calls " + calls
        lines.append(f"[{role}] {text}")
        length += len(lines[-1]) + 1
        if length > _MODEL_INPUT_CHARS:
            return None
    return "\n".join(lines)


class ModelWriter:
    """Prose from a model (pinned, bounded by a timeout), the extractive prose on any failure."""

    def __init__(
        self,
        model: Callable[[], Model[object]],
        store: SQLiteEventStore,
        types: EventTypeRegistry,
        *,
        timeout: float,
        name: str = "model",
    ) -> None:
        self._model = model
        self._store = store
        self._types = types
        self._timeout = timeout
        self._fallback = ExtractiveWriter()
        self.name = name
        self._resting_until = 0.0  # monotonic time before which the model is not asked
        self._last_error = ""
        from ..log.pins import PinLedger

        self._ledger = PinLedger(store, types)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        from concurrent.futures import ThreadPoolExecutor

        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="chronicle-summary")
            return self._pool

    def close(self) -> None:
        """Let the worker threads go (a draw still running finishes on its own)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _draw(self, prompt: str, timeout: float) -> tuple[str, tuple[str, ...]]:
        import asyncio  # with pydantic-ai, only where a model is called

        from pydantic_ai import Agent

        from ..log.pins import PinnedModel

        keys: list[str] = []
        agent = Agent(
            PinnedModel(self._model(), self._ledger, on_key=keys.append),
            instructions=_INSTRUCTIONS,
        )

        def run() -> str:
            return str(asyncio.run(agent.run(prompt)).output)

        future = self._executor().submit(run)
        try:
            text = future.result(timeout=timeout)
        except TimeoutError:  # concurrent.futures.TimeoutError is this builtin since 3.11
            future.cancel()  # still queued behind a hung draw: it never starts
            raise _TimedOut(f"the summary model took longer than {timeout:g}s") from None
        except BaseException:
            self._ledger.discard(keys)
            raise
        if not text.strip():
            self._ledger.discard(keys)  # an empty answer is not kept for replay
            raise SummaryFailed("the summary model returned no text")
        self._ledger.commit()
        return text.strip(), tuple(dict.fromkeys(keys))

    def _rest(self, error: str) -> None:
        """A failed model is not asked again for a while: one timeout per dead endpoint."""
        self._last_error = error
        rest = max(COOLDOWN_SECONDS, 2 * self._timeout)
        self._resting_until = time.monotonic() + rest
        log.warning(
            "summary model failed (%s); using the extractive summary, and not asking the "
            "model again for %.0fs",
            error,
            rest,
        )

    def _guarded(
        self,
        prompt: str,
        budget_chars: int,
        fallback: Callable[[], Drawn],
        deadline: float | None = None,
    ) -> Drawn:
        now = time.monotonic()
        if now < self._resting_until:
            drawn = fallback()
            error = f"not asked: it failed moments ago ({self._last_error})"
            return Drawn(drawn.prose, fell_back=True, error=error, writer=self.name)
        timeout = self._timeout
        if deadline is not None:
            if deadline <= now:
                drawn = fallback()
                error = "not asked: this pass spent its time for model calls"
                return Drawn(drawn.prose, fell_back=True, error=error, writer=self.name)
            timeout = min(timeout, deadline - now)
        try:
            text, pins = self._draw(prompt, timeout)
        except Exception as exc:  # any failure: the extractive prose, never a lost range
            if isinstance(exc, _TimedOut) and timeout < self._timeout:
                # Cut off by the pass's cap, not slower than its own timeout: no cooldown.
                log.warning("summary model cut off at the pass's time cap (%s)", exc)
            else:
                self._rest(str(exc))
            drawn = fallback()
            return Drawn(
                drawn.prose, fell_back=True, error=str(exc), writer=self.name, model_calls=1
            )
        # A model can echo or invent a credential-shaped string; the prose is masked like any.
        text = mask(text)
        if len(text) > budget_chars:
            text = text[: budget_chars - 1].rstrip() + "…"
        return Drawn(text, pins, model_calls=1, writer=self.name)

    def summarize(self, fold: FoldInput) -> Drawn:
        body = _render_for_model(fold.messages, fold.clean)
        if body is None:
            # Too long to send whole: the model polishes the extractive digest instead.
            body = _extractive(
                FoldInput(
                    fold.messages, fold.label, fold.focus, _MODEL_INPUT_CHARS, clean=fold.clean
                )
            ).prose
        prompt = (
            f"Write the record in at most {fold.budget_chars} characters."
            + (f" Focus on: {fold.focus}; keep everything about it in full." if fold.focus else "")
            + "\n\nCONVERSATION:\n"
            + body
        )
        return self._guarded(prompt, fold.budget_chars, lambda: _extractive(fold), fold.deadline)

    def condense(
        self,
        children: Sequence[tuple[str, str]],
        *,
        label: str,
        focus: str | None,
        budget_chars: int,
        deadline: float | None = None,
    ) -> Drawn:
        # Labels carry seq ranges; the prompt gets the prose alone so replays hit their pins.
        children = _masked_children(children)
        body = "\n\n".join(prose for _, prose in children)[:_MODEL_INPUT_CHARS]
        prompt = (
            f"Merge these consecutive records into one, in at most {budget_chars} characters."
            + (f" Focus on: {focus}." if focus else "")
            + "\n\nRECORDS:\n"
            + body
        )
        return self._guarded(
            prompt,
            budget_chars,
            lambda: self._fallback.condense(
                children, label=label, focus=focus, budget_chars=budget_chars
            ),
            deadline,
        )


# -- models ------------------------------------------------------------------------------------


def _openai_messages(messages: list[ModelMessage], info: AgentInfo) -> list[dict[str, str]]:
    from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart

    out: list[dict[str, str]] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        if message.instructions:
            out.append({"role": "system", "content": message.instructions})
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                out.append({"role": "system", "content": part.content})
            elif isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else str(part.content)
                out.append({"role": "user", "content": content})
    return out


def _text_of_openai_response(response: object) -> str:
    choices = (
        response.get("choices")
        if isinstance(response, dict)
        else getattr(response, "choices", None)
    )
    if not choices:
        raise SummaryFailed("the summary model returned no choices")
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else getattr(first, "message", None)
    content = (
        message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    )
    if not isinstance(content, str) or not content.strip():
        raise SummaryFailed("the summary model returned no text")
    return content


def auxiliary_model(timeout: float) -> FunctionModel:
    """Hermes' auxiliary compression model (`auxiliary.compression`), as a pydantic-ai model."""
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    def call(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        from agent.auxiliary_client import call_llm  # Hermes is only there inside Hermes

        response = call_llm(
            task="compression", messages=_openai_messages(messages, info), timeout=timeout
        )
        return ModelResponse(parts=[TextPart(_text_of_openai_response(response))])

    return FunctionModel(call, model_name="hermes-auxiliary-compression")


def endpoint_model(
    base_url: str,
    model_name: str,
    *,
    api_key: str | None,
    timeout: float,
    allow_remote: bool,
    allow_env_proxy: bool = False,
) -> FunctionModel:
    """An OpenAI-compatible server's /chat/completions, as a pydantic-ai model, through the
    egress client. Refused (EgressRefused, a UsageError) before anything is resolved when the
    endpoint is off this host's network and `allow_remote` is not set."""
    if not base_url.strip() or not host_of(base_url):
        raise UsageError("context.summarizer_base_url is empty; set it to the server's /v1 URL")
    route(base_url, allow_remote=allow_remote, setting="context.summarizer_allow_remote")
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    def call(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answer = post_json(
            base_url.rstrip("/") + "/chat/completions",
            {"model": model_name, "messages": _openai_messages(messages, info)},
            allow_remote=allow_remote,
            allow_env_proxy=allow_env_proxy,
            setting="context.summarizer_allow_remote",
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            timeout=timeout,
        )
        return ModelResponse(parts=[TextPart(_text_of_openai_response(answer))])

    return FunctionModel(call, model_name=model_name or "endpoint")


def writer_from_config(
    config: Config, store: SQLiteEventStore, types: EventTypeRegistry
) -> SectionWriter:
    """The writer `context.summarizer` names. A misconfigured endpoint logs once and gives the
    extractive writer: compaction works offline whatever the settings say."""
    try:
        return _writer_from_config(config, store, types)
    except ModuleNotFoundError as exc:  # pydantic-ai not installed yet (see deps.py)
        log.warning(
            "context.summarizer needs %s, which is not installed (%s); compaction uses the "
            "extractive summary. Install it with `hermes memory setup chronicle`",
            "pydantic-ai-slim",
            exc,
        )
        return ExtractiveWriter()


def _writer_from_config(
    config: Config, store: SQLiteEventStore, types: EventTypeRegistry
) -> SectionWriter:
    context = config.settings.context
    kind = context.summarizer
    timeout = context.summarizer_timeout_seconds or 30.0
    if kind == "auxiliary":
        return ModelWriter(
            lambda: auxiliary_model(timeout), store, types, timeout=timeout + 5, name="auxiliary"
        )
    if kind == "endpoint":
        base_url = context.summarizer_base_url
        model_name = context.summarizer_model
        env = context.summarizer_api_key_env
        allow = context.summarizer_allow_remote
        proxy = config.settings.egress.allow_env_proxy
        try:
            endpoint_model(base_url, model_name, api_key=None, timeout=timeout, allow_remote=allow)
        except UsageError as exc:
            log.warning("%s; compaction uses the extractive summary", exc)
            return ExtractiveWriter()
        return ModelWriter(
            lambda: endpoint_model(
                base_url,
                model_name,
                api_key=os.environ.get(env) if env else None,
                timeout=timeout,
                allow_remote=allow,
                allow_env_proxy=proxy,
            ),
            store,
            types,
            timeout=timeout + 5,
            name="endpoint",
        )
    return ExtractiveWriter()  # "extractive" (an unknown name fell back to it, with a warning)
