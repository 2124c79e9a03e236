"""Optional vectors: hybrid ranking with a local embedding server, refusal of off-host endpoints,
and full-text recall unchanged when vectors are refused or down. The server is a tiny stub on
127.0.0.1; nothing here leaves the host."""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_recall_support import core_on, open_core, say

from chronicle_engine.egress import endpoint_is_local
from chronicle_engine.recall.vectors import (
    Embedder,
    cosine,
    nearest,
    pack,
    unit,
    unpack,
)

CONCEPTS = [
    {"car", "automobile", "sedan", "vehicle"},
    {"buy", "bought", "purchase", "purchased"},
    {"dog", "puppy", "canine"},
    {"doctor", "physician", "dentist"},
]


def embed(text: str) -> list[float]:
    """Words of one concept land on one axis; other words on hashed axes after them."""
    vec = [0.0] * 16
    for word in re.findall(r"[a-z]+", text.lower()):
        for i, concept in enumerate(CONCEPTS):
            if word in concept:
                vec[i] += 1.0
                break
        else:
            vec[4 + sum(map(ord, word)) % 12] += 0.3
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class _Stub(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        data = [{"index": i, "embedding": embed(t)} for i, t in enumerate(body["input"])]
        payload = json.dumps({"data": data, "model": body.get("model")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub():
    _Stub.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()
    thread.join()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STORES = ["memory", "file", "postgres"]


@pytest.mark.parametrize("kind", STORES)
def test_vectors_find_what_words_miss(stub, tmp_path, kind, request):
    with core_on(
        kind,
        request,
        tmp_path,
        recall__embeddings__url=stub,
        recall__embeddings__model="stub-embed",
    ) as core:
        seq = say(core, "s1", "I finally bought a sedan yesterday")
        say(core, "s1", "The weather was lovely in the park")
        assert core.recall.embed_pending() == 2
        assert core.recall.embed_pending() == 0
        found = core.recall.search("automobile purchase", scope="messages")
        assert [r["id"] for r in found][:1] == [f"m{seq}"]
        assert all(r["model"] == "stub-embed" for r in _Stub.requests)


@pytest.mark.parametrize("kind", STORES)
def test_a_plain_search_keeps_the_full_text_order_and_vectors_fill_what_it_leaves(
    stub, tmp_path, kind, request
):
    """Fused by rank into a plain search, vectors lowered recall@10 on both development sets;
    they only add the nearest messages after the full-text hits, when those are fewer than
    asked for. A search pooled by session fuses them."""
    with core_on(
        kind, request, tmp_path, recall__embeddings__url=stub, recall__embeddings__model="m"
    ) as core:
        worded = [say(core, f"w{i}", f"The tires of the old car, story {i}") for i in range(3)]
        near = [
            say(core, "n1", "A red sedan"),
            say(core, "n2", "An automobile"),
        ]
        core.recall.embed_pending()
        asked = len(_Stub.requests)
        plain = [r["id"] for r in core.recall.search("car", scope="messages", limit=2)]
        assert len(_Stub.requests) == asked  # full text filled the places: nothing embedded
        assert set(plain) <= {f"m{seq}" for seq in worded} and len(plain) == 2, plain
        more = [r["id"] for r in core.recall.search("car", scope="messages", limit=5)]
        assert more[:3] == [f"m{seq}" for seq in reversed(worded)], more
        assert set(more[3:]) == {f"m{seq}" for seq in near}, more
        pooled = core.recall.search("car", scope="messages", limit=5, by_session=True)
        assert {"n1", "n2"} <= {r["session"] for r in pooled}, pooled


@pytest.mark.parametrize("kind", STORES)
def test_vectors_fill_only_the_places_the_whole_search_leaves(stub, tmp_path, kind, request):
    """Scope all: the messages' list is fused with beliefs and sections first; the nearest
    messages come after that ranking, never between its hits."""
    with core_on(
        kind, request, tmp_path, recall__embeddings__url=stub, recall__embeddings__model="m"
    ) as core:
        say(core, "w", "The old car needs new tires")
        for i in range(6):
            core.recall.remember(f"The car note number {i}")
        near = {say(core, f"n{i}", text) for i, text in enumerate(["A red sedan", "My vehicle"])}
        core.recall.embed_pending()

        def found(limit: int, use_vectors: bool = True) -> list[str]:
            return [
                h.id for h in core.recall.index.hits("car", limit=limit, use_vectors=use_vectors)
            ]

        assert found(5) == found(5, use_vectors=False)
        wider = found(9)
        assert wider[:7] == found(9, use_vectors=False), wider
        assert set(wider[7:]) == {f"m{seq}" for seq in near}, wider


def test_a_failed_read_of_the_vectors_leaves_the_ranking_made(stub, tmp_path, caplog):
    """The nearest messages are read in a second read; when the store refuses it (busy,
    gone), the search answers with what its full text found, and says so once."""
    from chronicle_engine.errors import StoreBusy

    core = open_core("file", tmp_path, recall__embeddings__url=stub, recall__embeddings__model="m")
    try:
        worded = say(core, "w", "The old car needs new tires")
        say(core, "n", "A red sedan")
        core.recall.embed_pending()

        def busy(*args: object, **kwargs: object) -> None:
            raise StoreBusy("searching memory: the database stayed locked")

        core.recall.index._nearest = busy  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING):
            for _ in range(2):
                found = core.recall.search("car", scope="messages", limit=5)
                assert [r["id"] for r in found] == [f"m{worded}"]
        assert sum("vectors unread" in r.getMessage() for r in caplog.records) == 1
    finally:
        core.shutdown()


@pytest.mark.parametrize("kind", STORES)
def test_a_new_model_replaces_the_vectors_and_a_forget_drops_them(stub, tmp_path, kind, request):
    """A vector is a cache keyed by what it embeds: embedding again with another model replaces
    it (one row a message), and forgetting the message deletes it."""
    with core_on(
        kind, request, tmp_path, recall__embeddings__url=stub, recall__embeddings__model="one"
    ) as core:
        seq = say(core, "s1", "my puppy chewed the sofa")
        kept = say(core, "s1", "the dentist is on friday")
        assert core.recall.embed_pending() == 2
        assert core.recall.index.embedder is not None
        core.recall.index.embedder.model = "two"
        assert core.recall.embed_pending() == 2
        with core.recall.index.reading("test") as conn:
            rows = conn.execute("SELECT target, model FROM recall_vectors ORDER BY seq").fetchall()
        assert [tuple(r) for r in rows] == [(f"m{seq}", "two"), (f"m{kept}", "two")]
        core.recall.forget(f"m{seq}", session_id="s1")
        with core.recall.index.reading("test") as conn:
            left = conn.execute("SELECT target FROM recall_vectors").fetchall()
        assert [r[0] for r in left] == [f"m{kept}"]
        found = core.recall.search("dog", scope="messages")
        assert f"m{seq}" not in [r["id"] for r in found]


def test_without_a_server_full_text_is_unchanged(tmp_path):
    core = open_core("memory", tmp_path)
    try:
        say(core, "s1", "I finally bought a sedan yesterday")
        assert core.recall.embed_pending() == 0
        assert core.recall.search("automobile purchase", scope="messages") == []
        assert len(core.recall.search("sedan", scope="messages")) == 1
    finally:
        core.shutdown()


@pytest.mark.parametrize("url", ["http://203.0.113.5:8080/v1", "https://api.example.com/v1"])
def test_an_off_host_endpoint_is_refused_with_one_warning(tmp_path, caplog, url):
    core = open_core("memory", tmp_path, recall__embeddings__url=url)
    try:
        seq = say(core, "s1", "the sedan needs new tyres")
        with caplog.at_level(logging.WARNING, logger="chronicle_engine.recall.vectors"):
            for _ in range(3):
                assert [r["id"] for r in core.recall.search("sedan tyres")][:1] == [f"m{seq}"]
            assert core.recall.embed_pending() == 0
        warnings = [r for r in caplog.records if r.name == "chronicle_engine.recall.vectors"]
        assert len(warnings) == 1
        assert "off this host" in warnings[0].getMessage()
    finally:
        core.shutdown()


def test_allow_remote_permits_and_says_so(caplog):
    embedder = Embedder("http://203.0.113.5:8080/v1", "m", allow_remote=True)
    with caplog.at_level(logging.WARNING, logger="chronicle_engine.recall.vectors"):
        assert embedder._permitted() is True
    assert "leaves" in caplog.text or "sent" in caplog.text


def test_a_server_that_is_down_degrades_with_one_warning(tmp_path, caplog):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    core = open_core(
        "memory", tmp_path, recall__embeddings__url=url, recall__embeddings__timeout_s=0.5
    )
    try:
        say(core, "s1", "the dentist appointment is on friday")
        with caplog.at_level(logging.WARNING, logger="chronicle_engine.recall.vectors"):
            for _ in range(3):
                assert len(core.recall.search("dentist friday")) >= 1
            assert core.recall.embed_pending() == 0
        assert len([r for r in caplog.records if r.name == "chronicle_engine.recall.vectors"]) == 1
    finally:
        core.shutdown()


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:1234/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://[::1]:8080/v1", True),
        ("http://10.1.2.3/v1", True),
        ("http://192.168.0.7:8080", True),
        ("http://172.16.5.4", True),
        ("http://169.254.10.1", True),
        ("http://[::ffff:127.0.0.1]:9/v1", True),
        ("http://8.8.8.8/v1", False),
        ("http://203.0.113.5/v1", False),
        ("http://[2001:4860:4860::8888]/v1", False),
        ("not a url", False),
    ],
)
def test_which_endpoints_are_local(url, local):
    assert endpoint_is_local(url) is local


