"""The handoff's blocks and their stamps (`chronicle/blocks.py`): a section stored clean is shown
without scanning it again, and skipping the scan never shows what masking would have changed."""

from __future__ import annotations

import pytest

from chronicle_engine.capture import secrets
from chronicle_engine.chronicle import blocks
from chronicle_engine.chronicle.blocks import CLEAN_KEY, block_text, masks_to_itself, stamped
from chronicle_engine.chronicle.sections import Consolidation, level_name
from chronicle_engine.chronicle.write import section_from
from chronicle_engine.compaction.handoff import ViewSection, render, render_block

KEY = "sk-proj-" + "Q7x2Lm9Pa4Rt8Vz1Bc6Nd3Fg5Hj0Kw2Ys"


def _section(prose: str, lo: int = 10, hi: int = 20, **meta: object):
    return section_from(lo, hi, Consolidation(prose), meta={"messages": 7, **meta})


def _no_scan(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every scan of the masker a recorded call (and the clean cache forget what it held)."""
    scanned: list[str] = []
    real = secrets.find_secrets

    def counting(text: str):
        scanned.append(text)
        return real(text)

    monkeypatch.setattr(secrets, "find_secrets", counting)
    monkeypatch.setattr(secrets, "_clean", {})
    monkeypatch.setattr(secrets, "_clean_chars", 0)  # (restored with the dict it counts)
    return scanned


def test_a_section_stored_clean_is_shown_without_a_scan(target, monkeypatch):
    store = target.open()
    try:
        chronicle = target.chronicle(store, "conversation:s1")
        assert chronicle.append(_section("Deployed the cache service; retries now back off."))
        shown = chronicle.current()[0]
        assert isinstance(shown.meta.get(CLEAN_KEY), str)
        scanned = _no_scan(monkeypatch)
        view = ViewSection(1, shown)
        text = render_block(view)
        assert scanned == []
        assert text == block_text(shown, 1) == secrets.mask(block_text(shown, 1))
    finally:
        store.close()


def test_a_condensed_level_is_stamped_for_its_own_label(target):
    store = target.open()
    try:
        chronicle = target.chronicle(store, level_name("conversation:s1", 2))
        assert chronicle.append(_section("Three sections on the build.", children_count=3))
        shown = chronicle.current()[0]
        assert masks_to_itself(shown, block_text(shown, 2))
        assert not masks_to_itself(shown, block_text(shown, 1))  # another label, another text
    finally:
        store.close()


def test_a_block_holding_a_credential_is_not_stamped_and_is_masked():
    # The prose is clean; the block also shows the focus the pass was given, which holds one.
    section = _section("The deploy went out after the rotation.", focus="password: hunter2horse")
    assert secrets.mask(section.prose) == section.prose
    assert stamped(section, 1) is section
    text = render_block(ViewSection(1, section))
    assert "hunter2horse" not in text
    assert text == secrets.mask(block_text(section, 1))


def test_a_stamp_is_trusted_only_for_the_text_and_the_masker_that_made_it(monkeypatch):
    section = stamped(_section("The token was rotated last week."), 1)
    assert masks_to_itself(section, block_text(section, 1))
    # The same stamp on other words: the prose, the meta (here its focus), the range.
    other = section_from(10, 20, Consolidation(f"The token {KEY} was rotated."), meta=section.meta)
    assert not masks_to_itself(other, block_text(other, 1))
    assert KEY not in render_block(ViewSection(1, other))
    refocused = section_from(
        10, 20, Consolidation(section.prose), meta={**section.meta, "focus": "api_key ="}
    )
    assert not masks_to_itself(refocused, block_text(refocused, 1))
    # Another masker (a release that knows another shape): nothing it did not stamp is trusted.
    monkeypatch.setattr(blocks, "_masker_key", lambda: b"another masker")
    assert not masks_to_itself(section, block_text(section, 1))
    scanned = _no_scan(monkeypatch)
    render_block(ViewSection(1, section))
    assert scanned != []


def test_without_the_maskers_source_nothing_is_stamped_or_trusted(monkeypatch):
    section = stamped(_section("Nothing secret here."), 1)
    monkeypatch.setattr(blocks, "_masker_key", lambda: None)
    assert not masks_to_itself(section, block_text(section, 1))
    unstamped = _section("Nothing secret here either.")
    assert stamped(unstamped, 1) is unstamped


def test_a_handoff_renders_the_same_with_and_without_stamps():
    clean = [
        _section(f"Step {n}: merged the branch and ran the build.", 10 * n, 10 * n + 9)
        for n in (1, 2, 3)
    ]
    leaky = _section(f"Then pasted {KEY} into the config.", 40, 49)
    views = [ViewSection(1, s) for s in [*clean, leaky]]
    stamped_views = [ViewSection(1, stamped(s, 1)) for s in [*clean, leaky]]
    assert render(views) == render(stamped_views)
    assert KEY not in render(stamped_views)


def test_a_carried_section_is_stamped_again_and_a_forged_stamp_is_dropped(target):
    """A sections file is not trusted: its stamps are made again by this masker on the way in."""
    leaky = _section("The rotation went out.", focus="password: hunter2horse")
    text = block_text(leaky, 1)
    forged = section_from(10, 20, Consolidation(leaky.prose), meta={**leaky.meta})
    forged.meta[CLEAN_KEY] = blocks._digest(text)  # what anyone holding the release can compute
    assert masks_to_itself(forged, text)
    clean = _section("Merged the branch.", 30, 39)
    store = target.open()
    try:
        chronicle = target.chronicle(store, "conversation:carried")
        assert chronicle.load([forged, clean]) == 2
        by_id = {s.anchor.section_id: s for s in chronicle.current()}
        assert CLEAN_KEY not in by_id["10-20"].meta
        assert "hunter2horse" not in render_block(ViewSection(1, by_id["10-20"]))
        assert masks_to_itself(by_id["30-39"], block_text(by_id["30-39"], 1))
    finally:
        store.close()


_STAMP_TWICE = """
import sys
from pathlib import Path
from chronicle_engine.capture import secrets
from chronicle_engine.chronicle.blocks import stamped
from chronicle_engine.chronicle.sections import Consolidation
from chronicle_engine.chronicle.write import section_from
section = section_from(1, 2, Consolidation("Merged the branch."), meta={"messages": 2})
print(stamped(section, 1).meta["clean"])
with open(secrets.__file__, "a", encoding="utf-8") as f:
    f.write("\\n# a release installed over the running process\\n")
print(stamped(section, 1).meta["clean"])
"""


def test_the_maskers_key_is_the_one_it_was_imported_with(tmp_path):
    """A release installed over a running process does not lend its key to the masker that
    process still runs: the key is read when the masker is imported."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import chronicle_engine

    copy = tmp_path / "copy"
    shutil.copytree(
        Path(chronicle_engine.__file__).parent,
        copy / "chronicle_engine",
        ignore=shutil.ignore_patterns("__pycache__"),
    )

    def run() -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", _STAMP_TWICE],
            cwd=copy,
            env={"PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    first, same = run()
    assert first == same  # the file changed under the process; its masker did not
    changed, _ = run()
    assert changed != first  # a process that imports the new release has another key
