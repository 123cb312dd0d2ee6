"""A shard's state and its op table.

How this works: ``ShardState`` holds the pure managers of one shard — the group
coordinator (groups and committed offsets), the topic catalogue and the partition
logs — and maps each rail ``Op`` to one handler. Every handler has the shape
``(org_id, payload, now_ms, respond) -> list[Record]``; ``append`` is the single
place records go: to the write-ahead log (when there is one) and through
``replay`` into the manager that owns their type. The runtime owns I/O; nothing
here touches sockets or clocks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from rafka.rail import Op
from rafka.shard.records import Record, RecordType

log = logging.getLogger("rafka.shard")

Respond = Callable[[Any], None]
Handler = Callable[[str, Any, int, Respond], list[Record]]
# (records, i, stop, skipped) -> the index of the first record from ``i`` it did not replay
RunReplayer = Callable[[list[Any], int, int, Callable[[Any], None]], int]


class Wal(Protocol):
    """What the state needs of a write-ahead log (see rafka.shard.wal)."""

    on_segment: Callable[[tuple[str, str, int], Path, int, int, bool], None] | None

    def active_segment(self, org_id: str, topic: str, partition: int) -> tuple[Path, int, int, int] | None: ...

    def append(self, records: list[Record]) -> None: ...
    def commit(self) -> Future[None] | None: ...
    def recover(self, raw: bool = False) -> Iterator[list[Any]]: ...
    def close(self) -> None: ...


class ShardState:
    """The managers of one shard plus the op → handler table."""

    def __init__(self, shard_id: int, groups: Any, topics: Any = None, logs: Any = None, wal: Wal | None = None) -> None:
        self.shard_id = shard_id
        self.groups = groups
        self.topics = topics
        self.logs = logs
        self.wal = wal
        self.handlers: dict[Op, Handler] = {
            Op.JOIN_GROUP: groups.join_group,
            Op.SYNC_GROUP: groups.sync_group,
            Op.HEARTBEAT: groups.heartbeat,
            Op.LEAVE_GROUP: groups.leave_group,
            Op.OFFSET_COMMIT: groups.offset_commit,
            Op.OFFSET_FETCH: groups.offset_fetch,
            Op.OFFSET_DELETE: groups.offset_delete,
            Op.DELETE_TOPIC_OFFSETS: groups.delete_topic_offsets,
            Op.DESCRIBE_GROUP: groups.describe_group,
            Op.LIST_GROUPS: groups.list_groups,
            Op.DELETE_GROUP: groups.delete_group,
        }
        self.on_start: list[Callable[[int], None]] = []
        self.data: Any = None  # the DataPlane, once installed
        self._replayers: dict[int, Callable[[Record], None]] = {
            RecordType.OFFSET_COMMIT: groups.replay,
            RecordType.GROUP_METADATA: groups.replay,
        }
        # what ``replay`` does with a run of records of these types, given the decoded tuples:
        # recovery replays millions of commits, without a Record for each
        self._run_replayers: dict[int, RunReplayer] = {
            RecordType.OFFSET_COMMIT: groups.replay_offset_commits,
        }
        # KIP-848 consumer groups live next to the classic ones (rafka.shard.groups.consumer)
        self.consumer_groups: Any = getattr(groups, "consumer", None)
        if self.consumer_groups is not None:
            consumer = self.consumer_groups
            self.handlers[Op.CONSUMER_GROUP_HEARTBEAT] = consumer.heartbeat
            self.handlers[Op.CONSUMER_GROUP_DESCRIBE] = consumer.describe
            self.handlers[Op.DESCRIBE_GROUP_CONFIGS] = consumer.configs.describe
            self.handlers[Op.ALTER_GROUP_CONFIGS] = consumer.configs.alter
            self.register_replay(RecordType.GROUP_CONFIG, consumer.configs.replay)
            for rtype in (RecordType.CONSUMER_GROUP_METADATA, RecordType.CONSUMER_GROUP_MEMBER,
                          RecordType.CONSUMER_GROUP_TARGET):
                self.register_replay(rtype, consumer.replay)

    def register(self, op: Op, handler: Handler) -> None:
        """Add a handler (each op once)."""
        if op in self.handlers:
            raise ValueError(f"op {op!r} registered twice")
        self.handlers[op] = handler

    def register_replay(self, rtype: RecordType, replay: Callable[[Record], None]) -> None:
        self._replayers[rtype] = replay
        self._run_replayers.pop(rtype, None)  # recovery replays through the same one

    def dispatch(self, op: int, org_id: str, payload: Any, now_ms: int, respond: Respond, trace: str | None) -> None:
        handler = self.handlers.get(op)
        if handler is None:
            raise ValueError(f"shard has no handler for op {op!r}")
        self.append(handler(org_id, payload, now_ms, respond))

    def append(self, records: list[Record]) -> None:
        """Log ``records`` and replay them: the only path by which state changes."""
        if not records:
            return
        if self.wal is not None:
            self.wal.append(records)
        for record in records:
            self.replay(record)

    def replay(self, record: Record) -> None:
        replayer = self._replayers.get(record.type)
        if replayer is None:
            log.error("no replayer for record type %s; skipped", record.type)
            return
        replayer(record)

    def start(self, now_ms: int) -> None:
        self.groups.on_loaded(now_ms)
        if self.consumer_groups is not None:
            self.consumer_groups.on_loaded(now_ms)
        for hook in self.on_start:
            hook(now_ms)

    def commit(self) -> Future[None] | None:
        """Make appended records durable; a future to wait on before replying, or None."""
        return self.wal.commit() if self.wal is not None else None

    def recover(self) -> Iterator[int]:
        """Replay the write-ahead log through the replayers ``replay`` uses (runs of commits through
        their run replayer, from the decoded tuples); yields progress after each list of records the
        WAL gives (a chunk of a meta segment, a data segment) and every 10,000 records of a long one,
        so the loop answers pings however the records come (each small data stream is a list)."""
        if self.wal is None:
            return
        n = 0
        replayers, by_runs, new = self._replayers, self._run_replayers.get, tuple.__new__
        for segment in self.wal.recover(raw=True):  # (type, key, value) tuples a chunk at a time, or Records
            i, end = 0, len(segment)
            while i < end:
                stop = min(i + 10_000, end)
                while i < stop:
                    record = segment[i]
                    try:
                        run = by_runs(record[0])
                        if run is not None:
                            i = run(segment, i, stop, _skipped)
                            continue
                        replayers[record[0]](record if type(record) is Record else new(Record, record))
                    except Exception:
                        _skipped(record)
                    i += 1
                yield n + i
            n += end
        yield n

    def close(self) -> None:
        if self.wal is not None:
            self.wal.close()


def _skipped(record: Any) -> None:
    log.exception("recovery: record %.300r could not be replayed; skipped", record)