@pytest.mark.parametrize("kind", STORES)
def test_prefetch_gate_asks_the_vectors_about_a_single_shared_word(stub, tmp_path, kind, request):
    with core_on(
        kind, request, tmp_path, recall__embeddings__url=stub, recall__embeddings__model="m"
    ) as core:
        say(core, "old", "my puppy chewed the sofa")
        say(core, "old", "sofa prices went up again")
        core.recall.embed_pending()
        block = core.recall.prefetch("dog sofa", session_id="now")
        assert "puppy" in block  # one shared word, and near in meaning
        assert "prices" not in block  # one shared word, far in meaning


def test_vectors_are_stored_at_unit_length_and_ranked_by_similarity():
    vec = [0.25, -1.5, 3.0]
    assert unpack(pack(vec)) == pytest.approx(unit(vec), rel=1e-6)
    rows = [(1, pack([1.0, 0.0, 0.0])), (2, pack([0.0, 1.0, 0.0])), (3, pack([1.0, 1.0]))]
    assert [key for _, key in nearest([0.9, 0.1, 0.0], rows, 5)] == [1, 2]
    assert cosine(vec, vec) == pytest.approx(1.0)
    assert cosine([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert cosine([], []) == 0.0


@pytest.mark.parametrize("kind", STORES)
def test_a_forget_while_its_message_is_embedded_leaves_no_vector(stub, tmp_path, kind, request):
    """The rows are read, embedded with no transaction open, then written: a forget folded in
    between is seen when they are written, and its message's vector does not stay."""
    with core_on(
        kind, request, tmp_path, recall__embeddings__url=stub, recall__embeddings__model="m"
    ) as core:
        gone = say(core, "s1", "my puppy chewed the sofa")
        kept = say(core, "s1", "the dentist is on friday")
        embedder = core.recall.index.embedder
        assert embedder is not None
        real = embedder.embed

        def embed_then_forget(texts, **kwargs):
            vectors = real(texts, **kwargs)
            core.recall.forget(f"m{gone}", session_id="s1")
            core.recall.catch_up()  # the forget folded before the vectors are written
            return vectors

        embedder.embed = embed_then_forget  # type: ignore[method-assign]
        assert core.recall.embed_pending() == 2
        with core.recall.index.reading("test") as conn:
            left = [r[0] for r in conn.execute("SELECT target FROM recall_vectors")]
        assert left == [f"m{kept}"]


@pytest.mark.parametrize("kind", STORES)
def test_a_vector_under_a_stale_scope_number_never_shows_another_users_message(
    stub, tmp_path, kind, request
):
    """A vector is written from a read made before it is embedded; a rebuild in between may
    number the scopes again (PostgreSQL), so the vector can carry another scope's number. The
    search reads each nearest message within its own scope (review finding on 9ae9d90)."""
    with core_on(
        kind, request, tmp_path, recall__embeddings__url=stub, recall__embeddings__model="m"
    ) as core:
        anns = say(core, "a1", "The weather was lovely in the park", user_id="ann")
        bobs = say(core, "b1", "I bought a sedan for my commute", user_id="bob")
        assert core.recall.embed_pending() == 2
        with core.recall.index.reading("test") as conn:
            ann = conn.execute(
                "SELECT n FROM recall_scopes WHERE user_id = ?", ("ann",)
            ).fetchone()[0]
        with core.recall.index.writing("a stale scope number") as conn:
            conn.execute("UPDATE recall_vectors SET scope = ? WHERE seq = ?", (ann, bobs))
        for by_session in (False, True):
            found = core.recall.search(
                "automobile", scope="messages", user_id="ann", by_session=by_session
            )
            assert f"m{bobs}" not in [r["id"] for r in found], found
        # bob's own search still finds it by words, and ann's vectors still find her message
        found = core.recall.search("sedan", scope="messages", user_id="bob")
        assert [r["id"] for r in found] == [f"m{bobs}"]
        found = core.recall.search("sunny weather", scope="messages", user_id="ann", limit=5)
        assert [r["id"] for r in found][:1] == [f"m{anns}"], found


@pytest.mark.parametrize("kind", STORES)
def test_a_vector_takes_its_messages_scope_as_it_is_when_written(stub, tmp_path, kind, request):
    """The rows are read, embedded with no transaction open, then written: a rebuild that
    numbers the scopes again in between (PostgreSQL numbers them from its sequence) is seen
    when they are written (review finding on 1185640)."""
    with core_on(
        kind, request, tmp_path, recall__embeddings__url=stub, recall__embeddings__model="m"
    ) as core:
        seq = say(core, "a1", "The weather was lovely in the park", user_id="ann")
        embedder = core.recall.index.embedder
        assert embedder is not None
        real = embedder.embed

        def embed_then_renumber(texts, **kwargs):
            vectors = real(texts, **kwargs)
            # what a rebuild that numbers the scopes again leaves (the row is append-only, so
            # its guard is dropped for this one change)
            on = " ON recall_messages" if kind == "postgres" else ""
            with core.recall.index.writing("a rebuild's new numbers") as conn:
                conn.execute(f"DROP TRIGGER recall_messages_never_update{on}")
                conn.execute("UPDATE recall_messages SET scope = scope + 100 WHERE seq = ?", (seq,))
            return vectors

        embedder.embed = embed_then_renumber  # type: ignore[method-assign]
        assert core.recall.embed_pending() == 1
        with core.recall.index.reading("test") as conn:
            (message,) = conn.execute("SELECT scope FROM recall_messages WHERE seq = ?", (seq,))
            (vector,) = conn.execute("SELECT scope FROM recall_vectors WHERE seq = ?", (seq,))
        assert vector[0] == message[0]
