"""Imports are all or nothing and name the bad line; the log takes only events it can read
back; exports and backups never write through a symlink."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chronicle_engine.cli import Exit, main
from chronicle_engine.core import ChronicleCore

HEADER = {"format": "chronicle-export", "version": 1, "kind": "events"}


def good_events(n: int) -> list[dict[str, Any]]:
    return [
        {
            "seq": i + 1,
            "id": f"imp{i:06d}",
            "namespace": "chronicle.chat",
            "type": "MessageCaptured",
            "version": 1,
            "created_at": "2026-01-01T00:00:00+00:00",
            "session": "imported",
            "payload": {
                "role": "user",
                "message": {"role": "user", "content": f"imported message {i}"},
                "fingerprint": f"fp{i}",
                "speaker": "person",
                "text": f"imported message {i}",
            },
        }
        for i in range(n)
    ]


def write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def encoded(records: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(r).encode() for r in [HEADER, *records]]


def count(db: Path) -> int:
    core = ChronicleCore.get(db)
    try:
        return core.store.count()
    finally:
        core.shutdown()


BAD_LINES: dict[str, bytes] = {
    "malformed json": b'{"id": "broken", ',
    "nul byte": json.dumps(good_events(1)[0]).replace("imp000000", "nul\\u0000").encode()[:-1]
    + b"\x00}",
    "invalid utf-8": b'{"id": "caf\xe9"}',
    "unknown type": json.dumps({**good_events(1)[0], "id": "x1", "type": "NoSuchEvent"}).encode(),
    "version 999": json.dumps({**good_events(1)[0], "id": "x2", "version": 999}).encode(),
    "payload its model refuses": json.dumps(
        {**good_events(1)[0], "id": "x3", "payload": {"role": 7}}
    ).encode(),
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_a_bad_line_after_twelve_hundred_good_ones_commits_nothing_and_names_its_line(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "target.db"
    lines = encoded(good_events(1200)) + [BAD_LINES[kind]]
    path = write(tmp_path / "export.jsonl", lines)
    assert main(["import", str(path), "--db", str(db)]) == Exit.USAGE
    err = capsys.readouterr().err
    assert "line 1202" in err, err  # the header is line 1
    assert count(db) == 0  # nothing of the file was committed
    good = write(tmp_path / "good.jsonl", encoded(good_events(1200)))
    assert main(["import", str(good), "--db", str(db)]) == Exit.OK
    assert count(db) == 1200


def test_export_and_backup_refuse_a_dangling_symlink(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    good = write(tmp_path / "good.jsonl", encoded(good_events(3)))
    assert main(["import", str(good), "--db", str(db)]) == Exit.OK
    for command in (["export", "-o"], ["backup"]):
        target = tmp_path / f"elsewhere-{command[0]}"
        link = tmp_path / f"link-{command[0]}"
        link.symlink_to(target)  # dangling: the target does not exist
        assert main([*command, str(link), "--db", str(db)]) != Exit.OK
        assert not target.exists()  # nothing was written through the link
