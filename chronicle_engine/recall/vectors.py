"""Optional vectors from a local OpenAI-compatible embedding server.

Invariants:
- Memory only leaves this host with permission, through the egress client (chronicle_engine/egress.py): an
  endpoint whose literal host is not loopback, private or link-local is refused, unresolved,
  unless `recall.embeddings.allow_remote` is set; no proxy from the environment and no redirect
  is followed unless the settings say so. A refusal,
  an unreachable server or a bad reply turns vectors off with one warning; full-text recall goes
  on unchanged and nothing raises.
- Vectors are a cache beside the log, keyed by what they embed ("m<seq>", "b<seq>.<n>") and the
  model that made them; dropping them loses nothing.
- No request is made while the store's write lock is held: texts are read, embedded with no
  transaction open, then written in one short transaction.
"""

from __future__ import annotations

import heapq
import logging
import math
import operator
import struct
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..config import ChronicleSettings
from ..egress import endpoint_is_local, post_json
from ..errors import EgressRefused

__all__ = [
    "Embedder",
    "pack",
    "unpack",
    "unit",
    "cosine",
    "nearest",
]

log = logging.getLogger("chronicle_engine.recall.vectors")


def unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm else list(vector)


def pack(vector: Sequence[float]) -> bytes:
    """Stored vectors are unit length, so a similarity is one dot product."""
    v = unit(vector)
    return struct.pack(f"<{len(v)}f", *v)


def unpack(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b) or not a:
        return 0.0
    dot = math.fsum(map(operator.mul, a, b))
    na = math.sqrt(math.fsum(map(operator.mul, a, a)))
    nb = math.sqrt(math.fsum(map(operator.mul, b, b)))
    return dot / (na * nb) if na and nb else 0.0


def nearest(
    query: Sequence[float], rows: Iterable[tuple[int, bytes]], k: int
) -> list[tuple[float, int]]:
    """The `k` stored (unit) vectors most similar to `query`, as (similarity, key), best first."""
    q = unit(query)
    dim = len(q)
    scored = []
    for key, blob in rows:
        if len(blob) != 4 * dim:
            continue  # another model's width: not comparable
        scored.append((sum(map(operator.mul, q, struct.unpack(f"<{dim}f", blob))), key))
    return heapq.nlargest(k, scored)


@dataclass
class _State:
    """Whether the embedding endpoint is usable, and when to ask it again."""

    usable: bool | None = None  # None: not decided yet
    warned: bool = False
    retry_at: float = 0.0


class Embedder:
    """A client for `POST {url}/embeddings`. `embed` returns None instead of raising."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        allow_remote: bool = False,
        allow_env_proxy: bool = False,
        timeout_s: float = 1.5,
        retry_after_s: float = 60.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.allow_remote = allow_remote
        self.allow_env_proxy = allow_env_proxy
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self._state = _State()
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: ChronicleSettings) -> Embedder | None:
        embeddings = settings.recall.embeddings
        url = embeddings.url.strip()
        if not url:
            return None
        return cls(
            url,
            embeddings.model,
            allow_remote=embeddings.allow_remote,
            allow_env_proxy=settings.egress.allow_env_proxy,
            timeout_s=embeddings.timeout_s,
        )

    def _warn(self, message: str, *args: object) -> None:
        with self._lock:
            if self._state.warned:
                return
            self._state.warned = True
        log.warning(message, *args)

    def _permitted(self) -> bool:
        if self._state.usable is False and time.monotonic() < self._state.retry_at:
            return False
        if self._state.usable is None:
            local = endpoint_is_local(self.url)
            if not local and not self.allow_remote:
                self._state.usable = False
                self._state.retry_at = math.inf
                self._warn(
                    "chronicle: embedding endpoint %s is off this host and its private network; "
                    "memory is not sent there. Vectors are off and full-text recall is unchanged. "
                    "Set chronicle.recall.embeddings.allow_remote: true only if memory may leave "
                    "this host.",
                    self.url,
                )
                return False
            if not local:
                self._warn(
                    "chronicle: recall.embeddings.allow_remote is set; memory excerpts are sent "
                    "to %s, off this host. The local-first guarantee no longer holds.",
                    self.url,
                )
        return True

    @property
    def available(self) -> bool:
        return self._state.usable is not False or time.monotonic() >= self._state.retry_at

    def embed(
        self, texts: Sequence[str], *, timeout_s: float | None = None
    ) -> list[list[float]] | None:
        """One vector per text, or None when vectors are unavailable (refused, down, malformed)."""
        if not texts or not self._permitted():
            return None
        try:
            data = post_json(
                self.url + "/embeddings",
                {"model": self.model, "input": list(texts)},
                allow_remote=self.allow_remote,
                allow_env_proxy=self.allow_env_proxy,
                setting="recall.embeddings.allow_remote",
                timeout=timeout_s or self.timeout_s,
            )
            vectors = _vectors(data)
            if len(vectors) != len(texts) or not all(vectors):
                raise ValueError(f"expected {len(texts)} embeddings, got {len(vectors)}")
        except (EgressRefused, OSError, ValueError, KeyError, TypeError) as exc:
            self._state.usable = False
            self._state.retry_at = time.monotonic() + self.retry_after_s
            self._warn(
                "chronicle: the embedding server at %s failed (%s); vectors are off for now and "
                "full-text recall is unchanged",
                self.url,
                exc,
            )
            return None
        self._state.usable = True
        return vectors


def _vectors(data: object) -> list[list[float]]:
    """The vectors of an OpenAI-style embeddings answer, in `index` order (ValueError when the
    answer has another shape)."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError("the answer holds no list of embeddings under 'data'")
    vectors: list[list[float]] = []
    for item in sorted(items, key=lambda d: d.get("index", 0)):
        embedding = item.get("embedding")
        if not isinstance(embedding, list):
            raise ValueError("an item of the answer holds no 'embedding' list")
        vectors.append([float(x) for x in embedding])
    return vectors
