"""Segments allocated ahead: appends do not change a segment's length on disk (so an fdatasync
need not record a new size), the zeros after the last entry are the end of its data after a
crash (no torn-tail warning, nothing lost, appends resume right after the last entry), a sealed
or closed segment holds its entries only, and a file system that cannot allocate still takes
appends."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from rafka.shard import wal_stream
from rafka.shard.records import Record, RecordType
from rafka.shard.wal import Wal
from rafka.shard.wal_stream import Stream, encode_entry, read_entries


def commit(n: int) -> list[Record]:
    return [Record(RecordType.OFFSET_COMMIT, ("o", "g", "t", 0), {"offset": n, "metadata": "m" * 50})]


def recovered(path: Path, **kw: Any) -> tuple[Wal, list[int]]:
    w = Wal(path, set(range(4)), 4, fsync="never", **kw)
    out = [r.value["offset"] for records in w.recover() for r in records if r.type == RecordType.OFFSET_COMMIT]
    return w, out


def segments(path: Path) -> list[Path]:
    return sorted(path.rglob("*.wal"))


def committed(path: Path, count: int) -> Wal:
    """A log (``always``) with ``count`` commits, each fsynced on its own."""
    w = Wal(path, set(range(4)), 4, fsync="always")
    for n in range(count):
        w.append(commit(n))
        w.commit()
    return w


def test_appends_fill_space_allocated_ahead_without_changing_the_length_on_disk(tmp_path: Path) -> None:
    w = Wal(tmp_path, set(range(4)), 4, fsync="always")
    w.append(commit(0))
    w.commit()
    [seg] = segments(tmp_path)
    allocated = seg.stat().st_size
    [stream] = w.streams.values()
    assert allocated >= 64 << 10 and stream.size < 200, "a chunk allocated ahead of the first entry"
    for n in range(1, 100):
        w.append(commit(n))
        w.commit()
    assert seg.stat().st_size == allocated, "appends within the chunk leave the length alone"
    assert seg.read_bytes()[stream.size:] == bytes(allocated - stream.size), "zeros after the entries"
    w.close()
    assert seg.stat().st_size == stream.size, "closing cuts the zeros"
    assert recovered(tmp_path)[1] == list(range(100))


def test_a_crash_leaves_zeros_that_recovery_reads_as_the_end_and_appends_resume_after_the_entries(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _dead = committed(tmp_path, 10)
    # the process dies: nothing is closed, the zeros allocated ahead stay on disk
    with caplog.at_level(logging.WARNING, logger="rafka"):
        again, offsets = recovered(tmp_path)
        assert offsets == list(range(10))
        for n in range(10, 20):
            again.append(commit(n))
        again.commit()
        # dies again
        third, offsets = recovered(tmp_path)
    assert offsets == list(range(20)), "the new entries follow the old ones, not the zeros"
    assert [r.getMessage() for r in caplog.records] == [], "no torn tail, no damage: just the end of the data"
    third.close()


def test_a_torn_entry_before_the_zeros_is_a_torn_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    w = committed(tmp_path, 3)
    [stream] = w.streams.values()
    [seg] = segments(tmp_path)
    with open(seg, "r+b") as f:  # the last entry only half written when the power went
        f.seek(stream.size - 20)
        f.write(bytes(20))
    with caplog.at_level(logging.WARNING, logger="rafka"):
        after, offsets = recovered(tmp_path)
    assert offsets == [0, 1]
    [line] = [r.getMessage() for r in caplog.records if "torn tail" in r.getMessage()]
    assert int(line.split("truncating ")[1].split()[0]) < 200, "the zeros allocated ahead are not counted"
    assert not any("damage" in r.getMessage() for r in caplog.records)
    after.close()


def test_a_sealed_segment_holds_its_entries_only(tmp_path: Path) -> None:
    stream = Stream(tmp_path / "s", segment_bytes=1000)  # a stream alone: no background compaction
    for n in range(30):
        records = commit(n)
        stream.append(records, encode_entry(records))
    stream.sync()
    *sealed, active = sorted((tmp_path / "s").glob("*.wal"))
    assert sealed
    for seg in sealed:
        records, good, why, _ = read_entries(seg)
        assert why is None and good == seg.stat().st_size <= 1000, "no zeros left in a sealed segment"
    assert active.stat().st_size <= 1000, "never allocated past where it rolls"
    stream.close()
    again = Stream(tmp_path / "s", segment_bytes=1000)
    assert [r.value["offset"] for records in again.recover() for r in records] == list(range(30))
    again.close()


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EOPNOTSUPP])
def test_appends_go_on_where_space_cannot_be_allocated_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             error: int) -> None:
    def refuse(fd: int, offset: int, length: int) -> None:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(wal_stream.os, "posix_fallocate", refuse)
    w = Wal(tmp_path, set(range(4)), 4, fsync="always")
    for n in range(50):
        w.append(commit(n))
        w.commit()
    [seg] = segments(tmp_path)
    [stream] = w.streams.values()
    assert seg.stat().st_size == stream.size, "the file grows with its entries"
    monkeypatch.undo()
    w2, offsets = recovered(tmp_path)
    assert offsets == list(range(50))
    w2.close()


@pytest.mark.parametrize("damage", ["zeroed page", "length field"])
def test_damage_that_hides_where_the_next_entry_starts_is_still_told_from_a_torn_write(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    """A zeroed page, or a damaged length field, in the middle of the active segment: intact
    entries follow, so it is damage on disk (an error line, the bytes kept aside), not a torn
    write, though the bad entry does not say where the next one starts."""
    w = committed(tmp_path, 100)
    [stream] = w.streams.values()
    [seg] = segments(tmp_path)
    size = stream.size
    w.close()
    data = bytearray(seg.read_bytes())
    if damage == "zeroed page":
        data[4096:8192] = bytes(4096)
    else:
        at = 0
        for _ in range(40):  # the 41st entry's length field
            at += 8 + int.from_bytes(data[at:at + 4], "big")
        data[at:at + 4] = (1 << 30).to_bytes(4, "big")
    seg.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="rafka"):
        after, offsets = recovered(tmp_path)
    after.close()
    assert offsets == list(range(len(offsets))) and len(offsets) < 100
    assert any("damage on disk" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    [aside] = list(tmp_path.rglob("*.damaged-at-*"))
    assert aside.stat().st_size == size - seg.stat().st_size
