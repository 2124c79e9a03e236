"""Configuration honesty: a declared key is read by shipped code or says why it is dormant, and a
key Chronicle does not know (or no longer has) is never silently ignored."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from chronicle_engine import config as config_module
from chronicle_engine.config import KEYS, ChronicleSettings, Config, Key
from chronicle_engine.config_audit import (
    audit,
    find_reads,
    format_audit,
    main,
    section_names,
    shipped_files,
)
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
        "def f(config, net, tuning, cfg):\n"
        "    config.settings.net.timeout\n"
        "    net.retries\n"
        "    tuning.port\n"
        "    config.settings.db\n"
        "    net.pool.size\n"
        "    cfg.proxy\n"
        "    net.timeout = 3\n"
        "    other.logged\n"
        "    print('net.quoted')\n",
        encoding="utf-8",
    )
    keys = [
        Key(path, None, "doc")
        for path in (
            "db",
            "net.timeout",
            "net.retries",
            "net.port",
            "net.pool.size",
            "net.proxy",
            "net.logged",
            "net.quoted",
        )
    ]
    sections = {
        "": frozenset({"settings"}),
        "net": frozenset({"net", "tuning"}),
        "net.pool": frozenset({"pool"}),
    }
    reads = find_reads([source], keys, sections)
    assert set(reads) == {"db", "net.timeout", "net.retries", "net.port", "net.pool.size"}
    assert reads["net.timeout"].endswith("module.py:2")


def test_the_audit_knows_each_section_by_its_key_and_its_declared_names() -> None:
    names = section_names()
    assert names[""] == {"settings"}
    assert names["recall"] == {"recall", "tuning", "t"}
    assert names["recall.embeddings"] == {"embeddings"}
    assert names["maintenance.schedules"] == {"schedules"}


def test_audit_states_and_report(tmp_path: Path) -> None:
    source = tmp_path / "reader.py"
    source.write_text("def f(config):\n    return config.a.read\n", encoding="utf-8")
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
    assert config.settings.maintenance.enabled is False
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


def test_an_unusable_value_falls_back_to_its_default_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from chronicle_engine.scheduler.settings import read_settings

    caplog.set_level(logging.WARNING, logger="chronicle_engine.config")
    config = Config(
        {
            "queue": {"max_attempts": "many", "shares": {"reaping": -1}},
            "maintenance": {"enabled": "yes", "budget_ms": True},
            "recall": {"search_limit": "7", "role_weights": {"tool": "heavy", "person": 2}},
            "context": {"summarizer": " Endpoint ", "high_watermark_percent": 80},
        }
    )
    settings = read_settings(config.settings)
    assert settings.max_attempts == 5 and settings.shares["reaping"] == 0.2
    assert settings.enabled is True and settings.budget_ms == 5
    recall = config.settings.recall
    assert recall.search_limit == 7  # a number written as text is still that number
    assert recall.role_weights["person"] == 2.0 and recall.role_weights["tool"] == 0.7
    assert config.settings.context.summarizer == "endpoint"
    assert config.settings.context.high_watermark_percent == 0.8
    messages = " ".join(r.getMessage() for r in caplog.records)
    for key in ("queue.max_attempts", "queue.shares.reaping", "maintenance.enabled"):
        assert f"chronicle.{key}" in messages
    assert "chronicle.maintenance.budget_ms" in messages


def test_settings_are_typed_and_read_once() -> None:
    config = Config({"recall": {"embeddings": {"url": "http://127.0.0.1:9/v1"}}})
    assert isinstance(config.settings, ChronicleSettings)
    assert config.settings.recall.embeddings.url == "http://127.0.0.1:9/v1"
    with pytest.raises(ValidationError):
        config.settings.recall.search_limit = 3  # type: ignore[misc]
    assert config.values()["recall.embeddings.url"] == "http://127.0.0.1:9/v1"
    assert set(config.values()) == {k.path for k in KEYS}
