"""The classic consumer-group coordinator of one shard (Kafka 4.1's classic protocol).

How this works: ``GroupCoordinator`` is Kafka's GroupMetadataManager +
OffsetMetadataManager for classic groups, split by concern into mixins:
``join`` (JoinGroup and the join phase), ``membership`` (SyncGroup, Heartbeat,
LeaveGroup, session expiry), ``offsets`` (OffsetCommit/Fetch/Delete, expiration)
and ``admin`` (Describe/List/DeleteGroups). Every handler takes
``(org_id, op, now_ms, respond)``, calls ``respond`` exactly once — now, or later
for a JoinGroup/SyncGroup parked until its rebalance phase ends — and returns
the records to write. The runtime appends them to the WAL, calls ``replay`` for
each right away, and releases responses once the records are durable.

``replay`` is the only code that changes committed offsets and the durable
image of groups. Classic membership itself (members, parked requests, pending
members) is soft state changed by the handlers, as in Kafka, whose classic
GROUP_METADATA records are appended without being replayed on the live path.
So ``replay`` of a GROUP_METADATA value rebuilds the group only if it is absent
or not yet live — a group becomes live when a handler or timer first touches it
(or at ``on_loaded``) — and otherwise just records it as the group's durable
image, since the live group is already ahead of it; tombstones always apply.
Recovery = replay the WAL onto a fresh coordinator, then ``on_loaded(now_ms)``
(which may be called again after loading further WALs into a live coordinator).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rafka.shard.groups.admin import AdminMixin
from rafka.shard.groups.classic import ClassicGroup
from rafka.shard.groups.offsets_store import entry_commit_ts, pack_entry
from rafka.shard.groups.state import ClassicGroupState
from rafka.shard.records import Record, RecordType

_OFFSET_COMMIT = int(RecordType.OFFSET_COMMIT)


class GroupCoordinator(AdminMixin):
    """Classic group coordinator: handlers, ``replay``, ``on_loaded`` and ``group_stats``."""

    def replay(self, record: Record) -> None:
        """Apply one OFFSET_COMMIT or GROUP_METADATA record (the live path; recovery too, but
        for commits, which go through ``replay_offset_commits``)."""
        if record.type == _OFFSET_COMMIT:
            self.replay_offset_commit(record.key, record.value)
        elif record.type == RecordType.GROUP_METADATA:
            org_id, group_id = record.key
            if record.value is None:
                group = self.groups.pop((org_id, group_id), None)
                if group is not None:
                    group.transition_to(ClassicGroupState.DEAD, None)
                return
            group = self.groups.get((org_id, group_id))
            if group is None or not group.live:
                self.groups[(org_id, group_id)] = ClassicGroup.from_record(org_id, group_id, record.value)
            else:
                group.durable = record.value  # the live group is already ahead of its image

    def replay_offset_commit(self, key: tuple[str, str, str, int], value: Any) -> None:
        """Apply one OFFSET_COMMIT record's key and value: ``replay`` of the live path, and
        ``replay_offset_commits`` of recovery's decoded records (millions: they get no ``Record``)."""
        org_id, group_id, topic, partition = key
        if value is None:
            self.offsets.delete(org_id, group_id, topic, partition)
            return
        expire_ts = None
        if type(value) is not bytes:
            if type(value) is dict:  # the value format before packed entries
                value = pack_entry(value["offset"], value["leader_epoch"], value["metadata"] or "",
                                   value["commit_ts"])
            else:  # (entry, expire_ts): committed with its own retention
                value, expire_ts = value
        group_key = (org_id, group_id)
        if group_key not in self.groups:
            self.ensure_group(org_id, group_id, entry_commit_ts(value))
        self.offsets.put(group_key, topic, partition, value, expire_ts)

    def replay_offset_commits(self, records: Sequence[Any], i: int, stop: int,
                              skipped: Callable[[Any], None]) -> int:
        """Recovery's replay of the decoded OFFSET_COMMIT records from ``records[i]`` up to one of
        another type or ``stop``; returns its index. Each goes through ``replay_offset_commit`` (one
        that cannot is handed to ``skipped``), but the records that follow one committing the next
        partitions of the same group's topic in order (how a compacted WAL writes a topic) are
        gathered and stored as one run: recovery replays millions."""
        while i < stop:
            record = records[i]
            i += 1
            try:
                if record[0] != _OFFSET_COMMIT:
                    return i - 1
                key, value = record[1], record[2]
                self.replay_offset_commit(key, value)
            except Exception:
                skipped(record)
                continue
            org_id, group_id, topic, first = key
            if type(value) is not bytes or type(first) is not int:
                continue
            partition = first
            run: list[bytes] = []
            add = run.append
            try:
                for rtype, rkey, rvalue in map(records.__getitem__, range(i, stop)):  # (islice walks from 0)
                    partition += 1
                    if rtype != _OFFSET_COMMIT or rkey != (org_id, group_id, topic, partition) or type(rvalue) is not bytes:
                        break
                    add(rvalue)
            except Exception:  # noqa: S110 - only reads: the run ends there, and the loop above takes that record
                pass
            if run:
                self.offsets.put_run((org_id, group_id), topic, first + 1, run)
                i += len(run)
        return i

    def ensure_group(self, org_id: str, group_id: str, now_ms: int) -> None:
        """Offsets never exist without a group: an offset (committed or pending in a transaction)
        of an unknown group id makes an Empty classic group without a protocol type, Kafka's
        "simple consumer group" (``getOrMaybeCreateClassicGroup`` on replay)."""
        if (org_id, group_id) not in self.groups and not (
                self.consumer is not None and self.consumer.is_consumer_group(org_id, group_id)):
            self.groups[(org_id, group_id)] = ClassicGroup(org_id, group_id, "", state_ts=now_ms)

    def snapshot_records(self) -> list[Record]:
        """Records that rebuild the current durable state (for WAL compaction): each group's
        last GROUP_METADATA value, then every committed offset."""
        records = [Record(RecordType.GROUP_METADATA, key, group.durable)
                   for key, group in self.groups.items() if group.durable is not None]
        for org_id, group_id in self.offsets.group_keys():
            own = self.offsets.own_expiries((org_id, group_id))
            for topic in self.offsets.topics(org_id, group_id):
                for index, raw in self.offsets.raw_partitions(org_id, group_id, topic):
                    expire_ts = own.get((topic, index))
                    records.append(Record(RecordType.OFFSET_COMMIT, (org_id, group_id, topic, index),
                                          raw if expire_ts is None else (raw, expire_ts)))
        return records

    def group_stats(self) -> dict[str, Any]:
        """Counts for metrics: classic and KIP-848 groups by state, members of both, offsets,
        completed (classic) rebalances."""
        by_state = {state.value: 0 for state in ClassicGroupState if state is not ClassicGroupState.DEAD}
        members = 0
        for group in self.groups.values():
            by_state[group.state.value] += 1
            members += len(group.members)
        consumer_by_state, consumer_members = self.consumer.group_stats() if self.consumer is not None else ({}, 0)
        return {
            "groups": len(self.groups) + sum(consumer_by_state.values()),
            "groups_by_state": by_state,
            "consumer_groups_by_state": consumer_by_state,
            "members": members + consumer_members,
            "offsets": self.offsets.count,
            "groups_with_offsets": self.offsets.group_count(),
            "completed_rebalances": self.completed_rebalances,
            "expired_offsets": self.expired_offsets,
        }
