"""`chronicle doctor`: is the database sound, is Hermes set up to use it, what may leave the
machine. Read-only: it reports and says what to do; it never repairs behind your back."""

from __future__ import annotations

import argparse
from collections.abc import Container, Mapping, Set
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from ..exits import CommandFailed, Exit
from ..options import add_common_options

if TYPE_CHECKING:
    from rich.console import Console

    from ...core import ChronicleCore
    from ..app import Outcome, Session

MIN_CONTEXT = 64_000


@dataclass
class Check:
    area: str
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="check integrity, chronicle forks, the Hermes config, and what egress is refused",
    )
    p.add_argument("--full", action="store_true", help="run SQLite's full integrity_check (slower)")
    p.add_argument(
        "--salvage",
        metavar="DAMAGED_DB",
        help="copy the events still readable in a damaged database (one Chronicle moved aside "
        "as *.corrupt-*) into this one; the damaged file is only read",
    )
    add_common_options(p)
    p.set_defaults(run=run)


def run(s: Session) -> Outcome:
    from ..app import Outcome, wrapped

    if s.args.salvage:
        return _salvage(s, Path(s.args.salvage).expanduser())
    checks: list[Check] = []
    checks += _dependency_checks(s)
    checks += _hermes_checks(s)
    checks += _config_checks(s)
    if s.postgres:
        checks += _postgres_checks(s)
    elif s.db_path.exists():
        checks += _database_checks(s)
    else:
        checks.append(
            Check(
                "database",
                "exists",
                "warn",
                f"no database yet at {s.db_path} (created on first use)",
            )
        )
    checks += _egress_checks(s)
    worst = (
        "fail"
        if any(c.status == "fail" for c in checks)
        else ("warn" if any(c.status == "warn" for c in checks) else "ok")
    )
    data = {"db_path": s.location, "verdict": worst, "checks": [asdict(c) for c in checks]}

    def draw(console: Console) -> None:
        console.print(f"[bold]chronicle doctor[/]: {worst}  ({s.location})")
        mark = {"ok": "[green]  ok[/]", "warn": "[yellow]warn[/]", "fail": "[bold red]FAIL[/]"}
        for c in checks:
            console.print(f"{mark[c.status]}  {c.area}: {c.name}")
            wrapped(console, c.detail, indent=6)

    return Outcome(data, draw, Exit.UNHEALTHY if worst == "fail" else Exit.OK)


# -- the database ------------------------------------------------------------------------------


def _database_checks(s: Session) -> list[Check]:
    from ...log.store import sqlite_errors
    from ..inventory import has_table, sqlite_store

    core = s.core()
    store = sqlite_store(core.store, "checking the database's pages")
    out: list[Check] = []
    pragma = "integrity_check" if s.args.full else "quick_check"
    with sqlite_errors("checking integrity"), store.reading() as conn:
        result = [r[0] for r in conn.execute(f"PRAGMA {pragma}").fetchall()]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        triggers = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger'"
            ).fetchall()
        }
    ok = result == ["ok"]
    out.append(
        Check(
            "database",
            pragma,
            "ok" if ok else "fail",
            "ok"
            if ok
            else "; ".join(result[:5])
            + " — restore the latest `chronicle backup`, or copy what is readable with "
            "`chronicle export`",
        )
    )
    out.append(
        Check(
            "database",
            "WAL mode",
            "ok" if str(mode).lower() == "wal" else "warn",
            f"journal_mode={mode}",
        )
    )
    out.append(
        _guards({"events_never_update", "events_never_delete"} - triggers, "updated or deleted")
    )
    if has_table(store, "sections"):
        out += _chronicle_checks(core)
    return out


def _postgres_checks(s: Session) -> list[Check]:
    """config.yaml's PostgreSQL store: reachable, the log's append-only triggers in place, and
    the chronicle checks SQLite gets (the server checks its own pages)."""
    from ...errors import StoreError

    try:
        core = s.core()
        with core.store.reading() as conn:
            # tgenabled: 'O' fires in ordinary sessions, 'A' always; 'D' (disabled) and 'R'
            # (replica sessions only) leave an ordinary session free to rewrite the log.
            enabled = {
                str(name): str(state) in ("O", "A")
                for name, state in conn.execute(
                    "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'events'::regclass"
                ).fetchall()
            }
    except StoreError as exc:
        return [Check("database", "reachable", "fail", f"PostgreSQL: {exc}")]
    out = [Check("database", "reachable", "ok", "PostgreSQL (chronicle.store)")]
    guards = {"events_never_update", "events_never_truncate"}
    out.append(
        _guards(
            guards - set(enabled),
            "updated, deleted or truncated",
            disabled={name for name in guards if enabled.get(name) is False},
        )
    )
    return out + _chronicle_checks(core)


