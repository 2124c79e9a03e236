"""`chronicle demo` end to end: the scripted chat through the real adapters, offline."""

from __future__ import annotations

import json
import os
from pathlib import Path

from chronicle_engine.cli import Exit, main


def test_demo_compacts_hands_off_finds_and_expands_byte_for_byte(capsys, tmp_path: Path):
    home_before = os.environ.get("HERMES_HOME")
    code = main(["demo", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == Exit.OK
    assert len(data["compactions"]) >= 2
    assert all(c["tokens_after"] < c["tokens_before"] for c in data["compactions"])
    assert data["handoff"].startswith("[CONTEXT COMPACTION — REFERENCE ONLY]")
    assert any(s["id"] in data["handoff"] for s in data["sections"])
    assert data["search"]["found"]
    assert data["expand"]["identical"] and data["expand"]["messages"] > 0
    assert data["needle_prefetched_turns"]
    # The demo used a throwaway HERMES_HOME and put the caller's back.
    assert os.environ.get("HERMES_HOME") == home_before
    assert not (Path(home_before or "") / "chronicle").exists()


def test_demo_draws_for_a_person(capsys):
    assert main(["demo"]) == Exit.OK
    out = capsys.readouterr().out
    for part in (
        "Compactions",
        "the handoff the model sees now",
        "Chronicle sections",
        "search",
        "expand",
    ):
        assert part in out
    assert "byte for byte identical" in out
