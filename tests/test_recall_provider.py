"""Recall through the memory-provider slot, as Hermes drives it: the slot says whose memory a
call reads, so a gateway user's first turn (nothing captured yet for that session) never sees
another user's memory, and a scheduled job's turn gets no per-turn memory. On each store: the
Hermes home's config.yaml names it (`test_provider.home`)."""

from __future__ import annotations

import json
from pathlib import Path

from test_provider import core_of, home  # noqa: F401 - the Hermes home on each store

from provider import ChronicleMemoryProvider


def _turn(provider: ChronicleMemoryProvider, session: str, user: str, reply: str) -> None:
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    provider.sync_turn(user, reply, session_id=session, messages=messages)


def test_gateway_users_first_turn_sees_only_their_own_memory(home: Path) -> None:  # noqa: F811
    local = ChronicleMemoryProvider()
    local.initialize("cli-1", hermes_home=str(home), platform="cli")
    _turn(local, "cli-1", "My locker code at the gym is on the blue card in the drawer.", "Noted.")
    gateway = ChronicleMemoryProvider()
    gateway.initialize("tg-1", hermes_home=str(home), platform="telegram", user_id="u-7")
    try:
        question = "where is the blue card with my gym locker code?"
        assert gateway.prefetch(question) == ""
        found = json.loads(gateway.handle_tool_call("chronicle_search", {"query": "gym locker"}))
        assert found["count"] == 0
        answer = json.loads(gateway.handle_tool_call("chronicle_answer", {"question": question}))
        assert answer["abstain"] is True
        # the local user still finds it, from a new session with nothing captured yet
        other = ChronicleMemoryProvider()
        other.initialize("cli-2", hermes_home=str(home), platform="cli")
        assert "blue card" in other.prefetch(question)
        assert (
            json.loads(other.handle_tool_call("chronicle_search", {"query": "gym locker"}))["count"]
            >= 1
        )
        other.shutdown()
        # and the gateway user's own words come back to them
        _turn(gateway, "tg-1", "My gym locker is number 42 near the sauna.", "Got it.")
        gateway.on_session_switch("tg-2", parent_session_id="", reset=True)
        block = gateway.prefetch("which gym locker number is mine near the sauna?")
        assert "42" in block and "blue card" not in block
    finally:
        gateway.shutdown()
        local.shutdown()


def test_a_cron_turn_gets_no_per_turn_memory(home: Path) -> None:  # noqa: F811
    person = ChronicleMemoryProvider()
    person.initialize("cli-1", hermes_home=str(home), platform="cli")
    _turn(
        person, "cli-1", "The backup disk on the NAS is almost full.", "I will keep an eye on it."
    )
    cron = ChronicleMemoryProvider()
    cron.initialize("cron_7", hermes_home=str(home), platform="cron", agent_context="cron")
    try:
        assert cron.prefetch("check the NAS backup disk usage") == ""
        core = core_of(home)
        assert core.recall.prefetch("check the NAS backup disk usage", session_id="chat") != ""
    finally:
        cron.shutdown()
        person.shutdown()


def test_the_system_prompt_says_what_chronicle_is_and_names_the_tools(home: Path) -> None:  # noqa: F811
    provider = ChronicleMemoryProvider()
    provider.initialize("cli-1", hermes_home=str(home), platform="cli")
    try:
        block = provider.system_prompt_block()
        assert "long-term memory" in block and "<memory-context>" in block
        names = [schema["name"] for schema in provider.get_tool_schemas()]
        assert names and all(name in block for name in names)
    finally:
        provider.shutdown()


def test_user_ids_differing_only_by_nul_and_replacement_character_keep_apart(
    home: Path,  # noqa: F811
) -> None:
    """`bob\\x00` and `bob\\ufffd` are two users: PostgreSQL's text cannot hold the NUL, and a
    store that kept U+FFFD in its place put both in one recall scope."""
    said = {
        "bob\x00": "My safe combination is hidden under the red teapot.",
        "bob\ufffd": "My bike lock code sits behind the green clock.",
    }
    for n, (user, words) in enumerate(said.items()):
        writer = ChronicleMemoryProvider()
        writer.initialize(f"tg-{n}", hermes_home=str(home), platform="telegram", user_id=user)
        _turn(writer, f"tg-{n}", words, "Noted.")
        writer.shutdown()
    for n, user in enumerate(said):
        # a new session of each user: a first turn, nothing of it captured yet
        reader = ChronicleMemoryProvider()
        reader.initialize(f"tg-{n}-new", hermes_home=str(home), platform="telegram", user_id=user)
        try:
            for query, owner in (
                ("safe combination red teapot", "bob\x00"),
                ("bike lock code green clock", "bob\ufffd"),
            ):
                block = reader.prefetch(f"where is my {query}?")
                hits = json.loads(reader.handle_tool_call("chronicle_search", {"query": query}))
                if user == owner:
                    assert query.split()[-2] in block, (user, block)
                    assert hits["count"] >= 1, (user, hits)
                else:
                    assert query.split()[-2] not in block, (user, block)
                    assert hits["count"] == 0, (user, hits)
        finally:
            reader.shutdown()
