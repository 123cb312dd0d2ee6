"""Log compaction (rafka.shard.log.cleaner) on a LogManager, with a hand-driven clock.

Every segment here holds one append (``segment.ms`` 1, appends 10 ms apart), so the
cleanable part is every segment but the active one.
"""

from __future__ import annotations

from typing import Any

import pytest

from rafka.protocol.cleaning import DELETE_HORIZON_BIT
from rafka.protocol.records import CompressionType, SimpleRecord, build_batch, iter_records, parse_header, split_batches
from rafka.shard.log.errors import Errors
from rafka.shard.log.manager import LogManager
from rafka.shard.records import Record, RecordType

ORG = "acme"
COMPACT = {"cleanup.policy": "compact", "segment.ms": "1"}
DAY = 86_400_000


class Log:
    """One compacted partition driven through the manager's handlers and replay."""

    def __init__(self, configs: dict[str, str] | None = None) -> None:
        self.manager = LogManager()
        self.records: list[Record] = []
        self.configs = {**COMPACT, **(configs or {})}
        self.now = 1_000

    def apply(self, records: list[Record]) -> list[Record]:
        for r in records:
            self.manager.replay(r)
        self.records += records
        return records

    def put(self, *kvs: tuple[bytes, bytes | None], topic: str = "t", **kw: Any) -> int:
        self.now += 10
        data = build_batch([SimpleRecord(k, v, self.now) for k, v in kvs], **kw)
        records, resp = self.manager.produce(ORG, {"acks": -1, "timeout_ms": 100, "partitions": [
            {"topic": topic, "partition": 0, "records": data, "configs": self.configs}]}, self.now)
        self.apply(records)
        assert resp["partitions"][0]["error_code"] == Errors.NONE, resp
        return int(resp["partitions"][0]["base_offset"])

    def clean(self, at: int | None = None) -> list[Record]:
        return self.apply(self.manager.clean(self.now if at is None else at))

    def fetch(self, offset: int = 0, isolation_level: int = 0) -> tuple[list[bytes], list[tuple[int, bytes | None, bytes | None, int]]]:
        [p] = self.manager.fetch(ORG, {"max_bytes": 2**31 - 1, "isolation_level": isolation_level, "partitions": [
            {"topic": "t", "partition": 0, "fetch_offset": offset, "partition_max_bytes": 2**30}]})["partitions"]
        batches = [bytes(b) for b in split_batches(p["records"])]
        return batches, [(r.offset, r.key, r.value, r.timestamp) for b in batches for r in iter_records(b)
                         if r.offset >= offset]

    @property
    def plog(self) -> Any:
        return self.manager.log(ORG, "t", 0)


def test_a_clean_keeps_the_last_value_of_each_key_at_its_offset() -> None:
    log = Log()
    log.put((b"a", b"1"), (b"b", b"1"))
    log.put((b"a", b"2"))
    log.put((b"c", b"1"), (b"a", b"3"))
    log.put((b"b", b"2"))  # the active segment: never cleaned
    _, before = log.fetch()
    [record] = log.clean()
    assert record.type == RecordType.PARTITION_COMPACTED and record.value["upto"] == 5
    _, after = log.fetch()
    assert [(o, k, v) for o, k, v, _ in after] == [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"a", b"3"), (5, b"b", b"2")]
    assert {o: ts for o, _, _, ts in after} == {o: ts for o, _, _, ts in before if o in (1, 3, 4, 5)}
    assert log.plog.log_end_offset == 6 and log.plog.log_start_offset == 0
    assert log.clean() == []  # nothing dirty is left


def test_a_fetch_of_a_removed_offset_gets_the_next_batch_holding_records_at_or_past_it() -> None:
    log = Log()
    log.put((b"a", b"1"))
    log.put((b"a", b"2"), (b"b", b"1"))
    log.put((b"a", b"3"))
    log.put((b"z", b"1"))
    log.clean()
    batches, records = log.fetch(1)  # offset 1 (a=2) is gone; b=1 at 2 shares its batch
    assert [parse_header(b).base_offset for b in batches] == [1, 3, 4]
    assert [(o, k) for o, k, _, _ in records] == [(2, b"b"), (3, b"a"), (4, b"z")]
    batches, _ = log.fetch(0)  # the first batch lost its only record and is not the range's end: gone
    assert parse_header(batches[0]).base_offset == 1


def _cleaned_then_slightly_dirty(log: Log) -> Log:
    """A big segment cleaned, then a small dirty one: a dirty ratio well under 0.5."""
    log.put(*[(b"k%d" % i, b"x" * 50) for i in range(20)])
    log.put((b"k0", b"y"))
    assert len(log.clean()) == 1  # all dirty: ratio 1
    log.put((b"k1", b"y"))  # makes the previous segment cleanable
    log.put((b"k2", b"y"))
    return log


