"""Transaction states and the metadata of one transactional id (Kafka's TransactionState/TransactionMetadata).

How this works: the state machine is data. ``TransactionState`` lists the
states a transactional id moves through; ``VALID_PREVIOUS`` says from which
states each may be entered, and ``TransactionMetadata.transition_to`` (pure: it
returns a new metadata) is the one place that checks it. A metadata value is
what a ``TXN_METADATA`` record stores, so replaying the record *is* the state.

    Empty ──AddPartitions/AddOffsets──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
      ▲                                   │ EndTxn(abort), timeout,                                │
      │                                   ▼ InitProducerId (fence)                                 │
      └──────── InitProducerId ◀── CompleteAbort ◀──markers── PrepareAbort                         │
                (epoch + 1)        ◀─────────────────────────────────────────────────────────────────┘
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any


class TransactionState(Enum):
    """States of a transactional id, with Kafka's names (DescribeTransactions shows them)."""

    EMPTY = "Empty"  # no transaction in progress; InitProducerId bumps the epoch here
    ONGOING = "Ongoing"  # partitions/groups added; EndTxn or the timeout ends it
    PREPARE_COMMIT = "PrepareCommit"  # decided: commit markers are being written
    PREPARE_ABORT = "PrepareAbort"  # decided: abort markers are being written
    COMPLETE_COMMIT = "CompleteCommit"  # every participant has its commit marker
    COMPLETE_ABORT = "CompleteAbort"  # every participant has its abort marker
    DEAD = "Dead"  # Kafka's state while an expired id is removed (here its tombstone removes it at once)


S = TransactionState
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
}
PREPARED = (S.PREPARE_COMMIT, S.PREPARE_ABORT)


class IllegalStateTransition(Exception):
    """A transition the table does not allow (a bug, never a client error)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """Everything the coordinator knows of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = S.EMPTY
    partitions: tuple[tuple[str, int], ...] = ()  # (topic, partition), in order added
    groups: tuple[str, ...] = ()  # consumer groups of AddOffsetsToTxn
    start_ms: int = -1  # when the ongoing transaction began
    update_ms: int = -1  # last state change
    last_producer_epoch: int = -1  # epoch before a timeout abort bumped it (KIP-360 re-init)
    # the epoch an InitProducerId naming the producer's own id and epoch bumped (Kafka's
    # lastProducerEpoch): that call again, its answer lost, gets the current epoch, unbumped
    bumped_from_epoch: int = -1

    def transition_to(self, state: TransactionState, now_ms: int, **changes: Any) -> TransactionMetadata:
        """The metadata in ``state`` (checked against ``VALID_PREVIOUS``) with ``changes``."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalStateTransition(f"{self.transactional_id}: {self.state.value} -> {state.value}")
        return dataclasses.replace(self, state=state, update_ms=now_ms, **changes)

    @property
    def committing(self) -> bool:
        return self.state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)

    def to_value(self) -> dict[str, Any]:
        """The ``TXN_METADATA`` record value."""
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "timeout_ms": self.timeout_ms, "state": self.state.value,
                "partitions": [list(p) for p in self.partitions], "groups": list(self.groups),
                "start_ms": self.start_ms, "update_ms": self.update_ms,
                "last_producer_epoch": self.last_producer_epoch, "bumped_from_epoch": self.bumped_from_epoch}

    @classmethod
    def from_value(cls, transactional_id: str, value: dict[str, Any]) -> TransactionMetadata:
        """Rebuild from a record value (replay)."""
        return cls(transactional_id, value["producer_id"], value["producer_epoch"], value["timeout_ms"],
                   TransactionState(value["state"]), tuple((t, int(p)) for t, p in value["partitions"]),
                   tuple(value["groups"]), value["start_ms"], value["update_ms"],
                   value.get("last_producer_epoch", -1), value.get("bumped_from_epoch", -1))
