"""Chronicle installs into a real Hermes the way a user installs it, and Hermes loads it."""

from __future__ import annotations

import json

import yaml

from .harness import HermesHome
from .stub_server import Reply, StubModel


def test_installer_clones_enables_and_hermes_loads_the_clone(hermes: HermesHome, stub: StubModel):
    manifest = yaml.safe_load((hermes.plugin_dir / "plugin.yaml").read_text(encoding="utf-8"))
    assert manifest["kind"] == "standalone"
    config = yaml.safe_load((hermes.home / "config.yaml").read_text(encoding="utf-8"))
    assert "chronicle" in config["plugins"]["enabled"]

    stub.script(Reply(text="hello from the stub"))
    turn = hermes.chat("hi")
    assert "hello from the stub" in turn.stdout
    (request,) = stub.chat_requests()
    assert request["messages"][-1]["content"].endswith("hi")

    log = hermes.log_text()
    assert "Failed to load plugin 'chronicle'" not in log
    # The engine Hermes ran is the installed clone's own copy, not this checkout's.
    assert list((hermes.plugin_dir / "chronicle_engine").glob("__pycache__/__init__.*.pyc"))


def test_hermes_chronicle_subcommand_reaches_the_cli(hermes: HermesHome):
    result = hermes.hermes("chronicle", "doctor", "--json")
    report = json.loads(result.stdout)
    checks = {c["name"]: c["status"] for c in report["checks"]}
    assert checks["memory.provider"] == "ok"
    assert checks["context.engine"] == "ok"
    assert checks["plugins.enabled"] == "ok"
    assert checks["plugin.yaml kind"] == "ok"
    assert result.returncode in (0, 4), result.stderr
