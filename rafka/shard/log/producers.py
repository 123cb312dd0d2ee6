"""Idempotent producers: producer id allocation and per-partition sequence state.

How this works (Kafka's ProducerStateManager / ProducerAppendInfo / ProducerStateEntry):

* ``ProducerIdManager`` answers InitProducerId without a transactional id with a
  fresh id and epoch 0. Ids are ``(counter << PARTITION_BITS) | partition``, where
  ``partition`` is the coordinator partition whose WAL stream records the
  allocation: an idempotent producer's in the org's ``PRODUCER_STATE`` record
  ``(org, LATEST_ALLOCATION) -> {producer_id, allocated_ms}`` (one key per org, so
  compaction keeps one record however many producers start, as Kafka's blocks of
  ids keep no state per producer), in the org's ``"\0producer-ids"`` partition; a
  transactional producer's in its transactional id's. Whichever shard owns a
  partition replays every allocation made in it, so ids stay unique across
  restarts and when ``--shards`` changes; the counter never falls below the clock
  in ms either. (Older versions wrote one record per allocation, ``(org,
  producer_id) -> {producer_epoch, allocated_ms}``; those still replay, and go
  once ``producer.id.expiration.ms`` old.)
* Each partition keeps a ``ProducerStateManager``: for every producer id, its
  epoch and the metadata of its last 5 batches (first/last sequence, offsets).
  ``check_append`` validates an incoming batch without changing anything:
  an epoch below the known one is INVALID_PRODUCER_EPOCH; a batch whose
  sequence range equals one of the last 5 is a duplicate (the caller answers
  with the original offset and stores nothing); otherwise the first sequence
  must follow the last one (wrapping at int32 max), except that a new epoch
  starts at 0 and an unknown producer may start anywhere (Kafka 4 accepts it).
  ``update`` records an appended batch; it is called from replay only, so the
  state is rebuilt from ``PARTITION_BATCH`` records exactly as Kafka rebuilds it
  from the log.
* A producer idle on a partition longer than ``producer.id.expiration.ms`` is
  forgotten there through a ``PRODUCERS_EXPIRED`` record in that partition's stream
  (see ``LogManager.retention``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from rafka import ids
from rafka.protocol.records import INT32_MAX, NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from rafka.shard.log.errors import Errors
from rafka.shard.records import Record, RecordType

NUM_BATCHES_TO_RETAIN = 5
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default
PARTITION_BITS = 10  # coordinator partitions: at most 1024


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one appended batch."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    max_timestamp: int = -1  # as appended (the append time on a LogAppendTime topic)


@dataclass(slots=True)
class ProducerStateEntry:
    """One producer's state on one partition."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_append_ms: int = -1  # broker time of the last append: expiry counts from it
    last_timestamp: int = -1  # the last batch's max timestamp, or the last marker's (DescribeProducers)
    coordinator_epoch: int = -1  # of the last transaction marker

    @property
    def last_seq(self) -> int:
        """Last sequence appended in the current epoch, or -1."""
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (0 follows int32 max)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """Sequence/epoch state of the producers writing to one partition."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerStateEntry] = {}

    def check_append(self, header: BatchHeader) -> tuple[Errors, BatchMetadata | None]:
        """Validate ``header`` (pure). Returns ``(error, duplicate)``.

        ``(NONE, meta)`` means the batch duplicates ``meta`` and must not be stored;
        ``(NONE, None)`` means append it. Batches without a producer id always pass.
        """
        if not header.has_producer_id:
            return Errors.NONE, None
        entry = self.entries.get(header.producer_id)
        if entry is None:
            return Errors.NONE, None
        epoch, first_seq = header.producer_epoch, header.base_sequence
        if epoch < entry.producer_epoch:
            return Errors.INVALID_PRODUCER_EPOCH, None
        duplicate = entry.find_duplicate(epoch, first_seq, header.last_sequence)
        if duplicate is not None:
            return Errors.NONE, duplicate
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        elif entry.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(entry.last_seq, first_seq):
            return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return Errors.NONE, None

    def update(self, header: BatchHeader, append_ms: int, coordinator_epoch: int = -1) -> None:
        """Record an appended batch (replay only); ``header`` carries its assigned offset, and a
        marker's ``coordinator_epoch`` is the one its record holds."""
        if not header.has_producer_id:
            return
        entry = self.entries.get(header.producer_id)
        if entry is None:
            entry = self.entries[header.producer_id] = ProducerStateEntry(header.producer_id)
        entry.last_timestamp = header.max_timestamp
        if header.is_control:  # a transaction marker may carry a bumped (fencing) epoch
            if header.producer_epoch > entry.producer_epoch:
                entry.producer_epoch = header.producer_epoch
                entry.batches.clear()
            entry.last_append_ms = max(entry.last_append_ms, append_ms)
            entry.coordinator_epoch = coordinator_epoch
            return
        if entry.producer_epoch != header.producer_epoch:
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        entry.batches.append(
            BatchMetadata(header.base_sequence, header.last_sequence, header.base_offset, header.last_offset,
                          header.max_timestamp)
        )
        entry.last_append_ms = max(entry.last_append_ms, append_ms)

    def fork(self, producer_ids: set[int]) -> ProducerStateManager:
        """A scratch copy holding only ``producer_ids``, for validating several batches at once."""
        scratch = ProducerStateManager()
        for pid in producer_ids:
            entry = self.entries.get(pid)
            if entry is not None:
                scratch.entries[pid] = replace(
                    entry, batches=deque(entry.batches, maxlen=NUM_BATCHES_TO_RETAIN))
        return scratch

    def remove(self, producer_id: int) -> None:
        """Forget a producer (expiry)."""
        self.entries.pop(producer_id, None)

    def snapshot(self) -> list[list[Any]]:
        """Every entry as plain data (msgpack), for ``restore``."""
        return [[e.producer_id, e.producer_epoch, e.last_append_ms,
                 [[b.first_seq, b.last_seq, b.base_offset, b.last_offset, b.max_timestamp] for b in e.batches],
                 e.last_timestamp, e.coordinator_epoch]
                for e in self.entries.values()]

    def restore(self, snapshot: list[list[Any]]) -> None:
        """Replace every entry by those of a ``snapshot`` (one written before the last two
        fields existed takes the last batch's timestamp and no coordinator epoch)."""
        self.entries = {}
        for pid, epoch, last_append_ms, batches, *rest in snapshot:
            metas = deque((BatchMetadata(*b) for b in batches), maxlen=NUM_BATCHES_TO_RETAIN)
            last_timestamp, coordinator_epoch = rest or (metas[-1].max_timestamp if metas else -1, -1)
            self.entries[pid] = ProducerStateEntry(pid, epoch, metas, last_append_ms, last_timestamp, coordinator_epoch)


