"""Partition logs through the real write-ahead log: what a restart rebuilds after the WAL has
dropped the segments below a log start."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rafka.protocol.records import SimpleRecord, build_batch, parse_header
from rafka.shard.data import DataPlane
from rafka.shard.log.manager import LogManager
from rafka.shard.log.producers import PRODUCER_ID_EXPIRATION_MS
from rafka.shard.records import Record, RecordType
from rafka.shard.wal import EntryTooLarge, Wal
from rafka.shard.wal_stream import encode_entry

ORG, PARTITIONS = "acme", 4
CONFIGS = {"retention.ms": "3600000"}


class Shard:
    """A LogManager whose records go through a Wal with tiny segments, as the runtime's do."""

    def __init__(self, path: Path, segment_bytes: int = 400) -> None:
        self.path = path
        self.segment_bytes = segment_bytes
        self.wal = Wal(path, set(range(PARTITIONS)), PARTITIONS, fsync="never", segment_bytes=segment_bytes)
        self.logs = LogManager(coordinator_partitions=PARTITIONS)

    def apply(self, records: list[Record]) -> None:
        self.wal.append(records)
        for r in records:
            self.logs.replay(r)
        self.wal.commit()  # as the runtime does before it replies

    def produce(self, now_ms: int, batch: dict[str, Any] | None = None, **part: Any) -> dict[str, Any]:
        data = build_batch([SimpleRecord(b"k", b"v" * 50, now_ms)], **(batch or {}))
        op = {"acks": -1, "partitions": [{"topic": "t", "partition": 0, "records": data, "topic_id": "A", **part}]}
        records, resp = self.logs.produce(ORG, op, now_ms)
        self.apply(records)
        return resp["partitions"][0]  # type: ignore[no-any-return]

    def delete_records(self, offset: int) -> None:
        records, _ = self.logs.delete_records(ORG, {"partitions": [{"topic": "t", "partition": 0, "offset": offset}]})
        self.apply(records)

    def restart(self) -> Shard:
        self.wal.close()
        fresh = Shard(self.path, self.segment_bytes)
        for records in fresh.wal.recover():
            for r in records:
                fresh.logs.replay(r)
        return fresh

    def state(self) -> tuple[Any, ...]:
        log = self.logs.logs[(ORG, "t", 0)]
        offsets = [parse_header(b).base_offset for s in log.segments for b in s.batches]
        return (log.log_start_offset, log.log_end_offset, log.overrides, log.config_version, log.topic_id,
                [o for o in offsets if o >= log.log_start_offset])


@pytest.mark.parametrize("org", [".", "..", "%2E", "a/b", "café & co", "%"])
def test_an_organisation_named_anything_a_users_file_allows_keeps_its_records_across_a_restart(
        tmp_path: Path, org: str) -> None:
    """An organisation's partition logs live under a directory named after it: ``.`` and ``..``
    named the partition directory itself and its parent, so the records written were not found
    again after a restart (every acknowledged record lost); each name has its own directory."""
    shard = Shard(tmp_path / "data")
    for name in (org, ORG):
        data = build_batch([SimpleRecord(b"k", name.encode(), 1000)])
        records, resp = shard.logs.produce(name, {"acks": -1, "partitions": [
            {"topic": "t", "partition": 0, "records": data, "topic_id": "A"}]}, 1000)
        assert resp["partitions"][0]["error_code"] == 0
        shard.apply(records)
    assert not (tmp_path / "data" / "logs" / "t").exists() and not (tmp_path / "t").exists()
    after = shard.restart()
    assert {o: after.logs.log_end_offset(o, "t", 0) for o in (org, ORG)} == {org: 1, ORG: 1}


def test_a_restart_after_the_wal_dropped_segments_rebuilds_the_log(tmp_path: Path) -> None:
    shard = Shard(tmp_path)
    shard.produce(0, configs={}, config_version=0)
    shard.apply(shard.logs.update_configs(ORG, {"topic": "t", "configs": CONFIGS, "config_version": 1})[0])
    for i in range(1, 20):
        shard.produce(i * 1000, configs=CONFIGS, config_version=1)
    shard.delete_records(15)
    before = shard.state()
    assert before == (15, 20, CONFIGS, 1, "A", [15, 16, 17, 18, 19])
    assert len(list((tmp_path / "logs").rglob("*.wal"))) < 5, "the WAL dropped the segments below offset 15"
    after = shard.restart()
    assert after.state() == before, "records, offsets, configs and topic id all come back"
    assert after.produce(30_000, configs=CONFIGS, config_version=1)["base_offset"] == 20


