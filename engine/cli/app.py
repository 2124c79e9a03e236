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
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ..config import Config, load_hermes_config
from ..errors import ChronicleError, FormatError, StoreBusy, UsageError

if TYPE_CHECKING:
    from ..core import ChronicleCore

__all__ = ["Exit", "Outcome", "Session", "CommandFailed", "add_common_options", "emit"]


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # something went wrong while running; the message says what
    USAGE = 2  # the command line or the input was wrong (argparse uses 2 too)
    NOT_FOUND = 3  # the database, a section, a session or a file does not exist
    UNHEALTHY = 4  # `doctor` found a problem
    BUSY = 5  # another process held the database's write lock too long; retry


class CommandFailed(Exception):
    """A subcommand's refusal: the message tells the user what to do; `code` is the exit code."""

    def __init__(self, message: str, code: Exit = Exit.FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Outcome:
    data: Any
    draw: Callable[[Console], None] | None = None
    code: Exit = Exit.OK


@dataclass
class Session:
    """The resolved command-line context: the config, the database, the output mode."""

    args: argparse.Namespace
    json: bool = False
    console: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=True))
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

    def core(self, *, create: bool = False) -> ChronicleCore:
        """The core for the selected database. Without `create`, a missing file is an error
        rather than a new empty database in the wrong place."""
        if self._core is None:
            from ..core import ChronicleCore

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

    def close(self) -> None:
        if self._core is not None and self._owns_core:
            self._core.shutdown()
        self._core = None


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="the Chronicle database (default: chronicle.db_path from config.yaml, "
        "else $HERMES_HOME/chronicle/chronicle.db)",
    )
    parser.add_argument(
        "--hermes-home",
        metavar="DIR",
        dest="hermes_home",
        help="read config.yaml from DIR instead of $HERMES_HOME (~/.hermes)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document on stdout, nothing else"
    )


def emit(session: Session, outcome: Outcome) -> int:
    if session.json:
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
