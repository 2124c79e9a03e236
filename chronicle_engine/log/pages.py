"""Reading table rows straight from a SQLite file's pages, without SQLite.

A damaged file (a garbage header, a truncation, an overwritten page) makes SQLite refuse every
query that touches a bad page, and the b-tree's interior pages are on the way to every row. The
rows themselves sit on leaf pages, each of which describes itself: this module walks the file
(and its -wal, frame by frame) page by page, decodes every cell of every table-leaf page it can
parse, and yields (rowid, values). A page that does not parse is counted and skipped; nothing is
ever written. Bounded: each page is read once, an overflow chain is followed for at most as many
pages as the file holds.

The file format is SQLite's documented one (https://www.sqlite.org/fileformat2.html).
"""

from __future__ import annotations

import contextlib
import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Cells", "leaf_rows"]

_MAGIC = b"SQLite format 3\x00"
_LEAF_TABLE = 0x0D
_WAL_MAGIC = (0x377F0682, 0x377F0683)

Value = int | float | str | bytes | None


@dataclass
class Cells:
    """What a walk met."""

    pages: int = 0  # pages looked at (the file's and the WAL's frames)
    leaves: int = 0  # table-leaf pages among them
    rows: int = 0  # rows decoded
    bad_cells: int = 0  # cells on a leaf page that did not decode
    notes: list[str] = field(default_factory=list)


def _page_size(data: bytes | mmap.mmap) -> tuple[int, int]:
    """(page size, reserved bytes per page): from the header when it is sane, else 4096/0."""
    if data[:16] == _MAGIC and len(data) >= 100:
        (raw,) = struct.unpack(">H", data[16:18])
        size = 65536 if raw == 1 else raw
        reserved = data[20]
        if 512 <= size <= 65536 and size & (size - 1) == 0 and reserved < size - 480:
            return size, reserved
    return 4096, 0


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        byte = buf[at + i]
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    return (value << 8) | buf[at + 8], at + 9


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _record(payload: bytes) -> list[Value]:
    header_size, at = _varint(payload, 0)
    if header_size > len(payload) or header_size < 1:
        raise ValueError("record header out of bounds")
    types: list[int] = []
    while at < header_size:
        serial, at = _varint(payload, at)
        types.append(serial)
    if at != header_size:
        raise ValueError("record header overruns")
    values: list[Value] = []
    body = header_size
    for serial in types:
        if serial == 0:
            values.append(None)
        elif 1 <= serial <= 6:
            width = (1, 2, 3, 4, 6, 8)[serial - 1]
            chunk = payload[body : body + width]
            if len(chunk) != width:
                raise ValueError("integer past the record")
            values.append(_signed(int.from_bytes(chunk, "big"), width * 8))
            body += width
        elif serial == 7:
            chunk = payload[body : body + 8]
            if len(chunk) != 8:
                raise ValueError("real past the record")
            values.append(struct.unpack(">d", chunk)[0])
            body += 8
        elif serial in (8, 9):
            values.append(serial - 8)
        elif serial >= 12:
            width = (serial - 12) // 2
            chunk = payload[body : body + width]
            if len(chunk) != width:
                raise ValueError("text past the record")
            values.append(chunk.decode("utf-8") if serial & 1 else chunk)
            body += width
        else:
            raise ValueError(f"reserved serial type {serial}")
    return values


class _File:
    def __init__(self, data: bytes | mmap.mmap, page_size: int, reserved: int) -> None:
        self.data = data
        self.size = page_size
        self.usable = page_size - reserved
        self.count = len(data) // page_size

    def page(self, number: int) -> bytes | None:
        if not 1 <= number <= self.count:
            return None
        start = (number - 1) * self.size
        return self.data[start : start + self.size]


