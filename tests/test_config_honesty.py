"""Configuration honesty: a declared key is read by shipped code or says why it is dormant, and a
key Chronicle does not know (or no longer has) is never silently ignored."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from chronicle_engine import config as config_module
from chronicle_engine.config import KEYS, Config, Key
from chronicle_engine.config_audit import audit, find_reads, format_audit, main, shipped_files
from chronicle_engine.errors import UsageError


def test_every_declared_key_is_read_or_declared_dormant() -> None:
    rows = audit()
    unread = [r.path for r in rows if r.state == "UNREAD"]
    assert unread == [], (
        f"declared config keys that no shipped code reads: {unread}. Read them where they take "
        "effect, or declare them dormant with a reason (Key(..., dormant='why'))."
    )


def test_no_dormant_declaration_has_gone_stale() -> None:
    stale = [(r.path, r.where) for r in audit() if r.stale]
    assert stale == [], f"keys declared dormant but read by shipped code: {stale}; drop `dormant`"


def test_keys_are_declared_once() -> None:
    paths = [k.path for k in KEYS]
    assert len(paths) == len(set(paths))
    assert all(k.doc for k in KEYS)


def test_the_audit_scans_the_shipped_package() -> None:
    files = {p.name for p in shipped_files()}
    assert {"config.py", "core.py", "settings.py"} <= files
    assert not any("tests" in p.parts for p in shipped_files())


def test_the_audit_recognises_each_read_shape_and_nothing_else(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        "import logging\n"
        "log = logging.getLogger(__name__)\n"
        "RETRIES = 'net.retries'\n"
        "def f(config, cfg, name):\n"
        "    config.get('net.timeout')\n"
        "    cfg['net.proxy']\n"
        "    _read(config, 'net.port', int)\n"
        "    config.get(RETRIES)\n"
        "    config.get(f'pool.{name}.size')\n"
        "    log.warning('net.logged is wrong')\n"
        "    Key('net.declared', 1, 'doc')\n"
        "    label = 'net.assigned'\n"
        "    config.get(f'{name}')\n",
        encoding="utf-8",
    )
    paths = [
        "net.timeout",
        "net.proxy",
        "net.port",
        "net.retries",
        "pool.a.size",
        "pool.b.size",
        "pool.size",
        "net.logged",
        "net.declared",
        "net.assigned",
    ]
    reads = find_reads([source], paths)
    assert set(reads) == {
        "net.timeout",
        "net.proxy",
        "net.port",
        "net.retries",
        "pool.a.size",
        "pool.b.size",
    }
    assert reads["net.timeout"].endswith("module.py:5")


def test_audit_states_and_report(tmp_path: Path) -> None:
    source = tmp_path / "reader.py"
    source.write_text("def f(config):\n    return config.get('a.read')\n", encoding="utf-8")
    keys = (
        Key("a.read", 1, "read"),
        Key("a.later", 2, "not yet", dormant="waits for the embedder"),
        Key("a.forgotten", 3, "nobody reads this"),
        Key("a.read", 1, "read", dormant="stale claim"),
    )
    rows = audit(keys, [source])
    assert [(r.path, r.state, r.stale) for r in rows] == [
        ("a.read", "WIRED", False),
        ("a.later", "DORMANT", False),
        ("a.forgotten", "UNREAD", False),
        ("a.read", "WIRED", True),
    ]
    text = format_audit(rows)
    assert "UNREAD   a.forgotten" in text and "dormant: waits for the embedder" in text
    assert "2 wired, 1 dormant, 1 unread, 1 stale" in text
    assert "a.later" not in format_audit(rows, unread_only=True)


def test_the_audit_command_prints_every_key_and_exits_clean(capsys: pytest.CaptureFixture) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    for key in KEYS:
        assert key.path in out
    assert "0 unread" in out


def test_an_unknown_key_logs_a_warning_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="chronicle_engine.config")
    config = Config({"maintenance": {"enabled": False, "budgett_ms": 9}})
    assert config.unknown == ["maintenance.budgett_ms"]
    assert config.get("maintenance.enabled") is False
    messages = [r.getMessage() for r in caplog.records]
    assert any("chronicle.maintenance.budgett_ms" in m for m in messages)


def test_a_removed_key_warns_and_a_removed_security_key_is_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(
        config_module.REMOVED, "scheduler.interval", ("use maintenance.schedules.*", False)
    )
    monkeypatch.setitem(
        config_module.REMOVED,
        "security.encrypt_at_rest",
        ("Chronicle never encrypted anything at rest; use full-disk encryption", True),
    )
    caplog.set_level(logging.WARNING, logger="chronicle_engine.config")
    Config({"scheduler": {"interval": 5}})
    assert any(
        "chronicle.scheduler.interval was removed: use maintenance.schedules.*" in r.getMessage()
        for r in caplog.records
    )
    with pytest.raises(UsageError, match="security.encrypt_at_rest"):
        Config({"security": {"encrypt_at_rest": True}})


def test_an_unusable_scheduler_value_falls_back_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from chronicle_engine.scheduler.settings import read_settings

    caplog.set_level(logging.WARNING, logger="chronicle_engine.scheduler")
    settings = read_settings(Config({"queue": {"max_attempts": "many", "shares": {"reaping": -1}}}))
    assert settings.max_attempts == 5 and settings.shares["reaping"] == 0.2
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "chronicle.queue.max_attempts" in messages
    assert "chronicle.queue.shares.reaping" in messages
