"""DescribeGroups, ListGroups and DeleteGroups for classic groups.

How this works: these only read the in-memory groups, except DeleteGroups which
emits a tombstone per committed offset (and per offset pending in an open
transaction) and then a group tombstone (the group
disappears when ``replay`` applies them) and cancels the group's timers.
Everything is scoped to one org: a group of another org is simply not found.
"""

from __future__ import annotations

from typing import Any

from rafka.shard.groups.classic import ClassicGroup
from rafka.shard.groups.core import Respond
from rafka.shard.groups.errors import Errors
from rafka.shard.groups.join import NO_RECORDS
from rafka.shard.groups.offsets import OffsetsMixin
from rafka.shard.groups.record_helpers import group_rrl, new_group_tombstone, new_offset_commit_tombstone
from rafka.shard.groups.state import ClassicGroupState
from rafka.shard.records import Record

S = ClassicGroupState
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


class AdminMixin(OffsetsMixin):
    """Describe / list / delete handlers."""

    def describe_group(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle DescribeGroups for one group (members' metadata only when Stable, as Kafka)."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""
        if self.consumer is not None:
            described_consumer = self.consumer.describe_as_classic(org_id, group_id)
            if described_consumer is not None:
                respond(described_consumer)
                return NO_RECORDS
        group = self._group(org_id, group_id)
        if group is None or group.state is S.DEAD:
            described = {
                "error_code": Errors.NONE, "error_message": None, "group_id": group_id,
                "group_state": S.DEAD.value, "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED, "group_uid": None, "rrl": None,
            }
            if op.get("api_version", 0) >= 6:  # KIP-1043
                described["error_code"] = Errors.GROUP_ID_NOT_FOUND
                described["error_message"] = f"Group {group_id} not found."
            respond(described)
            return NO_RECORDS
        respond(describe(group))
        return NO_RECORDS

    def list_groups(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle ListGroups for this coordinator's groups of ``org_id``."""
        self._ensure_loaded(now_ms)
        states = {s.strip().lower() for s in op.get("states_filter") or []}  # as Kafka's listGroups
        types = {t.lower() for t in op.get("types_filter") or []}  # trimmed: states only
        listed = []
        if not types or "classic" in types:
            for (org, group_id), group in self.groups.items():
                if org != org_id or group.state is S.DEAD:
                    continue
                if states and group.state.lower_name not in states:
                    continue
                listed.append({"group_id": group_id, "protocol_type": group.protocol_type or "",
                               "group_state": group.state.value, "group_type": "classic"})
        if self.consumer is not None and (not types or "consumer" in types):
            listed.extend(self.consumer.list_groups(org_id, states))
        respond({"error_code": Errors.NONE, "groups": listed})
        return NO_RECORDS

    def delete_group(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle DeleteGroups for one group: only an Empty group can be deleted."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""
        deleted = self.consumer.delete_group(org_id, group_id) if self.consumer is not None else None
        if deleted is not None:  # a KIP-848 group: only an Empty one can be deleted, with its offsets
            error, group_records = deleted
            if error:
                respond({"group_id": group_id, "error_code": error})
                return NO_RECORDS
            respond({"group_id": group_id, "error_code": Errors.NONE})
            return self._delete_all_offsets(org_id, group_id) + group_records
        group = self._group(org_id, group_id)
        if group is None or group.state is S.DEAD:
            respond({"group_id": group_id, "error_code": Errors.GROUP_ID_NOT_FOUND})
            return NO_RECORDS
        if group.state is not S.EMPTY:
            respond({"group_id": group_id, "error_code": Errors.NON_EMPTY_GROUP})
            return NO_RECORDS
        records = self._delete_all_offsets(org_id, group_id) + [new_group_tombstone(org_id, group_id)]
        self._cancel_group_timers(group)
        respond({"group_id": group_id, "error_code": Errors.NONE})
        return records

    def _delete_all_offsets(self, org_id: str, group_id: str) -> list[Record]:
        """Tombstones for every committed offset of the group and every one an open transaction
        holds (Kafka's ``deleteAllOffsets``)."""
        return [new_offset_commit_tombstone(org_id, group_id, topic, index)
                for topic in self.offsets.topics(org_id, group_id)
                for index, _ in self.offsets.raw_partitions(org_id, group_id, topic)
                ] + self.txn_cancel(org_id, group_id, None)


def describe(group: ClassicGroup) -> dict[str, Any]:
    """One DescribedGroup of DescribeGroups for ``group`` (plus ``group_uid`` and ``rrl``)."""
    stable = group.state is S.STABLE
    protocol = group.protocol_name if stable else None
    members = [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
         "client_host": m.client_host, "member_metadata": m.metadata(protocol) if stable else b"",
         "member_assignment": m.assignment}
        for m in group.members.values()
    ]
    return {
        "error_code": Errors.NONE, "error_message": None, "group_id": group.group_id,
        "group_state": group.state.value, "protocol_type": group.protocol_type or "",
        "protocol_data": (protocol or "") if stable else "", "members": members,
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        "group_uid": group.uid, "rrl": group_rrl(group.org_id, group.group_id),
    }
