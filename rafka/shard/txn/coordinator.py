"""The transaction coordinator of one shard (Kafka's TransactionCoordinator + TransactionStateManager).

How this works: a transactional id is owned like a group —
``stable_hash(org_id, transactional_id)`` picks a coordinator partition, the
partition a shard. Handlers are pure ``(org_id, op, now_ms) -> (records,
response)``; a handler never mutates state, it returns ``TXN_METADATA`` records
(key ``(org, transactional_id)``, value ``TransactionMetadata.to_value()``) and
``replay`` — live and on recovery alike — installs them.

Shards never talk to each other, so the coordinator does not write markers
itself. EndTxn moves the transaction to PrepareCommit/PrepareAbort (durable:
the decision) and answers with a *completion* ``{org_id, transactional_id,
producer_id, producer_epoch, committed, partitions, groups}``; the gateway
then sends WRITE_TXN_MARKERS to every participant's shard and finally
COMPLETE_TXN here, which moves the transaction to CompleteCommit/CompleteAbort.
Markers are idempotent, so any step may be repeated. ``sweep`` (polled by the
gateway's sweeper) aborts Ongoing transactions older than their timeout — with
an epoch bump that fences the abandoned producer, as Kafka does — and lists
every prepared transaction so a crash between the decision and the completion
is always finished. InitProducerId for an id with an Ongoing transaction fences
it the same way and answers CONCURRENT_TRANSACTIONS until it is complete.

Expiration (Kafka's ``transactional.id.expiration.ms``): an id with no transaction in
flight and no change for that long is removed by a tombstone, so ids that producers
stop using do not pile up. ``sweep`` looks for them once per
``EXPIRATION_CHECK_INTERVAL_MS`` (or per expiration time, if shorter); its other passes
walk only the ids with a transaction in flight (``in_flight``). The removed record
held the producer id, which kept the partition's id counter past it across restarts;
so an id is removed only once its counter is that old too, when the clock alone keeps
the counter past it (a burst of allocations runs the counter ahead of the clock).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rafka.ids import DEFAULT_COORDINATOR_PARTITIONS, coordinator_partition
from rafka.shard.log.producers import PARTITION_BITS
from rafka.shard.records import Record, RecordType
from rafka.shard.txn.state import PREPARED, TransactionMetadata, TransactionState

OFFSETS_TOPIC = "__consumer_offsets"

S = TransactionState
Result = tuple[list[Record], dict[str, Any]]
MAX_TRANSACTION_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms
MAX_EPOCH = 32_767  # Short.MaxValue: past it a producer gets a new id
TRANSACTIONAL_ID_EXPIRATION_MS = 604_800_000  # Kafka's transactional.id.expiration.ms (7 days)
EXPIRATION_CHECK_INTERVAL_MS = 3_600_000  # Kafka's transaction.remove.expired.transaction.cleanup.interval.ms
EXPIRABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})  # no transaction in flight


class Errors:
    """Kafka error codes the transaction coordinator answers with."""

    NONE = 0
    INVALID_REQUEST = 42
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105


def completion(org_id: str, meta: TransactionMetadata) -> dict[str, Any]:
    """What the gateway needs to write the markers of a prepared transaction."""
    return {"org_id": org_id, "transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch, "committed": meta.state is S.PREPARE_COMMIT,
            "partitions": [list(p) for p in meta.partitions], "groups": list(meta.groups)}


class TransactionCoordinator:
    """Transactional ids of one shard: handlers, ``replay`` and ``sweep``."""

    def __init__(self, allocate_producer_id: Callable[[str, str, int], int], on_producer_id: Callable[[int], None] = lambda _: None,
                 *, max_timeout_ms: int = MAX_TRANSACTION_TIMEOUT_MS,
                 partitions: int = DEFAULT_COORDINATOR_PARTITIONS,
                 expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS) -> None:
        self.txns: dict[tuple[str, str], TransactionMetadata] = {}
        self.in_flight: set[tuple[str, str]] = set()  # the ids in Ongoing or Prepare* (kept by ``replay``)
        self.expiration_ms = expiration_ms
        self.expiration_due_ms = 0  # when ``sweep`` next looks for expired ids (not state: a restart looks at once)
        self.partitions = partitions  # coordinator partitions: a group's offsets partition (DescribeTransactions)
        self.allocate_producer_id = allocate_producer_id  # (org, transactional id, now) → next unused id (pure peek)
        self.on_producer_id = on_producer_id  # replay saw an id: move the allocator past it
        self.max_timeout_ms = max_timeout_ms

    # ------------------------------------------------------------- helpers
    @staticmethod
    def _record(org_id: str, meta: TransactionMetadata) -> Record:
        return Record(RecordType.TXN_METADATA, (org_id, meta.transactional_id), meta.to_value())

    def _check_producer(self, meta: TransactionMetadata | None, op: dict[str, Any]) -> int:
        """INVALID_PRODUCER_ID_MAPPING / PRODUCER_FENCED unless ``op`` names the current producer."""
        if meta is None or meta.producer_id != op["producer_id"]:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != op["producer_epoch"]:
            return Errors.PRODUCER_FENCED
        return Errors.NONE

    @staticmethod
    def _fence(meta: TransactionMetadata, now_ms: int, *, timed_out: bool = False) -> TransactionMetadata:
        """Abort ``meta``'s Ongoing transaction with a bumped epoch (fences the old producer).

        After a timeout the old epoch is remembered, so that producer may re-initialise
        with it (KIP-360) instead of being fenced for good."""
        return meta.transition_to(S.PREPARE_ABORT, now_ms, producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
                                  last_producer_epoch=meta.producer_epoch if timed_out else -1, bumped_from_epoch=-1)

    # ------------------------------------------------------------ handlers
    def init_producer_id(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """InitProducerId with a transactional id: a producer id and a new epoch.

        ``op = {transactional_id, transaction_timeout_ms, producer_id, producer_epoch}``.
        Response ``{error_code, producer_id, producer_epoch[, complete]}``; ``complete``
        is a transaction this call fenced, for the gateway to finish.
        """
        tid, timeout = op["transactional_id"], op.get("transaction_timeout_ms", 60_000)
        fail = {"producer_id": -1, "producer_epoch": -1}
        if not 0 < timeout <= self.max_timeout_ms:
            return [], {"error_code": Errors.INVALID_TRANSACTION_TIMEOUT, **fail}
        meta = self.txns.get((org_id, tid))
        if meta is None:
            meta = TransactionMetadata(tid, self.allocate_producer_id(org_id, tid, now_ms), 0, timeout, S.EMPTY, update_ms=now_ms)
            return [self._record(org_id, meta)], {"error_code": Errors.NONE, "producer_id": meta.producer_id,
                                                  "producer_epoch": 0}
        given, expected = op.get("producer_id", -1), op.get("producer_epoch", -1)
        reinit = given not in (-1, None)
        known_epochs = {meta.producer_epoch, meta.last_producer_epoch, meta.bumped_from_epoch} - {-1}
        if reinit and (given != meta.producer_id or expected not in known_epochs):
            return [], {"error_code": Errors.PRODUCER_FENCED, **fail}  # KIP-360: only the current producer may re-init
        if meta.state in PREPARED:
            return [], {"error_code": Errors.CONCURRENT_TRANSACTIONS, **fail, "complete": completion(org_id, meta)}
        if meta.state is S.ONGOING:
            fenced = self._fence(meta, now_ms)
            return [self._record(org_id, fenced)], {"error_code": Errors.CONCURRENT_TRANSACTIONS, **fail,
                                                    "complete": completion(org_id, fenced)}
        if reinit and expected == meta.bumped_from_epoch != meta.producer_epoch:
            # Kafka's prepareIncrementProducerEpoch: a retry of the call that bumped (its answer lost)
            return [], {"error_code": Errors.NONE, "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch}
        if meta.producer_epoch + 1 >= MAX_EPOCH:
            pid, epoch = self.allocate_producer_id(org_id, tid, now_ms), 0
        else:
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
        new = meta.transition_to(S.EMPTY, now_ms, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout,
                                 partitions=(), groups=(), start_ms=-1, last_producer_epoch=-1,
                                 bumped_from_epoch=meta.producer_epoch if reinit and pid == meta.producer_id else -1)
        return [self._record(org_id, new)], {"error_code": Errors.NONE, "producer_id": pid, "producer_epoch": epoch}

    def _add(self, org_id: str, op: dict[str, Any], now_ms: int, partitions: list[tuple[str, int]],
             groups: list[str]) -> tuple[list[Record], int]:
        meta = self.txns.get((org_id, op["transactional_id"]))
        error = self._check_producer(meta, op)
        if error:
            return [], error
        assert meta is not None
        if meta.state in PREPARED:
            return [], Errors.CONCURRENT_TRANSACTIONS
        new_parts = tuple(dict.fromkeys(meta.partitions + tuple(partitions)))
        new_groups = tuple(dict.fromkeys(meta.groups + tuple(groups)))
        if meta.state is S.ONGOING and (new_parts, new_groups) == (meta.partitions, meta.groups):
            return [], Errors.NONE
        start = meta.start_ms if meta.state is S.ONGOING else now_ms
        new = meta.transition_to(S.ONGOING, now_ms, partitions=new_parts, groups=new_groups, start_ms=start)
        return [self._record(org_id, new)], Errors.NONE

    def add_partitions(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """AddPartitionsToTxn. ``op = {transactional_id, producer_id, producer_epoch,
        partitions: [[topic, partition]]}``; response ``{error_code}`` (for every partition)."""
        parts = [(t, int(p)) for t, p in op["partitions"]]
        records, error = self._add(org_id, op, now_ms, parts, [])
        return records, {"error_code": error}

    def verify_partitions(self, org_id: str, op: dict[str, Any]) -> dict[str, Any]:
        """KIP-890's check before a transactional produce or offset commit is stored (Kafka 4
        does it by default). ``op = {transactional_id, producer_id, producer_epoch, partitions:
        [[topic, partition]][, groups: [group_id]]}``; response ``{errors: [[topic, partition,
        code]], group_errors: [[group_id, code]]}`` for each partition or group the producer may
        not write: INVALID_TXN_STATE unless it is in the producer's Ongoing transaction (not
        added, or the transaction already aborted or committed), PRODUCER_FENCED or
        INVALID_PRODUCER_ID_MAPPING for another producer."""
        meta = self.txns.get((org_id, op["transactional_id"]))
        parts = [(t, int(p)) for t, p in op["partitions"]]
        groups = list(op.get("groups") or [])
        error = self._check_producer(meta, op)  # also when there is no ``meta``
        if error:
            return {"errors": [[t, p, error] for t, p in parts], "group_errors": [[g, error] for g in groups]}
        assert meta is not None
        ongoing = meta.state is S.ONGOING
        added = set(meta.partitions) if ongoing else set()
        return {"errors": [[t, p, Errors.INVALID_TXN_STATE] for t, p in parts if (t, p) not in added],
                "group_errors": [[g, Errors.INVALID_TXN_STATE] for g in groups if not ongoing or g not in meta.groups]}

    def add_offsets(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """AddOffsetsToTxn. ``op = {transactional_id, producer_id, producer_epoch, group_id}``."""
        records, error = self._add(org_id, op, now_ms, [], [op["group_id"]])
        return records, {"error_code": error}

    def end_txn(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """EndTxn. ``op = {transactional_id, producer_id, producer_epoch, committed}``.

        Ongoing → PrepareCommit/PrepareAbort and a ``complete`` for the gateway. A
        retry of the same decision while prepared answers the completion again (the
        gateway finishes it); once complete it answers NONE; the other decision
        is INVALID_TXN_STATE.
        """
        meta = self.txns.get((org_id, op["transactional_id"]))
        error = self._check_producer(meta, op)
        if error:
            return [], {"error_code": error}
        assert meta is not None
        committed = bool(op["committed"])
        if meta.state is S.ONGOING:
            new = meta.transition_to(S.PREPARE_COMMIT if committed else S.PREPARE_ABORT, now_ms)
            return [self._record(org_id, new)], {"error_code": Errors.NONE, "complete": completion(org_id, new)}
        if meta.state in PREPARED and meta.committing == committed:
            return [], {"error_code": Errors.NONE, "complete": completion(org_id, meta)}
        if meta.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and meta.committing == committed:
            return [], {"error_code": Errors.NONE}
        return [], {"error_code": Errors.INVALID_TXN_STATE}

    def complete_txn(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """After every marker is written: PrepareX → CompleteX. ``op = {transactional_id,
        producer_id, producer_epoch, committed}``; anything else is a no-op (a repeat)."""
        meta = self.txns.get((org_id, op["transactional_id"]))
        if (meta is None or meta.state not in PREPARED or meta.committing != bool(op["committed"])
                or (meta.producer_id, meta.producer_epoch) != (op["producer_id"], op["producer_epoch"])):
            return [], {"error_code": Errors.NONE}
        # the finished transaction's start stays, as in Kafka (DescribeTransactions shows it)
        new = meta.transition_to(S.COMPLETE_COMMIT if meta.committing else S.COMPLETE_ABORT, now_ms,
                                 partitions=(), groups=())
        return [self._record(org_id, new)], {"error_code": Errors.NONE}

    def sweep(self, op: dict[str, Any], now_ms: int) -> Result:
        """Abort timed-out Ongoing transactions; list every prepared one older than ``min_age_ms``
        (and those just aborted); when due, remove expired ids (``expire``). Response
        ``{complete: [completion]}`` across organisations."""
        min_age = op.get("min_age_ms", 0)
        records, out = [], []
        for key in sorted(self.in_flight):
            meta = self.txns[key]
            if meta.state is S.ONGOING and now_ms - meta.start_ms > meta.timeout_ms:
                fenced = self._fence(meta, now_ms, timed_out=True)
                records.append(self._record(key[0], fenced))
                out.append(completion(key[0], fenced))
            elif meta.state in PREPARED and now_ms - meta.update_ms >= min_age:
                out.append(completion(key[0], meta))
        if now_ms >= self.expiration_due_ms:
            self.expiration_due_ms = now_ms + min(EXPIRATION_CHECK_INTERVAL_MS, self.expiration_ms)
            records += self.expire(now_ms)
        return records, {"complete": out}

    def expire(self, now_ms: int) -> list[Record]:
        """Kafka's removeExpiredTransactionalIds: a tombstone for every id with no transaction in
        flight whose last change is ``expiration_ms`` old; its producer id goes with it, so a
        producer using it again is refused (INVALID_PRODUCER_ID_MAPPING) until it re-initialises."""
        cutoff = now_ms - self.expiration_ms
        expired = [key for key, meta in self.txns.items() if meta.state in EXPIRABLE and meta.update_ms <= cutoff
                   and meta.producer_id >> PARTITION_BITS <= cutoff]
        return [Record(RecordType.TXN_METADATA, key, None) for key in sorted(expired)]

    # ------------------------------------------------------------- operators
    def describe(self, org_id: str, op: dict[str, Any]) -> dict[str, Any]:
        """DescribeTransactions. ``op = {transactional_ids}``."""
        out = []
        for tid in op.get("transactional_ids") or []:
            meta = self.txns.get((org_id, tid))
            if meta is None:
                code = Errors.TRANSACTIONAL_ID_NOT_FOUND if tid else Errors.INVALID_REQUEST
                out.append({"error_code": code, "transactional_id": tid,  # Kafka's
                            "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": 0,  # defaults
                            "producer_id": 0, "producer_epoch": 0, "topics": []})
                continue
            topics: dict[str, list[int]] = {}
            for t, p in meta.partitions:
                topics.setdefault(t, []).append(p)
            for group in meta.groups:  # as Kafka, whose AddOffsetsToTxn adds the group's offsets partition
                offsets = topics.setdefault(OFFSETS_TOPIC, [])
                if (p := coordinator_partition(org_id, group, self.partitions)) not in offsets:
                    offsets.append(p)
            out.append({"error_code": 0, "transactional_id": tid, "transaction_state": meta.state.value,
                        "transaction_timeout": meta.timeout_ms, "transaction_start_time": meta.start_ms,
                        "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
        return {"transaction_states": out}

    def list(self, org_id: str, op: dict[str, Any], now_ms: int) -> dict[str, Any]:
        """ListTransactions. ``op = {state_filters, producer_id_filters, duration_filter}``."""
        states = set(op.get("state_filters") or [])
        pids = set(op.get("producer_id_filters") or [])
        duration = op.get("duration_filter", -1)
        out = []
        for (org, tid), meta in sorted(self.txns.items()):
            if org != org_id or (states and meta.state.value not in states) or (pids and meta.producer_id not in pids):
                continue
            if duration is not None and duration >= 0 and now_ms - meta.start_ms <= duration:
                continue  # Kafka's filter: running longer than ``duration`` (start -1 when none: kept)
            out.append({"transactional_id": tid, "producer_id": meta.producer_id,
                        "transaction_state": meta.state.value})
        return {"transaction_states": out}

    # ---------------------------------------------------------------- replay
    def replay(self, record: Record) -> None:
        """Install one ``TXN_METADATA`` record (the only code that changes ``txns``)."""
        org_id, tid = record.key
        key = (org_id, tid)
        if record.value is None:
            self.txns.pop(key, None)
            self.in_flight.discard(key)
            return
        meta = TransactionMetadata.from_value(tid, record.value)
        self.txns[key] = meta
        if meta.state in EXPIRABLE:
            self.in_flight.discard(key)
        else:
            self.in_flight.add(key)
        self.on_producer_id(meta.producer_id)

    def stats(self) -> dict[str, int]:
        """Transactions by state (for metrics)."""
        out = {s.value: 0 for s in TransactionState}
        for meta in self.txns.values():
            out[meta.state.value] += 1
        return out
