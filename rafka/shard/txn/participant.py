"""The participant side of transactions: pending transactional offsets and marker writes.

How this works: a transaction's participants are partition logs and consumer
groups, owned by whichever shards hash them. TxnOffsetCommit goes straight to
the group's shard (as in Kafka, to the group coordinator) and is validated like
an OffsetCommit, but is stored as *pending*: ``TXN_OFFSET_COMMIT`` records keyed
``(org, group, producer_id, topic, partition)``, invisible to OffsetFetch, which
answers UNSTABLE_OFFSET_COMMIT for them when asked with ``require_stable``.

WRITE_TXN_MARKERS carries the outcome of one transaction for the partitions and
groups this shard owns. For each partition where the producer has an open
transaction, ``LogManager.write_markers`` appends a commit/abort control batch
(durable like any batch); for each group, a commit turns the producer's pending
offsets into ordinary ``OFFSET_COMMIT`` records and an abort drops them — in
both cases tombstones clear the pending entries, all in one WAL entry of the
group's stream. A marker for a producer with nothing open is a no-op, so the
gateway may repeat markers after a crash.
"""

from __future__ import annotations

from typing import Any

from rafka.shard.groups.offsets import metadata_too_large
from rafka.shard.groups.record_helpers import new_offset_commit_record
from rafka.shard.records import Record, RecordType

ILLEGAL_GENERATION = 22
OFFSET_METADATA_TOO_LARGE = 12
UNSTABLE_OFFSET_COMMIT = 88
STALE_MEMBER_EPOCH = 113
Result = tuple[list[Record], dict[str, Any]]
PendingKey = tuple[str, int]


class TxnOffsets:
    """Pending transactional offsets: ``(org, group) -> producer_id -> (topic, partition) -> value``."""

    def __init__(self) -> None:
        self.pending: dict[tuple[str, str], dict[int, dict[PendingKey, dict[str, Any]]]] = {}

    def has_open(self, org_id: str, group_id: str) -> bool:
        """Whether some open transaction holds offsets of the group."""
        return bool(self.pending.get((org_id, group_id)))

    def has_pending(self, org_id: str, group_id: str, topic: str, partition: int) -> bool:
        """Whether some open transaction holds an offset for this partition (require_stable)."""
        return any((topic, partition) in offs for offs in self.pending.get((org_id, group_id), {}).values())

    def cancel(self, org_id: str, group_id: str, partitions: set[PendingKey] | None) -> list[Record]:
        """Tombstones for the open transactions' offsets of the group, of ``partitions`` only unless
        None: Kafka's OffsetDelete and DeleteGroups delete them with the committed ones, so a
        later commit marker does not bring them back."""
        return [Record(RecordType.TXN_OFFSET_COMMIT, (org_id, group_id, pid, topic, partition), None)
                for pid, offs in sorted(self.pending.get((org_id, group_id), {}).items())
                for topic, partition in sorted(offs) if partitions is None or (topic, partition) in partitions]

    def replay(self, record: Record) -> None:
        """Install or drop one ``TXN_OFFSET_COMMIT`` record."""
        org_id, group_id, pid, topic, partition = record.key
        key = (org_id, group_id)
        if record.value is not None:
            self.pending.setdefault(key, {}).setdefault(pid, {})[(topic, partition)] = record.value
            return
        by_pid = self.pending.get(key, {})
        offs = by_pid.get(pid, {})
        offs.pop((topic, partition), None)
        if not offs:
            by_pid.pop(pid, None)
        if not by_pid:
            self.pending.pop(key, None)

    def marker(self, org_id: str, group_id: str, producer_id: int, producer_epoch: int, committed: bool) -> list[Record]:
        """Records that materialise (commit) or discard (abort) the producer's pending offsets.
        Offsets a newer epoch committed are left alone: they belong to a later transaction, and
        this marker came late (a sweeper's abort of a timed-out transaction, applied after the
        producer's next one began), as Kafka's epoch check on markers refuses it."""
        offs = self.pending.get((org_id, group_id), {}).get(producer_id, {})
        records = []
        for (topic, partition), v in sorted(offs.items()):
            if v.get("producer_epoch", -1) > producer_epoch:
                continue
            if committed:
                records.append(new_offset_commit_record(org_id, group_id, topic, partition, v["offset"],
                                                        v["leader_epoch"], v["metadata"], v["commit_ts"]))
            records.append(Record(RecordType.TXN_OFFSET_COMMIT, (org_id, group_id, producer_id, topic, partition), None))
        return records