def test_offsets_never_go_back_after_every_record_was_deleted(tmp_path: Path) -> None:
    shard = Shard(tmp_path)
    for i in range(12):
        shard.produce(i * 1000, configs=CONFIGS, config_version=1)
    shard.delete_records(12)
    after = shard.restart()
    assert after.state() == (12, 12, CONFIGS, 1, "A", [])
    assert after.produce(20_000, configs=CONFIGS, config_version=1)["base_offset"] == 12


def test_a_deleted_topic_leaves_no_segments_and_does_not_hold_back_its_successor(tmp_path: Path) -> None:
    shard = Shard(tmp_path)
    for i in range(12):
        shard.produce(i * 1000, configs=CONFIGS, config_version=1)  # topic id "A", offsets 0..11
    segments = lambda: len(list((tmp_path / "logs").rglob("*.wal")))
    assert segments() > 3
    shard.apply(shard.logs.delete_partitions(ORG, {"topic": "t", "partitions": None, "topic_id": "A"})[0])
    assert segments() == 0, "the deleted topic's segments are gone"
    for i in range(20):
        shard.produce(20_000 + i, topic_id="B", configs={}, config_version=0)
    shard.delete_records(15)
    [stream] = shard.wal.streams.values()
    sealed = [int(p.stem) for p in stream.segments() if int(p.stem) < stream.seq]
    assert sealed and all(stream.segment_last_offset.get(seq, -1) >= 15 for seq in sealed), \
        "only segments holding offsets at or past the log start are left, whatever offsets the old topic reached"
    before = shard.state()
    assert before == (15, 20, {}, 0, "B", [15, 16, 17, 18, 19])
    assert shard.restart().state() == before


def test_producers_and_transactions_survive_the_drop_of_their_first_segments(tmp_path: Path) -> None:
    """Kafka keeps producer snapshots when the log start moves; so does every PARTITION_TRUNCATE."""
    shard = Shard(tmp_path)
    txn = {"producer_id": 7, "producer_epoch": 0, "transactional": True}
    shard.produce(0, batch={**txn, "base_sequence": 0})  # offset 0 opens producer 7's transaction
    shard.produce(0, batch={"producer_id": 8, "producer_epoch": 0, "base_sequence": 0, "transactional": True})
    shard.apply(shard.logs.write_markers(ORG, {"producer_id": 8, "producer_epoch": 0, "committed": False,
                                                "partitions": [["t", 0]]}, 0)[0])  # aborts 8 at offset 2
    for i in range(3, 20):
        shard.produce(i * 1000, batch={"producer_id": 9, "producer_epoch": 3, "base_sequence": i - 3})
    shard.delete_records(15)

    def txn_state(s: Shard) -> tuple[Any, ...]:
        log = s.logs.logs[(ORG, "t", 0)]
        return (log.producers.snapshot(), dict(log.ongoing_txns), list(log.aborted_txns), log.last_stable_offset)

    before = txn_state(shard)
    assert before[1] == {7: 0} and before[3] == 15, "producer 7's transaction is still open (LSO at the log start)"
    after = shard.restart()
    assert txn_state(after) == before
    retry = after.produce(30_000, batch={"producer_id": 9, "producer_epoch": 3, "base_sequence": 16})
    assert retry["base_offset"] == 19, "a retried batch is still recognised as a duplicate"
    fenced = after.produce(30_000, batch={"producer_id": 9, "producer_epoch": 2, "base_sequence": 0})
    assert fenced["error_code"] == 47, "an older epoch is still fenced (INVALID_PRODUCER_EPOCH)"


