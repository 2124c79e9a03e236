"""The `chronicle` command: look into, search, carry, back up and check a Chronicle database.

Invariant: every subcommand goes through the core's public API and only presents what it gets;
the same parser serves the console script (`chronicle ...`) and Hermes' CLI (`hermes chronicle
...`, registered by the plugin). Exit codes are `app.Exit`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .app import Exit, Session, code_for, emit, fail

__all__ = ["DESCRIPTION", "main", "build_parser", "configure_parser", "handle_hermes_args", "Exit"]

DESCRIPTION = (
    "Chronicle keeps every message of your Hermes chats in an append-only SQLite log, folds long "
    "chats into chronicle sections that cite the exact seq ranges they cover, and can expand any "
    "section back to the original messages."
)

EPILOG = (
    "exit codes: 0 ok, 1 failed, 2 usage or bad input, 3 not found, 4 doctor found a problem, "
    "5 database busy (retry), 6 subsystem missing from this build"
)


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the subcommands to `parser` (a fresh one, or the subparser Hermes hands us)."""
    from .commands import GROUPS

    parser.description = parser.description or DESCRIPTION
    parser.epilog = EPILOG
    sub = parser.add_subparsers(dest="chronicle_command", metavar="COMMAND")
    for group in GROUPS:
        group.add(sub)
    parser.set_defaults(chronicle_parser=parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    return configure_parser(argparse.ArgumentParser(prog="chronicle", description=DESCRIPTION))


def run(args: argparse.Namespace) -> int:
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
    except Exception as exc:  # the one place errors become messages and exit codes
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
    logging.basicConfig(level=logging.WARNING, format="chronicle: %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    return run(args)


def handle_hermes_args(args: argparse.Namespace) -> None:
    """`hermes chronicle ...`: Hermes calls this with its parsed namespace."""
    code = run(args)
    if code:
        sys.exit(code)
