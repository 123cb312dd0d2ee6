"""SyncGroup, Heartbeat, LeaveGroup and session expiry of classic groups.

How this works: in CompletingRebalance every SyncGroup is parked on its member
until the leader's SyncGroup arrives; the leader's assignments (empty bytes for
members it left out) are stored on the members, the group becomes Stable, every
parked SyncGroup is answered and a GROUP_METADATA record makes the generation
durable. In Stable a SyncGroup returns the member's current assignment.

Each member has one session timer (key ``("hb", org, group, member)``) re-armed
by heartbeats, joins and syncs. When it fires, a member that is not parked in a
join or sync (or is a new member) is removed and the group rebalances — or
becomes Empty if it was the last member. LeaveGroup removes members the same way.
"""

from __future__ import annotations

from typing import Any

from rafka.shard.groups.classic import ClassicGroup, ClassicGroupMember, join_error, sync_error
from rafka.shard.groups.core import Respond, sync_key
from rafka.shard.groups.errors import Errors
from rafka.shard.groups.join import NO_RECORDS, JoinMixin
from rafka.shard.groups.record_helpers import new_group_metadata_record
from rafka.shard.groups.state import ClassicGroupState
from rafka.shard.records import Record

S = ClassicGroupState


def _inconsistent(requested: str | None, actual: str | None) -> bool:
    return requested is not None and actual is not None and requested != actual