def test_damage_inside_a_sealed_segment_loses_that_segment_only(tmp_path: Path) -> None:
    """A sealed segment was fsynced whole when it rolled: a bad checksum in it is damage on disk,
    and the segments after it (acknowledged records) are replayed, not dropped."""
    shard = Shard(tmp_path)
    for i in range(12):
        shard.produce(i * 1000, configs=CONFIGS, config_version=1)
    [stream] = shard.wal.streams.values()
    segments = stream.segments()
    assert len(segments) >= 4
    damaged = segments[1]
    data = bytearray(damaged.read_bytes())
    data[-5] ^= 0xFF  # inside the payload of the segment's last entry
    damaged.write_bytes(bytes(data))
    lost = stream.segment_last_offset[int(damaged.stem)]  # one record per batch: its last entry is this one
    after = shard.restart()
    start, end, *_, offsets = after.state()
    assert (start, end) == (0, 12)
    assert offsets == [o for o in range(12) if o != lost], "every batch but the damaged one is back"
    assert after.produce(20_000, configs=CONFIGS, config_version=1)["base_offset"] == 12
    assert len(list((tmp_path / "logs").rglob("*.wal"))) >= len(segments), "no segment was deleted"


class StartTimer:
    """Keeps what the data plane schedules at start."""

    def __init__(self) -> None:
        self.scheduled: dict[str, tuple[int, Any]] = {}

    def schedule(self, key: str, delay_ms: int, callback: Any) -> None:
        self.scheduled[key] = (delay_ms, callback)


def test_a_producer_that_expired_before_a_restart_stays_expired_after_it(tmp_path: Path) -> None:
    """The expiry is written to the partition's own stream, after the batches that made the
    producer known, so replay forgets it again."""
    shard = Shard(tmp_path)
    shard.produce(0, batch={"producer_id": 9, "producer_epoch": 3, "base_sequence": 0})
    now = PRODUCER_ID_EXPIRATION_MS + 1
    expiry = shard.logs.retention(now)
    assert {shard.wal.stream_key(r)[0] for r in expiry} == {"logs"}, \
        "only the partition's own stream: another shard may own the producer-id partition's"
    shard.apply(expiry)
    after = shard.restart()
    assert 9 not in after.logs.logs[(ORG, "t", 0)].producers.entries
    back = after.produce(now, batch={"producer_id": 9, "producer_epoch": 2, "base_sequence": 0})
    assert back["error_code"] == 0, "a producer id that expired starts afresh, whatever its epoch"
    timer = StartTimer()
    DataPlane(0, timer).start(now)
    assert timer.scheduled["log-retention"][0] == 0, "the first retention pass runs as soon as the shard has recovered"


def test_a_deleted_topic_is_remembered_across_a_restart(tmp_path: Path) -> None:
    shard = Shard(tmp_path)
    for i in range(12):  # several sealed segments
        shard.produce(i, incarnation=3)
    records, _ = shard.logs.delete_partitions(ORG, {"topic": "t", "partitions": [0], "topic_id": "A",
                                                     "incarnation": 3})
    shard.apply(records)
    assert not [p for p in tmp_path.rglob("*.wal") if "logs" in str(p)], "the dead log's files are deleted"
    assert list((tmp_path / "logs").iterdir()) == [], "and its directories"
    after = shard.restart()
    assert after.logs.logs == {} and after.logs.dropped == {(ORG, "t"): 3}
    assert after.produce(20, incarnation=3)["error_code"] == 6, "a stale produce is still refused"


def test_deleted_topics_hold_no_files_and_a_crash_before_the_removal_is_cleaned_up(tmp_path: Path) -> None:
    shard = Shard(tmp_path)
    for n in range(20):
        for partition in range(5):
            data = build_batch([SimpleRecord(b"k", b"v", 0)])
            op = {"partitions": [{"topic": f"t{n}", "partition": partition, "records": data, "incarnation": 1}]}
            shard.apply(shard.logs.produce(ORG, op, 0)[0])
        shard.apply(shard.logs.delete_partitions(ORG, {"topic": f"t{n}", "partitions": list(range(5)),
                                                        "incarnation": 1})[0])
    assert [k for k in shard.wal.streams if k[0] == "logs"] == [], "no data stream stays open"
    assert list((tmp_path / "logs").iterdir()) == []
    # a crash between writing a drop and removing the stream: recovery removes it
    key = shard.wal.stream_key(Record(RecordType.PARTITION_TRUNCATE, (ORG, "crashed", 0), None))
    stream = shard.wal._stream(key)
    for r in ([Record(RecordType.PARTITION_BATCH, (ORG, "crashed", 0), {"batch": build_batch(
            [SimpleRecord(b"k", b"v", 0)]), "append_ms": 0, "roll": True})],
              [Record(RecordType.PARTITION_TRUNCATE, (ORG, "crashed", 0), None)]):
        stream.append(r, encode_entry(r))
    after = shard.restart()
    assert after.logs.logs == {} and [k for k in after.wal.streams if k[0] == "logs"] == []
    assert list((tmp_path / "logs").iterdir()) == []


