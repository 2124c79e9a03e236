"""The options the `chronicle` subcommands share. Imports only argparse, so building the parser
(for `chronicle`, and for `hermes` at every start) loads nothing of the core."""

from __future__ import annotations

import argparse

__all__ = ["add_common_options", "add_list_options", "add_session_option", "examples"]


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


def add_list_options(parser: argparse.ArgumentParser) -> None:
    """For commands that print a list: newline-delimited JSON and untruncated text."""
    parser.add_argument(
        "--nl",
        action="store_true",
        help="print one JSON object per line (newline-delimited JSON), nothing else",
    )
    parser.add_argument(
        "--full", action="store_true", help="print every text whole instead of its first lines"
    )


def add_session_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument(
        "--session",
        metavar="ID",
        help=help + " (`latest` for the most recent; a unique prefix of an id is enough)",
    )


def examples(*lines: str) -> str:
    """An epilog of example command lines (shown with RawDescriptionHelpFormatter)."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)
