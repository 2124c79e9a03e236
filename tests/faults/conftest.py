"""The fault suite's shared fixture: a HERMES_HOME with a private temp directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from faults_support import write_config

from chronicle_engine.core import ChronicleCore


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A HERMES_HOME, and a private temp directory (where the spill goes when the database's
    own directory refuses it), both under the test's tmp_path."""
    import tempfile

    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes_home"))
    (tmp_path / "hermes_home").mkdir()
    write_config(tmp_path / "hermes_home")
    yield tmp_path / "hermes_home"
    for core in ChronicleCore.open_cores():
        if str(tmp_path) in core.db_path:
            core.shutdown()
