"""`chronicle demo`: a scripted long chat through the real engine, offline, in seconds."""

from __future__ import annotations

import argparse

from ..app import Outcome, Session, add_common_options


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run a scripted long chat through the real engine, offline")
    add_common_options(p)
    p.set_defaults(run=run)


def run(s: Session) -> Outcome:
    from ..demo import run_demo

    return run_demo(s)
