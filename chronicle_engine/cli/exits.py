"""The `chronicle` command's exit codes (README, "Exit codes") and the refusal that carries one.
Imports nothing, so the command can answer `--version` and build its parser without loading
the core."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["Exit", "CommandFailed"]


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