class MembershipMixin(JoinMixin):
    """SyncGroup / Heartbeat / LeaveGroup handlers and session expiry."""

    # ------------------------------------------------------------------ sync
    def sync_group(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle a SyncGroup; followers are parked until the leader's assignment arrives."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""
        if not group_id:
            respond(sync_error(Errors.INVALID_GROUP_ID))
            return NO_RECORDS
        if self.consumer is not None and self.consumer.is_consumer_group(org_id, group_id):
            return self.consumer.classic_group_sync(org_id, op, now_ms, respond)  # type: ignore[no-any-return]
        group = self._group(org_id, group_id)
        if group is None or group.state is S.EMPTY:
            respond(sync_error(Errors.UNKNOWN_MEMBER_ID))
            return NO_RECORDS
        member_id = op.get("member_id") or ""
        error = self._validate_sync(group, op)
        if error:
            respond(sync_error(error))
            return NO_RECORDS
        if group.state is S.PREPARING_REBALANCE:
            respond(sync_error(Errors.REBALANCE_IN_PROGRESS))
            return NO_RECORDS
        member = group.members[member_id]
        if group.state is S.COMPLETING_REBALANCE:
            previous = member.awaiting_sync
            member.awaiting_sync = respond
            if previous is not None:  # superseded by this request
                previous(sync_error(Errors.REBALANCE_IN_PROGRESS))
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                return self._complete_sync(group, op.get("assignments") or [], now_ms)
            return NO_RECORDS
        # Stable: the member's current assignment
        self._remove_pending_sync_member(group, member_id)
        respond({"error_code": Errors.NONE, "protocol_type": group.protocol_type,
                 "protocol_name": group.protocol_name, "assignment": member.assignment})
        return NO_RECORDS

    def _validate_sync(self, group: ClassicGroup, op: dict[str, Any]) -> int:
        if group.state is S.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(op.get("member_id") or "", op.get("group_instance_id"))
        if error:
            return error
        if op.get("generation_id") != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        if _inconsistent(op.get("protocol_type"), group.protocol_type) or _inconsistent(
            op.get("protocol_name"), group.protocol_name
        ):
            return Errors.INCONSISTENT_GROUP_PROTOCOL
        return Errors.NONE

    def _complete_sync(self, group: ClassicGroup, assignments: list[dict[str, Any]], now_ms: int) -> list[Record]:
        """The leader's assignment arrived: store it, go Stable, answer every parked SyncGroup."""
        by_member = {a["member_id"]: bytes(a.get("assignment") or b"") for a in assignments}
        for member in group.members.values():
            member.assignment = by_member.get(member.member_id, b"")
        group.transition_to(S.STABLE, now_ms)
        self.completed_rebalances += 1
        started = self._rebalance_started.pop(group.key, now_ms)  # type: ignore[attr-defined]
        self.emit("rebalance-stable", org_id=group.org_id, group_id=group.group_id,  # type: ignore[attr-defined]
                  generation_id=group.generation_id, duration_ms=now_ms - started)
        self._propagate_assignment(group, Errors.NONE)
        return [new_group_metadata_record(group)]

    def _propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        """Answer every parked SyncGroup with its member's assignment (or ``error``)."""
        ok = error == Errors.NONE
        for member in list(group.members.values()):
            response = {
                "error_code": error,
                "protocol_type": group.protocol_type if ok else None,
                "protocol_name": group.protocol_name if ok else None,
                "assignment": member.assignment,
            }
            if group.complete_sync_future(member, response):
                # expirations ignored while it was parked must be re-armed
                self._reschedule_heartbeat(group, member)

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        if group.has_received_sync_from_all_members():
            self.timer.cancel(sync_key(*group.key))

    # ------------------------------------------------------------- heartbeat
    def heartbeat(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle a Heartbeat: renew the member's session and tell it whether to rejoin."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""
        if not group_id:
            respond({"error_code": Errors.INVALID_GROUP_ID})
            return NO_RECORDS
        if self.consumer is not None and self.consumer.is_consumer_group(org_id, group_id):
            return self.consumer.classic_group_heartbeat(org_id, op, now_ms, respond)  # type: ignore[no-any-return]
        group = self._group(org_id, group_id)
        if group is None:
            respond({"error_code": Errors.UNKNOWN_MEMBER_ID})
            return NO_RECORDS
        if group.state is S.DEAD:
            respond({"error_code": Errors.COORDINATOR_NOT_AVAILABLE})
            return NO_RECORDS
        member_id = op.get("member_id") or ""
        error = group.validate_member(member_id, op.get("group_instance_id"))
        if not error and op.get("generation_id") != group.generation_id:
            error = Errors.ILLEGAL_GENERATION
        if error:
            respond({"error_code": error})
            return NO_RECORDS
        if group.state is S.EMPTY:
            respond({"error_code": Errors.UNKNOWN_MEMBER_ID})
            return NO_RECORDS
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.state is S.PREPARING_REBALANCE:
            respond({"error_code": Errors.REBALANCE_IN_PROGRESS})
        else:  # CompletingRebalance (heartbeats may start after the JoinGroup response) or Stable
            respond({"error_code": Errors.NONE})
        return NO_RECORDS

    def _expire_heartbeat(self, org_id: str, group_id: str, member_id: str, now_ms: int) -> list[Record]:
        """Session timer of a member (or pending member) fired."""
        group = self._group(org_id, group_id)
        if group is None or group.state is S.DEAD:
            return NO_RECORDS
        if group.is_pending_member(member_id):
            group.remove(member_id)
            if group.state is S.PREPARING_REBALANCE and group.has_all_members_joined():
                return self._complete_join(group, now_ms)
            return NO_RECORDS
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return NO_RECORDS
        return self._remove_member_and_update_group(group, member, now_ms)

    def _remove_member_and_update_group(
        self, group: ClassicGroup, member: ClassicGroupMember, now_ms: int,
    ) -> list[Record]:
        # a new member may time out with a parked JoinGroup: it retries with UNKNOWN_MEMBER_ID
        group.complete_join_future(member, join_error("", Errors.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        if group.state is S.PREPARING_REBALANCE and group.has_all_members_joined():
            return self._complete_join(group, now_ms)
        return NO_RECORDS

    # ----------------------------------------------------------------- leave
    def leave_group(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle a LeaveGroup (a batch of members by member id and/or instance id)."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""
        identities = op.get("members") or []
        if not group_id:
            respond({"error_code": Errors.INVALID_GROUP_ID, "members": []})
            return NO_RECORDS
        if self.consumer is not None and self.consumer.is_consumer_group(org_id, group_id):
            return self.consumer.classic_group_leave(org_id, op, now_ms, respond)  # type: ignore[no-any-return]
        group = self._group(org_id, group_id)
        if group is None:
            respond({"error_code": Errors.NONE, "members": [
                {"member_id": m.get("member_id") or "", "group_instance_id": m.get("group_instance_id"),
                 "error_code": Errors.UNKNOWN_MEMBER_ID} for m in identities]})
            return NO_RECORDS
        if group.state is S.DEAD:
            respond({"error_code": Errors.COORDINATOR_NOT_AVAILABLE, "members": []})
            return NO_RECORDS

        results = []
        any_left = False
        for identity in identities:
            member_id = identity.get("member_id") or ""
            instance_id = identity.get("group_instance_id")
            error = self._leave_one(group, member_id, instance_id)
            any_left = any_left or error == Errors.NONE
            results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": error})

        records = NO_RECORDS
        if any_left:
            if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
                records = self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
            elif group.state is S.PREPARING_REBALANCE:
                records = self._maybe_complete_join_phase(group, now_ms)
        respond({"error_code": Errors.NONE, "members": results})
        return records

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
        if not member_id:
            # administrative removal by instance id (KIP-345)
            if instance_id is not None and group.has_static_member(instance_id):
                self._remove_current_member(group, group.static_members[instance_id])
                return Errors.NONE
            return Errors.UNKNOWN_MEMBER_ID
        if group.is_pending_member(member_id):
            group.remove(member_id)
            self._cancel_heartbeat(group, member_id)
            return Errors.NONE
        error = group.validate_member(member_id, instance_id)
        if error:
            return error
        self._remove_current_member(group, member_id)
        return Errors.NONE

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        self._cancel_heartbeat(group, member_id)
        group.complete_join_future(member, join_error("", Errors.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

