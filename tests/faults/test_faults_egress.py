"""Egress: the one HTTP client decides locality from the literal host (no DNS), never uses the
environment's proxy for a local endpoint, uses it for a remote one only when allowed, and follows
no redirect. Real listeners on 127.0.0.1 stand for the endpoint, the proxy and a redirect target;
no request here leaves the host (a "remote" endpoint is only ever reached through the local
proxy listener)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from faults_support import both_slots, report

from chronicle_engine.chronicle.writers import ExtractiveWriter, FoldInput, writer_from_config
from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore
from chronicle_engine.egress import (
    EgressFailed,
    endpoint_is_local,
    post_json,
    route,
)
from chronicle_engine.errors import EgressRefused, UsageError
from chronicle_engine.recall.vectors import Embedder

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


class Listener:
    """An HTTP server on 127.0.0.1 that records every request line it gets and answers with
    `answer` (status, headers, JSON body)."""

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.seen: list[str] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                listener.seen.append(self.requestline)
                texts = body.get("input") or []
                payload = json.dumps(
                    {
                        "data": [{"index": i, "embedding": [1.0, 0.5]} for i in range(len(texts))],
                        "choices": [{"message": {"role": "assistant", "content": "from stub"}}],
                    }
                ).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    """A listener named as the proxy in every proxy variable of the environment."""
    listener = Listener()
    for name in PROXY_VARIABLES:
        monkeypatch.setenv(name, listener.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    yield listener
    listener.close()


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every host name resolved while the test runs."""
    seen: list[str] = []
    real = socket.getaddrinfo

    def recording(host: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(host))
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    return seen


def test_a_local_endpoint_never_goes_through_the_environments_proxy(
    endpoint: Listener, proxy: Listener
) -> None:
    answer = post_json(
        endpoint.url + "/v1/embeddings",
        {"model": "m", "input": ["hello"]},
        allow_remote=False,
        allow_env_proxy=True,  # even when proxies are allowed: local traffic stays direct
        timeout=5,
    )
    assert answer["data"][0]["embedding"] == [1.0, 0.5]
    assert endpoint.seen == ["POST /v1/embeddings HTTP/1.1"]
    assert proxy.seen == []


def test_embeddings_and_summaries_reach_a_local_server_directly(
    endpoint: Listener, proxy: Listener, tmp_path: Any
) -> None:
    embedder = Embedder(endpoint.url + "/v1", "m", timeout_s=5)
    assert embedder.embed(["the tide table"]) == [[1.0, 0.5]]
    core = ChronicleCore(tmp_path / "c.db")
    try:
        config = Config(
            {"context": {"summarizer": "endpoint", "summarizer_base_url": endpoint.url + "/v1"}}
        )
        writer = writer_from_config(config, core.store, core.types)
        assert writer.name == "endpoint"
        messages = [{"role": "user", "content": "rotate the key of host db-1"}]
        drawn = writer.summarize(FoldInput(messages, "1-1", None, 2000))
        assert drawn.prose == "from stub" and not drawn.fell_back
    finally:
        core.shutdown()
    assert endpoint.seen == [
        "POST /v1/embeddings HTTP/1.1",
        "POST /v1/chat/completions HTTP/1.1",
    ]
    assert proxy.seen == []


def test_a_remote_endpoint_uses_the_environments_proxy_only_when_allowed(
    proxy: Listener,
) -> None:
    remote = "http://203.0.113.9/v1/embeddings"  # documentation range: only the proxy is contacted
    assert route(remote, allow_remote=True).proxy is None
    assert route(remote, allow_remote=True, allow_env_proxy=True).proxy == proxy.url
    answer = post_json(remote, {"input": ["x"]}, allow_remote=True, allow_env_proxy=True, timeout=5)
    assert answer["data"][0]["embedding"] == [1.0, 0.5]
    assert proxy.seen == [f"POST {remote} HTTP/1.1"]  # a proxy request names the full URL
    with pytest.raises(EgressRefused, match="allow_remote"):
        post_json(remote, {}, allow_remote=False, allow_env_proxy=True, timeout=5)
    assert len(proxy.seen) == 1