def test_compaction_bounds_the_wal_and_a_restart_rebuilds_the_compacted_log(tmp_path: Path) -> None:
    shard = Shard(tmp_path)
    compact = {"cleanup.policy": "compact", "segment.ms": "1"}
    for i in range(200):  # 4 keys written over and over, a segment per append
        data = build_batch([SimpleRecord(b"k%d" % (i % 4), b"v%d" % i + b"." * 40, i * 10)])
        shard.apply(shard.logs.produce(ORG, {"acks": -1, "partitions": [
            {"topic": "t", "partition": 0, "records": data, "configs": compact}]}, i * 10)[0])
        if i % 20 == 19:
            shard.apply(shard.logs.clean(i * 10))
    files = list((tmp_path / "logs").rglob("*.wal"))
    assert len(files) <= 6 and sum(f.stat().st_size for f in files) < 3_000, "superseded WAL segments deleted"
    log = shard.logs.logs[(ORG, "t", 0)]
    before = [(b, s.base_offset, s.next_offset) for s in log.segments for b in s.batches]
    assert len(before) <= 24 and log.log_end_offset == 200
    after = shard.restart()
    log = after.logs.logs[(ORG, "t", 0)]
    assert [(b, s.base_offset, s.next_offset) for s in log.segments for b in s.batches] == before
    assert (log.log_start_offset, log.log_end_offset) == (0, 200)


