"""The transaction coordinator's state machine, driven by hand with a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from rafka import ids
from rafka.shard.log.producers import ProducerIdManager
from rafka.shard.records import Record, RecordType
from rafka.shard.txn.coordinator import Errors, TransactionCoordinator
from rafka.shard.txn.state import IllegalStateTransition, TransactionMetadata, TransactionState
from tests.shard.test_groups_context import roundtrip

ORG = "org-a"
T0 = 1_000_000


class TxnCtx:
    """A coordinator, its producer-id allocator, a clock and the records written."""

    def __init__(self) -> None:
        self.ids = ProducerIdManager()
        self.coord = TransactionCoordinator(self.ids.peek, self.ids.observe)
        self.now = T0
        self.log: list[Record] = []

    def call(self, handler: str, **op: Any) -> dict[str, Any]:
        records, resp = getattr(self.coord, handler)(ORG, op, self.now)
        self.write(records)
        return resp

    def write(self, records: list[Record]) -> None:
        for r in records:
            r = roundtrip(r)  # exactly what the WAL gives back
            assert r.type == RecordType.TXN_METADATA
            self.coord.replay(r)
            self.log.append(r)

    def sweep(self, min_age_ms: int = 0) -> list[dict[str, Any]]:
        records, resp = self.coord.sweep({"min_age_ms": min_age_ms}, self.now)
        self.write(records)
        return resp["complete"]

    def state(self, tid: str = "tx") -> str:
        return self.coord.txns[(ORG, tid)].state.value

    # shortcuts ----------------------------------------------------------
    def init(self, tid: str = "tx", timeout: int = 60_000, **kw: Any) -> dict[str, Any]:
        return self.call("init_producer_id", transactional_id=tid, transaction_timeout_ms=timeout, **kw)

    def add(self, pid: int, epoch: int, *parts: tuple[str, int], tid: str = "tx") -> dict[str, Any]:
        return self.call("add_partitions", transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                         partitions=[list(p) for p in parts])

    def end(self, pid: int, epoch: int, committed: bool, tid: str = "tx") -> dict[str, Any]:
        return self.call("end_txn", transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=committed)

    def complete(self, c: dict[str, Any]) -> dict[str, Any]:
        return self.call("complete_txn", **{k: c[k] for k in ("transactional_id", "producer_id", "producer_epoch",
                                                             "committed")})


def test_init_allocates_an_id_and_each_init_bumps_the_epoch() -> None:
    ctx = TxnCtx()
    first = ctx.init()
    tx_partition = ids.coordinator_partition(ORG, "tx", ids.DEFAULT_COORDINATOR_PARTITIONS)
    assert first == {"error_code": 0, "producer_id": (T0 << 10) | tx_partition, "producer_epoch": 0}
    assert ctx.init() == {"error_code": 0, "producer_id": first["producer_id"], "producer_epoch": 1}
    assert ctx.init("other")["producer_id"] != first["producer_id"]
    assert ctx.state() == "Empty"


def test_invalid_timeout_is_refused() -> None:
    ctx = TxnCtx()
    assert ctx.init(timeout=0)["error_code"] == Errors.INVALID_TRANSACTION_TIMEOUT
    assert ctx.init(timeout=900_001)["error_code"] == Errors.INVALID_TRANSACTION_TIMEOUT
    assert ctx.log == []


def test_commit_prepares_with_every_participant_then_completes() -> None:
    ctx = TxnCtx()
    pid = ctx.init()["producer_id"]
    assert ctx.add(pid, 0, ("out", 0), ("out", 1))["error_code"] == 0
    assert ctx.state() == "Ongoing" and ctx.coord.txns[(ORG, "tx")].start_ms == T0
    assert ctx.call("add_offsets", transactional_id="tx", producer_id=pid, producer_epoch=0,
                    group_id="g")["error_code"] == 0
    n = len(ctx.log)
    assert ctx.add(pid, 0, ("out", 1))["error_code"] == 0 and len(ctx.log) == n  # nothing new: no record
    ctx.now += 10
    resp = ctx.end(pid, 0, True)
    assert resp["error_code"] == 0 and ctx.state() == "PrepareCommit"
    assert resp["complete"] == {"org_id": ORG, "transactional_id": "tx", "producer_id": pid, "producer_epoch": 0,
                                "committed": True, "partitions": [["out", 0], ["out", 1]], "groups": ["g"]}
    assert ctx.end(pid, 0, True)["complete"] == resp["complete"]  # a retry re-drives the markers
    assert ctx.end(pid, 0, False)["error_code"] == Errors.INVALID_TXN_STATE
    assert ctx.add(pid, 0, ("out", 2))["error_code"] == Errors.CONCURRENT_TRANSACTIONS
    assert ctx.init()["error_code"] == Errors.CONCURRENT_TRANSACTIONS
    ctx.complete(resp["complete"])
    meta = ctx.coord.txns[(ORG, "tx")]
    assert meta.state is TransactionState.COMPLETE_COMMIT and meta.partitions == () and meta.groups == ()
    assert ctx.end(pid, 0, True) == {"error_code": 0}  # retried EndTxn after completion
    assert ctx.end(pid, 0, False)["error_code"] == Errors.INVALID_TXN_STATE
    n = len(ctx.log)
    ctx.complete(resp["complete"])  # a repeated completion is a no-op
    assert len(ctx.log) == n
    assert ctx.add(pid, 0, ("out", 3))["error_code"] == 0 and ctx.state() == "Ongoing"  # next transaction


def test_abort_and_wrong_producer() -> None:
    ctx = TxnCtx()
    pid = ctx.init()["producer_id"]
    assert ctx.add(pid + 1, 0, ("t", 0))["error_code"] == Errors.INVALID_PRODUCER_ID_MAPPING
    assert ctx.add(pid, 7, ("t", 0))["error_code"] == Errors.PRODUCER_FENCED
    assert ctx.end(pid, 0, False)["error_code"] == Errors.INVALID_TXN_STATE  # nothing open
    ctx.add(pid, 0, ("t", 0))
    resp = ctx.end(pid, 0, False)
    assert ctx.state() == "PrepareAbort" and resp["complete"]["committed"] is False
    ctx.complete(resp["complete"])
    assert ctx.state() == "CompleteAbort"


def test_a_new_producer_fences_the_ongoing_transaction_of_the_old_one() -> None:
    ctx = TxnCtx()
    pid = ctx.init()["producer_id"]
    ctx.add(pid, 0, ("t", 0))
    fence = ctx.init()
    assert fence["error_code"] == Errors.CONCURRENT_TRANSACTIONS
    assert fence["complete"]["committed"] is False and fence["complete"]["producer_epoch"] == 1
    assert ctx.state() == "PrepareAbort"
    assert ctx.end(pid, 0, True)["error_code"] == Errors.PRODUCER_FENCED  # the zombie cannot commit
    ctx.complete(fence["complete"])
    assert ctx.init() == {"error_code": 0, "producer_id": pid, "producer_epoch": 2}
    assert ctx.init(producer_id=pid, producer_epoch=0)["error_code"] == Errors.PRODUCER_FENCED  # KIP-360 zombie


def test_timeout_aborts_an_abandoned_transaction_with_an_epoch_bump() -> None:
    ctx = TxnCtx()
    pid = ctx.init(timeout=5_000)["producer_id"]
    ctx.add(pid, 0, ("t", 0))
    ctx.now += 5_000
    assert ctx.sweep() == []  # not yet past the timeout
    ctx.now += 1
    [complete] = ctx.sweep()
    assert complete["committed"] is False and complete["producer_epoch"] == 1 and complete["partitions"] == [["t", 0]]
    assert ctx.state() == "PrepareAbort"
    assert ctx.end(pid, 0, True)["error_code"] == Errors.PRODUCER_FENCED
    assert ctx.sweep(min_age_ms=2_000) == []  # prepared just now: EndTxn may still be finishing it
    ctx.now += 2_000
    assert ctx.sweep(min_age_ms=2_000) == [complete]  # left prepared (a crash): the sweeper finishes it
    ctx.complete(complete)
    # KIP-360: the timed-out producer may re-initialise with its old epoch
    assert ctx.init(timeout=5_000, producer_id=pid, producer_epoch=0) == {
        "error_code": 0, "producer_id": pid, "producer_epoch": 2}


def test_ids_unused_for_the_expiration_time_are_removed_and_only_those() -> None:
    """Kafka's transactional.id.expiration.ms: an id with no transaction in flight and no change
    for that long is removed (a tombstone), its producer refused until it re-initialises; one
    with a transaction in flight is not, however old. The check runs once per hour (or per
    expiration time if shorter), not on every sweep."""
    ctx = TxnCtx()
    ctx.coord.expiration_ms = expiration = 10_000
    ctx.init("idle")
    done = ctx.init("done")["producer_id"]
    ctx.add(done, 0, ("t", 0), tid="done")
    ctx.complete(ctx.end(done, 0, True, tid="done")["complete"])
    open_ = ctx.init("open", timeout=900_000)["producer_id"]
    ctx.add(open_, 0, ("t", 1), tid="open")
    ctx.now += expiration - 1
    assert ctx.sweep() == [] and set(ctx.coord.txns) == {(ORG, "idle"), (ORG, "done"), (ORG, "open")}
    ctx.now += 1
    ctx.init("idle")  # used again: its clock starts over
    assert ctx.sweep() == []
    assert set(ctx.coord.txns) == {(ORG, "idle"), (ORG, "done"), (ORG, "open")}, "checked 1 ms ago: not due yet"
    ctx.now += expiration - 1
    ctx.sweep()
    assert set(ctx.coord.txns) == {(ORG, "idle"), (ORG, "open")}, "done expired; idle was used since"
    assert [(r.key, r.value) for r in ctx.log[-1:]] == [((ORG, "done"), None)]
    assert ctx.add(done, 0, ("t", 0), tid="done")["error_code"] == Errors.INVALID_PRODUCER_ID_MAPPING
    again = ctx.init("done")
    assert again["error_code"] == 0 and again["producer_id"] != done and again["producer_epoch"] == 0
    ctx.now += 10 * expiration
    ctx.sweep()
    assert (ORG, "idle") not in ctx.coord.txns
    assert ctx.state("open") == "Ongoing", "a transaction in flight never expires (its timeout ends it)"
    fresh = TxnCtx()  # a restart replays the tombstones
    for r in ctx.log:
        fresh.coord.replay(r)
    assert fresh.coord.txns == ctx.coord.txns and fresh.coord.in_flight == {(ORG, "open")}


def test_a_sweep_walks_only_the_ids_with_a_transaction_in_flight() -> None:
    ctx = TxnCtx()
    for i in range(50):
        ctx.init(f"idle-{i}")
    pid = ctx.init("busy")["producer_id"]
    ctx.add(pid, 0, ("t", 0), tid="busy")
    assert ctx.coord.in_flight == {(ORG, "busy")}
    complete = ctx.end(pid, 0, False, tid="busy")["complete"]
    ctx.sweep()  # the first looks for expired ids too; the next ones, for an hour, do not

    class Untouchable:
        def __getattr__(self, name: str) -> None:
            raise AssertionError(f"a sweep read {name} of an id with no transaction in flight")

    for i in range(50):
        ctx.coord.txns[(ORG, f"idle-{i}")] = Untouchable()  # type: ignore[assignment]
    ctx.now += 3_000_000
    assert ctx.coord.in_flight == {(ORG, "busy")} and ctx.sweep() == [complete]
    ctx.complete(complete)
    assert ctx.coord.in_flight == set() and ctx.sweep() == []


def test_an_id_allocated_ahead_of_the_clock_outlives_its_expiration_until_the_clock_passes_it() -> None:
    """Ids are the partition's counter, never below the clock; a burst of InitProducerIds runs the
    counter ahead of it. The counter comes back after a restart from the records left, so a
    record whose id is ahead of the clock must stay, or compaction (which drops tombstones) and a
    restart would hand its id out again while partitions still know that producer."""
    ctx = TxnCtx()
    ctx.coord.expiration_ms = 1_000
    tids = [f"burst-{i}" for i in range(3_000)]  # one coordinator partition, one millisecond: 3,000 ids
    ctx.coord.allocate_producer_id = lambda org, _tid, now: ctx.ids.peek(org, "burst", now)
    pids = [ctx.init(t)["producer_id"] for t in tids]
    ctx.now += 2_000
    ctx.sweep()
    left = {tid for _org, tid in ctx.coord.txns}
    assert 0 < len(left) < len(tids), "those the clock has passed go; the ones ahead stay"
    survivors = {r.key: r for r in ctx.log}  # a compaction: the last record of each key, no tombstones
    restarted = TxnCtx()
    for r in survivors.values():
        if r.value is not None:
            restarted.coord.replay(r)
    assert restarted.ids.peek(ORG, "burst", ctx.now) > max(pids), "no id handed out again"
    ctx.now += 3_000
    ctx.sweep()
    assert ctx.coord.txns == {}, "and they go once the clock has passed them"


def test_a_retried_epoch_bump_gets_the_same_epoch_and_a_stale_one_is_fenced() -> None:
    """Kafka's prepareIncrementProducerEpoch: a producer bumps its own epoch after an abortable
    error (InitProducerId naming its id and epoch); the same call again, its answer lost, gets
    the bumped epoch back without another bump (it was PRODUCER_FENCED, fatal to the client)."""
    ctx = TxnCtx()
    pid = ctx.init()["producer_id"]
    bumped = {"error_code": 0, "producer_id": pid, "producer_epoch": 1}
    assert ctx.init(producer_id=pid, producer_epoch=0) == bumped
    assert ctx.init(producer_id=pid, producer_epoch=0) == bumped  # the retry
    fresh = TxnCtx()  # and after a restart
    for r in ctx.log:
        fresh.coord.replay(r)
    assert fresh.init(producer_id=pid, producer_epoch=0) == bumped
    assert ctx.init(producer_id=pid, producer_epoch=1)["producer_epoch"] == 2  # a new bump
    assert ctx.init(producer_id=pid, producer_epoch=0)["error_code"] == Errors.PRODUCER_FENCED
    ctx.init()  # another producer instance (no id given) takes over: the old one's retries are fenced
    assert ctx.init(producer_id=pid, producer_epoch=1)["error_code"] == Errors.PRODUCER_FENCED


def test_replaying_the_log_rebuilds_the_same_state_and_allocator() -> None:
    ctx = TxnCtx()
    pid = ctx.init()["producer_id"]
    ctx.init("b")
    ctx.add(pid, 0, ("t", 0))
    ctx.end(pid, 0, True)
    fresh = TxnCtx()
    for r in ctx.log:
        fresh.coord.replay(r)
    assert fresh.coord.txns == ctx.coord.txns
    assert fresh.ids.next_counter == ctx.ids.next_counter and fresh.ids.peek(ORG, "tx", 0) > pid
    assert fresh.sweep()[0]["committed"] is True  # the prepared commit survives a restart


def test_describe_and_list() -> None:
    ctx = TxnCtx()
    pid = ctx.init()["producer_id"]
    ctx.init("idle")
    ctx.add(pid, 0, ("t", 1), ("t", 0), ("u", 0))
    [d, missing] = ctx.coord.describe(ORG, {"transactional_ids": ["tx", "nope"]})["transaction_states"]
    assert d["transaction_state"] == "Ongoing" and d["transaction_start_time"] == T0
    assert d["topics"] == [{"topic": "t", "partitions": [1, 0]}, {"topic": "u", "partitions": [0]}]
    assert missing["error_code"] == Errors.TRANSACTIONAL_ID_NOT_FOUND
    for group in ("g", "g", "h"):  # as Kafka: each group's offsets partition, once
        ctx.call("add_offsets", transactional_id="tx", producer_id=pid, producer_epoch=0, group_id=group)
    [d] = ctx.coord.describe(ORG, {"transactional_ids": ["tx"]})["transaction_states"]
    offsets = sorted({ids.coordinator_partition(ORG, g) for g in ("g", "h")})
    assert d["topics"][:2] == [{"topic": "t", "partitions": [1, 0]}, {"topic": "u", "partitions": [0]}]
    assert d["topics"][2]["topic"] == "__consumer_offsets" and sorted(d["topics"][2]["partitions"]) == offsets
    listed = ctx.coord.list(ORG, {"state_filters": ["Ongoing"]}, ctx.now)["transaction_states"]
    assert listed == [{"transactional_id": "tx", "producer_id": pid, "transaction_state": "Ongoing"}]
    assert len(ctx.coord.list(ORG, {}, ctx.now)["transaction_states"]) == 2
    assert ctx.coord.list("other-org", {}, ctx.now)["transaction_states"] == []
    ctx.now += 100
    recent = ctx.coord.list(ORG, {"duration_filter": 100}, ctx.now)["transaction_states"]
    assert [t["transactional_id"] for t in recent] == ["idle"]  # Ongoing for only 100 ms: filtered out


def test_transition_table_refuses_illegal_moves() -> None:
    meta = TransactionMetadata("tx", 1, 0, 1000)
    with pytest.raises(IllegalStateTransition):
        meta.transition_to(TransactionState.PREPARE_COMMIT, 0)
    assert meta.transition_to(TransactionState.ONGOING, 5).state is TransactionState.ONGOING


def test_verify_partitions_allows_only_the_ongoing_transactions_own_partitions() -> None:
    ctx = TxnCtx()
    pid = ctx.init()["producer_id"]

    def refused(p: int, epoch: int, *parts: tuple[str, int], tid: str = "tx") -> list[list[Any]]:
        return ctx.coord.verify_partitions(ORG, {"transactional_id": tid, "producer_id": p, "producer_epoch": epoch,
                                                 "partitions": [list(x) for x in parts]})["errors"]

    assert refused(pid, 0, ("t", 0)) == [["t", 0, Errors.INVALID_TXN_STATE]], "no transaction yet"
    ctx.add(pid, 0, ("t", 0))
    assert refused(pid, 0, ("t", 0), ("t", 1)) == [["t", 1, Errors.INVALID_TXN_STATE]]
    assert refused(pid, 7, ("t", 0)) == [["t", 0, Errors.PRODUCER_FENCED]]
    assert refused(pid + 1, 0, ("t", 0)) == [["t", 0, Errors.INVALID_PRODUCER_ID_MAPPING]]
    assert refused(pid, 0, ("t", 0), tid="other") == [["t", 0, Errors.INVALID_PRODUCER_ID_MAPPING]]
    ctx.complete(ctx.end(pid, 0, False)["complete"])
    assert refused(pid, 0, ("t", 0)) == [["t", 0, Errors.INVALID_TXN_STATE]], "after the abort"
