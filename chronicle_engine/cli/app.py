"""What every `chronicle` subcommand shares: where the database is, how results are shown, and
what the exit codes mean.

Invariant: a subcommand returns an `Outcome` (plain data, a code, and how to draw it for a
person); this module alone prints. `--json` prints the data and nothing else, so scripts can
rely on stdout being one JSON document. Errors go to stderr and say what to do next.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from ..config import Config, load_hermes_config
from ..errors import ChronicleError, FormatError, StoreBusy, UsageError
from .exits import CommandFailed, Exit

if TYPE_CHECKING:
    from ..core import ChronicleCore

__all__ = [
    "Exit",
    "Outcome",
    "Session",
    "CommandFailed",
    "emit",
    "when",
    "clip",
    "wrapped",
]


class _Console(Console):
    """rich's console, but a closed pipe reaches `main` (which ends quietly, exit 0) instead
    of rich's own exit 1."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


@dataclass
class Outcome:
    data: object
    draw: Callable[[Console], None] | None = None
    code: Exit = Exit.OK
    rows: Sequence[object] | None = None  # what `--nl` prints, one JSON object per line


@dataclass
class Session:
    """The resolved command-line context: the config, the database, the output mode."""

    args: argparse.Namespace
    json: bool = False
    console: Console = field(default_factory=lambda: _Console(highlight=False, soft_wrap=True))
    _config: Config | None = None
    _core: ChronicleCore | None = None
    _owns_core: bool = False

    @property
    def config(self) -> Config:
        if self._config is None:
            home = getattr(self.args, "hermes_home", None)
            self._config = load_hermes_config(home)
        return self._config

    @property
    def db_path(self) -> Path:
        given = getattr(self.args, "db", None)
        return Path(given).expanduser() if given else self.config.db_path()

    @property
    def postgres(self) -> bool:
        """Whether the selected store is config.yaml's PostgreSQL one (`--db` names a file)."""
        return getattr(self.args, "db", None) is None and self.config.postgres

    @property
    def location(self) -> str:
        """The selected store as a core names it: the SQLite file, or the connection string."""
        return self.config.location() if self.postgres else str(self.db_path)

    def core(self, *, create: bool = False) -> ChronicleCore:
        """The core for the selected database. Without `create`, a missing file is an error
        rather than a new empty database in the wrong place."""
        if self._core is None:
            from ..core import ChronicleCore

            if self.postgres:  # config.yaml's chronicle.store: the server's database
                already = {c.location for c in ChronicleCore.open_cores()}
                self._core = ChronicleCore.get(self.config.location(), config=self.config)
                self._owns_core = self._core.location not in already
                return self._core
            path = self.db_path
            if not create and not path.exists():
                raise CommandFailed(
                    f"no Chronicle database at {path}. Chat once in Hermes with Chronicle "
                    "enabled, run `chronicle demo`, or point at one with --db PATH "
                    "(or --hermes-home DIR).",
                    Exit.NOT_FOUND,
                )
            # A core someone else in this process opened stays open after the command.
            already = {c.db_path for c in ChronicleCore.open_cores()}
            self._core = ChronicleCore.get(path, config=self.config)
            self._owns_core = self._core.db_path not in already
        return self._core

    def session_id(self, given: str | None) -> str | None:
        """--session as typed: `latest` (or `@`), a whole id, or an unambiguous prefix of one.
        An id the database does not hold is an error that names the ones it does."""
        if given is None:
            return None
        from .inventory import resolve_session

        return resolve_session(self.core().store, given)

    def close(self) -> None:
        if self._core is not None and self._owns_core:
            self._core.shutdown()
        self._core = None


def emit(session: Session, outcome: Outcome) -> int:
    if getattr(session.args, "nl", False) and outcome.rows is not None:
        for row in outcome.rows:
            sys.stdout.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    elif session.json:
        sys.stdout.write(json.dumps(outcome.data, ensure_ascii=False, indent=2, default=str))
        sys.stdout.write("\n")
    elif outcome.draw is not None:
        outcome.draw(session.console)
    return int(outcome.code)


def fail(session: Session, message: str, code: Exit) -> int:
    if session.json:
        sys.stdout.write(json.dumps({"error": message, "exit_code": int(code)}) + "\n")
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]chronicle:[/] {message}"
    )
    return int(code)


def code_for(exc: BaseException) -> Exit:
    if isinstance(exc, CommandFailed):
        return exc.code
    if isinstance(exc, StoreBusy):
        return Exit.BUSY
    if isinstance(exc, FormatError | UsageError):
        return Exit.USAGE
    if isinstance(exc, KeyError | LookupError):
        return Exit.NOT_FOUND
    if isinstance(exc, ChronicleError):
        return Exit.FAILED
    return Exit.FAILED


def when(stamp: object, short: bool = False) -> str:
    """A stored ISO time as a reader wants it: local date and minute (`short`: no year)."""
    if not stamp:
        return ""
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    return moment.astimezone().strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M")


def clip(text: object, full: bool, lines: int = 3, width: int = 240) -> str:
    """`text` whole with --full, else its first `lines` lines and `width` characters."""
    value = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    if full:
        return value
    kept = value.strip().splitlines()[:lines]
    out = "\n".join(kept)
    if len(out) > width:
        out = out[: width - 1].rstrip()
    if out != value.strip():
        out += " …"
    return out


def wrapped(console: Console, text: str, indent: int = 4) -> None:
    """Print `text` wrapped to the terminal's width under `indent` spaces, never as markup."""
    import textwrap

    from rich.text import Text

    width = max(20, console.width - indent)
    pad = " " * indent
    lines: list[str] = []
    for line in text.splitlines() or [""]:
        lines += textwrap.wrap(line, width, break_on_hyphens=False) or [""]
    console.print(Text("\n".join(pad + line for line in lines)), soft_wrap=True)