def test_no_clean_while_the_dirty_part_is_at_most_half_the_cleanable_bytes() -> None:
    assert _cleaned_then_slightly_dirty(Log()).clean() == []
    assert len(_cleaned_then_slightly_dirty(Log({"min.cleanable.dirty.ratio": "0.01"})).clean()) == 1


def test_max_compaction_lag_forces_a_clean_below_the_ratio() -> None:
    log = _cleaned_then_slightly_dirty(Log({"max.compaction.lag.ms": "1000"}))
    assert log.clean() == [] and len(log.clean(at=log.now + 1000)) == 1


def test_min_compaction_lag_holds_recent_segments_back() -> None:
    log = Log({"min.compaction.lag.ms": "1000"})
    log.put((b"a", b"1"))
    log.put((b"a", b"2"))
    log.put((b"b", b"1"))
    assert log.clean() == []
    assert len(log.clean(at=log.now + 1000)) == 1
    assert [k for _, k, _, _ in log.fetch()[1]] == [b"a", b"b"]


def test_a_tombstone_stays_until_its_delete_horizon_then_goes() -> None:
    log = Log({"delete.retention.ms": "5000"})
    log.put((b"a", b"1"), (b"b", b"1"))
    log.put((b"a", None))
    log.put((b"c", b"1"))
    log.clean()
    batches, records = log.fetch()
    assert [(o, k, v) for o, k, v, _ in records] == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    tombstone = parse_header(batches[1])
    assert tombstone.attributes & DELETE_HORIZON_BIT and tombstone.base_timestamp == log.now + 5000
    assert [ts for o, _, _, ts in records if o == 2] == [1020]  # the record keeps its own timestamp
    log.put((b"d", b"1"))
    log.put((b"e", b"1"))
    log.clean(at=log.now + 4000)  # before the horizon: the tombstone stays
    assert (2, b"a", None) in [(o, k, v) for o, k, v, _ in log.fetch()[1]]
    log.put((b"f", b"1"))
    log.put((b"g", b"1"))
    log.clean(at=log.now + 6000)
    assert b"a" not in [k for _, k, _, _ in log.fetch()[1]]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_a_rebuilt_batch_keeps_its_codec(codec: CompressionType) -> None:
    log = Log()
    log.put((b"a", b"1"), (b"b", b"1"), (b"a", b"2"), compression=codec)
    log.put((b"z", b"1"))
    log.clean()
    batches, records = log.fetch()
    assert parse_header(batches[0]).compression == codec and parse_header(batches[0]).last_offset_delta == 2
    assert [(o, k, v) for o, k, v, _ in records] == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"z", b"1")]