def _leaf_cells(
    page: bytes, header_at: int, usable: int, overflow: _File, cells: Cells
) -> Iterator[tuple[int, list[Value]]]:
    (count,) = struct.unpack(">H", page[header_at + 3 : header_at + 5])
    pointers = header_at + 8
    if pointers + 2 * count > usable:
        raise ValueError("cell pointer array past the page")
    x = usable - 35
    m = ((usable - 12) * 32 // 255) - 23
    for k in range(count):
        try:
            (offset,) = struct.unpack(">H", page[pointers + 2 * k : pointers + 2 * k + 2])
            if not pointers + 2 * count <= offset < usable:
                raise ValueError("cell outside the page")
            size, at = _varint(page, offset)
            rowid, at = _varint(page, at)
            rowid = _signed(rowid, 64)
            if size <= x:
                local = size
            else:
                local = m + (size - m) % (usable - 4)
                if local > x:
                    local = m
            payload = page[at : at + local]
            if len(payload) != local or at + local > usable:
                raise ValueError("payload past the page")
            if local < size:
                payload = _follow(payload, size, page[at + local : at + local + 4], overflow)
            yield rowid, _record(payload)
            cells.rows += 1
        except (ValueError, IndexError, UnicodeDecodeError, struct.error):
            cells.bad_cells += 1


def _follow(head: bytes, size: int, link: bytes, file: _File) -> bytes:
    """A payload's overflow chain (bounded by the file's page count)."""
    parts = [head]
    have = len(head)
    (next_page,) = struct.unpack(">I", link)
    for _ in range(file.count):
        if have >= size:
            break
        page = file.page(next_page)
        if page is None:
            raise ValueError("overflow page missing")
        chunk = page[4 : file.usable][: size - have]
        parts.append(chunk)
        have += len(chunk)
        (next_page,) = struct.unpack(">I", page[:4])
    if have < size:
        raise ValueError("overflow chain too short")
    return b"".join(parts)


def _pages(
    database: bytes | mmap.mmap, wal: bytes | mmap.mmap | None, size: int
) -> Iterator[tuple[int, bytes]]:
    """(page number, page) for every page of the file, then every frame of the WAL's current
    generation (its salts; older frames are pages the WAL was reset over)."""
    for i in range(len(database) // size):
        yield i + 1, database[i * size : (i + 1) * size]
    if wal is None or len(wal) < 32:
        return
    magic, _, wal_size = struct.unpack(">III", wal[:12])
    if magic not in _WAL_MAGIC or wal_size != size:
        return
    salts = wal[16:24]
    frame = 24 + size
    for at in range(32, len(wal) - frame + 1, frame):
        if wal[at + 8 : at + 16] != salts:
            continue
        (number,) = struct.unpack(">I", wal[at : at + 4])
        yield number, wal[at + 24 : at + frame]


@contextlib.contextmanager
def _mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    """The file's bytes, mapped read-only (an empty file as b"")."""
    with open(path, "rb") as handle:
        if path.stat().st_size == 0:
            yield b""
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield mapped


def leaf_rows(path: Path, cells: Cells | None = None) -> Iterator[tuple[int, int, list[Value]]]:
    """Every (page number, rowid, values) decodable from the table-leaf pages of `path` and its
    -wal, in file order (a row the WAL rewrote comes again later; rows of every table come, the
    caller picks)."""
    cells = cells if cells is not None else Cells()
    wal_path = path.with_name(path.name + "-wal")
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(_mapped(path))
        wal = stack.enter_context(_mapped(wal_path)) if wal_path.is_file() else None
        size, reserved = _page_size(database[:100])
        if database[:16] != _MAGIC:
            cells.notes.append("no SQLite header: pages read as 4096 bytes")
        file = _File(database, size, reserved)
        for number, page in _pages(database, wal, size):
            cells.pages += 1
            header_at = 100 if number == 1 else 0
            if len(page) < header_at + 8 or page[header_at] != _LEAF_TABLE:
                continue
            cells.leaves += 1
            try:
                for rowid, values in _leaf_cells(page, header_at, file.usable, file, cells):
                    yield number, rowid, values
            except (ValueError, IndexError, struct.error):
                cells.bad_cells += 1
