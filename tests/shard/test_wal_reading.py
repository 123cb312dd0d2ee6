"""Reading a write-ahead-log segment for recovery a chunk at a time (``read_chunks``) gives the
records, the good length and the verdict on a bad tail that reading it whole (``read_entries``)
gives, whatever the entries' sizes and whatever damage the segment holds."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafka.shard import wal_stream
from rafka.shard.handlers import ShardState
from rafka.shard.records import Record, RecordType
from rafka.shard.wal_stream import Stream, encode_entry, frame_entry, read_chunks, read_entries
from tests.shard.test_groups_context import GroupsTestContext

CHUNK, SMALL = 7, 64  # small enough for short examples to cross both


def chunks_of(path: Path) -> tuple[list[list[Any]], tuple[int, str | None, bool]]:
    gen = read_chunks(path)
    chunks = []
    while True:
        try:
            chunks.append(next(gen))
        except StopIteration as done:
            return chunks, done.value


records_st = st.lists(st.tuples(st.integers(1, 3), st.tuples(st.text(max_size=3), st.integers(0, 9)),
                                st.binary(max_size=40)), max_size=20)
# entries rafka could not have written, each with a checksum that holds
odd_st = st.sampled_from([
    b"\xc1",  # a byte msgpack never uses
    msgpack.packb([[1, ["g", 1], b"v"]] * 2) + b"\x01",  # bytes after the array (a small entry)
    msgpack.packb([[1, ["g", 1], b"v" * 30]] * 3) + b"\x01",  # the same, large
    b"\xdc\x00\x05" + msgpack.packb([1, ["g", 1], b"v" * 80]) + b"\xc1",  # a large array cut by a bad byte
    b"\xdc\x00\x05" + msgpack.packb([1, ["g", 1], b"v" * 30]) * 3,  # a large array shorter than its header
    msgpack.packb(5), msgpack.packb("abc"), msgpack.packb(b"ab"), msgpack.packb({1: 2}),  # not an array
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(records_st, max_size=12), odd=st.none() | st.tuples(st.integers(0, 12), odd_st),
       damage=st.sampled_from(["none", "cut", "flip", "zeros"]), where=st.floats(0, 1))
def test_a_segment_read_a_chunk_at_a_time_is_the_segment_read_whole(
        monkeypatch: pytest.MonkeyPatch, entries: list[list[tuple[int, tuple[str, int], bytes]]],
        odd: tuple[int, bytes] | None, damage: str, where: float) -> None:
    monkeypatch.setattr(wal_stream, "CHUNK", CHUNK)
    monkeypatch.setattr(wal_stream, "_SMALL_ENTRY", SMALL)
    parts = [encode_entry([Record(*r) for r in recs]) for recs in entries]
    if odd is not None:
        parts.insert(min(odd[0], len(parts)), frame_entry(odd[1]))  # its checksum holds, whatever it is
    data = b"".join(parts)
    at = int(where * max(len(data) - 1, 0))
    if damage == "cut":
        data = data[:at]
    elif damage == "flip" and data:
        data = data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:]
    elif damage == "zeros":
        data += bytes(100)  # allocated ahead, never written
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "00000000000000000000.wal"
        path.write_bytes(data)
        whole, good, why, damaged = read_entries(path)
        chunks, status = chunks_of(path)
    assert status == (good, why, damaged)
    expected = [tuple(r) for r in whole]
    got = [r for chunk in chunks for r in chunk]
    if why == "undecodable entry":  # a large one may have given whole chunks before its fault
        assert got[:len(expected)] == expected and len(got) - len(expected) <= 5
        assert len(got) == len(expected) or len(chunks[-1]) >= CHUNK, "none of its records after the fault"
    else:
        assert got == expected
    assert all(chunks), "no empty chunk"
    assert all(len(chunk) >= CHUNK for chunk in chunks[:-1]), "a chunk ends early only where the segment's data does"
    assert all(len(chunk) <= CHUNK - 1 + SMALL for chunk in chunks), "a large entry is cut into chunks"


def test_an_entry_of_many_records_is_read_a_chunk_at_a_time(tmp_path: Path) -> None:
    records = [Record(1, ("org", "g", "t", p), b"x" * 20) for p in range(2500)]
    path = tmp_path / "00000000000000000000.wal"
    path.write_bytes(encode_entry(records[:1]) + encode_entry(records[1:]))
    chunks, (good, why, damaged) = chunks_of(path)
    assert [len(c) for c in chunks] == [wal_stream.CHUNK, wal_stream.CHUNK, 500]
    assert [r for c in chunks for r in c] == [tuple(r) for r in records]
    assert (good, why, damaged) == (path.stat().st_size, None, False)


def test_a_meta_stream_with_a_torn_tail_is_replayed_to_its_last_good_entry_and_cut_there(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stream = Stream(tmp_path / "s", segment_bytes=1 << 20)
    for n in range(3):
        recs = [Record(1, ("org", "g", "t", p), n) for p in range(600)]
        stream.append(recs, encode_entry(recs))
    stream.sync()
    stream.close()
    [seg] = sorted((tmp_path / "s").glob("*.wal"))
    size = seg.stat().st_size
    with open(seg, "r+b") as f:  # the last entry torn half-way
        f.truncate(size - 1000)
    again = Stream(tmp_path / "s", segment_bytes=1 << 20)
    got = [r for chunk in again.recover(raw=True) for r in chunk]
    assert [r[2] for r in got] == [0] * 600 + [1] * 600, "the two whole entries, not the torn one"
    assert "truncating" in caplog.text
    more = [Record(1, ("org", "g", "t", 0), 9)]
    again.append(more, encode_entry(more))
    again.sync()
    again.close()
    third = Stream(tmp_path / "s", segment_bytes=1 << 20)
    assert [r[2] for chunk in third.recover(raw=True) for r in chunk][-2:] == [1, 9], "appends go on after the cut"
    third.close()


def test_recovery_lets_the_loop_run_after_each_list_of_records_the_wal_gives() -> None:
    """Each small data stream is a list of its own: thousands of topics must not make one long step
    between two answers to the gateway's pings."""

    class Wal:
        def recover(self, raw: bool = False) -> Any:
            return iter([[Record(RecordType.TOPIC, ("org", f"t{n}"), None)] for n in range(5)])

        def close(self) -> None: ...

    state = ShardState(0, GroupsTestContext().coord, wal=Wal())  # type: ignore[arg-type]
    replayed: list[Record] = []
    state.register_replay(RecordType.TOPIC, replayed.append)
    progress = []
    for count in state.recover():
        progress.append((count, len(replayed)))
    assert progress[:5] == [(n, n) for n in range(1, 6)], "a step of progress after each list, once it is replayed"

