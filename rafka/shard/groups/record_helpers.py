"""Builders for the coordinator's WAL records, plus consumer-protocol parsing.

How this works: mirrors Kafka's ``GroupCoordinatorRecordHelpers``. Every key and
value is plain msgpack-able data so the WAL stores it as is:

* ``OFFSET_COMMIT`` key ``(org, group, topic, partition)``, value the packed entry
  of ``offsets_store.pack_entry`` (offset, leader epoch, commit time, metadata —
  the very bytes the store keeps, so replay stores the value as is) or ``None``
  (tombstone). Replay also accepts the older ``{"offset", "leader_epoch",
  "metadata", "commit_ts"}`` dict.
* ``GROUP_METADATA`` key ``(org, group)``, value ``{"uid", "protocol_type",
  "generation", "protocol", "leader", "state_ts", "members": [...]}`` or ``None``.
  A value is the durable image of a classic group: written when a rebalance
  completes with the leader's SyncGroup, when the group becomes Empty, when a
  static member is replaced without a rebalance and when the group is created
  (so its ``cgp_`` id is durable). Replaying it rebuilds the group as Stable (with
  members) or Empty.
"""

from __future__ import annotations

import re
import struct
from typing import TYPE_CHECKING, Any

from rafka.shard.groups.offsets_store import pack_entry
from rafka.shard.records import Record, RecordType

if TYPE_CHECKING:
    from rafka.shard.groups.classic import ClassicGroup

CONSUMER_PROTOCOL_TYPE = "consumer"

_SLUG_RE = re.compile(r"[^a-z0-9-]")


def group_slug(group_id: str) -> str:
    """The group id lower-cased with every character outside ``[a-z0-9-]`` turned into '-'."""
    return _SLUG_RE.sub("-", group_id.lower())


def group_rrl(org_id: str, group_id: str) -> str:
    """The group's Rafka Resource Locator, ``<org>/consumer-groups/<slug>``."""
    return f"{org_id}/consumer-groups/{group_slug(group_id)}"


def new_group_metadata_record(group: ClassicGroup, *, with_members: bool = True) -> Record:
    """A GROUP_METADATA record holding ``group``'s durable image.

    ``with_members=False`` writes the image of an Empty group (used when a group is
    created: its members are soft state until a rebalance completes).
    """
    members: list[dict[str, Any]] = []
    if with_members:
        for m in group.members.values():
            members.append(
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "session_timeout": m.session_timeout_ms,
                    "rebalance_timeout": m.rebalance_timeout_ms,
                    "protocols": [[name, meta] for name, meta in m.protocols],
                    "assignment": m.assignment,
                }
            )
    value = {
        "uid": group.uid,
        "protocol_type": group.protocol_type or "",
        "generation": group.generation_id,
        "protocol": group.protocol_name if with_members else None,
        "leader": group.leader_id if with_members else None,
        "state_ts": group.state_ts if group.state_ts is not None else -1,
        "members": members,
    }
    return Record(RecordType.GROUP_METADATA, (group.org_id, group.group_id), value)


def new_simple_group_record(org_id: str, group_id: str, uid: str, now_ms: int) -> Record:
    """A GROUP_METADATA record creating an Empty "simple" group (offsets only, no protocol type)."""
    value = {"uid": uid, "protocol_type": "", "generation": 0, "protocol": None, "leader": None,
             "state_ts": now_ms, "members": []}
    return Record(RecordType.GROUP_METADATA, (org_id, group_id), value)


def new_group_tombstone(org_id: str, group_id: str) -> Record:
    """A GROUP_METADATA tombstone: the group is deleted."""
    return Record(RecordType.GROUP_METADATA, (org_id, group_id), None)


def new_offset_commit_record(
    org_id: str, group_id: str, topic: str, partition: int,
    offset: int, leader_epoch: int, metadata: str, commit_ts: int, expire_ts: int | None = None,
) -> Record:
    """An OFFSET_COMMIT record for one partition; ``expire_ts`` when committed with its own retention."""
    value = pack_entry(offset, leader_epoch, metadata, commit_ts)
    return Record(RecordType.OFFSET_COMMIT, (org_id, group_id, topic, partition),
                  value if expire_ts is None else (value, expire_ts))


def new_offset_commit_tombstone(org_id: str, group_id: str, topic: str, partition: int) -> Record:
    """An OFFSET_COMMIT tombstone: the committed offset of one partition is deleted."""
    return Record(RecordType.OFFSET_COMMIT, (org_id, group_id, topic, partition), None)


def parse_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription, or None if it does not parse.

    Read with the v0 layout that prefixes every version (as Kafka does): version
    i16, then an i32-counted array of i16-length UTF-8 strings; the rest
    (user data, owned partitions, rack, ...) is ignored.
    """
    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        if count < 0:
            return None
        topics: set[str] = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(bytes(metadata[pos:pos + length]).decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