def _guards(missing: set[str], refused: str, *, disabled: Set[str] = frozenset()) -> Check:
    """The log's append-only triggers: `missing` those not found, `disabled` those found that
    do not fire (PostgreSQL's ALTER TABLE ... DISABLE TRIGGER)."""
    if missing or disabled:
        said = [f"missing triggers: {', '.join(sorted(missing))}"] if missing else []
        if disabled:
            said.append(
                f"disabled triggers: {', '.join(sorted(disabled))} (the log's "
                "table's owner restores each with ALTER TABLE ... ENABLE TRIGGER)"
            )
        return Check("database", "append-only guards", "fail", "; ".join(said))
    return Check("database", "append-only guards", "ok", f"events cannot be {refused}")


def _chronicle_checks(core: ChronicleCore) -> list[Check]:
    """Current sections never overlap, and each cites messages this log holds."""
    from ...capture.events import NAMESPACE as CHAT
    from ..inventory import chronicle_rows

    store = core.store
    out: list[Check] = []
    forks = []
    orphans = []
    last_seq = store.last_seq()
    for row in chronicle_rows(store):
        current = core.chronicle(row["chronicle"]).current()
        for sec in current:
            lo, hi = sec.anchor.from_seq, sec.anchor.to_seq
            held = hi <= last_seq and any(
                True for _ in store.read(after=lo - 1, upto=hi, namespaces=[CHAT], limit=1)
            )
            if not held:
                orphans.append(f"{row['chronicle']} {sec.anchor.section_id}")
        for prev, nxt in zip(current, current[1:], strict=False):
            if nxt.anchor.from_seq <= prev.anchor.to_seq:
                forks.append(
                    f"{row['chronicle']}: {prev.anchor.section_id} overlaps {nxt.anchor.section_id}"
                )
    out.append(
        Check(
            "chronicle",
            "no forks",
            "fail" if forks else "ok",
            "; ".join(forks) + " — supersede one of them (`reconsolidate`) or carry a clean export"
            if forks
            else f"{len(chronicle_rows(store))} chronicles, current sections never overlap",
        )
    )
    out.append(
        Check(
            "chronicle",
            "sections have their log",
            "fail" if orphans else "ok",
            f"{len(orphans)} current sections cite messages this log does not hold "
            f"({', '.join(orphans[:5])}{', …' if len(orphans) > 5 else ''}): sections were "
            "carried without their log. Import the session or events export they came from "
            "(`chronicle import FILE`), or `chronicle expand` cannot restore them"
            if orphans
            else "every current section's seq range holds captured messages",
        )
    )
    return out


# -- configuration -----------------------------------------------------------------------------


def _config_checks(s: Session) -> list[Check]:
    from ...config import KEYS

    config = s.config
    out: list[Check] = []
    if config.unknown:
        out.append(
            Check(
                "config",
                "unknown chronicle keys",
                "warn",
                f"ignored: {', '.join('chronicle.' + k for k in config.unknown)} "
                f"(valid keys: {', '.join(k.path for k in KEYS)})",
            )
        )
    else:
        out.append(
            Check("config", "chronicle keys", "ok", "every chronicle.* key is a declared setting")
        )
    from ...config_audit import audit

    rows = audit()
    unread = [r.path for r in rows if r.state == "UNREAD" or r.stale]
    dormant_keys = [r.path for r in rows if r.state == "DORMANT"]
    out.append(
        Check(
            "config",
            "honesty audit",
            "fail" if unread else "ok",
            f"declared but never read: {', '.join(unread)}"
            if unread
            else f"{len(rows) - len(dormant_keys)} keys wired, {len(dormant_keys)} declared dormant",
        )
    )
    values = config.values()
    dormant = [k.path for k in KEYS if k.dormant and values.get(k.path) != k.default]
    if dormant:
        out.append(
            Check(
                "config",
                "dormant keys set",
                "warn",
                f"set but not read by this build: {', '.join(dormant)}",
            )
        )
    return out


def _dependency_checks(s: Session) -> list[Check]:
    """Each requirement this Python cannot import, named with the command that installs it."""
    from ... import deps

    absent = deps.missing()
    if not absent:
        return [Check("python", "dependencies", "ok", "every dependency imports")]
    model_summaries = s.config.settings.context.summarizer != "extractive"
    out = []
    for r in absent:
        hard = not r.optional or model_summaries
        out.append(
            Check(
                "python",
                r.module,
                "fail" if hard else "warn",
                f"{r.spec} is not installed (needed for {r.needed_for}); install it with "
                + deps.install_command([r]),
            )
        )
    return out


