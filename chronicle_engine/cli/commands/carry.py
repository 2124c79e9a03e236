"""`chronicle export | import`: sessions as JSONL, and chronicle carry between databases."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..exits import CommandFailed, Exit
from ..options import add_common_options

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from ...core import ChronicleCore
    from ...sessions.redact import Forgotten
    from ..app import Outcome, Session


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a session (or the whole log, or a chronicle's sections) as JSONL",
        description="With --session: that conversation's whole session tree in the versioned "
        "session format (messages byte for byte, branches and compactions included). Without: "
        "every event of the log. With --chronicle: that chronicle's sections, to carry them to "
        "another database holding the same log.",
    )
    p.add_argument("-o", "--out", metavar="FILE", help="write here (default: stdout)")
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--session",
        metavar="ID",
        help="one conversation, its whole tree and lineage (`latest` for the most recent; a "
        "unique prefix of an id is enough)",
    )
    what.add_argument("--chronicle", help="carry this chronicle's sections instead of events")
    p.add_argument(
        "--messages-only",
        action="store_true",
        help="whole-log export: only captured chat messages, no other events",
    )
    add_common_options(p)
    p.set_defaults(run=export)

    p = sub.add_parser(
        "import",
        help="read a `chronicle export` file into this database (idempotent)",
        description="Events keep their ids; ones already present are skipped. A sections file "
        "is carried into the chronicle it names (or --chronicle).",
    )
    p.add_argument("file", help="a file written by `chronicle export` ('-' for stdin)")
    p.add_argument("--chronicle", help="load sections into this chronicle instead")
    add_common_options(p)
    p.set_defaults(run=import_)


def _progress(console: Console, enabled: bool) -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not enabled,
        transient=True,
    )


@contextlib.contextmanager
def _open_out(path: str | None) -> Iterator[IO[str]]:
    if not path or path == "-":
        yield sys.stdout
        return
    target = Path(path)
    if target.exists() or target.is_symlink():
        raise CommandFailed(
            f"{target} already exists (or is a symlink); choose a new file name", Exit.USAGE
        )
    # O_EXCL refuses a file or symlink that appeared since; nothing is written through a link.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "w", encoding="utf-8") as fh:
        yield fh


def _forgotten(core: ChronicleCore) -> Forgotten:
    """What an export leaves out: the words of every message the user had forgotten (the log
    keeps them; a file that leaves this store does not)."""
    from ...sessions.redact import Forgotten

    return Forgotten.read(core.store, core.recall.forgotten_messages())


def export(s: Session) -> Outcome:
    from rich.console import Console

    from ... import transfer
    from ...capture.events import NAMESPACE as CHAT
    from ...sessions.jsonl import export_jsonl
    from ...sessions.redact import redacted
    from ..app import Outcome

    a = s.args
    core = s.core()
    to_stdout = not a.out or a.out == "-"
    stderr = Console(stderr=True)
    if a.chronicle:
        with _open_out(a.out) as fh:
            count = transfer.write_sections(core.chronicle(a.chronicle), fh)
        data = {"kind": "sections", "chronicle": a.chronicle, "written": count, "out": a.out or "-"}
    elif a.session:
        session = s.session_id(a.session)
        assert session is not None
        tree = core.sessions
        text = export_jsonl(tree, session, forgotten=_forgotten(core))
        with _open_out(a.out) as fh:
            fh.write(text)
        lines = max(0, len([line for line in text.splitlines() if line.strip()]) - 1)
        data = {"kind": "session", "session": session, "written": lines, "out": a.out or "-"}
    else:
        namespaces = [CHAT] if a.messages_only else None
        if not a.messages_only:  # the passes' ledgers leave counted (`Compaction.count_ledgers`)
            core.compaction.count_ledgers()
        total = core.store.count()
        with _open_out(a.out) as fh, _progress(stderr, not s.json and not to_stdout) as bar:
            task = bar.add_task("exporting events", total=total)
            count = transfer.write_events(
                redacted(core.store.read(namespaces=namespaces), _forgotten(core)),
                fh,
                progress=lambda n: bar.advance(task, n),
            )
        data = {"kind": "events", "written": count, "out": a.out or "-"}

    def draw(console: Console) -> None:
        # With stdout carrying the export itself, the summary goes to stderr.
        where = stderr if to_stdout else console
        what = {"session": f"entries of session {data.get('session')}"}.get(
            data["kind"], data["kind"]
        )
        where.print(f"exported {data['written']} {what} to {data['out']}")

    if to_stdout and s.json:
        # stdout is the export; a JSON summary on top would corrupt it.
        s.json = False
    return Outcome(data, draw)


def import_(s: Session) -> Outcome:
    from rich.console import Console

    from ... import transfer
    from ...sessions.jsonl import FORMAT as SESSION_FORMAT
    from ...sessions.jsonl import import_jsonl
    from ..app import Outcome

    a = s.args
    if a.file != "-" and not Path(a.file).exists():
        raise CommandFailed(f"{a.file} does not exist", Exit.NOT_FOUND)
    core = s.core(create=True)
    source = "stdin" if a.file == "-" else a.file
    if a.file == "-":
        lines: list[bytes] | None = list(sys.stdin.buffer)
        header = transfer.header_of_lines(lines or [], source)
    else:
        header = transfer.header_of(Path(a.file))
        lines = None
    kind = "session" if header.get("format") == SESSION_FORMAT else header.get("kind")
    if kind == "session":
        tree = core.sessions
        raw = b"".join(lines) if lines is not None else Path(a.file).read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise CommandFailed(f"{source}, line {line}: not UTF-8", Exit.USAGE) from None
        stored = import_jsonl(tree, text)
        read = max(0, sum(1 for line in text.splitlines() if line.strip()) - 1)
        data = {
            "kind": "session",
            "session": header.get("session"),
            "read": read,
            "stored": stored,
            "skipped": max(0, read - stored),
        }
    elif kind == "sections":
        named = header.get("chronicle")
        name = a.chronicle or (named if isinstance(named, str) else "") or "default"
        with _lines(a.file, lines) as it:
            loaded = core.chronicle(name).load(transfer.read_sections(it, source=source))
        data = {"kind": "sections", "chronicle": name, "loaded": loaded}
    elif kind == "events":
        stderr = Console(stderr=True)
        with _lines(a.file, lines) as it, _progress(stderr, not s.json) as bar:
            task = bar.add_task("importing events", total=None)
            seen, stored = transfer.import_events(
                core.store,
                transfer.read_events(it, source=source, refusal=core.reader.refusal),
                progress=lambda n: bar.advance(task, n),
                hold=core.sessions.writing,
            )
        data = {"kind": "events", "read": seen, "stored": stored, "skipped": seen - stored}
    else:
        raise CommandFailed(f"{source}: unknown export kind {kind!r}", Exit.USAGE)

    def draw(console: Console) -> None:
        if data["kind"] == "sections":
            console.print(
                f"carried {data['loaded']} new sections into chronicle {data['chronicle']!r}"
            )
        elif data["kind"] == "session":
            console.print(
                f"imported session {data['session']}: {data['stored']} new entries "
                f"({data['skipped']} already present) into {s.db_path}"
            )
        else:
            console.print(
                f"imported {data['stored']} new events ({data['skipped']} already present)"
            )

    return Outcome(data, draw)


@contextlib.contextmanager
def _lines(path: str, lines: list[bytes] | None) -> Iterator[list[bytes] | IO[bytes]]:
    if lines is not None:
        yield lines
        return
    with open(path, "rb") as fh:
        yield fh
