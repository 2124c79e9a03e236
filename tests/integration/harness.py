"""A throwaway Hermes installation with Chronicle installed the way a user installs it.

Invariant: everything lives under one temporary HERMES_HOME (and a HOME beside it); Chronicle
arrives through Hermes' own installer (`hermes plugins install file://<clone> --enable`) from a
clean clone of this repository at HEAD; the model is a `StubModel` on 127.0.0.1. Every Hermes
process is bounded by a timeout and runs with lazy installs and downloads switched off, so a
test never reaches the network and never changes the virtualenv it runs in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .stub_server import StubModel

__all__ = ["REPO_ROOT", "HermesHome", "ChatTurn", "clean_clone"]

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOT = Path(__file__).with_name("hermes_boot.py")
HERMES_TIMEOUT_S = 120
CONTEXT_LENGTH = 65_536  # Hermes refuses a window under 64,000 tokens

_SESSION_LINE = re.compile(r"^session_id:\s*(\S+)\s*$", re.MULTILINE)


def clean_clone(dest: Path) -> Path:
    """A repository holding exactly this checkout's HEAD, for Hermes' installer to clone.

    In a git checkout that is a clone of it; outside one (an unpacked tarball) the files are
    committed into a fresh repository, so the installer always sees a real git URL.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    inside = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", "HEAD"],
        capture_output=True,
        text=True,
    )
    if inside.returncode == 0:
        _git("clone", "--quiet", "--no-hardlinks", f"file://{REPO_ROOT}", str(dest))
        return dest
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "venv", "__pycache__", "*.egg-info", ".pytest_cache", "*.db*"
    )
    shutil.copytree(REPO_ROOT, dest, ignore=ignore)
    _git("-C", str(dest), "init", "--quiet")
    _git("-C", str(dest), "add", "-A")
    _git(
        "-C", str(dest), "-c", "user.name=t", "-c", "user.email=t@localhost",
        "commit", "--quiet", "-m", "snapshot",
    )  # fmt: skip
    return dest


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True, text=True, timeout=60)


@dataclass
class ChatTurn:
    """One `hermes chat -q` process: what it printed and the session it ended in."""

    stdout: str
    stderr: str
    returncode: int
    session_id: str


@dataclass
class HermesHome:
    root: Path
    stub: StubModel
    chronicle: dict[str, Any] = field(default_factory=dict)
    compression: dict[str, Any] = field(default_factory=dict)
    python: str = sys.executable  # the interpreter of the virtualenv Hermes is installed in

    @property
    def home(self) -> Path:
        return self.root / "hermes_home"

    @property
    def plugin_dir(self) -> Path:
        return self.home / "plugins" / "chronicle"

    @property
    def db_path(self) -> Path:
        return self.home / "chronicle" / "chronicle.db"

    @property
    def location(self) -> str:
        """The store Hermes writes: config.yaml's `chronicle.store` (PostgreSQL), else the file."""
        return str(self.chronicle.get("store") or self.db_path)

    def env(self) -> dict[str, str]:
        keep = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")
        # pip's own settings (an index, a wheel cache) are the machine's, as for any user.
        env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("PIP_")}
        env.update(
            HERMES_HOME=str(self.home),
            HOME=str(self.root / "home"),
            HERMES_DISABLE_LAZY_INSTALLS="1",
            TIRITH_ENABLED="false",
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
            PYTHONUNBUFFERED="1",
            # Hermes spills tool results over 100k characters to $TMPDIR/hermes-results.
            TMPDIR=str(self.root / "tmp"),
        )
        return env

    # -- set-up ------------------------------------------------------------------------------

    def write_config(self, *, select: bool = True, **extra: Any) -> dict[str, Any]:
        """config.yaml selecting Chronicle for both slots (unless not `select`: a Hermes that
        has never heard of it), the stub as the model."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.root / "home").mkdir(exist_ok=True)
        (self.root / "tmp").mkdir(exist_ok=True)
        config: dict[str, Any] = {
            "model": {
                "provider": "custom",
                "base_url": self.stub.base_url,
                "default": self.stub.model,
                "api_key": "stub-key",
                "context_length": CONTEXT_LENGTH,
            },
            "memory": {"provider": "chronicle"},
            "context": {"engine": "chronicle"},
            "plugins": {"enabled": ["chronicle"]},
            "compression": {"enabled": True, **self.compression},
            # Only what the tests need: fewer tools, no lazily installed extras.
            "platform_toolsets": {"cli": ["memory", "context_engine", "todo"]},
            "security": {"allow_lazy_installs": False, "tirith_enabled": False},
            "chronicle": dict(self.chronicle),
        }
        config.update(extra)
        if not select:
            for key in ("memory", "context", "plugins", "chronicle"):
                config.pop(key)
        path = self.home / "config.yaml"
        # Keep what Hermes' installer added (plugins.enabled) if it ran first.
        if select and path.exists():
            existing = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            enabled = set((existing.get("plugins") or {}).get("enabled") or [])
            config["plugins"]["enabled"] = sorted(enabled | {"chronicle"})
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return config

    def install_plugin(self, source: Path) -> subprocess.CompletedProcess[str]:
        """`hermes plugins install file://<source> --enable`, exactly as a user runs it."""
        result = self.hermes("plugins", "install", f"file://{source}", "--enable")
        if result.returncode != 0:
            raise AssertionError(
                f"hermes plugins install failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    # -- running Hermes ----------------------------------------------------------------------

    def hermes(
        self, *args: str, timeout: float = HERMES_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.python, str(BOOT), *args],
            env=self.env(),
            cwd=str(self.root),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def chat(self, message: str, *, resume: str | None = None) -> ChatTurn:
        """One user turn through `hermes chat -Q -q` (a fresh process: every turn is a restart)."""
        args = ["chat", "-Q", "-q", message]
        if resume:
            args += ["--resume", resume]
        result = self.hermes(*args)
        found = _SESSION_LINE.findall(result.stderr) or _SESSION_LINE.findall(result.stdout)
        turn = ChatTurn(
            stdout=result.stdout,
            stderr=result.stderr,
            returncode=result.returncode,
            session_id=found[-1] if found else "",
        )
        if result.returncode != 0 or not turn.session_id:
            raise AssertionError(
                f"hermes chat failed ({result.returncode}):\n--- stdout\n{result.stdout[-4000:]}"
                f"\n--- stderr\n{result.stderr[-4000:]}\n--- agent.log\n{self.log_tail()}"
            )
        return turn

    def log_tail(self, lines: int = 60) -> str:
        log = self.home / "logs" / "agent.log"
        if not log.exists():
            return "(no agent.log)"
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    def log_text(self) -> str:
        log = self.home / "logs" / "agent.log"
        return log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
