"""`register()` against Hermes' two real loaders, in this process: two module names, one core.

Hermes' general plugin loader imports the plugin as `hermes_plugins.chronicle`; its memory loader
imports the same directory again as `_hermes_user_memory.chronicle` (after executing each sibling
`*.py` on its own). These tests run both on a copy of this checkout in a throwaway HERMES_HOME.
"""

from __future__ import annotations

import copy
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .harness import REPO_ROOT

_PREFIXES = ("hermes_plugins", "_hermes_user_memory")


@pytest.fixture
def plugin_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "hermes_home"
    target = home / "plugins" / "chronicle"
    target.mkdir(parents=True)
    for item in REPO_ROOT.iterdir():
        if item.suffix in (".py", ".yaml") and item.is_file():
            shutil.copy2(item, target / item.name)
    shutil.copytree(
        REPO_ROOT / "chronicle_engine",
        target / "chronicle_engine",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (home / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "memory": {"provider": "chronicle"},
                "context": {"engine": "chronicle"},
                "plugins": {"enabled": ["chronicle"]},
            }
        ),
        encoding="utf-8",
    )
    monkeypatch.setenv("HERMES_HOME", str(home))
    before = set(sys.modules)
    yield target
    for name in set(sys.modules) - before:
        if name.startswith(_PREFIXES):
            del sys.modules[name]


def _general_loader():
    from hermes_cli.plugins import PluginManager

    manager = PluginManager()
    manager.discover_and_load(force=True)
    return manager


def test_general_loader_registers_the_cli_command_under_its_own_module_name(plugin_home: Path):
    manager = _general_loader()
    loaded = manager._plugins["chronicle"]
    assert loaded.enabled and loaded.error is None, loaded.error
    assert loaded.module.__name__ == "hermes_plugins.chronicle"
    command = manager._cli_commands["chronicle"]
    assert command["plugin"] == "chronicle"
    import argparse

    parser = argparse.ArgumentParser(prog="hermes chronicle")
    command["setup_fn"](parser)
    args = parser.parse_args(["status", "--json"])
    assert args.chronicle_command == "status" and args.json


def test_both_loaders_fill_both_slots_and_share_one_core(plugin_home: Path):
    from plugins.memory import _load_provider_from_dir

    from chronicle_engine.core import ChronicleCore

    manager = _general_loader()
    engine = manager._context_engine
    assert engine is not None and engine.name == "chronicle"
    clone = copy.deepcopy(engine)  # what Hermes does for every agent
    assert clone is not engine

    provider = _load_provider_from_dir(plugin_home)
    assert provider is not None and provider.name == "chronicle"
    assert "_hermes_user_memory.chronicle" in sys.modules
    assert "hermes_plugins.chronicle" in sys.modules
    assert (
        sys.modules["_hermes_user_memory.chronicle"] is not sys.modules["hermes_plugins.chronicle"]
    )

    home = str(plugin_home.parent.parent)
    engine.on_session_start("s-loaders", hermes_home=home, platform="cli")
    provider.initialize("s-loaders", hermes_home=home, platform="cli", agent_context="primary")
    cores = ChronicleCore.open_cores()
    assert len([c for c in cores if c.db_path.startswith(home)]) == 1
    for core in cores:
        if core.db_path.startswith(home):
            core.shutdown()
