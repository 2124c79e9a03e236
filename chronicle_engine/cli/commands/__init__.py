"""One module per group of `chronicle` subcommands; each exposes `add(subparsers)`."""

from __future__ import annotations

from . import backup, browse, carry, context, demo, doctor, maintenance, migrate, status

__all__ = ["GROUPS"]

GROUPS = (demo, status, browse, context, carry, migrate, backup, doctor, maintenance)
