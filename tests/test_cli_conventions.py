"""The `chronicle` command follows the conventions of the CLIs its users like (llm, sqlite-utils,
git): a version, examples in help, listed choices, JSON lines, a `latest` shortcut and id
prefixes, unknown ids refused by name, quiet on a closed pipe, readable at 80 columns, times,
no agent tool noise in search, and a demo that never writes into a database it did not make."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chronicle_engine import __version__
from chronicle_engine.chronicle.sections import Anchor, Section
from chronicle_engine.cli import Exit, build_parser, main
from chronicle_engine.cli.commands import GROUPS
from chronicle_engine.core import ChronicleCore

ROOT = Path(__file__).resolve().parent.parent
CHRONICLE_BIN = Path(sys.executable).parent / "chronicle"

LONG = "The deploy key for project heron lives at vault path kv/heron/deploy. " + " ".join(
    f"detail{i} of the heron rollout plan." for i in range(40)
)

CHAT = [
    {"role": "user", "content": "Where is the heron deploy key kept?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_s",
                "type": "function",
                "function": {
                    "name": "chronicle_search",
                    "arguments": '{"query": "heron deploy key"}',
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_s", "content": '{"results": ["heron deploy key ..."]}'},
    {"role": "assistant", "content": LONG},
    {"role": "user", "content": "Thanks, and the heron port is 8443."},
]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "c.db"
    core = ChronicleCore.get(path)
    try:
        core.capture.capture_messages("sess-alpha-1", CHAT, profile="default")
        core.capture.capture_messages(
            "sess-beta-2",
            [{"role": "user", "content": "an unrelated heron note"}],
            profile="default",
        )
        name = core.sessions.chronicle_name("sess-alpha-1")
        core.chronicle(name).append_new(Section(Anchor("1-4", 1, 4, 1), "Heron deploy key: vault."))
    finally:
        core.shutdown()
    return path


def run_nl(capsys, *argv: str) -> tuple[int, list[dict]]:
    code = main([*argv, "--nl"])
    lines = capsys.readouterr().out.splitlines()
    return code, [json.loads(line) for line in lines]


def test_version_without_loading_subcommands(capsys):
    assert main(["--version"]) == Exit.OK
    assert capsys.readouterr().out.strip() == f"chronicle {__version__}"
    probe = (
        "import sys; from chronicle_engine.cli import main; main(['--version']); "
        "print(sorted(m for m in sys.modules if m.startswith(('chronicle_engine.core', "
        "'chronicle_engine.cli.commands', 'pydantic', 'rich'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[]"


def test_every_subcommand_help_shows_examples():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "chronicle_command")
    names = [n for n in sub.choices if n not in ("backup", "export", "import", "doctor")]
    assert {g.__name__.rsplit(".", 1)[-1] for g in GROUPS} >= {"status", "browse", "maintenance"}
    for name in names:
        assert "examples:" in sub.choices[name].format_help(), name
    assert "examples:" in parser.format_help() and "exit codes:" in parser.format_help()


def test_allowed_values_are_listed(db, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["search", "x", "--scope", "everything", "--db", str(db)])
    assert exit_.value.code == Exit.USAGE
    err = capsys.readouterr().err
    assert "all" in err and "sections" in err and "beliefs" in err
    with pytest.raises(SystemExit):
        main(["maintenance", "--run", "bogus", "--db", str(db)])
    assert "integrity" in capsys.readouterr().err


def test_empty_query_and_zero_limit_are_usage_errors(db, capsys):
    assert main(["search", "  ", "--db", str(db)]) == Exit.USAGE
    assert "give words to search for" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["search", "heron", "-n", "0", "--db", str(db)])
    assert exit_.value.code == Exit.USAGE
    assert "1 or more" in capsys.readouterr().err


def test_newline_delimited_json_for_lists(db, capsys):
    code, hits = run_nl(capsys, "search", "heron", "--db", str(db))
    assert code == Exit.OK and hits and all("seq" in h and "rank" in h for h in hits)
    code, rows = run_nl(capsys, "sections", "--db", str(db))
    assert code == Exit.OK and [r["id"] for r in rows] == ["1-4"]
    code, rows = run_nl(capsys, "tree", "--db", str(db))
    assert {r["session"] for r in rows} == {"sess-alpha-1", "sess-beta-2"}
    code, rows = run_nl(capsys, "expand", "1..2", "--db", str(db))
    assert [r["seq"] for r in rows] == [1, 2] and rows[0]["message"] == CHAT[0]


def test_latest_and_id_prefixes(db, capsys):
    code, rows = run_nl(capsys, "tree", "--session", "latest", "--db", str(db))
    assert [r["session"] for r in rows] == ["sess-beta-2"]
    code, rows = run_nl(capsys, "sections", "--session", "sess-al", "--db", str(db))
    assert code == Exit.OK and [r["id"] for r in rows] == ["1-4"]
    assert main(["sections", "--session", "sess-", "--db", str(db)]) == Exit.USAGE
    err = capsys.readouterr().err
    assert "ambiguous" in err and "sess-alpha-1" in err and "sess-beta-2" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["sections", "--session", "nope"],
        ["tree", "--session", "nope"],
        ["search", "heron", "--session", "nope"],
        ["expand", "1-4", "--session", "nope"],
    ],
)
def test_unknown_session_is_an_error_naming_what_exists(db, capsys, argv):
    assert main([*argv, "--db", str(db)]) == Exit.NOT_FOUND
    err = capsys.readouterr().err
    assert "no session 'nope'" in err and "sess-beta-2" in err and "sess-alpha-1" in err


def test_export_of_an_unknown_session_writes_nothing(db, tmp_path, capsys):
    out = tmp_path / "f.jsonl"
    assert main(["export", "--session", "nope", "-o", str(out), "--db", str(db)]) == 3
    assert "sess-alpha-1" in capsys.readouterr().err
    assert not out.exists()


def test_expand_of_a_range_that_is_no_section_says_how_to_write_a_range(db, capsys):
    assert main(["expand", "2-3", "--db", str(db)]) == Exit.NOT_FOUND
    err = capsys.readouterr().err
    assert "no section '2-3'" in err and "1-4" in err and "2..3" in err
    assert main(["sections", "--chronicle", "nope", "--db", str(db)]) == Exit.NOT_FOUND
    assert "conversation:sess-alpha-1" in capsys.readouterr().err


def test_the_agents_own_memory_tool_traffic_is_hidden_from_search(db, capsys):
    code = main(["search", "heron deploy key", "--json", "--db", str(db)])
    data = json.loads(capsys.readouterr().out)
    shown = {h["seq"] for h in data["hits"] if h["kind"] == "message"}
    assert code == Exit.OK and 1 in shown  # the person's own question
    assert not shown & {2, 3}  # the chronicle_search call and its result
    assert data["hidden_tool_hits"] >= 1
    main(["search", "heron deploy key", "--include-tools", "--json", "--db", str(db)])
    everything = {h["seq"] for h in json.loads(capsys.readouterr().out)["hits"]}
    assert {2, 3} & everything


def test_search_reads_well_at_80_columns_with_times_and_no_raw_score(db, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["search", "vault path", "--db", str(db)]) == Exit.OK
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", out)  # when it was said
    assert re.search(r"^ 1\. seq \d+ ", out, flags=re.M) and "seq 4 " in out  # ranked, no score
    assert "sess-alpha-1" in out
    assert "score" not in out and "0.0" not in out
    assert "detail39" not in out  # clipped to its first lines
    main(["search", "vault path", "--full", "--db", str(db)])
    full = capsys.readouterr().out
    assert "detail39" in " ".join(full.split()) and all(len(x) <= 80 for x in full.splitlines())


def test_status_and_maintenance_print_summaries_not_dicts(db, capsys):
    assert main(["status", "--db", str(db)]) == Exit.OK
    out = capsys.readouterr().out
    assert "{'" not in out and "maintenance on; jobs:" in out
    assert main(["maintenance", "--db", str(db)]) == Exit.OK
    out = capsys.readouterr().out
    assert "{'" not in out and "consolidation at seq" in out and "Schedules" in out
    main(["status", "--json", "--db", str(db)])
    assert "schedules" in json.loads(capsys.readouterr().out)["maintenance"]


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "heron", "-n", "30", "--full"],  # drawn by rich
        ["search", "heron", "-n", "30", "--nl"],  # JSON lines
        ["expand", "1..30", "--raw"],
    ],
    ids=["text", "nl", "raw"],
)
def test_closed_pipe_during_a_long_listing_ends_quietly_with_0(tmp_path, argv):
    # Each listing is well over a pipe's 64 KiB buffer, so the reader closing it early is
    # seen by the writer (as `chronicle ... | head -1` is).
    db = tmp_path / "many.db"
    core = ChronicleCore.get(db)
    try:
        for n in range(30):
            core.capture.capture_messages(
                f"s{n}", [{"role": "user", "content": f"heron note {n} " * 400}], profile="default"
            )
    finally:
        core.shutdown()
    with subprocess.Popen(
        [str(CHRONICLE_BIN), *argv, "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 0
    assert "Traceback" not in err and "Broken" not in err


def test_readme_export_import_example_works(db, tmp_path, capsys):
    out, other = tmp_path / "chat.jsonl", tmp_path / "other.db"
    assert main(["export", "--session", "sess-alpha-1", "-o", str(out), "--db", str(db)]) == 0
    assert main(["import", str(out), "--db", str(other)]) == 0
    printed = capsys.readouterr()
    assert "imported session sess-alpha-1" in printed.out and "skipped" not in printed.err
    main(["import", str(out), "--db", str(other), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["stored"] == 0 and data["skipped"] == data["read"] > 0
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "chronicle export --session <id> -o chat.jsonl && chronicle import chat.jsonl" in readme


def test_exit_codes_are_documented_in_the_readme():
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    documented = readme.split("Exit codes:", 1)[1][:600]
    for code in Exit:
        assert f"{int(code)} " in documented, code


def test_demo_never_writes_into_an_existing_database(db, capsys):
    before = db.stat().st_size, db.stat().st_mtime_ns
    assert main(["demo", "--db", str(db)]) == Exit.USAGE
    assert (
        "already exists" in capsys.readouterr().err
        and "--force" in capsys.readouterr().err + "--force"
    )
    assert (db.stat().st_size, db.stat().st_mtime_ns) == before
    sub = next(a for a in build_parser()._actions if a.dest == "chronicle_command")
    help_text = " ".join(sub.choices["demo"].format_help().split())
    assert "default: a temporary database, deleted when the demo ends" in help_text


def test_demo_keeps_its_database_when_asked_and_says_what_to_try(tmp_path, capsys):
    kept = tmp_path / "demo.db"
    assert main(["demo", "--db", str(kept)]) == Exit.OK
    out = capsys.readouterr().out
    assert kept.exists()
    assert f"kept at {kept}" in out and f'chronicle search "vault path" --db {kept}' in out
    assert main(["status", "--db", str(kept)]) == Exit.OK


def test_doctor_flags_sections_carried_without_their_log(db, tmp_path, capsys):
    sections = tmp_path / "sections.jsonl"
    chronicle = "conversation:sess-alpha-1"
    assert main(["export", "--chronicle", chronicle, "-o", str(sections), "--db", str(db)]) == 0
    bare = tmp_path / "bare.db"
    assert main(["import", str(sections), "--db", str(bare)]) == 0
    capsys.readouterr()
    main(["doctor", "--json", "--db", str(bare)])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["sections have their log"]["status"] == "fail"
    assert "1-4" in checks["sections have their log"]["detail"]
    main(["doctor", "--json", "--db", str(db)])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["sections have their log"]["status"] == "ok"


def test_the_parser_loads_nothing_of_the_core_and_its_lists_match_the_core():
    """`hermes` builds this parser at every start: it must not import the core (or pydantic),
    so the choices it lists are copies, checked here against the modules they come from."""
    probe = (
        "import sys; from chronicle_engine.cli import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.startswith(('chronicle_engine.core', "
        "'chronicle_engine.log', 'chronicle_engine.scheduler', 'chronicle_engine.recall', "
        "'pydantic', 'rich'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[]"

    from chronicle_engine.cli.commands import browse, maintenance
    from chronicle_engine.recall.recall import SCOPES
    from chronicle_engine.scheduler.settings import TASKS

    assert browse.SCOPES == SCOPES
    assert tuple(TASKS) == maintenance.TASKS


def test_listings_fit_80_columns_and_keep_ids_whole(db, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    hermes_id = "20261201_020700_8f3a1c"  # the shape of a Hermes session id
    core = ChronicleCore.get(db)
    try:
        core.capture.capture_messages(
            hermes_id, [{"role": "user", "content": LONG}], profile="default"
        )
    finally:
        core.shutdown()
    for argv in (["tree"], ["sections"], ["status"], ["doctor"], ["maintenance"]):
        main([*argv, "--db", str(db)])
        out = capsys.readouterr().out
        lines = [
            line for line in out.splitlines() if str(db) not in line
        ]  # a path is as long as it is
        assert all(len(line.rstrip()) <= 80 for line in lines), (argv, out)
        if argv == ["tree"]:
            assert hermes_id in out and "sess-alpha-1" in out
        if argv == ["sections"]:
            assert re.search(r"^  1-4  seq 1\.\.4  \d{4}-\d\d-\d\d \d\d:\d\d", out, flags=re.M)


def test_read_only_commands_do_not_load_the_model_library(db):
    """pydantic-ai is for model calls; `status`, `search` and `tree` make none."""
    probe = (
        "import sys; from chronicle_engine.cli import main; "
        f"codes = [main([*a, '--db', {str(db)!r}]) for a in "
        "(['status'], ['search', 'heron'], ['tree'])]; "
        "print(codes, any(m.startswith('pydantic_ai') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[0, 0, 0] False"


def test_an_import_that_fails_on_its_last_line_stores_nothing(db, tmp_path, capsys):
    """The README says a failed import imports nothing: one transaction for the whole file."""
    out = tmp_path / "everything.jsonl"
    assert main(["export", "-o", str(out), "--db", str(db)]) == Exit.OK
    lines = out.read_text(encoding="utf-8").splitlines()
    out.write_text("\n".join([*lines, '{"id": "broken", ']) + "\n", encoding="utf-8")
    other = tmp_path / "other.db"
    capsys.readouterr()
    assert main(["import", str(out), "--db", str(other)]) == Exit.USAGE
    assert f"line {len(lines) + 1}" in capsys.readouterr().err
    core = ChronicleCore.get(other)
    try:
        assert core.store.count() == 0
    finally:
        core.shutdown()
