"""LogManager: every partition log a shard owns, behind pure handlers.

How this works: the gateway splits Produce/Fetch/ListOffsets/DeleteRecords by
owning shard (``stable_hash(org, topic, partition)``) and sends each shard one
op carrying all of that shard's partitions. Write handlers (``produce``,
``delete_records``, ``delete_partitions``, ``update_configs``,
``init_producer_id``, ``retention``) return ``(records, response)`` and never
touch state; the runtime replays the records (``replay``) right after, which is
also how a restart rebuilds every log from the write-ahead log. Read handlers
(``fetch``, ``list_offsets``) only return a response.

Records (key ``(org, topic, partition)`` unless noted):

* ``PARTITION_BATCH`` ``{batch, append_ms, roll[, configs, config_version][, topic_id][, incarnation]}``:
  one batch with its base offset already stamped, so replay re-appends it exactly.
  ``configs``/``topic_id``/``incarnation`` appear when the produce op carried values
  the log did not have yet.
* ``PARTITION_TRUNCATE`` ``{log_start_offset, configs, config_version, producers, ongoing_txns,
  aborted_txns, incarnation[, topic_id]}``: DeleteRecords or
  retention moved the log start (or configs changed); ``None`` drops the log (topic
  deleted, or a newer incarnation replaces it).
* ``TOPIC_DROPPED`` key ``(org, topic, coordinator partition)``: the newest incarnation of
  the topic deleted on this shard (a meta record, one per coordinator partition the
  topic's logs here belong to, so it moves with them when the shard count changes).
* ``PRODUCER_STATE`` key ``(org, -1)``: ``{producer_id, allocated_ms}``, the org's last
  idempotent allocation (a meta record of the org's producer-id partition). Older versions
  wrote key ``(org, producer_id)``: ``{producer_epoch, allocated_ms}``, one per allocation;
  ``None`` drops such a record once it is older than ``producer.id.expiration.ms``.
* ``PARTITION_COMPACTED`` ``{upto, segments, ...}`` plus what ``PARTITION_TRUNCATE`` carries:
  a clean (``rafka.shard.log.cleaner``), the whole cleaned log below ``upto``.
* ``PRODUCERS_EXPIRED`` key ``(org, topic, partition)``: ``[producer ids]`` the
  partition forgets, idle longer than ``producer.id.expiration.ms`` (each partition
  expires its own producers, as Kafka's ProducerStateManager does, in its own stream).

Transactions: ``fetch`` with isolation_level 1 stops at each partition's last
stable offset and lists the aborted transactions in the fetched range;
``write_markers`` plans commit/abort control batches (``PARTITION_BATCH``
records like any other) for the partitions where a producer has an open
transaction — see ``rafka.shard.txn``.

Partition logs learn their topic's configs (and topic id) from the ops, because
the catalogue lives on another shard; the catalogue numbers each set of configs, and a
log keeps the newest (a produce may carry a gateway's cached, older copy after an
AlterConfigs reached the log). A partition nobody produced to reads as an
empty log. Ops also carry the topic's ``incarnation`` (the catalogue version that
created it): a produce naming a newer incarnation than the log's (the topic was
deleted and created again) starts the log afresh; one naming an older incarnation,
or one this partition saw deleted, comes from a gateway's stale cache and is refused
with the retriable NOT_LEADER_OR_FOLLOWER, so the client retries on fresh metadata:
nothing is acknowledged into a dead topic, and the new topic's records stay. ``appended_partitions`` tells
the runtime which partitions got data, to wake parked fetches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rafka import ids
from rafka.protocol.records import CorruptRecordError, parse_header, split_batches
from rafka.shard.log import cleaner
from rafka.shard.log.config import LogConfig
from rafka.shard.log.errors import Errors
from rafka.shard.log.partition import PartitionLog
from rafka.shard.log.producers import PRODUCER_ID_EXPIRATION_MS, ProducerIdManager
from rafka.shard.log.validator import AppendBudget
from rafka.shard.records import Record, RecordType

INT32_MAX = 2**31 - 1
READ_COMMITTED = 1
PartitionKey = tuple[str, str, int]
Result = tuple[list[Record], dict[str, Any]]
_EMPTY = PartitionLog()  # what a partition without data reads as; never mutated


def appended_partitions(records: Iterable[Record]) -> set[PartitionKey]:
    """``(org, topic, partition)`` of every partition that ``records`` append to."""
    return {tuple(r.key) for r in records if r.type == RecordType.PARTITION_BATCH}


_NO_LOG_START = frozenset({Errors.MESSAGE_TOO_LARGE, Errors.CORRUPT_MESSAGE})
"""Produce refusals Kafka answers with log start offset -1 (ReplicaManager.handleError)."""


def _produce_error(topic: str, partition: int, code: Errors, message: str | None) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "error_code": code,
        "error_message": message,
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "record_errors": [],
    }


class LogManager:
    """The partition logs and producer ids of one shard."""

    def __init__(self, *, producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
                 coordinator_partitions: int = ids.DEFAULT_COORDINATOR_PARTITIONS) -> None:
        self.logs: dict[PartitionKey, PartitionLog] = {}
        self.producer_ids = ProducerIdManager(coordinator_partitions)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.coordinator_partitions = coordinator_partitions
        self.dropped: dict[tuple[str, str], int] = {}  # (org, topic) → newest incarnation deleted on this shard

    # ------------------------------------------------------------------ reads

    def log(self, org_id: str, topic: str, partition: int, topic_id: Any = None) -> PartitionLog | None:
        """The log of a partition, or ``None`` (also when ``topic_id`` names another incarnation)."""
        log = self.logs.get((org_id, topic, partition))
        if log is not None and topic_id is not None and log.topic_id is not None and log.topic_id != str(topic_id):
            return None
        return log

    def _stale(self, org_id: str, p: dict[str, Any]) -> bool:
        """Whether an op's partition ``p`` names its topic from a stale cache: a newer incarnation
        owns the log, or this one was deleted here (incarnation 0: an op from before incarnations,
        never stale)."""
        incarnation = p.get("incarnation", 0)
        if not incarnation:
            return False
        log = self.logs.get((org_id, p["topic"], p["partition"]))
        tid = _topic_id(p)
        if log is not None and tid is not None and log.topic_id not in (None, tid) and incarnation < log.incarnation:
            return True
        return incarnation <= self.dropped.get((org_id, p["topic"]), 0)

    def log_end_offset(self, org_id: str, topic: str, partition: int) -> int:
        """LEO of a partition (0 if it has no log): lets the runtime decide to wake a fetch."""
        log = self.logs.get((org_id, topic, partition))
        return log.log_end_offset if log is not None else 0

    def fetch(self, org_id: str, op: dict[str, Any]) -> dict[str, Any]:
        """Fetch. ``op = {max_bytes, isolation_level, partitions: [{topic, partition,
        fetch_offset, partition_max_bytes[, log_start_offset][, topic_id, incarnation]}]}``.

        Response ``{partitions: [{topic, partition, error_code, high_watermark,
        last_stable_offset, log_start_offset, aborted_transactions,
        preferred_read_replica, records}]}``. Only the first partition with data
        may exceed the byte limits (by one batch); errors report offsets as -1. A partition
        named by a stale cache (see ``stale``) answers NOT_LEADER_OR_FOLLOWER.
        """
        remaining = op.get("max_bytes", INT32_MAX)
        committed = op.get("isolation_level", 0) == READ_COMMITTED
        min_one = True
        out = []
        for p in op.get("partitions", []):
            log = self.log(org_id, p["topic"], p["partition"], p.get("topic_id")) or _EMPTY
            limit = min(p.get("partition_max_bytes", INT32_MAX), remaining)
            lso = log.last_stable_offset
            batches: list[bytes]
            if self._stale(org_id, p):
                error, batches = Errors.NOT_LEADER_OR_FOLLOWER, []
            else:
                error, batches = log.read(p["fetch_offset"], limit, min_one, lso if committed else None)
            resp = {
                "topic": p["topic"],
                "partition": p["partition"],
                "error_code": error,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": [] if committed else None,
                "preferred_read_replica": -1,
                "records": b"",
            }
            if not error:
                data = b"".join(batches)
                remaining -= len(data)
                min_one = min_one and not data
                if committed and batches:
                    end = parse_header(batches[-1]).last_offset + 1
                    resp["aborted_transactions"] = log.aborted_in(p["fetch_offset"], end)
                resp.update(high_watermark=log.high_watermark, last_stable_offset=lso,
                            log_start_offset=log.log_start_offset, records=data)
            out.append(resp)
        return {"partitions": out}

    def list_offsets(self, org_id: str, op: dict[str, Any]) -> dict[str, Any]:
        """ListOffsets. ``op = {isolation_level, partitions: [{topic, partition, timestamp[, topic_id,
        incarnation]}]}``.

        Response ``{partitions: [{topic, partition, error_code, timestamp, offset, leader_epoch}]}``.
        """
        out = []
        committed = op.get("isolation_level", 0) == READ_COMMITTED
        for p in op.get("partitions", []):
            if self._stale(org_id, p):
                out.append({"topic": p["topic"], "partition": p["partition"],
                            "error_code": Errors.NOT_LEADER_OR_FOLLOWER, "timestamp": -1, "offset": -1,
                            "leader_epoch": -1})
                continue
            log = self.log(org_id, p["topic"], p["partition"], p.get("topic_id")) or _EMPTY
            offset, timestamp = log.list_offset(p["timestamp"])
            if committed and p["timestamp"] == -1:
                offset = log.last_stable_offset
            elif committed and (p["timestamp"] >= 0 or p["timestamp"] == -3) and offset >= log.last_stable_offset:
                offset, timestamp = -1, -1  # Kafka's fetchOffsetForTimestamp: nothing past the last stable offset
            out.append(
                {
                    "topic": p["topic"],
                    "partition": p["partition"],
                    "error_code": Errors.NONE,
                    "timestamp": timestamp,
                    "offset": offset,
                    "leader_epoch": -1,
                }
            )
        return {"partitions": out}

    def describe_producers(self, org_id: str, op: dict[str, Any]) -> dict[str, Any]:
        """DescribeProducers. ``op = {partitions: [{topic, partition}]}``; response ``{partitions:
        [{topic, partition, error_code, active_producers: [{producer_id, producer_epoch, last_sequence,
        last_timestamp, coordinator_epoch, current_txn_start_offset}]}]}``."""
        out = []
        for p in op.get("partitions", []):
            log = self.log(org_id, p["topic"], p["partition"], p.get("topic_id")) or _EMPTY
            producers = [{"producer_id": pid, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
                          "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                          "current_txn_start_offset": log.ongoing_txns.get(pid, -1)}
                         for pid, e in sorted(log.producers.entries.items())]
            out.append({"topic": p["topic"], "partition": p["partition"], "error_code": Errors.NONE,
                        "active_producers": producers})
        return {"partitions": out}

    # --------------------------------------------------------------- handlers

    def produce(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """Produce. ``op = {acks, timeout_ms, partitions: [{topic, partition, records[,
        topic_id][, configs]}]}`` where ``configs`` are the topic's config overrides.

        Response ``{partitions: [{topic, partition, error_code, error_message,
        base_offset, log_append_time_ms, log_start_offset, record_errors}]}``.
        Like Kafka (Produce v3+), ``records`` must hold exactly one v2 batch
        (else INVALID_RECORD). A duplicate from an idempotent producer answers
        the original base offset and appends nothing.
        """
        records: list[Record] = []
        out = []
        seen: set[PartitionKey] = set()
        acks = op.get("acks", -1)
        budget = AppendBudget()  # for all of the op's compressed batches
        for p in op.get("partitions", []):
            topic, partition = p["topic"], p["partition"]
            key = (org_id, topic, partition)
            if acks not in (-1, 0, 1):
                out.append(_produce_error(topic, partition, Errors.INVALID_REQUIRED_ACKS, f"Invalid acks {acks}"))
            elif key in seen:
                out.append(_produce_error(topic, partition, Errors.INVALID_REQUEST, "Partition given twice"))
            else:
                seen.add(key)
                recs, resp = self._produce_partition(key, p, now_ms, budget)
                records += recs
                out.append(resp)
        return records, {"partitions": out}

    def _produce_partition(self, key: PartitionKey, p: dict[str, Any], now_ms: int,
                           budget: AppendBudget) -> Result:
        _, topic, partition = key
        tid, incarnation = _topic_id(p), p.get("incarnation", 0)
        if self._stale(key[0], p):
            return [], _produce_error(topic, partition, Errors.NOT_LEADER_OR_FOLLOWER,
                                      "This topic was deleted (perhaps created again): refresh metadata and retry")
        existing = self.logs.get(key)
        reset = existing is not None and self.log(*key, topic_id=tid) is None
        log = existing if existing is not None and not reset else _EMPTY
        configs, version = p.get("configs"), p.get("config_version", 0)
        adopt = log.newer_configs(configs, version)
        config = LogConfig.from_overrides(configs, validate=False) if adopt else log.config
        try:
            batches = split_batches(p["records"])
        except CorruptRecordError as exc:
            return [], _produce_error(topic, partition, Errors.CORRUPT_MESSAGE, str(exc))
        if len(batches) != 1:
            return [], _produce_error(
                topic,
                partition,
                Errors.INVALID_RECORD,
                "Produce requests must contain exactly one record batch per partition",
            )
        plan = log.prepare_append(batches, now_ms, config, f"{topic}-{partition}", budget)
        if plan.error:
            # as Kafka's ReplicaManager: only record-level errors carry a message, and a refusal
            # other than a size or corruption one tells the producer where the log starts
            resp = _produce_error(topic, partition, plan.error, plan.message if plan.record_errors else None)
            resp["record_errors"] = plan.record_errors
            if plan.error not in _NO_LOG_START:
                resp["log_start_offset"] = log.log_start_offset
            return [], resp
        ok = {
            "topic": topic,
            "partition": partition,
            "error_code": Errors.NONE,
            "error_message": None,
            "base_offset": plan.base_offset,
            "log_append_time_ms": plan.log_append_time_ms,
            "log_start_offset": log.log_start_offset,
            "record_errors": [],
        }
        if plan.duplicate is not None:
            return [], ok
        records = [Record(RecordType.PARTITION_TRUNCATE, key, None)] if reset else []
        first = plan.values[0]
        if adopt:
            first["configs"], first["config_version"] = dict(configs), version  # type: ignore[arg-type]
        if tid is not None and tid != log.topic_id:
            first["topic_id"] = tid
        if incarnation > log.incarnation:
            first["incarnation"] = incarnation
        records += [Record(RecordType.PARTITION_BATCH, key, v) for v in plan.values]
        return records, ok

    def delete_records(self, org_id: str, op: dict[str, Any]) -> Result:
        """DeleteRecords. ``op = {partitions: [{topic, partition, offset[, topic_id, incarnation,
        configs, config_version]}]}``; offset -1 = high watermark.

        Response ``{partitions: [{topic, partition, low_watermark, error_code}]}``;
        an offset past the high watermark is OFFSET_OUT_OF_RANGE, a partition named by a
        stale cache NOT_LEADER_OR_FOLLOWER, one of a compact-only topic POLICY_VIOLATION. Batches stay, but fetches below the new log
        start are refused.
        """
        records: list[Record] = []
        out = []
        for p in op.get("partitions", []):
            key = (org_id, p["topic"], p["partition"])
            log = self.log(*key, topic_id=p.get("topic_id")) or _EMPTY
            offset = log.high_watermark if p["offset"] == -1 else p["offset"]
            stale = self._stale(org_id, p)
            configs, version = p.get("configs"), p.get("config_version", 0)
            config = LogConfig.from_overrides(configs, validate=False) if log.newer_configs(configs, version) \
                else log.config
            if not stale and not config.delete:
                out.append({"topic": p["topic"], "partition": p["partition"], "low_watermark": -1,
                            "error_code": Errors.POLICY_VIOLATION})
                continue
            if stale or offset < 0 or offset > log.high_watermark:
                code = Errors.NOT_LEADER_OR_FOLLOWER if stale else Errors.OFFSET_OUT_OF_RANGE
                out.append({"topic": p["topic"], "partition": p["partition"], "low_watermark": -1, "error_code": code})
                continue
            if offset > log.log_start_offset:
                records.append(Record(RecordType.PARTITION_TRUNCATE, key, _truncate(log, offset)))
            out.append(
                {
                    "topic": p["topic"],
                    "partition": p["partition"],
                    "low_watermark": max(offset, log.log_start_offset),
                    "error_code": Errors.NONE,
                }
            )
        return records, {"partitions": out}

    def delete_partitions(self, org_id: str, op: dict[str, Any]) -> Result:
        """Drop the logs of a deleted topic. ``op = {topic, partitions: [int] | None[, topic_id][, incarnation]}``.

        ``partitions=None`` drops every partition of the topic this shard holds. Logs of the
        topic and of older incarnations go; a newer incarnation's log stays (a late drop).
        The shard also remembers the incarnation (``TOPIC_DROPPED``), so a stale produce
        cannot start a log for the dead topic afterwards, on any of its partitions.
        Response ``{partitions: [partitions whose logs were dropped]}``.
        """
        topic, wanted, incarnation = op["topic"], op.get("partitions"), op.get("incarnation", 0)
        keys = sorted(
            k
            for k, log in self.logs.items()
            if k[0] == org_id
            and k[1] == topic
            and (wanted is None or k[2] in wanted)
            and (self.log(*k, topic_id=op.get("topic_id")) is not None or 0 < log.incarnation < incarnation)
        )
        records = []
        if incarnation > self.dropped.get((org_id, topic), 0):  # first: remembered before the logs go
            parts = wanted if wanted is not None else [k[2] for k in keys]
            streams = sorted({ids.log_partition(org_id, topic, p, self.coordinator_partitions) for p in parts})
            records += [Record(RecordType.TOPIC_DROPPED, (org_id, topic, cp), incarnation) for cp in streams]
        records += [Record(RecordType.PARTITION_TRUNCATE, k, None) for k in keys]
        return records, {"partitions": [k[2] for k in keys]}

    def update_configs(self, org_id: str, op: dict[str, Any]) -> Result:
        """Give existing logs of ``topic`` new config overrides (e.g. a lowered retention.ms).

        ``op = {topic, configs, config_version, partitions: [int] | None[, topic_id]}``; response
        ``{partitions: [updated]}``. Logs that already have these or newer configs, or that belong
        to another incarnation of the topic, are left alone.
        """
        topic, configs, wanted = op["topic"], dict(op.get("configs") or {}), op.get("partitions")
        version = op.get("config_version", 0)
        records = [
            Record(RecordType.PARTITION_TRUNCATE, k,
                   {**_truncate(log, log.log_start_offset), "configs": configs, "config_version": version})
            for k, log in sorted(self.logs.items())
            if k[0] == org_id and k[1] == topic and (wanted is None or k[2] in wanted)
            and self.log(*k, topic_id=op.get("topic_id")) is not None and log.newer_configs(configs, version)
        ]
        return records, {"partitions": [r.key[2] for r in records]}

    def sizes(self, org_id: str, topics: list[str] | None) -> list[list[Any]]:
        """``[topic, partition, bytes]`` of every log of ``org_id`` (of ``topics`` only, when given)."""
        wanted = None if topics is None else set(topics)
        return [[k[1], k[2], log.size] for k, log in sorted(self.logs.items())
                if k[0] == org_id and (wanted is None or k[1] in wanted)]

    def summary(self) -> list[list[Any]]:
        """Every log here, of every organisation, grouped by topic incarnation:
        ``[org, topic, topic_id, incarnation, config_version, [partitions]]`` (for the gateway's
        check against the catalogue, ``rafka.gateway.reconcile``)."""
        groups: dict[tuple[Any, ...], list[int]] = {}
        for (org, topic, partition), log in sorted(self.logs.items()):
            groups.setdefault((org, topic, log.topic_id, log.incarnation, log.config_version), []).append(partition)
        return [[*key, partitions] for key, partitions in groups.items()]

    def init_producer_id(self, org_id: str, op: dict[str, Any], now_ms: int) -> Result:
        """InitProducerId (idempotent producers only); see ``ProducerIdManager.init_producer_id``."""
        return self.producer_ids.init_producer_id(org_id, op, now_ms)

    def write_markers(self, org_id: str, marker: dict[str, Any], now_ms: int) -> tuple[list[Record], list[list[Any]]]:
        """Commit/abort markers of one transaction on this shard's ``partitions`` (pure), and
        ``[topic, partition, INVALID_PRODUCER_EPOCH]`` for those it refuses.

        ``marker = {producer_id, producer_epoch, committed, partitions: [[topic, partition]]}``.
        One control batch per partition where the producer has an open transaction;
        none elsewhere, so repeating a marker (a retry after a crash) changes nothing. A marker
        older than the producer's epoch on a partition is refused there.
        """
        records: list[Record] = []
        refused: list[list[Any]] = []
        for topic, partition in marker.get("partitions") or []:
            key = (org_id, topic, int(partition))
            log = self.logs.get(key)
            if log is None:
                continue
            if _stale_marker(log, marker):
                refused.append([topic, int(partition), Errors.INVALID_PRODUCER_EPOCH])
                continue
            value = log.prepare_marker(marker["producer_id"], marker["producer_epoch"], bool(marker["committed"]), now_ms)
            if value is not None:
                records.append(Record(RecordType.PARTITION_BATCH, key, value))
        return records, refused

    def retention(self, now_ms: int) -> list[Record]:
        """Periodic: truncate logs past ``retention.ms``/``retention.bytes``, expire each log's idle
        producers (never one with an open transaction) and old producer id allocations."""
        records = []
        expiry = self.producer_id_expiration_ms
        for key, log in sorted(self.logs.items()):
            new_start = log.retention_log_start(now_ms)
            if new_start is not None:
                records.append(Record(RecordType.PARTITION_TRUNCATE, key, _truncate(log, new_start)))
            idle = sorted(pid for pid, entry in log.producers.entries.items()
                          if now_ms - entry.last_append_ms >= expiry and pid not in log.ongoing_txns)
            if idle:
                records.append(Record(RecordType.PRODUCERS_EXPIRED, key, idle))
        records += [Record(RecordType.PRODUCER_STATE, key, None) for key in self.producer_ids.expired(now_ms, expiry)]
        return records

    def clean(self, now_ms: int) -> list[Record]:
        """Compact every log due a clean, here and now (see ``rafka.shard.log.cleaner``; the
        shard runs ``cleaner.run`` in a worker thread instead, through ``due_cleans`` and
        ``compacted``)."""
        records = []
        for key, job in self.due_cleans(now_ms):
            record = self.compacted(key, job, cleaner.run(job))
            if record is not None:
                records.append(record)
        return records

    def due_cleans(self, now_ms: int) -> list[tuple[PartitionKey, cleaner.CleanJob]]:
        """The cleans the logs are due (Kafka's log.cleaner.backoff.ms pass)."""
        jobs = ((key, cleaner.due(log, now_ms)) for key, log in sorted(self.logs.items()))
        return [(key, job) for key, job in jobs if job is not None]

    def compacted(self, key: PartitionKey, job: cleaner.CleanJob, cleaned: dict[str, Any] | None) -> Record | None:
        """The ``PARTITION_COMPACTED`` record of a finished clean, or None if the log changed
        since its job was taken. It also carries the log's state, as a truncation does, since
        the write-ahead log then deletes the segments it replaces."""
        log = self.logs.get(key)
        if log is None or not cleaner.still_valid(log, job):
            return None
        if cleaned is None:  # as Kafka's LogCleanerManager.markPartitionUncleanable, until a restart
            log.uncleanable = True
            return None
        return Record(RecordType.PARTITION_COMPACTED, key, {**_truncate(log, log.log_start_offset), **cleaned})

    # ----------------------------------------------------------------- replay

    def replay(self, record: Record) -> None:
        """Apply one record; the only code that changes the logs."""
        key = tuple(record.key)
        if record.type == RecordType.PARTITION_BATCH:
            self._replay_batch(key, record.value)
        elif record.type == RecordType.PARTITION_TRUNCATE:
            self._replay_truncate(key, record.value)
        elif record.type == RecordType.PARTITION_COMPACTED:
            self._restored(key, record.value).apply_compaction(record.value)
        elif record.type == RecordType.TOPIC_DROPPED:
            topic = (key[0], key[1])
            self.dropped[topic] = max(self.dropped.get(topic, 0), int(record.value))
        elif record.type == RecordType.PRODUCER_STATE:
            self.producer_ids.replay(record)
        elif record.type == RecordType.PRODUCERS_EXPIRED:
            log = self.logs.get(key)
            if log is not None:
                for pid in record.value:
                    log.producers.remove(pid)
        else:
            raise ValueError(f"LogManager cannot replay record type {record.type}")

    def _replay_batch(self, key: PartitionKey, value: dict[str, Any]) -> None:
        log = self.logs.get(key)
        if log is None:
            log = self.logs[key] = PartitionLog()
        _adopt_topic(log, value)
        log.apply_batch(value)

    def _replay_truncate(self, key: PartitionKey, value: dict[str, Any] | None) -> None:
        if value is None:
            self.logs.pop(key, None)
            return
        self._restored(key, value).apply_log_start(value["log_start_offset"])

    def _restored(self, key: PartitionKey, value: dict[str, Any]) -> PartitionLog:
        """The log of ``key`` with the topic and state a truncation or compaction record carries:
        the state when it was written, all of it, even if the segments holding it were deleted."""
        log = self.logs.get(key)
        if log is None:
            log = self.logs[key] = PartitionLog()
        _adopt_topic(log, value)
        if "producers" in value:
            log.producers.restore(value["producers"])
            log.ongoing_txns = {int(p): int(o) for p, o in value["ongoing_txns"]}
            log.aborted_txns = [(int(p), int(f), int(last)) for p, f, last in value["aborted_txns"]]
        return log


def _stale_marker(log: PartitionLog, marker: dict[str, Any]) -> bool:
    """Kafka's checkProducerEpoch for an end-transaction marker: one older than the producer's
    epoch on this partition would end a transaction it did not decide."""
    entry = log.producers.entries.get(marker["producer_id"])
    return entry is not None and marker["producer_epoch"] < entry.producer_epoch


def _topic_id(p: dict[str, Any]) -> str | None:
    """The topic id an op's partition names, as logs keep it (a string), or None."""
    return None if p.get("topic_id") is None else str(p["topic_id"])


def _adopt_topic(log: PartitionLog, value: dict[str, Any]) -> None:
    """Replay what a record says of the log's topic: its id, incarnation and configs."""
    if "topic_id" in value:
        log.topic_id = value["topic_id"]
    if "incarnation" in value:
        log.incarnation = value["incarnation"]
    if "configs" in value:
        log.set_overrides(value["configs"], value.get("config_version", 0))


def _truncate(log: PartitionLog, log_start_offset: int) -> dict[str, Any]:
    """A ``PARTITION_TRUNCATE`` value. It also carries the log's configs, topic id, producer state
    and transactions (as Kafka keeps producer snapshots): the write-ahead log drops the segments
    below the new log start, which may hold the only records of them."""
    value: dict[str, Any] = {
        "log_start_offset": log_start_offset, "configs": dict(log.overrides), "config_version": log.config_version,
        "producers": log.producers.snapshot(), "ongoing_txns": [[p, o] for p, o in log.ongoing_txns.items()],
        "aborted_txns": [list(t) for t in log.aborted_txns if t[2] >= log_start_offset],
        "incarnation": log.incarnation}
    if log.topic_id is not None:
        value["topic_id"] = log.topic_id
    return value
