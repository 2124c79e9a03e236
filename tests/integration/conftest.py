"""Fixtures for the real-Hermes tests: a stub model on 127.0.0.1 and a throwaway HERMES_HOME
with Chronicle installed by Hermes' own installer from a clean clone of this repository."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import HermesHome, clean_clone
from .stub_server import StubModel


@pytest.fixture(scope="session")
def plugin_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's HEAD as a git repository Hermes can clone (once per test run)."""
    return clean_clone(tmp_path_factory.mktemp("source") / "chronicle")


@pytest.fixture
def stub() -> Iterator[StubModel]:
    with StubModel() as model:
        yield model


@pytest.fixture
def hermes(tmp_path: Path, stub: StubModel, plugin_source: Path) -> HermesHome:
    home = HermesHome(tmp_path / "h", stub)
    home.write_config()
    home.install_plugin(plugin_source)
    return home
