"""A tiny OpenAI-compatible chat-completions server on 127.0.0.1, scripted per test.

Invariant: it answers only on the loopback interface, records every request body it received (in
order, parsed JSON) before answering, and never blocks longer than one scripted reply takes. A
test scripts it with `Reply` objects (text, tool calls, usage) or with a function of the request;
when the script runs out it answers with plain text, so a runaway agent loop ends instead of
hanging.

It speaks both shapes Hermes uses: a whole JSON response, and server-sent events when the request
says `"stream": true` (the usage chunk included when `stream_options.include_usage` asks for it).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Reply", "ToolCall", "StubModel", "estimate_tokens"]


def estimate_tokens(body: dict[str, Any]) -> int:
    """A prompt size the way a real server would report it: about four characters a token."""
    text = json.dumps(body.get("messages", []), ensure_ascii=False)
    tools = json.dumps(body.get("tools", []), ensure_ascii=False)
    return (len(text) + len(tools)) // 4


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class Reply:
    """One scripted model answer: text, tool calls, or both."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int | None = None  # None: estimated from the request


Script = Callable[[dict[str, Any], int], Reply]


@dataclass
class StubModel:
    """The server and its record. Use as a context manager; `base_url` ends in /v1."""

    model: str = "stub-model"
    replies: list[Reply | Script] = field(default_factory=list, repr=False)
    default: Reply = field(default_factory=lambda: Reply(text="(stub: script exhausted)"))
    requests: list[dict[str, Any]] = field(default_factory=list, repr=False)
    paths: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting ---------------------------------------------------------------------------

    def script(self, *replies: Reply | Script) -> None:
        with self._lock:
            self.replies.extend(replies)

    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r, p in zip(self.requests, self.paths, strict=True) if "chat" in p]

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.paths.append("/v1/chat/completions")
            index = len(self.requests) - 1
            step = self.replies.pop(0) if self.replies else self.default
        return step(body, index) if callable(step) else step

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the stub first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> StubModel:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_GET(self) -> None:  # noqa: N802
                with stub._lock:
                    stub.requests.append({})
                    stub.paths.append(self.path)
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [_model_card(stub.model)]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "body is not JSON"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    with stub._lock:
                        stub.requests.append(body)
                        stub.paths.append(self.path)
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                reply = stub._next(body)
                prompt = reply.prompt_tokens
                if prompt is None:
                    prompt = estimate_tokens(body)
                completion = max(1, len(reply.text) // 4)
                usage = {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                }
                calls = [
                    {
                        "id": c.id or f"call_{next(stub._ids)}",
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for c in reply.tool_calls
                ]
                if body.get("stream"):
                    self._stream(reply, calls, usage, body)
                else:
                    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
                    if calls:
                        message["tool_calls"] = calls
                    self._json(
                        200,
                        {
                            "id": f"chatcmpl-{next(stub._ids)}",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": stub.model,
                            "choices": [
                                {
                                    "index": 0,
                                    "message": message,
                                    "finish_reason": "tool_calls" if calls else "stop",
                                }
                            ],
                            "usage": usage,
                        },
                    )

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(
                self,
                reply: Reply,
                calls: list[dict[str, Any]],
                usage: dict[str, int],
                body: dict[str, Any],
            ) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                ident = f"chatcmpl-{next(stub._ids)}"
                created = int(time.time())

                def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
                    payload = {
                        "id": ident,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": stub.model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                        **extra,
                    }
                    self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())

                chunk({"role": "assistant", "content": ""})
                if reply.text:
                    chunk({"content": reply.text})
                for index, call in enumerate(calls):
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": call["id"],
                                    "type": "function",
                                    "function": call["function"],
                                }
                            ]
                        }
                    )
                chunk({}, "tool_calls" if calls else "stop")
                if (body.get("stream_options") or {}).get("include_usage"):
                    payload = {
                        "id": ident,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": stub.model,
                        "choices": [],
                        "usage": usage,
                    }
                    self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="stub-model", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _model_card(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "stub"}
