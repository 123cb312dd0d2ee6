"""The gateway↔shard rail: msgpack envelopes over ZeroMQ.

How this works: a gateway holds one DEALER socket per shard; a shard binds one
ROUTER socket. To keep per-message overhead low, every ZeroMQ message carries a
*batch*: a msgpack list of envelopes: a gateway's are those queued while it handled
one client read (or one loop pass), a shard's the replies made durable by one flush.

request envelope: ``[request_id, op, org_id, trace_context, payload]``
reply envelope:   ``[request_id, status, payload]``

``op`` is an ``Op`` code, ``trace_context`` a W3C ``traceparent`` string or None,
``payload`` a version-independent op dict. ``status`` is ``OK``, ``LOADING`` (the
shard is replaying its log) or ``FAILED`` (payload is an error message). PING
replies carry the shard's incarnation id so a gateway can tell that a shard
restarted and that requests sent to the old process are lost.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import msgpack


class Op(IntEnum):
    """Operations a shard serves. Never renumber."""

    PING = 0
    JOIN_GROUP = 1
    SYNC_GROUP = 2
    HEARTBEAT = 3
    LEAVE_GROUP = 4
    OFFSET_COMMIT = 5
    OFFSET_FETCH = 6
    OFFSET_DELETE = 7
    DESCRIBE_GROUP = 8
    LIST_GROUPS = 9
    DELETE_GROUP = 10
    CONSUMER_GROUP_HEARTBEAT = 11
    CONSUMER_GROUP_DESCRIBE = 12
    DESCRIBE_GROUP_CONFIGS = 13
    ALTER_GROUP_CONFIGS = 14
    DELETE_TOPIC_OFFSETS = 15
    CREATE_TOPIC = 20
    DELETE_TOPIC = 21
    CREATE_PARTITIONS = 22
    LIST_TOPICS = 23
    DESCRIBE_CONFIGS = 24
    ALTER_CONFIGS = 25
    PRODUCE = 30
    FETCH = 31
    FETCH_CANCEL = 32
    LIST_OFFSETS = 33
    DELETE_RECORDS = 34
    INIT_PRODUCER_ID = 35
    DELETE_PARTITIONS = 36
    UPDATE_CONFIGS = 37
    LOG_DIRS = 38
    LIST_LOGS = 39
    TXN_INIT_PRODUCER_ID = 40
    TXN_ADD_PARTITIONS = 41
    TXN_ADD_OFFSETS = 42
    TXN_END = 43
    TXN_COMPLETE = 44
    TXN_WRITE_MARKERS = 45
    TXN_OFFSET_COMMIT = 46
    TXN_SWEEP = 47
    TXN_DESCRIBE = 48
    TXN_LIST = 49
    DESCRIBE_PRODUCERS = 50
    TXN_VERIFY = 51
    FETCH_RETARGET = 52


OP_NAMES: dict[int, str] = {
    Op.PING: "shard.ping",
    Op.JOIN_GROUP: "group.join",
    Op.SYNC_GROUP: "group.sync",
    Op.HEARTBEAT: "group.heartbeat",
    Op.LEAVE_GROUP: "group.leave",
    Op.OFFSET_COMMIT: "group.offset-commit",
    Op.OFFSET_FETCH: "group.offset-fetch",
    Op.OFFSET_DELETE: "group.offset-delete",
    Op.DELETE_TOPIC_OFFSETS: "group.delete-topic-offsets",
    Op.DESCRIBE_GROUP: "group.describe",
    Op.LIST_GROUPS: "group.list",
    Op.DELETE_GROUP: "group.delete",
    Op.CONSUMER_GROUP_HEARTBEAT: "group.consumer-heartbeat",
    Op.CONSUMER_GROUP_DESCRIBE: "group.consumer-describe",
    Op.DESCRIBE_GROUP_CONFIGS: "group.describe-configs",
    Op.ALTER_GROUP_CONFIGS: "group.alter-configs",
    Op.CREATE_TOPIC: "topic.create",
    Op.DELETE_TOPIC: "topic.delete",
    Op.CREATE_PARTITIONS: "topic.create-partitions",
    Op.LIST_TOPICS: "topic.list",
    Op.DESCRIBE_CONFIGS: "topic.describe-configs",
    Op.ALTER_CONFIGS: "topic.alter-configs",
    Op.PRODUCE: "data.produce",
    Op.FETCH: "data.fetch",
    Op.FETCH_CANCEL: "data.fetch-cancel",
    Op.FETCH_RETARGET: "data.fetch-retarget",
    Op.LIST_OFFSETS: "data.list-offsets",
    Op.DELETE_RECORDS: "data.delete-records",
    Op.INIT_PRODUCER_ID: "data.init-producer-id",
    Op.DELETE_PARTITIONS: "data.delete-partitions",
    Op.UPDATE_CONFIGS: "data.update-configs",
    Op.LOG_DIRS: "data.log-dirs",
    Op.LIST_LOGS: "data.list-logs",
    Op.TXN_INIT_PRODUCER_ID: "txn.init-producer-id",
    Op.TXN_ADD_PARTITIONS: "txn.add-partitions",
    Op.TXN_ADD_OFFSETS: "txn.add-offsets",
    Op.TXN_END: "txn.end-txn",
    Op.TXN_COMPLETE: "txn.complete-txn",
    Op.TXN_WRITE_MARKERS: "txn.write-markers",
    Op.TXN_OFFSET_COMMIT: "txn.offset-commit",
    Op.TXN_SWEEP: "txn.sweep",
    Op.TXN_DESCRIBE: "txn.describe",
    Op.TXN_LIST: "txn.list",
    Op.DESCRIBE_PRODUCERS: "data.describe-producers",
    Op.TXN_VERIFY: "txn.verify-partitions",
}
"""Span and metric name of each op: ``rafka.shard.<area>.<op>``."""


class Status(IntEnum):
    OK = 0
    LOADING = 1
    FAILED = 2


def pack(batch: list[Any]) -> bytes:
    """Encode a batch of envelopes."""
    return msgpack.packb(batch, use_bin_type=True)


def unpack(data: bytes) -> list[Any]:
    """Decode a batch of envelopes (raises ValueError on garbage)."""
    try:
        batch = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:
        raise ValueError(f"bad rail message: {exc}") from exc
    if not isinstance(batch, list):
        raise ValueError("rail message is not a list")  # noqa: TRY004 (one error type for any bad message)
    return batch