def _hermes_checks(s: Session) -> list[Check]:
    raw: Mapping[str, object] = s.config.raw
    home = s.config.hermes_home
    if not raw:
        where = home / "config.yaml" if home else "config.yaml"
        return [
            Check(
                "hermes",
                "config.yaml",
                "warn",
                f"{where} not found or empty; Hermes is not set up to use Chronicle",
            )
        ]

    def section(name: str) -> Mapping[str, object]:
        value = raw.get(name)
        return value if isinstance(value, dict) else {}

    provider = section("memory").get("provider")
    engine = section("context").get("engine")
    enabled = section("plugins").get("enabled") or []
    listed = isinstance(enabled, Container) and "chronicle" in enabled
    out = [
        _expect("memory.provider", provider == "chronicle", "chronicle",
                f"is {provider!r}; set memory.provider: chronicle"),
        _expect("context.engine", engine == "chronicle", "chronicle",
                f"is {engine!r}; set context.engine: chronicle (else Hermes uses its built-in "
                "compressor)"),
        _expect("plugins.enabled", listed, "lists chronicle",
                "does not list chronicle; run `hermes plugins enable chronicle`"),
    ]  # fmt: skip
    window = section("model").get("context_length")
    if window is not None:
        out.append(_window_check(window))
    if home is not None:
        out.append(_manifest_check(Path(home) / "plugins" / "chronicle" / "plugin.yaml"))
    return out


def _expect(name: str, holds: bool, ok: str, fix: str) -> Check:
    """A setting Hermes needs for Chronicle: `ok` when it holds, else `fix` says what to do."""
    return Check("hermes", name, "ok" if holds else "fail", ok if holds else fix)


def _window_check(window: object) -> Check:
    try:
        small = int(window) < MIN_CONTEXT if isinstance(window, (int, float, str)) else True
    except ValueError:
        small = True
    return Check(
        "hermes",
        "model.context_length",
        "fail" if small else "ok",
        f"{window}" + (f"; Hermes refuses windows under {MIN_CONTEXT}" if small else ""),
    )


def _manifest_check(manifest: Path) -> Check:
    import yaml

    if not manifest.exists():
        return Check(
            "hermes",
            "plugin installed",
            "warn",
            f"{manifest.parent} not found; install with "
            "`hermes plugins install <repo url> --enable`",
        )
    try:
        kind = (yaml.safe_load(manifest.read_text(encoding="utf-8")) or {}).get("kind")
    except (OSError, yaml.YAMLError) as exc:
        kind = f"unreadable ({exc})"
    return _expect(
        "plugin.yaml kind",
        kind == "standalone",
        "standalone",
        f"is {kind!r}; must be standalone or the context engine never registers "
        "(reinstall: `hermes plugins install ... --force`)",
    )


# -- egress ------------------------------------------------------------------------------------


def _egress_checks(s: Session) -> list[Check]:
    """Where Chronicle would send conversation text, and which of those sends it refuses."""
    config = s.config
    out: list[Check] = []
    context = config.settings.context
    writer = context.summarizer
    if writer == "extractive":
        out.append(
            Check("egress", "summaries", "ok", "extractive, on this machine: nothing leaves")
        )
    elif writer == "auxiliary":
        out.append(
            Check(
                "egress",
                "summaries",
                "warn",
                "folded ranges go to Hermes' auxiliary compression model (auxiliary.compression "
                "in Hermes' config), wherever that points",
            )
        )
    else:
        out.append(
            _endpoint_check(
                "summaries",
                context.summarizer_base_url,
                context.summarizer_allow_remote,
                "chronicle.context.summarizer_allow_remote",
                "folded ranges of the conversation",
            )
        )
    embeddings = config.settings.recall.embeddings
    url = embeddings.url
    if not url:
        out.append(Check("egress", "embeddings", "ok", "none configured: full-text recall only"))
    else:
        out.append(
            _endpoint_check(
                "embeddings",
                url,
                embeddings.allow_remote,
                "chronicle.recall.embeddings.allow_remote",
                "message excerpts",
            )
        )
    return out


def _endpoint_check(name: str, url: str, allow_remote: bool, key: str, what: str) -> Check:
    from ...egress import endpoint_is_local

    host = urlparse(url).hostname or ""
    if not host:
        return Check(
            "egress", name, "fail", f"endpoint URL {url!r} has no host; fix it in config.yaml"
        )
    if endpoint_is_local(url):
        return Check(
            "egress", name, "ok", f"{what} go to {host} (this host or its private network)"
        )
    if allow_remote:
        return Check(
            "egress", name, "warn", f"{what} go to {host}, off this network ({key} is true)"
        )
    return Check(
        "egress",
        name,
        "warn",
        f"REFUSED: {host} is off this host and its private network, so {what} are not sent "
        f"there; set {key}: true to allow it",
    )


def _salvage(s: Session, damaged: Path) -> Outcome:
    from ...log.salvage import salvage
    from ..app import Outcome
    from ..inventory import sqlite_store

    if not damaged.is_file():
        raise CommandFailed(f"{damaged} is not a file", Exit.NOT_FOUND)
    core = s.core(create=True)
    found = salvage(damaged, sqlite_store(core.store, "salvage"), core.reader.refusal)
    data = {"salvaged_from": str(damaged), "into": str(s.db_path), **asdict(found)}

    def draw(console: Console) -> None:
        console.print(
            f"salvaged {found.read} events from {damaged} ({found.stored} new to {s.db_path}); "
            f"{found.unreadable} rows could not be read, {found.refused} events refused"
        )

    return Outcome(data, draw)