LATEST_ALLOCATION = -1  # the key of an org's allocation record (a producer id is never negative)


class ProducerIdManager:
    """Allocates producer ids that are unique across shards, restarts and reshards."""

    def __init__(self, partitions: int = ids.DEFAULT_COORDINATOR_PARTITIONS) -> None:
        if not 0 < partitions <= 1 << PARTITION_BITS:
            raise ValueError(f"{partitions} coordinator partitions do not fit in {PARTITION_BITS} bits")
        self.partitions = partitions
        self.next_counter: dict[int, int] = {}  # coordinator partition → its next counter
        self.allocated: dict[tuple[str, int], int] = {}  # (org, idempotent producer id) → allocated_ms

    def init_producer_id(self, org_id: str, op: dict[str, Any], now_ms: int) -> tuple[list[Record], dict[str, Any]]:
        """InitProducerId. ``op = {transactional_id, transaction_timeout_ms, producer_id, producer_epoch}``.

        Without a transactional id Kafka always hands out a new id with epoch 0
        (even when the producer sends its old id, KIP-360). A transactional id is
        the transaction coordinator's (rafka.shard.txn): here it answers UNSUPPORTED_VERSION.
        Response: ``{error_code, producer_id, producer_epoch}``.
        """
        if op.get("transactional_id") is not None:
            return [], {"error_code": Errors.UNSUPPORTED_VERSION, "producer_id": -1, "producer_epoch": -1}
        producer_id = self.peek(org_id, ids.PRODUCER_IDS_KEY, now_ms)
        record = Record(RecordType.PRODUCER_STATE, (org_id, LATEST_ALLOCATION),
                        {"producer_id": producer_id, "allocated_ms": now_ms})
        return [record], {"error_code": Errors.NONE, "producer_id": producer_id, "producer_epoch": 0}

    def peek(self, org_id: str, key: str, now_ms: int) -> int:
        """The id the next allocation recorded under coordinator key ``key`` gets (pure; replaying
        its record moves past it)."""
        partition = ids.coordinator_partition(org_id, key, self.partitions)
        return (max(self.next_counter.get(partition, 0), now_ms) << PARTITION_BITS) | partition

    def observe(self, producer_id: int) -> None:
        """Move the counter of the id's partition past ``producer_id``."""
        if producer_id >= 0:
            partition = producer_id & ((1 << PARTITION_BITS) - 1)
            self.next_counter[partition] = max(self.next_counter.get(partition, 0), (producer_id >> PARTITION_BITS) + 1)

    def expired(self, now_ms: int, expiration_ms: int) -> list[tuple[str, int]]:
        """Per-allocation records (written by older versions) older than ``expiration_ms``, for
        tombstones: the producer has expired on every partition by then."""
        return sorted(k for k, ms in self.allocated.items() if now_ms - ms >= expiration_ms)

    def replay(self, record: Record) -> None:
        """Move the counter past an allocated idempotent producer id, or forget an old allocation
        (a tombstone; those written before partitions expired their own producers are read alike)."""
        if record.key[1] == LATEST_ALLOCATION:
            if record.value is not None:
                self.observe(record.value["producer_id"])
            return
        key = (record.key[0], record.key[1])
        self.observe(key[1])  # a tombstone too: compaction may leave only it
        if record.value is None:
            self.allocated.pop(key, None)
        else:
            self.allocated[key] = record.value.get("allocated_ms", 0)
