"""Exactly-once transactions: the coordinator (``coordinator``), its state machine
(``state``) and the participant side (``participant``); ``install`` wires them
into a shard's op table and replayers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rafka.rail import Op
from rafka.shard.handlers import ShardState
from rafka.shard.records import Record, RecordType
from rafka.shard.txn.coordinator import TRANSACTIONAL_ID_EXPIRATION_MS, TransactionCoordinator
from rafka.shard.txn.participant import TxnOffsets, TxnParticipant

Respond = Callable[[Any], None]


def _handler(fn: Callable[[str, Any, int], tuple[list[Record], Any]]) -> Callable[[str, Any, int, Respond], list[Record]]:
    def handle(org_id: str, op: Any, now_ms: int, respond: Respond) -> list[Record]:
        records, resp = fn(org_id, op, now_ms)
        respond(resp)
        return records
    return handle


def install(state: ShardState, logs: Any, *, expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS) -> TransactionCoordinator:
    """Register the transaction ops and record types on ``state`` (after the DataPlane)."""
    ids = logs.producer_ids
    coordinator = TransactionCoordinator(ids.peek, ids.observe, partitions=ids.partitions, expiration_ms=expiration_ms)
    offsets = TxnOffsets()
    participant = TxnParticipant(state.groups, logs, offsets)
    state.groups.txn_pending = offsets.has_pending
    state.groups.txn_open = offsets.has_open
    state.groups.txn_cancel = offsets.cancel

    def replay_txn_offset(record: Record) -> None:
        offsets.replay(record)
        if record.value is not None:  # a pending offset needs its group too, as a committed one does
            state.groups.ensure_group(record.key[0], record.key[1], record.value["commit_ts"])
    for op, fn in [(Op.TXN_INIT_PRODUCER_ID, coordinator.init_producer_id),
                   (Op.TXN_ADD_PARTITIONS, coordinator.add_partitions),
                   (Op.TXN_ADD_OFFSETS, coordinator.add_offsets), (Op.TXN_END, coordinator.end_txn),
                   (Op.TXN_VERIFY, lambda org, op, _now: ([], coordinator.verify_partitions(org, op))),
                   (Op.TXN_COMPLETE, coordinator.complete_txn),
                   (Op.TXN_SWEEP, lambda _org, op, now: coordinator.sweep(op, now)),
                   (Op.TXN_DESCRIBE, lambda org, op, _now: ([], coordinator.describe(org, op))),
                   (Op.TXN_LIST, lambda org, op, now: ([], coordinator.list(org, op, now))),
                   (Op.TXN_OFFSET_COMMIT, participant.txn_offset_commit),
                   (Op.TXN_WRITE_MARKERS, participant.write_markers),
                   (Op.DESCRIBE_PRODUCERS, lambda org, op, _now: ([], logs.describe_producers(org, op)))]:
        state.register(op, _handler(fn))
    state.register_replay(RecordType.TXN_METADATA, coordinator.replay)
    state.register_replay(RecordType.TXN_OFFSET_COMMIT, replay_txn_offset)
    state.txn = coordinator  # type: ignore[attr-defined]
    return coordinator
