"""OffsetCommit, OffsetFetch, OffsetDelete and offset expiration (Kafka's OffsetMetadataManager).

How this works: handlers only validate and emit records — one OFFSET_COMMIT
record per committed partition, a tombstone per deleted one — and
``GroupCoordinator.replay`` applies them to the ``OffsetStore``. A commit is
fenced exactly as Kafka's ``validateOffsetCommit``: with generation -1 an admin
client or a consumer without group management may commit to an Empty or absent
group (an absent one is created as a "simple" group with its own ``cgp_`` id);
otherwise the member, instance id and generation must match, and commits are
refused while the group waits for the leader's assignment.

Expiration runs every ``offsets_retention_check_interval_ms``: offsets of an
Empty group expire ``offsets_retention_ms`` after the group became Empty; those
of a group with no protocol type (simple consumers) after their commit time;
those of a Stable consumer group only for topics it no longer subscribes to; those of
a KIP-848 group for the topics no member subscribes to, after their commit time. An
offset committed with its own ``retention_time`` (OffsetCommit v2–4) expires at commit
time + that instead, as Kafka's ``OffsetExpirationConditionImpl``. An
offset an open transaction also holds waits; an Empty group left with no offsets and
no open transaction is deleted, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rafka.shard.groups.classic import ClassicGroup
from rafka.shard.groups.core import Respond
from rafka.shard.groups.errors import Errors
from rafka.shard.groups.join import NO_RECORDS
from rafka.shard.groups.membership import MembershipMixin
from rafka.shard.groups.offsets_store import OffsetEntry, entry_commit_ts
from rafka.shard.groups.record_helpers import (
    new_group_tombstone,
    new_offset_commit_record,
    new_offset_commit_tombstone,
    new_simple_group_record,
)
from rafka.shard.groups.state import ClassicGroupState
from rafka.shard.records import Record

S = ClassicGroupState



def metadata_too_large(metadata: str | None, max_length: int) -> bool:
    """Kafka's ``isMetadataInvalid``: longer than ``offset.metadata.max.bytes`` in Java chars
    (UTF-16 units: a character outside the BMP counts two)."""
    return metadata is not None and len(metadata) * 2 > max_length and (
        len(metadata) > max_length or len(metadata.encode("utf-16-le")) // 2 > max_length)


def _all_partitions(op: dict[str, Any], error: int) -> dict[str, Any]:
    return {"topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": error}
                                           for p in t.get("partitions") or []]}
        for t in op.get("topics") or []
    ]}


class OffsetsMixin(MembershipMixin):
    """OffsetCommit / OffsetFetch / OffsetDelete handlers and offset expiration."""

    def offset_commit(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle an OffsetCommit: validate, then one OFFSET_COMMIT record per accepted partition."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""  # "" is a valid (legacy) group id for commits
        generation = op.get("generation_id_or_member_epoch")
        if generation is None:
            generation = op.get("generation_id")
        if generation is None:
            generation = -1
        member_id = op.get("member_id") or ""
        instance_id = op.get("group_instance_id")
        records: list[Record] = []
        consumer_error = None
        if self.consumer is not None:  # a KIP-848 group: the member epoch fences the commit
            consumer_error = self.consumer.validate_offset_commit(
                org_id, group_id, member_id, instance_id, generation, op.get("api_version", 0))
        group = None if consumer_error is not None else self._group(org_id, group_id)
        if consumer_error is not None:
            error = consumer_error
        elif group is None:
            if generation < 0:
                # admin client or consumer without group management: create a simple group
                records.append(new_simple_group_record(org_id, group_id, self._new_group_uid(now_ms), now_ms))
                error = Errors.NONE
            else:
                error = Errors.GROUP_ID_NOT_FOUND if op.get("api_version", 0) >= 9 else Errors.ILLEGAL_GENERATION
        else:
            error = group.validate_offset_commit(member_id, instance_id, generation)
            if not error and group.state in (S.STABLE, S.PREPARING_REBALANCE):
                # a commit keeps a classic member's session alive, as in Kafka
                self._reschedule_heartbeat(group, group.members[member_id])
        if error:
            respond(_all_partitions(op, error))
            return NO_RECORDS

        max_bytes = self.config.offset_metadata_max_bytes
        retention = op.get("retention_time", -1)
        expire_ts = now_ms + retention if retention is not None and retention != -1 else None
        topics_out = []
        # A partition listed more than once is answered each time and stored once, with its last
        # value, which replay would have left anyway: a small request naming one partition
        # thousands of times under a long group id no longer writes megabytes of log.
        commits: dict[tuple[str, int], Record] = {}
        for topic in op.get("topics") or []:
            name = topic["name"]
            parts_out = []
            for p in topic.get("partitions") or []:
                index = p["partition_index"]
                metadata = p.get("committed_metadata")
                if metadata_too_large(metadata, max_bytes):
                    parts_out.append({"partition_index": index, "error_code": Errors.OFFSET_METADATA_TOO_LARGE})
                    continue
                epoch = p.get("committed_leader_epoch")
                commits[(name, index)] = new_offset_commit_record(
                    org_id, group_id, name, index, p["committed_offset"],
                    -1 if epoch is None else epoch, metadata or "", now_ms, expire_ts,
                )
                parts_out.append({"partition_index": index, "error_code": Errors.NONE})
            topics_out.append({"name": name, "partitions": parts_out})
        respond({"topics": topics_out})
        records.extend(commits.values())
        return records

    def offset_fetch(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle an OffsetFetch for one group; never-committed partitions answer offset -1."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""
        if self.consumer is not None:
            error = self.consumer.validate_offset_fetch(org_id, group_id, op.get("member_id"), op.get("member_epoch"))
            if error:
                respond({"group_id": group_id, "error_code": error, "topics": []})
                return NO_RECORDS
        group = self._group(org_id, group_id)
        if group is not None and group.state is S.DEAD:
            respond({"group_id": group_id, "error_code": Errors.GROUP_ID_NOT_FOUND, "topics": []})
            return NO_RECORDS
        store = self.offsets
        requested = op.get("topics")
        topics_out = []
        if requested is None:
            for name in store.topics(org_id, group_id):
                topics_out.append({"name": name, "partitions": [
                    _fetched(index, entry) for index, entry in store.partitions(org_id, group_id, name)]})
        else:
            for topic in requested:
                name = topic["name"]
                topics_out.append({"name": name, "partitions": [
                    _fetched(index, store.get(org_id, group_id, name, index))
                    for index in topic.get("partition_indexes") or []]})
        if op.get("require_stable"):
            for t in topics_out:
                for p in t["partitions"]:
                    if self.txn_pending(org_id, group_id, t["name"], p["partition_index"]):
                        p.update(committed_offset=-1, error_code=Errors.UNSTABLE_OFFSET_COMMIT)
        respond({"group_id": group_id, "error_code": Errors.NONE, "topics": topics_out})
        return NO_RECORDS

    def offset_delete(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle an OffsetDelete: tombstones for topics the group does not subscribe to."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""
        if not group_id:
            respond({"error_code": Errors.INVALID_GROUP_ID, "topics": []})
            return NO_RECORDS
        if self.consumer is not None and self.consumer.is_consumer_group(org_id, group_id):
            subscribed = lambda name: self.consumer.is_subscribed_to_topic(org_id, group_id, name)
        else:
            group = self._group(org_id, group_id)
            if group is None or group.state is S.DEAD:
                respond({"error_code": Errors.GROUP_ID_NOT_FOUND, "topics": []})
                return NO_RECORDS
            if group.state is not S.EMPTY and not group.uses_consumer_protocol():
                respond({"error_code": Errors.NON_EMPTY_GROUP, "topics": []})
                return NO_RECORDS
            subscribed = group.is_subscribed_to_topic
        records: list[Record] = []
        topics_out = []
        for topic in op.get("topics") or []:
            name = topic["name"]
            indexes = [p["partition_index"] for p in topic.get("partitions") or []]
            if subscribed(name):
                error = Errors.GROUP_SUBSCRIBED_TO_TOPIC
            else:  # Kafka: a committed offset or one pending in an open transaction is deleted
                error = Errors.NONE
                for index in indexes:
                    if (self.offsets.get(org_id, group_id, name, index) is not None
                            or self.txn_pending(org_id, group_id, name, index)):
                        records.append(new_offset_commit_tombstone(org_id, group_id, name, index))
                records += self.txn_cancel(org_id, group_id, {(name, index) for index in indexes})
            topics_out.append({"name": name, "partitions": [
                {"partition_index": index, "error_code": error} for index in indexes]})
        respond({"error_code": Errors.NONE, "topics": topics_out})
        return records

    def delete_topic_offsets(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """The topics ``op["topics"]`` were deleted: tombstones for every group's committed offsets
        of them, as Kafka's coordinator drops the offsets of deleted partitions (a topic created
        again under the name starts from the reset policy, not from the old topic's offsets)."""
        self._ensure_loaded(now_ms)
        names = set(op.get("topics") or ())
        records = [new_offset_commit_tombstone(org, group_id, topic, index)
                   for org, group_id in self.offsets.group_keys() if org == org_id
                   for topic in self.offsets.topics(org, group_id) if topic in names
                   for index, _raw in self.offsets.raw_partitions(org, group_id, topic)]
        respond({"deleted": len(records)})
        return records

    # ------------------------------------------------------------ expiration
    def expire_offsets(self, now_ms: int) -> list[Record]:
        """Tombstones for expired offsets, and for Empty groups left without offsets."""
        retention = self.config.offsets_retention_ms
        records: list[Record] = []
        for group in list(self.groups.values()):
            org_id, group_id = group.key
            all_expired = True
            if self.offsets.has_offsets(org_id, group_id):
                all_expired = self._expire_group_offsets(group, now_ms, retention, records)
            if all_expired and group.state is S.EMPTY and not self.txn_open(org_id, group_id):
                records.append(new_group_tombstone(org_id, group_id))
        if self.consumer is not None:
            for (org_id, group_id), group in list(self.consumer.groups.items()):
                self._expire_consumer_group(org_id, group_id, group, now_ms, retention, records)
        self.expired_offsets += sum(1 for r in records if r.value is None and len(r.key) == 4)
        return records

    def _expire_consumer_group(self, org_id: str, group_id: str, group: Any, now_ms: int, retention: int,
                               records: list[Record]) -> None:
        """A KIP-848 group (Kafka's ConsumerGroup.offsetExpirationCondition): offsets of topics no
        member subscribes to expire ``retention`` after their commit; an Empty group left without
        offsets is deleted."""
        subscribed = group.all_subscribed_names()
        all_expired = self._expire_unsubscribed(org_id, group_id, subscribed.__contains__, None, now_ms, retention,
                                                records)
        if all_expired and not group.members and not self.txn_open(org_id, group_id):
            deleted = self.consumer.delete_group(org_id, group_id)
            if deleted is not None:
                records += deleted[1]

    def _expire_group_offsets(self, group: ClassicGroup, now_ms: int, retention: int, records: list[Record]) -> bool:
        """Append tombstones for ``group``'s expired offsets; True if none would remain."""
        org_id, group_id = group.key
        if group.protocol_type is not None:
            if group.state is S.EMPTY:
                base = group.state_ts  # counted from when the group became Empty
                if base is not None and now_ms - base < retention and not self.offsets.own_expiries(group.key):
                    return False
            elif not (group.uses_consumer_protocol() and group.subscribed_topics is not None
                      and group.state is S.STABLE):
                return False
            else:
                base = None
        else:
            base = None  # simple group: counted from each commit
        return self._expire_unsubscribed(org_id, group_id, group.is_subscribed_to_topic, base, now_ms, retention,
                                         records)

    def _expire_unsubscribed(self, org_id: str, group_id: str, subscribed: Callable[[str], bool], base: int | None,
                             now_ms: int, retention: int, records: list[Record]) -> bool:
        """Append tombstones for the group's offsets of topics it does not subscribe to that are
        ``retention`` old (counted from ``base``, else from each commit), or past their own
        expiry time, and that no open transaction also holds (Kafka's cleanupExpiredOffsets);
        True if none would remain."""
        all_expired = True
        own = self.offsets.own_expiries((org_id, group_id))
        for topic in self.offsets.topics(org_id, group_id):
            if subscribed(topic):
                all_expired = False
                continue
            for index, raw in self.offsets.raw_partitions(org_id, group_id, topic):
                expire_ts = own.get((topic, index))
                if expire_ts is not None:
                    expired = now_ms >= expire_ts
                else:
                    expired = now_ms - (entry_commit_ts(raw) if base is None else base) >= retention
                if expired and not self.txn_pending(org_id, group_id, topic, index):
                    records.append(new_offset_commit_tombstone(org_id, group_id, topic, index))
                else:
                    all_expired = False
        return all_expired


def _fetched(index: int, entry: OffsetEntry | None) -> dict[str, Any]:
    if entry is None:
        return {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1,
                "metadata": "", "error_code": Errors.NONE}
    return {"partition_index": index, "committed_offset": entry[0], "committed_leader_epoch": entry[1],
            "metadata": entry[2], "error_code": Errors.NONE}
