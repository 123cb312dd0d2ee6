"""Rail handlers for the data plane: the topic catalogue and the partition logs.

How this works: ``DataPlane`` adapts the pure ``TopicCatalog`` and ``LogManager``
to the shard's handler shape ``(org_id, payload, now_ms, respond) -> records``
(writes through ``_pure``) and owns long-poll fetches. A FETCH that has fewer than ``min_bytes`` ready is parked
under its ``fetch_id`` and the partitions it watches; a produce that appends to a
watched partition re-runs the parked fetch, and the fetch is answered when it has
``min_bytes``, when its ``max_wait_ms`` timer fires, when its topic is deleted (with the
error a re-run then finds, as Kafka completes a delayed fetch of a partition it stops
hosting), or when the gateway sends FETCH_CANCEL (a fetch spanning several shards has its answer). FETCH_RETARGET lowers a
parked fetch's ``min_bytes`` to what the other shards' answers left to make up.
Responses are plain msgpack data (topic ids as strings).
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rafka import ids
from rafka.rail import Op
from rafka.shard.handlers import ShardState
from rafka.shard.log import cleaner
from rafka.shard.log.errors import Errors
from rafka.shard.log.manager import LogManager, appended_partitions
from rafka.shard.log.topics import TopicCatalog, validate_topic_name
from rafka.shard.pager import Pager
from rafka.shard.records import Record, RecordType

Respond = Callable[[Any], None]
log = logging.getLogger("rafka.shard")
CLEANER_POLL_MS = 20  # how soon the loop looks again while a clean runs or more are due


def plain(value: Any) -> Any:
    """``value`` with UUIDs as strings and enums as ints, for msgpack."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return value


