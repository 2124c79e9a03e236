"""Shared set-up for the fault suite: how hard to try (`--soak` makes every test try more),
the figures each test reports, and the file systems some tests mount.

Mounting: a small tmpfs (a full disk) and a read-only one need root and a kernel that lets the
test mount (a container run as root usually does). Without them those tests are skipped, with
the reason; every other test runs anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


def soaking() -> bool:
    """The long version of every fault test: set by the `--soak` option (tests/conftest.py).
    Read at each call, not at import: this module is imported by tests/faults/conftest.py,
    which pytest may load before the option is seen."""
    return os.environ.get("CHRONICLE_SOAK") == "1"


REPORTED: list[dict[str, Any]] = []
"""Every figure reported in this run; tests/conftest.py prints them at the end of the run."""


def examples(fast: int, soak_factor: int = 20) -> int:
    """How many examples a property test tries: `fast` in CI, `fast * soak_factor` under --soak."""
    return fast * soak_factor if soaking() else fast


def report(test: str, **figures: Any) -> None:
    """Keep a test's figures: the run's summary prints them (tests/conftest.py), and they are
    appended to CHRONICLE_FAULT_FIGURES when that names a file."""
    record = {"test": test, "soak": soaking(), **figures}
    REPORTED.append(record)
    line = json.dumps(record)
    figures_file = os.environ.get("CHRONICLE_FAULT_FIGURES", "")
    if figures_file:
        with open(figures_file, "a", encoding="utf-8") as out:
            out.write(line + "\n")


_mountable: bool | None = None


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (tried once)."""
    global _mountable
    if _mountable is None:
        _mountable = False
        if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount"):
            import tempfile

            probe = Path(tempfile.mkdtemp(prefix="chronicle-mount-probe-"))
            try:
                done = subprocess.run(
                    ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                    capture_output=True,
                    timeout=10,
                )
                if done.returncode == 0:
                    _mountable = True
                    subprocess.run(["umount", str(probe)], capture_output=True, timeout=10)
            finally:
                with contextlib.suppress(OSError):
                    probe.rmdir()
    return _mountable


class Mount:
    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        self.size = size

    def _run(self, *options: str) -> None:
        subprocess.run(
            ["mount", "-o", ",".join(("remount", *options)), str(self.path)],
            check=True,
            capture_output=True,
            timeout=10,
        )

    def remount(self, *, read_only: bool) -> None:
        self._run("ro" if read_only else "rw")

    def resize(self, size: str) -> None:
        self._run(f"size={size}")
        self.size = size


@contextlib.contextmanager
def tmpfs(path: Path, *, size: str, read_only: bool = False) -> Iterator[Mount]:
    """A tmpfs of `size` at `path` for the block (read-only if asked), unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        check=True,
        capture_output=True,
        timeout=10,
    )
    mount = Mount(path, size)
    try:
        if read_only:
            mount.remount(read_only=True)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10)


def write_config(home: Path, db_path: Path | str | None = None) -> None:
    """A HERMES_HOME config.yaml naming `db_path` (or the default), with a short busy timeout."""
    chronicle: dict[str, Any] = {"busy_timeout_ms": 2000}
    if db_path is not None:
        chronicle["db_path"] = str(db_path)
    (home / "config.yaml").write_text(yaml.safe_dump({"chronicle": chronicle}))


def both_slots(
    home: Path,
    config: dict[str, Any],
    monkeypatch: Any,
    *,
    session: str = "s1",
    user_id: str | None = None,
) -> tuple[Any, Any]:
    """HERMES_HOME at `home` with `config` as its config.yaml, and Chronicle's two slots started
    on `session` the way Hermes starts them: (memory provider, context engine)."""
    from importlib import import_module

    from test_compaction_support import load_plugin

    from provider import ChronicleMemoryProvider

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("HERMES_HOME", str(home))
    identity = {"user_id": user_id} if user_id else {}
    provider = ChronicleMemoryProvider()
    provider.initialize(session, hermes_home=str(home), platform="cli", **identity)
    engine = import_module(load_plugin().__name__ + ".context").ChronicleContextEngine(
        hermes_home=str(home)
    )
    engine.update_model(model="m", context_length=64_000)
    engine.on_session_start(session, hermes_home=str(home), platform="cli", **identity)
    return provider, engine


@contextlib.contextmanager
def example_store(kind: str, request: Any) -> Iterator[str | None]:
    """A store of its own for one example: None (SQLite in the example's home), or a schema of
    its own on the test session's PostgreSQL server."""
    if kind == "sqlite":
        yield None
        return
    from postgres_support import own_schema

    with own_schema(request.getfixturevalue("postgres_cluster")) as conninfo:
        yield conninfo


def core_of(home: Path) -> Any:  # -> ChronicleCore
    """The core the slots opened on config.yaml's store at `home`."""
    from chronicle_engine.config import load_hermes_config
    from chronicle_engine.core import ChronicleCore

    config = load_hermes_config(home)
    return ChronicleCore.get(config.location(), config=config)
