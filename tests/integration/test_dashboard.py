"""Chronicle's tab in Hermes' own dashboard, in a real browser.

`hermes dashboard` runs on 127.0.0.1 with Chronicle installed by Hermes' installer and a
database the demo filled; headless Chromium (Debian's `chromium`, driven by playwright through
its executable path, never a downloaded browser) opens the Chronicle tab. What the page shows
is checked against the database, and a screenshot is saved (set CHRONICLE_SCREENSHOT=PATH to
keep it; docs/dashboard.png is one). Without the browser it fails: .ci/run installs it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from chronicle_engine.cli import main
from chronicle_engine.core import ChronicleCore

from .harness import BOOT, HermesHome

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
START_TIMEOUT_S = 120
UI_TIMEOUT_MS = 60_000


def _require_browser() -> None:
    """Fail (never skip) without the browser: .ci/run installs both, and a developer gets the
    command that does."""
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append('playwright (pip install -e ".[dev]")')
    if missing:
        pytest.fail("the dashboard test needs " + " and ".join(missing) + "; .ci/run installs both")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dashboard(hermes: HermesHome, capsys: pytest.CaptureFixture[str]) -> Iterator[str]:
    _require_browser()
    assert main(["demo", "--db", str(hermes.db_path)]) == 0  # a database with compactions
    capsys.readouterr()
    port = _free_port()
    log = (hermes.root / "dashboard.log").open("w")
    proc = subprocess.Popen(
        [
            hermes.python,
            str(BOOT),
            "dashboard",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-open",
            "--skip-build",
        ],
        env=hermes.env(),
        cwd=str(hermes.root),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(base + "/", timeout=5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    text = (hermes.root / "dashboard.log").read_text(errors="replace")
                    raise AssertionError(
                        f"hermes dashboard did not start:\n{text[-4000:]}"
                    ) from None
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        log.close()


def test_chronicle_tab_shows_the_database(
    dashboard: str, hermes: HermesHome, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    # Behind Hermes' dashboard auth: no session token, no data.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(dashboard + "/api/plugins/chronicle/overview", timeout=10)
    assert refused.value.code == 401

    core = ChronicleCore.get(hermes.db_path)
    try:
        latest = core.store.read(namespaces=["chronicle.chat"])
        sessions = sorted({e.envelope.session for e in latest if e.envelope.session})
        session = sessions[-1]
        name = core.sessions.chronicle_name(session)
        current = core.chronicle(name).current()
        first = current[0]
        originals = core.sessions.message_events(
            session, first.anchor.from_seq, first.anchor.to_seq
        )
        compactions = [
            e
            for e in core.store.read(namespaces=["chronicle.session"])
            if e.envelope.type == "CompactionRecorded"
        ]
        needle = next(
            e.seq
            for e in core.store.read(namespaces=["chronicle.chat"])
            if "kv/heron/staging" in str(e.payload.get("text"))
            and e.payload["message"]["role"] == "user"
        )
        events = core.store.count()
        schedules = core.scheduler.maintenance_status()["schedules"]
    finally:
        core.shutdown()

    shot = tmp_path / "chronicle-dashboard.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            failed: list[str] = []
            page.on(
                "response",
                lambda r: (
                    failed.append(f"{r.status} {r.url}")
                    if "/api/plugins/chronicle/" in r.url and r.status >= 400
                    else None
                ),
            )
            page.goto(dashboard + "/chronicle", timeout=UI_TIMEOUT_MS)
            page.wait_for_selector("[data-testid=chronicle-token-chart]", timeout=UI_TIMEOUT_MS)

            stats = page.inner_text("[data-testid=chronicle-stats]")
            shown = "$HERMES_HOME/" + str(hermes.db_path.relative_to(hermes.home))
            assert f"{events} events" in stats and shown in stats
            listed = page.locator("[data-testid=chronicle-conversations] [data-session]")
            assert listed.count() == 1  # the demo's three sessions are one conversation
            assert listed.first.get_attribute("data-session") == session

            marks = page.locator("[data-testid=chronicle-token-chart] .chr-compaction-mark")
            assert marks.count() == len(compactions) >= 2
            timeline = page.locator("[data-testid=chronicle-timeline] [data-kind=compaction]")
            assert timeline.count() == len(compactions)

            shown = page.locator("[data-testid=chronicle-sections] [data-section]")
            assert [shown.nth(i).get_attribute("data-section") for i in range(shown.count())] == [
                s.anchor.section_id for s in current
            ]
            assert (
                f"cites seq {first.anchor.from_seq}..{first.anchor.to_seq}"
                in shown.first.inner_text()
            )
            page.click(f"[data-expand='{first.anchor.section_id}']")
            rows = page.locator(f"[data-originals='{first.anchor.section_id}'] li")
            rows.first.wait_for(timeout=UI_TIMEOUT_MS)
            assert rows.count() == len(originals)
            assert rows.first.get_attribute("data-seq") == str(originals[0].seq)

            page.fill("input[name=q]", "vault path staging")
            page.click("form.chr-search button[type=submit]")
            hits = page.locator("[data-testid=chronicle-hits] li")
            hits.first.wait_for(timeout=UI_TIMEOUT_MS)
            assert hits.first.get_attribute("data-seq") == str(needle)

            tasks = page.locator("[data-testid=chronicle-maintenance] tr[data-task]")
            assert tasks.count() == len(schedules)
            assert "maintenance on" in page.inner_text("[data-testid=chronicle-maintenance]")

            # The dashboard scrolls inside its own pane: show the whole tab from its top.
            page.set_viewport_size({"width": 1400, "height": 2200})
            page.locator("[data-testid=chronicle-page]").evaluate("e => e.scrollIntoView()")
            page.wait_for_timeout(300)
            page.screenshot(path=str(shot))
            assert not failed, failed
        finally:
            browser.close()
    assert shot.stat().st_size > 20_000
    # Read-only: the tab's requests appended nothing and wrote no section.
    core = ChronicleCore.get(hermes.db_path)
    try:
        assert core.store.count() == events
        assert len(core.chronicle(name).current()) == len(current)
    finally:
        core.shutdown()
    keep = os.environ.get("CHRONICLE_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