def test_an_open_transaction_stops_the_clean_and_an_aborted_one_is_removed() -> None:
    log = Log()
    log.put((b"a", b"1"))
    log.put((b"a", b"aborted"), producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    log.put((b"b", b"1"))
    log.put((b"a", b"2"))
    log.put((b"z", b"1"))
    assert [r.value["upto"] for r in log.clean()] == [1]  # only below the open transaction
    log.apply(log.manager.write_markers(ORG, {"producer_id": 7, "producer_epoch": 0, "committed": False,
                                               "partitions": [["t", 0]]}, log.now)[0])
    log.put((b"y", b"1"))
    log.clean()
    offsets = [(o, k, v) for o, k, v, _ in log.fetch()[1]]
    assert (1, b"a", b"aborted") not in offsets and (3, b"a", b"2") in offsets and (0, b"a", b"1") not in offsets


def test_a_producers_last_batch_stays_as_an_empty_header() -> None:
    log = Log()
    log.put((b"a", b"1"), producer_id=9, producer_epoch=0, base_sequence=0)
    log.put((b"a", b"2"))
    log.put((b"z", b"1"))
    log.clean()
    batches, records = log.fetch()
    first = parse_header(batches[0])
    assert (first.base_offset, first.records_count, first.producer_id, first.base_sequence) == (0, 0, 9, 0)
    assert len(batches[0]) == 61 and [k for _, k, _, _ in records] == [b"a", b"z"]
    # the producer's next batch is still in sequence
    assert log.put((b"b", b"1"), producer_id=9, producer_epoch=0, base_sequence=1) == 3


def test_replaying_the_records_rebuilds_the_compacted_log() -> None:
    log = Log({"delete.retention.ms": "0"})
    for i in range(30):
        log.put((b"k%d" % (i % 4), b"v%d" % i), *([(b"gone", None)] if i % 7 == 0 else []))
        if i % 5 == 4:
            log.clean()
    fresh = LogManager()
    for r in log.records:
        fresh.replay(r)
    again = fresh.log(ORG, "t", 0)
    assert [s.batches for s in again.segments] == [s.batches for s in log.plog.segments]
    assert again.first_dirty_offset == log.plog.first_dirty_offset > 0
    compactions = [r for r in log.records if r.type == RecordType.PARTITION_COMPACTED]
    # the write-ahead log keeps the last compaction, the batches past its range written before it
    # (the active segment's), and what follows
    last = compactions[-1]
    at = log.records.index(last)
    kept = [r for r in log.records[:at] if r.type == RecordType.PARTITION_BATCH
            and parse_header(r.value["batch"]).base_offset >= last.value["upto"]]
    tail = LogManager()
    for r in kept + log.records[at:]:
        tail.replay(r)
    assert [b for s in tail.log(ORG, "t", 0).segments for b in s.batches] == [
        b for s in log.plog.segments for b in s.batches]


def test_a_delete_only_topic_is_never_cleaned() -> None:
    log = Log({"cleanup.policy": "delete"})
    log.put((b"a", b"1"))
    log.put((b"a", b"2"))
    log.put((b"a", b"3"))
    assert log.clean() == []


def test_a_clean_finished_in_the_background_is_written_only_if_its_log_did_not_change_meanwhile() -> None:
    from rafka.shard.log import cleaner

    log = Log({"retention.ms": "100000", "cleanup.policy": "compact,delete"})
    log.put((b"a", b"1"))
    log.put((b"a", b"2"))
    log.put((b"b", b"1"))
    [(key, job)] = log.manager.due_cleans(log.now)
    log.put((b"c", b"1"))  # appends while the job runs change nothing it read
    assert log.manager.compacted(key, job, cleaner.run(job)) is not None
    [(key, job)] = log.manager.due_cleans(log.now)
    log.apply(log.manager.retention(log.now + 100_000 - 15))  # retention dropped segments the job read
    assert log.plog.log_start_offset > 0 and log.manager.compacted(key, job, cleaner.run(job)) is None
    log.put((b"d", b"1"))
    log.put((b"e", b"1"))
    [(key, job)] = log.manager.due_cleans(log.now)
    log.clean()  # another clean got there first
    assert log.manager.compacted(key, job, cleaner.run(job)) is None


def test_a_fetch_from_the_log_start_reads_past_segments_a_clean_emptied() -> None:
    log = Log({"segment.bytes": "100"})  # a group per segment: the first one ends up empty and goes
    log.put((b"a", b"1"))
    log.put((b"b", b"1"))
    log.put((b"a", b"2"))
    log.put((b"c", b"1"))
    log.clean()
    assert log.plog.segments[0].base_offset == 1
    assert [(o, k) for o, k, _, _ in log.fetch(0)[1]] == [(1, b"b"), (2, b"a"), (3, b"c")]


def test_a_log_whose_clean_fails_is_not_tried_again_and_does_not_hold_back_the_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rafka.shard.log import cleaner

    log = Log()
    for value in (b"1", b"2", b"3"):
        log.put((b"a", value))
    monkeypatch.setattr(cleaner, "MAX_CLEANED_BYTES", 50)  # too large to write in one WAL entry
    assert log.clean() == [] and log.plog.uncleanable and log.manager.due_cleans(log.now) == []
    monkeypatch.undo()
    for value in (b"1", b"2", b"3"):
        log.put((b"a", value), topic="u")  # sorts after t
    assert [r.key for r in log.clean()] == [(ORG, "u", 0)]


def test_a_delete_retention_of_forever_keeps_tombstones_and_still_cleans() -> None:
    log = Log({"delete.retention.ms": str(2**63 - 1)})
    log.put((b"a", b"1"))
    log.put((b"a", None))
    log.put((b"b", b"1"))
    assert len(log.clean()) == 1
    assert [(o, k, v) for o, k, v, _ in log.fetch()[1]] == [(1, b"a", None), (2, b"b", b"1")]


def test_a_timestamp_lookup_finds_a_record_the_clean_left_not_one_it_removed() -> None:
    log = Log({"message.timestamp.type": "LogAppendTime"})
    log.put((b"a", b"1"), (b"b", b"1"))  # appended at 1010: a at 0 is removed below
    log.put((b"a", b"2"))
    log.put((b"z", b"1"))
    log.clean()

    def lookup(timestamp: int) -> tuple[int, int]:
        [p] = log.manager.list_offsets(ORG, {"partitions": [{"topic": "t", "partition": 0, "timestamp": timestamp}]})[
            "partitions"]
        return p["offset"], p["timestamp"]

    assert lookup(1000) == (1, 1010) and lookup(1015) == (2, 1020)