class TxnParticipant:
    """TxnOffsetCommit and WRITE_TXN_MARKERS handlers of one shard."""

    def __init__(self, groups: Any, logs: Any, offsets: TxnOffsets) -> None:
        self.groups = groups  # the GroupCoordinator, for validation
        self.logs = logs  # the LogManager
        self.offsets = offsets

    def _validate(self, org_id: str, op: dict[str, Any]) -> int:
        group_id, generation = op["group_id"], op.get("generation_id", -1)
        member_id, instance_id = op.get("member_id") or "", op.get("group_instance_id")
        consumer = getattr(self.groups, "consumer", None)
        if consumer is not None:
            error = consumer.validate_offset_commit(org_id, group_id, member_id, instance_id, generation, 9, True)
            if error is not None:  # Kafka's validateTransactionalOffsetCommit: a stale epoch is ILLEGAL_GENERATION
                return ILLEGAL_GENERATION if error == STALE_MEMBER_EPOCH else int(error)
        group = self.groups._group(org_id, group_id)
        if group is None:
            return 0 if generation < 0 else ILLEGAL_GENERATION
        return int(group.validate_offset_commit(member_id, instance_id, generation, transactional=True))

    def txn_offset_commit(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """TxnOffsetCommit. ``op = {transactional_id, group_id, producer_id, producer_epoch,
        generation_id, member_id, group_instance_id, topics: [{name, partitions: [{partition_index,
        committed_offset, committed_leader_epoch, committed_metadata}]}]}``."""
        error = self._validate(org_id, op)
        max_bytes = self.groups.config.offset_metadata_max_bytes
        records: dict[tuple[str, int], Record] = {}  # a partition listed twice: stored once, its last value
        topics = []
        for t in op.get("topics") or []:
            parts = []
            for p in t.get("partitions") or []:
                metadata = p.get("committed_metadata") or ""
                code = error or (OFFSET_METADATA_TOO_LARGE if metadata_too_large(metadata, max_bytes) else 0)
                parts.append({"partition_index": p["partition_index"], "error_code": code})
                if code:
                    continue
                epoch = p.get("committed_leader_epoch")
                records[(t["name"], p["partition_index"])] = Record(
                    RecordType.TXN_OFFSET_COMMIT, (org_id, op["group_id"], op["producer_id"], t["name"], p["partition_index"]),
                    {"offset": p["committed_offset"], "leader_epoch": -1 if epoch is None else epoch,
                     "metadata": metadata, "commit_ts": now_ms, "producer_epoch": op.get("producer_epoch", -1)})
            topics.append({"name": t["name"], "partitions": parts})
        return list(records.values()), {"topics": topics}

    def write_markers(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """WRITE_TXN_MARKERS. ``op = {markers: [{producer_id, producer_epoch, committed,
        partitions: [[topic, partition]], groups: [group_id]}]}``; response ``{error_code, written,
        refused: [[topic, partition, error]]}`` (a marker older than the producer's epoch there)."""
        records: list[Record] = []
        refused: list[list[Any]] = []
        for m in op.get("markers") or []:
            written, stale = self.logs.write_markers(org_id, m, now_ms)
            records += written
            refused += stale
            for group_id in m.get("groups") or []:
                records += self.offsets.marker(org_id, group_id, m["producer_id"], m["producer_epoch"],
                                               bool(m["committed"]))
        return records, {"error_code": 0, "written": sum(1 for r in records if r.type == RecordType.PARTITION_BATCH),
                         "refused": refused}
