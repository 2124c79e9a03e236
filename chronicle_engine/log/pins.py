"""Pinned model calls: every draw is keyed on its whole request and can be replayed word for word.

- `PinnedModel` wraps any pydantic-ai model. It keys each request on everything that shapes the
  answer (messages with the prompt, settings, tool definitions; never run ids or timestamps), asks
  a resolver for the response and reports the key through `on_key`.
- `PinLedger` is the live resolver: it answers from pins already in the log or recorded this run,
  otherwise draws from the model and records the answer; `commit()` appends the new pins to the
  log as bookkeeping events (`PinPromoted`).
- `ReplayPins` answers only from the log and raises `PinMiss` rather than reach a model.

This is the one module of the log that imports pydantic-ai; the pin event itself lives in
`bookkeeping.py`, so nothing that only reads the log loads a model library.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from ..errors import PinMiss
from .bookkeeping import BOOKKEEPING_NAMESPACE, PinPromoted, register_builtin_events
from .events import EventTypeRegistry
from .store import SQLiteEventStore, StoredEvent

__all__ = ["PinResolver", "PinnedModel", "PinLedger", "ReplayPins", "request_key"]

_KEY_PREFIX = "p1:model_call:"
# Fields that differ between two runs of the same request; they must not reach the key.
_VOLATILE = frozenset(
    {"timestamp", "run_id", "conversation_id", "provider_response_id", "metadata", "state"}
)

Draw = Callable[[], Awaitable[ModelResponse]]


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def request_key(
    messages: list[ModelMessage],
    model_settings: ModelSettings | None,
    parameters: ModelRequestParameters,
) -> str:
    """A key over the whole request: prompt, history, settings and tools."""
    request = {
        "messages": _strip(ModelMessagesTypeAdapter.dump_python(messages, mode="json")),
        "settings": _strip(dict(model_settings or {})),
        "tools": [_strip(_dump(t)) for t in (*parameters.function_tools, *parameters.output_tools)],
        "allow_text_output": getattr(parameters, "allow_text_output", True),
    }
    blob = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return _KEY_PREFIX + hashlib.sha256(blob.encode()).hexdigest()


def _dump(tool: object) -> object:
    from dataclasses import asdict, is_dataclass

    if is_dataclass(tool) and not isinstance(tool, type):
        return asdict(tool)
    return repr(tool)


def encode_response(response: ModelResponse) -> str:
    return ModelMessagesTypeAdapter.dump_json([response]).decode()


def decode_response(text: str) -> ModelResponse:
    (message,) = ModelMessagesTypeAdapter.validate_json(text)
    assert isinstance(message, ModelResponse)
    return message


class PinResolver(Protocol):
    async def resolve(self, key: str, draw: Draw) -> ModelResponse: ...


class PinnedModel(WrapperModel):
    """A model whose every request is answered through a resolver, keyed on the request."""

    def __init__(
        self,
        wrapped: Model[object],  # bare `Model` means Model[Any]: its client type defaults to Any
        resolver: PinResolver,
        *,
        on_key: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(wrapped)
        self.resolver = resolver
        self.on_key = on_key

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        key = request_key(messages, model_settings, model_request_parameters)
        if self.on_key is not None:
            self.on_key(key)

        async def draw() -> ModelResponse:
            return await self.wrapped.request(messages, model_settings, model_request_parameters)

        return await self.resolver.resolve(key, draw)


class ReplayPins:
    """Answers from pins committed to the log; never reaches a model."""

    def __init__(self, pins: dict[str, str]) -> None:
        self._pins = pins

    @classmethod
    def from_events(
        cls, events: Iterable[StoredEvent], types: EventTypeRegistry | None = None
    ) -> ReplayPins:
        pins: dict[str, str] = {}
        for event in events:
            env = event.envelope
            if env.namespace == BOOKKEEPING_NAMESPACE and env.type == "PinPromoted":
                key, response = event.payload["key"], event.payload["response"]
                if isinstance(key, str) and isinstance(response, str):
                    pins.setdefault(key, response)
        return cls(pins)

    def __contains__(self, key: str) -> bool:
        return key in self._pins

    async def resolve(self, key: str, draw: Draw) -> ModelResponse:
        try:
            return decode_response(self._pins[key])
        except KeyError:
            raise PinMiss(
                f"the log has no pin {key}: the request changed since it was recorded "
                "(usually a prompt that renders seq, ids or timestamps); render payload fields only"
            ) from None


class PinLedger:
    """The live resolver: pins from the log first, then a draw that is recorded for `commit()`."""

    def __init__(self, store: SQLiteEventStore, types: EventTypeRegistry) -> None:
        self.store = store
        self.types = types
        if not types.knows(BOOKKEEPING_NAMESPACE, "PinPromoted"):
            register_builtin_events(types)
        self._lock = threading.Lock()
        self._recorded: dict[str, str] = {}
        self._committed: dict[str, str] | None = None
        self._committed_through = 0
        self.live_draws = 0

    def _refresh_committed(self) -> dict[str, str]:
        committed = self._committed if self._committed is not None else {}
        for event in self.store.read(
            after=self._committed_through, namespaces=[BOOKKEEPING_NAMESPACE]
        ):
            key, response = event.payload["key"], event.payload["response"]
            if isinstance(key, str) and isinstance(response, str):
                committed.setdefault(key, response)
            self._committed_through = event.seq
        self._committed = committed
        return committed

    def lookup(self, key: str) -> str | None:
        with self._lock:
            if key in self._recorded:
                return self._recorded[key]
            return self._refresh_committed().get(key)

    async def resolve(self, key: str, draw: Draw) -> ModelResponse:
        known = self.lookup(key)
        if known is not None:
            return decode_response(known)
        response = await draw()
        with self._lock:
            self._recorded.setdefault(key, encode_response(response))
            self.live_draws += 1
        return response

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._recorded)

    def discard(self, keys: Iterable[str]) -> None:
        """Forget pins recorded for `keys` and not committed yet (a draw its caller rejected)."""
        with self._lock:
            for key in keys:
                self._recorded.pop(key, None)

    def commit(self) -> int:
        """Append every pin recorded since the last commit to the log, in one transaction."""
        with self._lock:
            recorded = dict(self._recorded)
        if not recorded:
            return 0
        committed = self._refresh_committed()
        fresh = [
            self.types.pending(PinPromoted(key=key, response=response))
            for key, response in recorded.items()
            if key not in committed
        ]
        self.store.append(fresh)
        with self._lock:
            for key in recorded:
                self._recorded.pop(key, None)
        self._refresh_committed()
        return len(fresh)
