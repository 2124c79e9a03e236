"""The `chronicle` command: look into, search, carry, back up and check a Chronicle database.

Invariant: every subcommand goes through the core's public API and only presents what it gets;
the same parser serves the console script (`chronicle ...`) and Hermes' CLI (`hermes chronicle
...`, registered by the plugin). Exit codes are `exits.Exit`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .exits import Exit

if TYPE_CHECKING:  # imported where a parser is built, which registering the command is not
    import argparse

__all__ = ["DESCRIPTION", "main", "build_parser", "configure_parser", "handle_hermes_args", "Exit"]

DESCRIPTION = (
    "Chronicle keeps every message of your Hermes chats in an append-only SQLite log, folds long "
    "chats into chronicle sections that cite the exact seq ranges they cover, and can expand any "
    "section back to the original messages."
)

EPILOG = """\
examples:
  chronicle status                          what the database holds
  chronicle search "vault path"             search every conversation's memory
  chronicle sections --session latest       the sections of the newest conversation
  chronicle expand 3-74 --session latest    a section back to its original messages
  chronicle tree                            conversations, compactions and branches
  chronicle export --session latest -o chat.jsonl && chronicle import chat.jsonl --db other.db
  chronicle doctor                          is Hermes set up, is the database sound

exit codes: 0 ok, 1 failed, 2 usage or bad input, 3 not found, 4 doctor found a problem,
5 database busy (retry).
A closed output pipe (`chronicle search x | head`) ends quietly.
"""


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the subcommands to `parser` (a fresh one, or the subparser Hermes hands us)."""
    import argparse

    from .commands import GROUPS

    parser.description = parser.description or DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--version", action="version", version=_version(), help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="chronicle_command", metavar="COMMAND")
    for group in GROUPS:
        group.add(sub)
    parser.set_defaults(chronicle_parser=parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    import argparse

    return configure_parser(argparse.ArgumentParser(prog="chronicle", description=DESCRIPTION))


def _version() -> str:
    from .. import __version__

    return f"chronicle {__version__}"


def run(args: argparse.Namespace) -> int:
    from .app import Session, emit, fail

    command = getattr(args, "run", None)
    if command is None:
        parser = getattr(args, "chronicle_parser", None)
        if parser is not None:
            parser.print_help(sys.stderr)
        return int(Exit.USAGE)
    session = Session(args, json=bool(getattr(args, "json", False)))
    try:
        return emit(session, command(session))
    except KeyboardInterrupt:
        return fail(session, "interrupted", Exit.FAILED)
    except BrokenPipeError:
        raise
    except Exception as exc:  # the one place errors become messages and exit codes
        from .app import code_for

        logging.getLogger("chronicle_engine.cli").debug("command failed", exc_info=True)
        return fail(session, _message(exc), code_for(exc))
    finally:
        session.close()


def _message(exc: Exception) -> str:
    if isinstance(exc, ModuleNotFoundError):
        from ..deps import install_command, requirement_for

        requirement = requirement_for(exc.name)
        if requirement is not None:
            return (
                f"{requirement.spec} is not installed in this Python ({exc}); it is needed for "
                f"{requirement.needed_for}. Install it with {install_command([requirement])}"
            )
    return str(exc) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given in (["--version"], ["-V"]):  # answered before any subcommand is loaded
        print(_version())
        return int(Exit.OK)
    logging.basicConfig(level=logging.WARNING, format="chronicle: %(levelname)s %(message)s")
    try:
        args = build_parser().parse_args(given)
        code = run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _closed_pipe()


def _closed_pipe() -> int:
    """The reader went away (`| head`): stop quietly, as git and sqlite-utils do. Python would
    otherwise complain again when it flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return int(Exit.OK)


def handle_hermes_args(args: argparse.Namespace) -> None:
    """`hermes chronicle ...`: Hermes calls this with its parsed namespace."""
    try:
        code = run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        code = _closed_pipe()
    if code:
        sys.exit(code)