def test_a_redirect_is_not_followed(endpoint: Listener, proxy: Listener) -> None:
    bouncer = Listener(status=307, headers={"Location": endpoint.url + "/v1/elsewhere"})
    try:
        with pytest.raises(EgressFailed, match="redirects are not followed"):
            post_json(bouncer.url + "/v1/embeddings", {}, allow_remote=False, timeout=5)
        embedder = Embedder(bouncer.url + "/v1", "m", timeout_s=5)
        assert embedder.embed(["x"]) is None  # vectors off, nothing raised
    finally:
        bouncer.close()
    assert len(bouncer.seen) == 2
    assert endpoint.seen == [] and proxy.seen == []


def test_a_refused_endpoint_is_never_resolved(lookups: list[str], tmp_path: Any) -> None:
    for url in ("http://embeddings.example.com/v1", "https://gpu-box.lan:8080/v1"):
        assert endpoint_is_local(url) is False
        with pytest.raises(EgressRefused):
            route(url, allow_remote=False)
        assert Embedder(url, "m").embed(["memory text"]) is None
    core = ChronicleCore(tmp_path / "c.db")
    try:
        config = Config(
            {
                "context": {
                    "summarizer": "endpoint",
                    "summarizer_base_url": "https://summaries.example.com/v1",
                }
            }
        )
        assert isinstance(writer_from_config(config, core.store, core.types), ExtractiveWriter)
    finally:
        core.shutdown()
    assert lookups == []


def test_a_refusal_is_a_usage_error_naming_the_setting_to_change() -> None:
    with pytest.raises(UsageError, match="chronicle.recall.embeddings.allow_remote"):
        route("http://8.8.8.8/v1", allow_remote=False, setting="recall.embeddings.allow_remote")
    with pytest.raises(EgressRefused, match="not an http"):
        route("file:///etc/passwd", allow_remote=True)
    assert isinstance(EgressRefused("x"), PermissionError)


def test_with_a_proxy_in_the_environment_the_plugin_sends_nothing_through_it(
    endpoint: Listener, proxy: Listener, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both slots, as Hermes drives them, with HTTPS_PROXY/HTTP_PROXY (and the rest) naming a
    proxy and a summariser and an embedding server on this host: every request goes straight to
    the local server, none through the proxy, even with proxies allowed for remote endpoints."""
    local = endpoint.url + "/v1"
    config = {
        "compression": {"protect_first_n": 1, "protect_last_n": 2},
        "chronicle": {
            "context": {"summarizer": "endpoint", "summarizer_base_url": local},
            "recall": {"embeddings": {"url": local, "model": "m"}},
            "egress": {"allow_env_proxy": True},
        },
    }
    home = tmp_path / "home"
    provider, engine = both_slots(home, config, monkeypatch, user_id="alice")
    live: list[dict[str, Any]] = []
    for n in range(14):
        live += [
            {"role": "user", "content": f"step {n} of the harbour rota " + "x" * 1500},
            {"role": "assistant", "content": f"done step {n} of the rota " + "y" * 1500},
        ]
        provider.sync_turn("", "", session_id="s1", messages=live)
    provider.prefetch("what is on the harbour rota?")
    core = ChronicleCore.get(home / "chronicle" / "chronicle.db")
    embedded = core.recall.embed_pending(limit=8)
    out = engine.compress(list(live), current_tokens=60_000, force=True)
    assert out != live
    provider.shutdown()
    kinds = {line.split()[1] for line in endpoint.seen}
    assert {"/v1/chat/completions", "/v1/embeddings"} <= kinds, endpoint.seen
    assert embedded > 0
    assert proxy.seen == []
    report(
        "egress with a proxy in the environment",
        requests_to_local_endpoint=len(endpoint.seen),
        through_proxy=len(proxy.seen),
    )
