"""The participant side of transactions: LSO, markers, aborted index, pending offsets."""

from __future__ import annotations

from typing import Any

from rafka.protocol.records import SimpleRecord, build_batch, iter_records, parse_header, split_batches
from rafka.shard.log.manager import LogManager
from rafka.shard.records import Record, RecordType
from rafka.shard.txn.participant import TxnOffsets, TxnParticipant
from tests.shard.test_groups_context import GroupsTestContext, fetch_op, roundtrip

ORG = "org-a"


class LogCtx:
    """A LogManager plus the participant, with every record kept (the WAL)."""

    def __init__(self) -> None:
        self.logs = LogManager()
        self.groups = GroupsTestContext(ORG)
        self.offsets = TxnOffsets()
        self.participant = TxnParticipant(self.groups.coord, self.logs, self.offsets)
        self.groups.coord.txn_pending = self.offsets.has_pending
        self.wal: list[Record] = []
        self.seq: dict[int, int] = {}

    def apply(self, records: list[Record]) -> list[Record]:
        for r in records:
            r = roundtrip(r)
            self.wal.append(r)
            if r.type in (RecordType.TXN_OFFSET_COMMIT,):
                self.offsets.replay(r)
            elif r.type == RecordType.OFFSET_COMMIT:
                self.groups.coord.replay(r)
            else:
                self.logs.replay(r)
        return records

    def produce(self, pid: int, values: list[bytes], partition: int = 0, transactional: bool = True,
                timestamp: int = 0) -> int:
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + len(values)
        batch = build_batch([SimpleRecord(None, v, timestamp) for v in values], producer_id=pid, producer_epoch=0,
                            base_sequence=seq, transactional=transactional)
        records, resp = self.logs.produce(ORG, {"partitions": [
            {"topic": "t", "partition": partition, "records": batch}]}, 0)
        self.apply(records)
        return int(resp["partitions"][0]["base_offset"])

    def marker(self, pid: int, committed: bool, partitions: tuple[int, ...] = (0,),
               groups: tuple[str, ...] = ()) -> list[Record]:
        records, resp = self.participant.write_markers(ORG, {"markers": [{
            "producer_id": pid, "producer_epoch": 0, "committed": committed,
            "partitions": [["t", p] for p in partitions], "groups": list(groups)}]}, 5)
        assert resp["error_code"] == 0
        return self.apply(records)

    def fetch(self, isolation: int, offset: int = 0) -> dict[str, Any]:
        return self.logs.fetch(ORG, {"isolation_level": isolation, "partitions": [
            {"topic": "t", "partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]})["partitions"][0]


def values(resp: dict[str, Any]) -> list[bytes]:
    """Data values of a fetch answer (control batches left out)."""
    out = []
    for batch in split_batches(resp["records"]):
        if not parse_header(batch).is_control:
            out += [r.value for r in iter_records(batch)]
    return out


def test_open_transaction_holds_the_last_stable_offset() -> None:
    ctx = LogCtx()
    ctx.produce(1, [b"plain"], transactional=False)
    ctx.produce(7, [b"a", b"b"])
    ctx.produce(1, [b"after"], transactional=False)
    log = ctx.logs.logs[(ORG, "t", 0)]
    assert (log.high_watermark, log.last_stable_offset) == (4, 1)
    committed, uncommitted = ctx.fetch(1), ctx.fetch(0)
    assert values(committed) == [b"plain"] and committed["last_stable_offset"] == 1
    assert values(uncommitted) == [b"plain", b"a", b"b", b"after"]
    assert ctx.fetch(1, offset=1)["records"] == b""  # read_committed waits at the LSO
    lso = ctx.logs.list_offsets(ORG, {"isolation_level": 1, "partitions": [
        {"topic": "t", "partition": 0, "timestamp": -1}]})["partitions"][0]["offset"]
    assert lso == 1


def test_read_committed_list_offsets_by_time_finds_nothing_past_the_last_stable_offset() -> None:
    """Kafka's fetchOffsetForTimestamp: under read_committed, a timestamp lookup (and -3, the
    largest timestamp) whose offset is at or past the last stable offset answers -1."""
    ctx = LogCtx()
    ctx.produce(1, [b"old"], transactional=False, timestamp=1_000)
    ctx.produce(7, [b"open"], timestamp=2_000)

    def lookup(isolation: int, timestamp: int) -> tuple[int, int]:
        p = ctx.logs.list_offsets(ORG, {"isolation_level": isolation, "partitions": [
            {"topic": "t", "partition": 0, "timestamp": timestamp}]})["partitions"][0]
        return p["offset"], p["timestamp"]

    assert lookup(1, 500) == (0, 1_000)
    assert lookup(1, 1_500) == (-1, -1) and lookup(0, 1_500) == (1, 2_000)
    assert lookup(1, -3) == (-1, -1) and lookup(0, -3) == (1, 2_000)
    ctx.marker(7, True)
    assert lookup(1, 1_500) == (1, 2_000) and lookup(1, -3) == (1, 2_000)


def test_the_last_stable_offset_never_falls_below_the_log_start() -> None:
    ctx = LogCtx()
    ctx.produce(7, [b"a", b"b"])
    ctx.produce(1, [b"c", b"d"], transactional=False)
    records, resp = ctx.logs.delete_records(ORG, {"partitions": [{"topic": "t", "partition": 0, "offset": 3}]})
    ctx.apply(records)
    assert resp["partitions"][0]["low_watermark"] == 3
    committed = ctx.fetch(1, offset=3)
    assert (committed["log_start_offset"], committed["last_stable_offset"], committed["records"]) == (3, 3, b"")
    latest = ctx.logs.list_offsets(ORG, {"isolation_level": 1, "partitions": [
        {"topic": "t", "partition": 0, "timestamp": -1}]})["partitions"][0]["offset"]
    assert latest == 3, "read_committed 'latest' is not below the earliest offset"
    ctx.marker(7, True)
    after = ctx.fetch(1, offset=3)
    assert after["last_stable_offset"] == 5 and values(after) == [b"c", b"d"]  # whole batches, as in Kafka


def test_commit_marker_releases_the_data() -> None:
    ctx = LogCtx()
    ctx.produce(7, [b"a", b"b"])
    [marker] = ctx.marker(7, True)
    header = parse_header(marker.value["batch"])
    assert header.is_control and header.is_transactional and header.base_offset == 2
    resp = ctx.fetch(1)
    assert values(resp) == [b"a", b"b"] and resp["aborted_transactions"] == []
    assert resp["last_stable_offset"] == resp["high_watermark"] == 3
    assert ctx.marker(7, True) == []  # repeated marker (a retry after a crash): nothing written
    assert ctx.marker(99, False) == []  # a producer with nothing open here


def test_a_plain_batch_from_a_producer_inside_a_transaction_is_refused() -> None:
    """Kafka's ProducerAppendInfo: a transaction mixes no non-transactional writes of its producer
    (INVALID_TXN_STATE); after the marker they are fine again."""
    ctx = LogCtx()
    ctx.produce(7, [b"a"])
    batch = build_batch([SimpleRecord(None, b"plain", 0)], producer_id=7, producer_epoch=0, base_sequence=1)
    records, resp = ctx.logs.produce(ORG, {"partitions": [{"topic": "t", "partition": 0, "records": batch}]}, 0)
    assert resp["partitions"][0]["error_code"] == 48 and records == []
    ctx.marker(7, True)
    records, resp = ctx.logs.produce(ORG, {"partitions": [{"topic": "t", "partition": 0, "records": batch}]}, 0)
    assert resp["partitions"][0]["error_code"] == 0 and records


def test_abort_marker_lists_the_aborted_transaction_for_read_committed() -> None:
    ctx = LogCtx()
    ctx.produce(7, [b"x"])
    ctx.marker(7, False)
    ctx.produce(7, [b"y"])
    ctx.marker(7, True)
    resp = ctx.fetch(1)
    assert resp["aborted_transactions"] == [{"producer_id": 7, "first_offset": 0}]
    assert ctx.fetch(1, offset=2)["aborted_transactions"] == []  # outside the fetched range
    assert ctx.fetch(0)["aborted_transactions"] is None  # read_uncommitted: no list at all


def test_replaying_the_log_rebuilds_lso_and_aborted_index() -> None:
    ctx = LogCtx()
    ctx.produce(7, [b"x"])
    ctx.marker(7, False)
    ctx.produce(8, [b"y"])
    fresh = LogManager()
    for r in ctx.wal:
        fresh.replay(r)
    old, new = ctx.logs.logs[(ORG, "t", 0)], fresh.logs[(ORG, "t", 0)]
    assert (new.last_stable_offset, new.aborted_txns, new.ongoing_txns) == (2, [(7, 0, 1)], {8: 2})
    assert (old.last_stable_offset, old.aborted_txns) == (new.last_stable_offset, new.aborted_txns)


def test_pending_txn_offsets_are_unstable_until_the_commit_marker() -> None:
    ctx = LogCtx()
    ctx.groups.commit("g", {"in": {0: 5}})
    records, resp = ctx.participant.txn_offset_commit(ORG, {
        "transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 0, "generation_id": -1,
        "member_id": "", "topics": [{"name": "in", "partitions": [
            {"partition_index": 0, "committed_offset": 10, "committed_metadata": "m"}]}]}, 100)
    assert resp == {"topics": [{"name": "in", "partitions": [{"partition_index": 0, "error_code": 0}]}]}
    ctx.apply(records)
    plain = ctx.groups.fetch("g", {"in": [0]})
    assert plain["topics"][0]["partitions"][0]["committed_offset"] == 5  # not visible yet
    stable = ctx.groups.call("offset_fetch", {**fetch_op("g", {"in": [0]}), "require_stable": True})
    assert stable["topics"][0]["partitions"][0]["error_code"] == 88  # UNSTABLE_OFFSET_COMMIT
    written = ctx.marker(7, True, partitions=(), groups=("g",))
    assert [r.type for r in written] == [RecordType.OFFSET_COMMIT, RecordType.TXN_OFFSET_COMMIT]
    after = ctx.groups.call("offset_fetch", {**fetch_op("g", {"in": [0]}), "require_stable": True})
    after = after["topics"][0]["partitions"][0]
    assert (after["committed_offset"], after["metadata"], after["error_code"]) == (10, "m", 0)
    assert ctx.offsets.pending == {}
    assert ctx.marker(7, True, partitions=(), groups=("g",)) == []  # repeat: no-op


def test_a_partition_listed_twice_in_a_txn_offset_commit_is_stored_once_with_its_last_value() -> None:
    ctx = LogCtx()
    records, resp = ctx.participant.txn_offset_commit(ORG, {
        "transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 0, "generation_id": -1,
        "member_id": "", "topics": [{"name": "in", "partitions": [
            {"partition_index": 0, "committed_offset": o, "committed_metadata": ""} for o in (3, 4, 5)]}]}, 100)
    assert [p["error_code"] for p in resp["topics"][0]["partitions"]] == [0, 0, 0]
    assert [(r.key, r.value["offset"]) for r in records] == [((ORG, "g", 7, "in", 0), 5)]


def test_aborted_txn_offsets_are_discarded() -> None:
    ctx = LogCtx()
    records, _ = ctx.participant.txn_offset_commit(ORG, {
        "transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 0, "generation_id": -1,
        "topics": [{"name": "in", "partitions": [{"partition_index": 0, "committed_offset": 10}]}]}, 100)
    ctx.apply(records)
    assert [r.type for r in ctx.marker(7, False, partitions=(), groups=("g",))] == [RecordType.TXN_OFFSET_COMMIT]
    assert ctx.groups.fetch("g", {"in": [0]})["topics"][0]["partitions"][0]["committed_offset"] == -1


def test_txn_offset_commit_is_fenced_like_an_offset_commit() -> None:
    ctx = LogCtx()
    _, resp = ctx.participant.txn_offset_commit(ORG, {
        "group_id": "nogroup", "producer_id": 7, "producer_epoch": 0, "generation_id": 3, "member_id": "m",
        "topics": [{"name": "in", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]}, 0)
    assert resp["topics"][0]["partitions"][0]["error_code"] == 22  # ILLEGAL_GENERATION


def _txn_commit(ctx: LogCtx, group_id: str, **op: Any) -> int:
    _, resp = ctx.participant.txn_offset_commit(ORG, {
        "group_id": group_id, "producer_id": 7, "producer_epoch": 0, "generation_id": -1, "member_id": "",
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}], **op}, 0)
    return int(resp["topics"][0]["partitions"][0]["error_code"])


def test_a_transactional_commit_skips_a_classic_groups_member_and_rebalance_checks() -> None:
    """Kafka's ClassicGroup.validateOffsetCommit: TxnOffsetCommit v0-2 cannot name a member, and
    a group's state is not enforced for transactional commits (a plain commit gets 25 and 27)."""
    ctx = LogCtx()
    ctx.groups.stable_group("stable")
    assert _txn_commit(ctx, "stable") == 0
    assert ctx.groups.commit("stable", {"t": {0: 1}})["topics"][0]["partitions"][0]["error_code"] == 25
    member, joined = ctx.groups.join_new_member("syncing")
    ctx.groups.sleep(0)
    generation = joined["generation_id"]
    assert ctx.groups.state("syncing") == "CompletingRebalance"
    assert _txn_commit(ctx, "syncing", generation_id=generation, member_id=member) == 0
    plain = ctx.groups.commit("syncing", {"t": {0: 1}}, generation=generation, member_id=member)
    assert plain["topics"][0]["partitions"][0]["error_code"] == 27
    assert _txn_commit(ctx, "syncing", generation_id=generation + 1, member_id=member) == 22


def test_a_marker_older_than_the_producers_epoch_is_refused() -> None:
    """Kafka's checkProducerEpoch for end-transaction markers: a stale abort (an admin's, built
    from an old DescribeProducers answer) must not end the producer's current transaction."""
    ctx = LogCtx()
    batch = build_batch([SimpleRecord(None, b"v", 0)], producer_id=7, producer_epoch=5, base_sequence=0,
                        transactional=True)
    ctx.apply(ctx.logs.produce(ORG, {"partitions": [{"topic": "t", "partition": 0, "records": batch}]}, 0)[0])

    def marker(epoch: int) -> dict[str, Any]:
        records, resp = ctx.participant.write_markers(ORG, {"markers": [{
            "producer_id": 7, "producer_epoch": epoch, "committed": False, "partitions": [["t", 0]], "groups": []}]}, 5)
        ctx.apply(records)
        return resp

    assert marker(3) == {"error_code": 0, "written": 0, "refused": [["t", 0, 47]]}
    assert ctx.logs.logs[(ORG, "t", 0)].ongoing_txns == {7: 0}, "the transaction is still open"
    assert marker(5) == {"error_code": 0, "written": 1, "refused": []}
    assert ctx.logs.logs[(ORG, "t", 0)].ongoing_txns == {}


def test_a_late_marker_leaves_a_newer_transactions_offsets_alone() -> None:
    """A sweeper's abort of a timed-out transaction (epoch 1) applied after the producer's next
    transaction (epoch 2) sent its offsets: they stay pending, and its own commit commits them."""
    ctx = LogCtx()
    records, _ = ctx.participant.txn_offset_commit(ORG, {
        "transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 2, "generation_id": -1,
        "member_id": "", "topics": [{"name": "in", "partitions": [{"partition_index": 0, "committed_offset": 42}]}]},
        100)
    ctx.apply(records)

    def marker(epoch: int, committed: bool) -> list[Record]:
        written, _ = ctx.participant.write_markers(ORG, {"markers": [{
            "producer_id": 7, "producer_epoch": epoch, "committed": committed, "partitions": [], "groups": ["g"]}]}, 5)
        return ctx.apply(written)

    assert marker(1, False) == [] and ctx.offsets.has_pending(ORG, "g", "in", 0), "the late abort drops nothing"
    assert [r.type for r in marker(2, True)] == [RecordType.OFFSET_COMMIT, RecordType.TXN_OFFSET_COMMIT]
    assert ctx.groups.fetch("g", {"in": [0]})["topics"][0]["partitions"][0]["committed_offset"] == 42