def test_a_restart_after_compactions_is_not_reported_as_damage(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Write-ahead-log segments a compaction supersedes are deleted, so a restart replays batches
    with offsets missing between them until the compaction record replaces them; that was logged
    at ERROR as "write-ahead log damage" on every such restart (an alert for nothing)."""
    shard = Shard(tmp_path, segment_bytes=4000)
    compact = {"cleanup.policy": "compact", "segment.ms": "500", "min.cleanable.dirty.ratio": "0.01",
               "delete.retention.ms": "1000"}
    now = 0
    for rnd in range(8):
        for _ in range(10):
            data = build_batch([SimpleRecord(b"k%d" % (i % 10), None if rnd == 6 and i % 10 == 9 else
                                             b"r%d-%d" % (rnd, i) * 4, now) for i in range(50)])
            shard.apply(shard.logs.produce(ORG, {"acks": -1, "partitions": [
                {"topic": "t", "partition": 0, "records": data, "configs": compact}]}, now)[0])
            now += 10
        now += 700
        shard.apply(shard.logs.clean(now))
    log = shard.logs.logs[(ORG, "t", 0)]
    before = [(b, s.base_offset, s.next_offset) for s in log.segments for b in s.batches]
    with caplog.at_level("INFO"):
        after = shard.restart()
    log = after.logs.logs[(ORG, "t", 0)]
    assert [(b, s.base_offset, s.next_offset) for s in log.segments for b in s.batches] == before
    assert [r.getMessage() for r in caplog.records if r.levelname in ("ERROR", "WARNING")] == []
    assert any("not in the write-ahead log" in r.getMessage() for r in caplog.records), "the case was met"


def test_superseded_segments_go_only_once_the_compaction_is_durable_and_never_the_compactions_own(
        tmp_path: Path) -> None:
    wal = Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="batch", segment_bytes=400,
              inline_fsync_under_ms=0)  # every pass on the syncer thread
    logs = LogManager(coordinator_partitions=PARTITIONS)
    compact = {"cleanup.policy": "compact", "segment.ms": "1"}

    def write(records: list[Record]) -> Any:
        wal.append(records)
        for r in records:
            logs.replay(r)
        return wal.commit()

    def produce(i: int) -> Any:
        data = build_batch([SimpleRecord(b"k%d" % (i % 3), b"v%d" % i + b"." * 60, i * 10)])
        return write(logs.produce(ORG, {"acks": -1, "partitions": [
            {"topic": "t", "partition": 0, "records": data, "configs": compact}]}, i * 10)[0])

    for i in range(30):
        fut = produce(i)
    fut.result()
    files = sorted((tmp_path / "logs").rglob("*.wal"))
    [record] = logs.clean(300)
    assert len(encode_entry([record])) > 400  # a segment of its own
    wal.append([record])
    logs.replay(record)
    assert sorted((tmp_path / "logs").rglob("*.wal"))[:len(files)] == files  # nothing goes before it is durable
    fut = wal.commit()
    fut.result()
    produce(30).result()  # rolls past the compaction's segment; this commit deletes what it superseded
    produce(31).result()
    left = sorted((tmp_path / "logs").rglob("*.wal"))
    assert len(left) < len(files) / 2
    before = [b for s in logs.logs[(ORG, "t", 0)].segments for b in s.batches]
    wal.close()
    fresh = LogManager(coordinator_partitions=PARTITIONS)
    for records in Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="never", segment_bytes=400).recover():
        for r in records:
            fresh.replay(r)
    assert [b for s in fresh.logs[(ORG, "t", 0)].segments for b in s.batches] == before


def test_an_entry_too_large_to_recover_is_refused_and_not_written(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from rafka.shard import wal as wal_module

    wal = Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="never", segment_bytes=400)
    monkeypatch.setattr(wal_module, "MAX_ENTRY", 100)
    data = build_batch([SimpleRecord(b"k", b"v" * 200, 0)])
    small = Record(RecordType.PARTITION_BATCH, (ORG, "t", 1), {"batch": build_batch([SimpleRecord(b"k", b"v", 0)]),
                                                               "append_ms": 0, "roll": False})
    with pytest.raises(EntryTooLarge):  # checked before anything is written, the small entry too
        wal.append([small, Record(RecordType.PARTITION_BATCH, (ORG, "t", 0), {"batch": data, "append_ms": 0,
                                                                              "roll": False})])
    assert sum(f.stat().st_size for f in tmp_path.rglob("*.wal")) == 0


def test_a_truncation_that_rolled_out_of_the_active_segment_keeps_its_own_segment(tmp_path: Path) -> None:
    wal = Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="batch", segment_bytes=400)
    logs = LogManager(coordinator_partitions=PARTITIONS)

    def write(records: list[Record]) -> None:
        wal.append(records)
        for r in records:
            logs.replay(r)
        fut = wal.commit()
        if fut is not None:
            fut.result()

    def produce(seq: int, pid: int) -> None:
        data = build_batch([SimpleRecord(b"k", b"v" * 50, seq)], producer_id=pid, producer_epoch=0, base_sequence=seq)
        write(logs.produce(ORG, {"acks": -1, "partitions": [{"topic": "t", "partition": 0, "records": data}]}, 0)[0])

    for seq in range(5):
        produce(seq, pid=5)
    write(logs.delete_records(ORG, {"partitions": [{"topic": "t", "partition": 0, "offset": 5}]})[0])
    for seq in range(3):  # another producer: the truncation's segment rolls, then its drop runs
        produce(seq, pid=6)
    wal.close()
    fresh = LogManager(coordinator_partitions=PARTITIONS)
    for records in Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="never", segment_bytes=400).recover():
        for r in records:
            fresh.replay(r)
    log = fresh.logs[(ORG, "t", 0)]
    assert (log.log_start_offset, log.log_end_offset) == (5, 8)
    assert log.producers.entries[5].last_seq == 4, "producer 5's state, held by the truncation record, survives"


def test_a_compacted_logs_files_follow_its_live_keys_with_full_sized_segments(tmp_path: Path) -> None:
    wal = Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="never")  # 64 MiB segments
    logs = LogManager(coordinator_partitions=PARTITIONS)
    compact = {"cleanup.policy": "compact", "segment.ms": "1"}
    for i in range(300):  # 4 keys of 1 KB written over and over: 300 KB of history
        data = build_batch([SimpleRecord(b"k%d" % (i % 4), b"v" * 1000, i * 10)])
        records = logs.produce(ORG, {"acks": -1, "partitions": [
            {"topic": "t", "partition": 0, "records": data, "configs": compact}]}, i * 10)[0]
        if i % 30 == 29:
            records += logs.clean(i * 10)
        wal.append(records)
        for r in records:
            logs.replay(r)
        wal.commit()
    before = [b for s in logs.logs[(ORG, "t", 0)].segments for b in s.batches]
    wal.close()  # the active segment is cut to its entries (space allocated ahead goes)
    held = sum(f.stat().st_size for f in (tmp_path / "logs").rglob("*.wal"))
    # the live keys, and the 30 KB written since the last clean (as a Kafka log's dirty part)
    assert held < 60_000, f"{held} bytes of WAL for 4 live keys of 1 KB, 300 KB written"
    fresh = LogManager(coordinator_partitions=PARTITIONS)
    for records in Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="never").recover():
        for r in records:
            fresh.replay(r)
    assert [b for s in fresh.logs[(ORG, "t", 0)].segments for b in s.batches] == before


def test_files_an_operator_left_in_the_data_directory_are_ignored_with_a_log_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A backup copy of a partition directory, a copied segment and a stray file crashed the
    shard's recovery on their names, and the supervisor restarted it forever."""
    import shutil

    shard = Shard(tmp_path)
    for i in range(6):
        shard.produce(1000 + i)
    before = shard.restart()
    expected = before.state()
    part = next((tmp_path / "logs").glob(f"*/{ORG}/t/0"))
    shutil.copytree(part.parent, part.parent.with_name("t.bak"))  # a topic name may hold a dot: read, then refused
    shutil.copytree(part, part.with_name("0.bak"))
    first = min(part.glob("*.wal"))
    shutil.copy(first, part / f"{first.stem} copy.wal")
    (part.parent.parent / "notes.txt").write_text("x")
    before.wal.close()
    with caplog.at_level("WARNING"):
        after = Shard(tmp_path)
        for records in after.wal.recover():
            for r in records:
                after.logs.replay(r)
    assert after.state() == expected
    ignored = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(ignored) == 4 and all(name in " ".join(ignored) for name in ("0.bak", "copy.wal", "notes.txt", "t.bak"))
    assert (part.parent.with_name("t.bak") / "0").is_dir(), "the copy is left for its operator"


def test_a_damaged_entry_that_good_entries_follow_is_cut_as_kafka_does_and_kept_aside(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A write is torn only at the end of a segment: a bad entry that intact ones follow is damage
    on disk. Recovery still stops there, as Kafka's truncates at a segment's first invalid batch
    (replaying the entries after a skipped one could apply a batch to a log it replaced, or a
    commit marker over an abort), but says so with an error line and keeps the bytes aside."""
    import struct

    shard = Shard(tmp_path, segment_bytes=1 << 20)
    for i in range(3):
        shard.produce(1000 + i)
    [stream] = shard.wal.streams.values()
    [active] = stream.segments()
    data = bytearray(active.read_bytes())
    starts, pos = [], 0
    while pos < len(data) and struct.unpack_from(">I", data, pos)[0]:  # then zeros allocated ahead
        starts.append(pos)
        pos += 8 + struct.unpack_from(">I", data, pos)[0]
    assert len(starts) == 3, "one entry per batch"
    del data[pos:]
    data[starts[1] + 12] ^= 0xFF  # inside the payload of the middle entry
    active.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        after = shard.restart()
    _start, end, *_, offsets = after.state()
    assert (end, offsets) == (1, [0])
    assert active.stat().st_size == starts[1]
    assert active.with_name(f"{active.name}.damaged-at-{starts[1]}").read_bytes() == bytes(data[starts[1]:])
    [line] = [r for r in caplog.records if "damage on disk" in r.getMessage()]
    assert line.levelname == "ERROR"
    again = after.restart()  # the side file is not read back
    assert again.state()[1] == 1 and not [r for r in caplog.records if "ignored" in r.getMessage()]


def _write(wal: Wal, logs: LogManager, value: bytes, configs: dict[str, str], now: int,
           then: Any = None) -> list[Record]:
    """Produce one record of ``value`` to partition 0 of topic ``t`` (plus ``then(now)``'s
    records), write it through ``wal`` and replay it, as the runtime does; the records."""
    records = logs.produce(ORG, {"acks": -1, "partitions": [{"topic": "t", "partition": 0, "records": build_batch(
        [SimpleRecord(b"k", value, now)]), "configs": configs}]}, now)[0]
    if then is not None:
        records += then(now)
    wal.append(records)
    for r in records:
        logs.replay(r)
    wal.commit()
    return records


@pytest.mark.parametrize("roll", ["segment.bytes", "segment.ms"])
def test_retention_frees_disk_with_the_logs_segments_not_at_the_wals_size(tmp_path: Path, roll: str) -> None:
    """A data stream rolls where its partition log starts a segment (once past ``data_roll_bytes``),
    so retention by bytes or time frees disk as the log's segments go: a resource probe saw
    ``retention.bytes`` 2 MB topics hold 56–67 MB per partition, the WAL's 64 MiB segment size."""
    wal = Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="never", data_roll_bytes=3_000)
    logs = LogManager(coordinator_partitions=PARTITIONS)
    configs = {"retention.bytes": "10000", "segment.bytes": "4000"} if roll == "segment.bytes" else \
        {"retention.ms": "5000", "segment.ms": "1000"}
    for i in range(200):  # 200 KB written, 1 KB a batch, 100 ms apart
        _write(wal, logs, b"v" * 1000, configs, i * 100, logs.retention if i % 10 == 9 else None)
    wal.close()
    held = sum(f.stat().st_size for f in (tmp_path / "logs").rglob("*.wal"))
    kept = logs.logs[(ORG, "t", 0)].size
    assert kept <= 80_000 and held <= kept + 10_000, f"{held} bytes of WAL for a log holding {kept}"
    fresh = LogManager(coordinator_partitions=PARTITIONS)
    for records in Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="never").recover():
        for r in records:
            fresh.replay(r)
    before, after = logs.logs[(ORG, "t", 0)], fresh.logs[(ORG, "t", 0)]
    assert (after.log_start_offset, after.log_end_offset) == (before.log_start_offset, before.log_end_offset)
    assert [b for s in after.segments for b in s.batches if parse_header(b).base_offset >= after.log_start_offset
            ] == [b for s in before.segments for b in s.batches if parse_header(b).base_offset >= before.log_start_offset]


