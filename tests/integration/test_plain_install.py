"""A new user's path: a virtualenv holding only hermes-agent 0.19.0, the README's install steps
run as written (their non-interactive form), then chats that Chronicle captures and compacts.

The other integration tests run Hermes in this project's own virtualenv, where Chronicle's
dependencies are already installed. Here nothing is: the plugin must import and be listed by
`hermes memory setup` before that step has installed pydantic-ai, as a user finds it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from chronicle_engine.core import ChronicleCore

from .harness import REPO_ROOT, HermesHome
from .stub_server import Reply, StubModel

MARKER = "[CONTEXT COMPACTION — REFERENCE ONLY]"
COMPRESSION = {"threshold": 0.75, "target_ratio": 0.25, "protect_first_n": 1, "protect_last_n": 4}
TURN_LIMIT = 8  # bounded: fails rather than chatting on if compaction never fires
VENV_TIMEOUT_S = 900


def readme_install_commands() -> list[str]:
    """The commands of the README's "Install into Hermes" section, in order."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Install into Hermes", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^ {7}(hermes .+?)\s*$", section, flags=re.MULTILINE)


def _python_has(python: Path, module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    # Not from the checkout: there `-c` puts the current directory, which holds chronicle_engine/,
    # on the path.
    return subprocess.run([str(python), "-c", probe], cwd=python.parent, timeout=60).returncode == 0


@pytest.fixture(scope="module")
def plain_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with hermes-agent 0.19.0 and nothing of Chronicle (once per run:
    creating it is the slow part of this module)."""
    venv = tmp_path_factory.mktemp("plain") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "hermes-agent==0.19.0"],
        check=True,
        timeout=VENV_TIMEOUT_S,
    )
    return python


@pytest.fixture
def stub_model() -> Iterator[StubModel]:
    with StubModel() as model:
        yield model


def test_readme_install_steps_into_a_plain_hermes_reach_a_chat_that_compacts(
    plain_python: Path, tmp_path: Path, stub_model: StubModel, plugin_source: Path
) -> None:
    assert not _python_has(plain_python, "pydantic_ai")
    assert not _python_has(plain_python, "chronicle_engine")
    home = HermesHome(tmp_path / "h", stub_model, compression=COMPRESSION, python=str(plain_python))
    home.write_config(select=False)  # a Hermes that has never heard of Chronicle

    commands = readme_install_commands()
    assert [c.split()[:3] for c in commands] == [
        ["hermes", "plugins", "install"],
        ["hermes", "memory", "setup"],
        ["hermes", "config", "set"],
    ], commands
    for command in commands:
        args = command.split()[1:]
        args = [f"file://{plugin_source}" if a.startswith("https://") else a for a in args]
        result = home.hermes(*args, timeout=600)
        assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
        assert "not found" not in result.stdout, f"{command}:\n{result.stdout}"

    # memory setup installed the plugin's dependencies into Hermes' own virtualenv.
    assert _python_has(plain_python, "pydantic_ai")
    config = yaml.safe_load((home.home / "config.yaml").read_text(encoding="utf-8"))
    assert config["memory"]["provider"] == "chronicle"
    assert config["context"]["engine"] == "chronicle"
    assert "chronicle" in config["plugins"]["enabled"]
    doctor = home.hermes("chronicle", "doctor", "--json")
    checks = {c["name"]: c["status"] for c in json.loads(doctor.stdout)["checks"]}
    for name in ("dependencies", "memory.provider", "context.engine", "plugins.enabled"):
        assert checks[name] == "ok", (name, doctor.stdout)

    # Long turns until Chronicle has compacted once and its handoff reached the model.
    stub_model.script(Reply(text="Noted."))
    session = home.chat("Remember: the staging database is called osprey-17.").session_id
    handoffs: list[str] = []
    for turn in range(2, TURN_LIMIT + 1):
        body = " ".join(f"t{turn}w{i % 97}" for i in range(9000))
        stub_model.script(Reply(text=f"Read turn {turn}."))
        session = home.chat(f"Turn {turn} notes: {body}", resume=session).session_id
        handoffs = [
            m["content"]
            for r in stub_model.chat_requests()
            for m in r["messages"]
            if isinstance(m.get("content"), str) and m["content"].startswith(MARKER)
        ]
        if handoffs:
            break
    assert handoffs, f"no compaction in {TURN_LIMIT} turns:\n{home.log_tail()}"
    log = home.log_text()
    assert "Memory provider 'chronicle' activated" in log
    assert "falling back to built-in compressor" not in log

    core = ChronicleCore.get(home.db_path)
    try:
        texts = [
            e.payload["message"].get("content")
            for e in core.store.read(namespaces=["chronicle.chat"])
            if e.envelope.type == "MessageCaptured"
        ]
        assert any("osprey-17" in str(t) for t in texts)
        name = core.sessions.chronicle_name(session)
        assert len(core.chronicle(name)) >= 1
    finally:
        core.shutdown()
