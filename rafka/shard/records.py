"""State-change records: the only way shard state changes.

How this works: a pure handler returns a list of ``Record``; the shard runtime
appends them to the write-ahead log and then calls ``replay(record)`` on the owning
manager. Recovery after a restart calls the same ``replay`` over the log, so the
live path and the recovery path are one. A record has an explicit type id, a key
and a value; ``value=None`` is a tombstone. Keys and values are plain msgpack-able
data (tuples/lists, dicts, str, int, bytes) so the WAL can store them as is.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple


class RecordType(IntEnum):
    """Type ids of every record kind. Never renumber: ids are stored on disk."""

    OFFSET_COMMIT = 1  # key (org, group, topic, partition); value packed entry (offsets_store) | (entry, expire_ts) | None
    GROUP_METADATA = 2  # key (org, group); value dict | None
    CONSUMER_GROUP_METADATA = 3  # key (org, group); value dict | None (KIP-848 group)
    CONSUMER_GROUP_MEMBER = 4  # key (org, group, member_id); value dict | None
    CONSUMER_GROUP_TARGET = 5  # key (org, group, member_id); value {topic_id: [partitions]} | None
    GROUP_CONFIG = 6  # key (org, group); value {config name: value} | None (groups.config_manager)
    TOPIC = 10  # key (org, topic); value dict | None
    PARTITION_BATCH = 11  # key (org, topic, partition); value dict
    PARTITION_TRUNCATE = 12  # key (org, topic, partition); value dict (new log start)
    PRODUCER_STATE = 13  # key (org, -1): the org's last allocated id (older: (org, producer_id)); value dict | None
    TXN_METADATA = 14  # key (org, transactional_id); value dict | None (rafka.shard.txn.state)
    TXN_OFFSET_COMMIT = 15  # key (org, group, producer_id, topic, partition); value dict | None (pending)
    TOPIC_DROPPED = 16  # key (org, topic, coordinator partition); value newest incarnation deleted (log.manager)
    PRODUCERS_EXPIRED = 17  # key (org, topic, partition); value [producer ids] the partition forgets (log.manager)
    PARTITION_COMPACTED = 18  # key (org, topic, partition); value dict: the cleaned log below ``upto`` (log.cleaner)


class Record(NamedTuple):
    """One state change: ``type`` id, ``key`` and ``value`` (``None`` = tombstone).

    A NamedTuple rather than a dataclass: recovery builds millions of these.
    """

    type: int
    key: tuple[Any, ...]
    value: Any = None