def test_a_short_segment_ms_does_not_make_a_file_per_batch(tmp_path: Path) -> None:
    wal = Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="never")  # rolls with the log past 512 KiB
    logs = LogManager(coordinator_partitions=PARTITIONS)
    for i in range(50):
        records = _write(wal, logs, b"v" * 100, {"segment.ms": "1"}, i * 10)
        assert records[0].value["roll"] or i == 0, "every batch starts a segment of the log"
    wal.close()
    assert len(list((tmp_path / "logs").rglob("*.wal"))) == 1


def test_a_log_rolling_at_the_smallest_segment_bytes_rolls_its_stream_each_time(tmp_path: Path) -> None:
    """segment.bytes=1048576 (Kafka's minimum): the files follow the log's segments, not two of them
    (a resource probe's files held two: its log's segments, of a few large batches, rolled before
    the stream held 1 MiB)."""
    wal = Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync="never")
    logs = LogManager(coordinator_partitions=PARTITIONS)
    for i in range(30):  # 9 MB in batches of 300 KB: three to a segment of the log
        _write(wal, logs, b"v" * 300_000, {"segment.bytes": "1048576"}, i)
    wal.close()
    sizes = sorted(f.stat().st_size for f in (tmp_path / "logs").rglob("*.wal"))
    assert len(sizes) >= 9 and sizes[-1] < 1_000_000, sizes


@pytest.mark.parametrize("policy", ["never", "always"])
def test_a_rolled_segment_is_fsynced_unless_the_policy_is_never(tmp_path: Path, policy: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """--fsync never made one fsync per segment roll all the same (per MiB with 1 MiB segments)."""
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    wal = Wal(tmp_path, set(range(PARTITIONS)), PARTITIONS, fsync=policy, data_roll_bytes=3_000)
    logs = LogManager(coordinator_partitions=PARTITIONS)
    for i in range(40):
        _write(wal, logs, b"v" * 1000, {"segment.bytes": "4000"}, i)
    rolled = len(list((tmp_path / "logs").rglob("*.wal"))) - 1
    assert rolled >= 5
    if policy == "never":
        assert calls == []
    else:  # each roll, and the directories that gained a file
        assert len(calls) >= rolled
    wal.close()
