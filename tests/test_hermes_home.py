"""Chronicle finds the Hermes home the way Hermes does, profile overrides included.

A multiplexed gateway serves several profiles from one process: for each profile's turn it sets
a context-local override of `hermes_constants.get_hermes_home()` and leaves HERMES_HOME as it is.
The context engine opens its store when the host first gives it a model, before
`on_session_start` names a home, so a plugin that read only the environment would open the
default profile's store for every profile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import yaml
from hermes_constants import reset_hermes_home_override, set_hermes_home_override
from test_compaction_support import slots

from chronicle_engine.config import default_db_path, load_hermes_config
from chronicle_engine.core import ChronicleCore


@contextlib.contextmanager
def profile(home: Path) -> Iterator[None]:
    """A profile's turn as the gateway scopes it (`_profile_runtime_scope`)."""
    token = set_hermes_home_override(str(home))
    try:
        yield
    finally:
        reset_hermes_home_override(token)


def test_the_home_is_the_profiles_while_the_gateway_scopes_one(tmp_path: Path) -> None:
    work = tmp_path / "profiles" / "work"
    work.mkdir(parents=True)
    (work / "config.yaml").write_text(
        yaml.safe_dump({"chronicle": {"recall": {"search_limit": 7}}})
    )
    default = default_db_path()  # HERMES_HOME (the test's own, see conftest)
    with profile(work):
        assert default_db_path() == work / "chronicle" / "chronicle.db"
        assert load_hermes_config().settings.recall.search_limit == 7
    assert default_db_path() == default != work / "chronicle" / "chronicle.db"


def test_both_slots_of_a_profile_write_to_that_profiles_store(tmp_path: Path) -> None:
    work = tmp_path / "profiles" / "work"
    work.mkdir(parents=True)
    with profile(work):
        engine, provider = slots()
        # Hermes' order: the engine is given its model before any session names a home.
        engine.update_model(model="m", context_length=64_000)
        engine.on_session_start("w1", hermes_home=str(work), platform="cli")
        provider.initialize("w1", hermes_home=str(work), platform="cli")
        messages = [
            {"role": "user", "content": "keep the work profile's notes apart"},
            {"role": "assistant", "content": "they stay in its own store"},
        ]
        provider.sync_turn(messages[0]["content"], messages[1]["content"], messages=messages)
        expected = str((work / "chronicle" / "chronicle.db").resolve())
        assert engine.core.db_path == expected
        assert provider.core.db_path == expected
        assert engine.core is provider.core
        assert engine.core.store.count() > 0
        provider.shutdown()
    ChronicleCore.get(expected).shutdown()
    assert not default_db_path().exists()  # the default profile's store was never opened