def _pure(handler: Callable[..., tuple[list[Record], Any]], now: bool = True) -> Callable[..., list[Record]]:
    """Shape a pure ``(org_id, op[, now_ms]) -> (records, response)`` handler as a shard op."""
    def op(org_id: str, payload: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        records, resp = handler(org_id, payload, now_ms) if now else handler(org_id, payload)
        respond(plain(resp))
        return records

    return op


@dataclass
class ParkedFetch:
    fetch_id: str
    org_id: str
    op: dict[str, Any]
    respond: Respond
    keys: set[tuple[str, str, int]] = field(default_factory=set)


class DataPlane:
    """Topic catalogue + partition logs of one shard, with parked fetches."""

    def __init__(self, shard_id: int, timer: Any, default_partitions: int = 1,
                 coordinator_partitions: int = ids.DEFAULT_COORDINATOR_PARTITIONS,
                 retention_check_ms: int = 30_000, cleaner_backoff_ms: int = 15_000) -> None:
        self.catalog = TopicCatalog(default_partitions=default_partitions)
        self.logs = LogManager(coordinator_partitions=coordinator_partitions)
        self.timer = timer
        self.retention_check_ms = retention_check_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self._cleaning: tuple[tuple[str, str, int], cleaner.CleanJob, Future[dict[str, Any] | None]] | None = None
        self.parked: dict[str, ParkedFetch] = {}
        self.wal: Any = None
        self.pager = Pager(self.logs.logs, timer, None)
        self.watchers: dict[tuple[str, str, int], set[str]] = {}

    def install(self, state: ShardState) -> None:
        """Register this plane's ops and record types on ``state``."""
        for op, fn in [(Op.LIST_TOPICS, self.list_topics), (Op.DESCRIBE_CONFIGS, self.describe_configs),
                       (Op.LOG_DIRS, self.log_dirs), (Op.LIST_LOGS, self.list_logs),
                       (Op.FETCH, self.fetch), (Op.FETCH_CANCEL, self.fetch_cancel),
                       (Op.FETCH_RETARGET, self.fetch_retarget),
                       (Op.LIST_OFFSETS, self.list_offsets),
                       (Op.CREATE_TOPIC, _pure(self.catalog.create_topics)),
                       (Op.DELETE_TOPIC, _pure(self.catalog.delete_topics, now=False)),
                       (Op.CREATE_PARTITIONS, _pure(self.catalog.create_partitions)),
                       (Op.ALTER_CONFIGS, _pure(self.catalog.alter_configs, now=False)),
                       (Op.UPDATE_CONFIGS, _pure(self.logs.update_configs, now=False)),
                       (Op.PRODUCE, _pure(self.logs.produce)),
                       (Op.DELETE_RECORDS, _pure(self.logs.delete_records, now=False)),
                       (Op.DELETE_PARTITIONS, _pure(self.logs.delete_partitions, now=False)),
                       (Op.INIT_PRODUCER_ID, _pure(self.logs.init_producer_id))]:
            state.register(op, fn)
        state.on_start.append(self.start)
        state.data = self
        state.register_replay(RecordType.TOPIC, self.catalog.replay)
        for rtype in (RecordType.PARTITION_BATCH, RecordType.PARTITION_TRUNCATE, RecordType.PRODUCER_STATE,
                      RecordType.TOPIC_DROPPED, RecordType.PRODUCERS_EXPIRED, RecordType.PARTITION_COMPACTED):
            state.register_replay(rtype, self._replay_log)
        self._state = state
        self.wal = self.pager.wal = state.wal
        if self.wal is not None:
            self.wal.on_segment = self.pager.page_out

    def _replay_log(self, record: Record) -> None:
        self.logs.replay(record)
        if record.type == RecordType.PARTITION_BATCH:
            self.timer_wake(appended_partitions([record]))
            if self.pager.enabled:
                self.pager.count(tuple(record.key), len(record.value["batch"]), 1)
        elif record.type == RecordType.PARTITION_COMPACTED and self.pager.enabled:
            cleaned = [b for seg in record.value["segments"] for b in seg[4]]
            self.pager.count(tuple(record.key), sum(map(len, cleaned)), len(cleaned))
        elif record.type == RecordType.PARTITION_TRUNCATE and record.value is None:  # the log dropped
            self.pager.dropped(tuple(record.key))
        elif record.type == RecordType.TOPIC_DROPPED:  # fetches waiting on the topic are answered now, as Kafka's are
            org_id, topic = record.key[0], record.key[1]
            self.timer_wake({k for k in self.watchers if k[0] == org_id and k[1] == topic})

    # -- catalogue ----------------------------------------------------------
    def list_topics(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Metadata: the named topics (auto-created when allowed) or all of them."""
        records: list[Record] = []
        names = op.get("names")
        if names is not None and op.get("auto_create"):
            missing = [n for n in dict.fromkeys(names) if self.catalog.topic(org_id, n) is None]
            if missing:
                records, _ = self.catalog.create_topics(org_id, {"topics": [
                    {"name": n, "num_partitions": op.get("default_partitions", -1), "replication_factor": -1}
                    for n in missing]}, now_ms)
                for r in records:
                    self.catalog.replay(r)  # visible to this answer; replayed again below idempotently
        topics = []
        infos = self.catalog.list_topics(org_id) if names is None else [self.catalog.topic(org_id, n) for n in names]
        for name, info in zip(names or [i.name for i in infos], infos):
            if info is None:  # Kafka's codes: an illegal name fails at once, an unknown one is retried
                code = Errors.INVALID_TOPIC_EXCEPTION if validate_topic_name(name) else Errors.UNKNOWN_TOPIC_OR_PARTITION
                topics.append({"name": name, "topic_id": None, "partitions": 0, "error_code": int(code), "configs": {}})
            else:
                topics.append({"name": info.name, "topic_id": str(info.topic_id), "partitions": info.partitions,
                               "error_code": 0, "configs": dict(info.configs), "config_version": info.config_version,
                               "incarnation": info.incarnation})
        # the newest catalogue version: a log whose incarnation is above it was not created by this catalogue
        respond({"topics": topics, "version": self.catalog.version(org_id)})
        return records

    def describe_configs(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        respond(plain(self.catalog.describe_configs(org_id, op["name"], op.get("configuration_keys"),
                                                    op.get("include_synonyms", False))))
        return []

    # -- logs ---------------------------------------------------------------
    def log_dirs(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """DescribeLogDirs: this shard's log directory (its WAL's; none in memory), the disk it is
        on, and the bytes of ``org_id``'s logs here."""
        root = getattr(self._state.wal, "root", None)
        total = usable = -1  # Kafka's "unknown"
        if root is not None:
            try:
                disk = shutil.disk_usage(root)
                total, usable = disk.total, disk.free
            except OSError:
                pass
        respond({"log_dir": str(Path(root).resolve()) if root is not None else f"memory:shard-{self._state.shard_id}",
                 "total_bytes": total, "usable_bytes": usable,
                 "partitions": self.logs.sizes(org_id, op.get("topics"))})
        return []

    def list_logs(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Every log here, of every organisation (``LogManager.summary``): ``{logs: [...]}``."""
        respond({"logs": self.logs.summary()})
        return []

    def list_offsets(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        respond(plain(self.logs.list_offsets(org_id, op)))
        return []

    def start(self, now_ms: int) -> None:
        """Run the first retention pass right after recovery, then every ``retention_check_ms``.

        Recovery replays the meta streams (where a producer's expiry is written) before the
        data streams that re-add it, so expired producers come back until a pass; Kafka too
        drops expired producers when it loads a log."""
        self.timer.schedule("log-retention", 0, self.retention)
        self.pager.enabled = self.wal is not None
        self.timer.schedule("log-cleaner", self.cleaner_backoff_ms, self.clean)

    def retention(self, now_ms: int) -> list[Record]:
        """Periodic retention pass: delete whole segments past retention.ms / retention.bytes; and
        the pager's (``Pager.retention_pass``)."""
        self.timer.schedule("log-retention", self.retention_check_ms, self.retention)
        self.pager.retention_pass()
        return self.logs.retention(now_ms)

    def clean(self, now_ms: int) -> list[Record]:
        """Log compaction, as Kafka's cleaner thread: one due clean at a time runs in a worker
        thread (a large log would stall the loop); a tick on the loop writes each finished one
        (if its log did not change meanwhile) and starts the next, and with none due waits
        ``cleaner_backoff_ms`` (Kafka's log.cleaner.backoff.ms)."""
        records: list[Record] = []
        if self._cleaning is not None:
            key, job, future = self._cleaning
            if not future.done():
                self.timer.schedule("log-cleaner", CLEANER_POLL_MS, self.clean)
                return records
            self._cleaning = None
            try:
                cleaned = future.result()
            except Exception:
                log.exception("log clean of %s failed", key)
                cleaned = None
            record = self.logs.compacted(key, job, cleaned)
            records += [record] if record is not None else []
        due = self.logs.due_cleans(now_ms)
        if due:
            key, job = due[0]
            self._cleaning = (key, job, _in_thread(cleaner.run, job))
        self.timer.schedule("log-cleaner", CLEANER_POLL_MS if due else self.cleaner_backoff_ms, self.clean)
        return records

    # -- long-poll fetch ----------------------------------------------------
    def fetch(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        resp = self.logs.fetch(org_id, op)
        if _size(resp) >= op.get("min_bytes", 1) or _error(resp) or op.get("max_wait_ms", 0) <= 0 or not op.get("fetch_id"):
            respond(plain(resp))
            return []
        parked = ParkedFetch(op["fetch_id"], org_id, op, respond,
                             {(org_id, p["topic"], p["partition"]) for p in op["partitions"]})
        self.parked[parked.fetch_id] = parked
        for key in parked.keys:
            self.watchers.setdefault(key, set()).add(parked.fetch_id)
        self.timer.schedule(f"fetch:{parked.fetch_id}", op["max_wait_ms"],
                            lambda _now, fid=parked.fetch_id: self._finish(fid))
        return []

    def fetch_cancel(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        self._finish(op["fetch_id"])
        respond({})
        return []

    def fetch_retarget(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """The parked fetch ``fetch_id`` now needs only ``min_bytes``: answer it if it has them."""
        parked = self.parked.get(op["fetch_id"])
        if parked is not None:
            parked.op = {**parked.op, "min_bytes": op["min_bytes"]}
            self._recheck(op["fetch_id"])
        respond({})
        return []

    def timer_wake(self, keys: set[tuple[str, str, int]]) -> None:
        """Re-run parked fetches watching ``keys``; answer those that now have enough, or an error."""
        for key in keys:
            for fid in list(self.watchers.get(key, ())):
                self._recheck(fid)

    def _recheck(self, fetch_id: str) -> None:
        """Re-run a parked fetch; answer it if it now has its ``min_bytes`` or a partition error."""
        parked = self.parked.get(fetch_id)
        if parked is None:
            return
        resp = self.logs.fetch(parked.org_id, parked.op)
        if _size(resp) >= max(parked.op.get("min_bytes", 1), 1) or _error(resp):
            self._finish(fetch_id, resp)

    def _finish(self, fetch_id: str, resp: dict[str, Any] | None = None) -> list[Record]:
        parked = self.parked.pop(fetch_id, None)
        if parked is None:
            return []
        self.timer.cancel(f"fetch:{fetch_id}")
        for key in parked.keys:
            ids = self.watchers.get(key)
            if ids is not None:
                ids.discard(fetch_id)
                if not ids:
                    del self.watchers[key]
        resp = resp if resp is not None else self.logs.fetch(parked.org_id, parked.op)
        for p in resp["partitions"]:
            if p["error_code"]:
                p["waited"] = True  # found while the fetch waited (see the gateway's _answer_deleted)
        parked.respond(plain(resp))
        return []


def _in_thread(fn: Callable[[Any], Any], arg: Any) -> Future[Any]:
    """``fn(arg)`` in a daemon thread: a clean writes nothing itself, so a shard exiting mid-clean
    need not wait for it."""
    fut: Future[Any] = Future()

    def run() -> None:
        try:
            fut.set_result(fn(arg))
        except BaseException as exc:
            fut.set_exception(exc)

    threading.Thread(target=run, name="log-cleaner", daemon=True).start()
    return fut


def _size(resp: dict[str, Any]) -> int:
    """Bytes of records in a fetch answer (what min_bytes counts)."""
    return sum(len(p.get("records") or b"") for p in resp["partitions"])


def _error(resp: dict[str, Any]) -> bool:
    """Whether a partition of a fetch answer has an error (which answers the fetch at once)."""
    return any(p.get("error_code") for p in resp["partitions"])
