"""JoinGroup and the join phase of a classic rebalance (Kafka's ``classicGroupJoin…``).

How this works: a JoinGroup either answers at once (an error, MEMBER_ID_REQUIRED,
or the current generation for a member whose metadata did not change) or parks
the request: its ``respond`` is stored on the member and the group moves to
PreparingRebalance. The join phase completes — event driven, never polled —
when the last expected member joins, or when the join timer fires (rebalance
timeout, or the initial-rebalance delay of a group coming from Empty, which is
re-armed while new members keep arriving). Completion removes dynamic members
that did not rejoin, bumps the generation, keeps the leader if it rejoined (else
elects the first member that did), picks the protocol by vote and answers every
parked JoinGroup; the leader's answer carries the member list. The group then
waits in CompletingRebalance for the leader's SyncGroup (``membership.py``); a
sync timer removes members that never sync.
"""

from __future__ import annotations

from typing import Any

from rafka.shard.groups.classic import ClassicGroup, ClassicGroupMember, Protocols, join_error
from rafka.shard.groups.core import CoordinatorCore, Respond, heartbeat_key, join_key, log, sync_key
from rafka.shard.groups.errors import Errors
from rafka.shard.groups.record_helpers import new_group_metadata_record
from rafka.shard.groups.state import ClassicGroupState
from rafka.shard.records import Record

S = ClassicGroupState
NO_RECORDS: list[Record] = []


def _protocols(op: dict[str, Any]) -> Protocols:
    return [(p["name"], bytes(p.get("metadata") or b"")) for p in op.get("protocols") or []]


class JoinMixin(CoordinatorCore):
    """JoinGroup handling and the rebalance machinery shared with the other handlers."""

    def join_group(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle a JoinGroup; ``respond`` is called now or when the join phase completes."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""
        member_id = op.get("member_id") or ""
        if not group_id:
            respond(join_error(member_id, Errors.INVALID_GROUP_ID))
            return NO_RECORDS
        session_timeout = op.get("session_timeout", 0)
        if not self.config.min_session_timeout_ms <= session_timeout <= self.config.max_session_timeout_ms:
            respond(join_error(member_id, Errors.INVALID_SESSION_TIMEOUT))
            return NO_RECORDS

        released: list[Record] = []
        if self.consumer is not None and self.consumer.has_members(org_id, group_id):
            # a consumer group with members: the classic member joins it (consumer/classic_members.py)
            return self.consumer.classic_group_join(org_id, op, now_ms, respond)  # type: ignore[no-any-return]
        if self.consumer is not None:
            taken = self.consumer.release_for_classic(org_id, group_id)
            if taken is not None:
                error, released = taken
                if error:  # a KIP-848 group with members: no classic member can join it
                    respond(join_error(member_id, error))
                    return NO_RECORDS
        group = self._group(org_id, group_id)
        is_new_group = group is None
        if group is None:
            if member_id:
                # a known member id but no group: the group was deleted or expired
                respond(join_error(member_id, Errors.UNKNOWN_MEMBER_ID))
                return released or NO_RECORDS
            group = ClassicGroup(org_id, group_id, self._new_group_uid(now_ms), state_ts=now_ms)
            group.live = True
            self.groups[group.key] = group

        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            respond(join_error("", Errors.GROUP_MAX_SIZE_REACHED))
            records = NO_RECORDS
        elif not member_id:
            records = self._join_new_member(group, op, now_ms, respond)
        else:
            records = self._join_existing_member(group, op, now_ms, respond)

        if is_new_group:
            # make the group (and its cgp_ id) durable as an Empty group
            return [*released, new_group_metadata_record(group, with_members=False), *records]
        return records

    # ------------------------------------------------------------- join paths
    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """Kafka's acceptJoiningMember: enforce ``max_size``."""
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.state is S.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join is not None) or (
                group.num_awaiting_join < self.config.max_size
            )
        return member_id in group.members or len(group.members) < self.config.max_size

    def _join_new_member(self, group: ClassicGroup, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        if group.state is S.DEAD:
            respond(join_error("", Errors.COORDINATOR_NOT_AVAILABLE))
            return NO_RECORDS
        protocols = _protocols(op)
        if not group.supports_protocols(op.get("protocol_type") or "", {n for n, _ in protocols}):
            respond(join_error("", Errors.INCONSISTENT_GROUP_PROTOCOL))
            return NO_RECORDS
        instance_id = op.get("group_instance_id")
        prefix = instance_id if instance_id is not None else (op.get("client_id") or "")
        new_member_id = f"{prefix}-{self._new_member_uuid()}"
        if instance_id is not None:
            existing = group.static_member_id(instance_id)
            if existing is not None:
                return self._update_static_member_then_rebalance_or_complete_join(
                    group, op, existing, new_member_id, now_ms, respond)
            return self._add_member_then_rebalance_or_complete_join(group, op, new_member_id, now_ms, respond)
        if op.get("api_version", 0) >= 4:
            # KIP-394: hand out a member id and let the client rejoin with it
            group.add_pending_member(new_member_id)
            org_id, group_id = group.key
            self.timer.schedule(
                heartbeat_key(org_id, group_id, new_member_id), op["session_timeout"],
                lambda now: self._expire_heartbeat(org_id, group_id, new_member_id, now),
            )
            respond(join_error(new_member_id, Errors.MEMBER_ID_REQUIRED))
            return NO_RECORDS
        return self._add_member_then_rebalance_or_complete_join(group, op, new_member_id, now_ms, respond)

    def _join_existing_member(
        self, group: ClassicGroup, op: dict[str, Any], now_ms: int, respond: Respond,
    ) -> list[Record]:
        member_id = op["member_id"]
        instance_id = op.get("group_instance_id")
        protocols = _protocols(op)
        if group.state is S.DEAD:
            respond(join_error(member_id, Errors.COORDINATOR_NOT_AVAILABLE))
            return NO_RECORDS
        if not group.supports_protocols(op.get("protocol_type") or "", {n for n, _ in protocols}):
            respond(join_error(member_id, Errors.INCONSISTENT_GROUP_PROTOCOL))
            return NO_RECORDS
        if group.is_pending_member(member_id):
            if instance_id is not None:  # a pending member is never static (Kafka: IllegalStateException)
                respond(join_error(member_id, Errors.UNKNOWN_SERVER_ERROR))
                return NO_RECORDS
            return self._add_member_then_rebalance_or_complete_join(group, op, member_id, now_ms, respond)
        error = group.validate_member(member_id, instance_id)
        if error:
            respond(join_error(member_id, error))
            return NO_RECORDS
        member = group.members[member_id]
        if group.state is S.PREPARING_REBALANCE:
            return self._update_member_then_rebalance_or_complete_join(group, member, op, protocols, now_ms, respond)
        if group.state is S.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # same metadata (it probably missed the JoinGroup response): current generation
                respond(group.join_response(member_id, with_members=group.is_leader(member_id)))
                return NO_RECORDS
            return self._update_member_then_rebalance_or_complete_join(group, member, op, protocols, now_ms, respond)
        if group.state is S.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # the leader may rejoin to force a rebalance (e.g. topic metadata changed)
                return self._update_member_then_rebalance_or_complete_join(
                    group, member, op, protocols, now_ms, respond)
            respond(group.join_response(member_id, with_members=False))
            return NO_RECORDS
        respond(join_error(member_id, Errors.UNKNOWN_MEMBER_ID))  # Empty: reset and rejoin
        return NO_RECORDS

    def _add_member_then_rebalance_or_complete_join(
        self, group: ClassicGroup, op: dict[str, Any], member_id: str, now_ms: int, respond: Respond,
    ) -> list[Record]:
        session_timeout = op["session_timeout"]
        rebalance_timeout = op.get("rebalance_timeout")
        if op.get("api_version", 0) == 0 or rebalance_timeout is None or rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        member = ClassicGroupMember(
            member_id, op.get("group_instance_id"), op.get("client_id") or "", op.get("client_host") or "",
            rebalance_timeout, session_timeout, op.get("protocol_type") or "", _protocols(op),
        )
        member.is_new = True
        if group.state is S.PREPARING_REBALANCE and group.previous_state is S.EMPTY:
            group.new_member_added = True  # extends the initial rebalance delay
        group.add(member, respond)
        # a parked new member cannot heartbeat: expire it if it never completes the join
        self._reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _update_member_then_rebalance_or_complete_join(
        self, group: ClassicGroup, member: ClassicGroupMember, op: dict[str, Any], protocols: Protocols,
        now_ms: int, respond: Respond,
    ) -> list[Record]:
        rebalance_timeout = op.get("rebalance_timeout")
        if op.get("api_version", 0) == 0 or rebalance_timeout is None or rebalance_timeout < 0:
            rebalance_timeout = op["session_timeout"]
        group.update_member(member, protocols, rebalance_timeout, op["session_timeout"], respond)
        return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _update_static_member_then_rebalance_or_complete_join(
        self, group: ClassicGroup, op: dict[str, Any], old_member_id: str, new_member_id: str,
        now_ms: int, respond: Respond,
    ) -> list[Record]:
        """A static member rejoined with an unknown member id: it replaces its old member id."""
        current_leader = group.leader_id
        new_member = group.replace_static_member(op["group_instance_id"], old_member_id, new_member_id)
        self._cancel_heartbeat(group, old_member_id)
        self._reschedule_heartbeat(group, new_member)
        rebalance_timeout = op.get("rebalance_timeout")
        if op.get("api_version", 0) == 0 or rebalance_timeout is None or rebalance_timeout < 0:
            rebalance_timeout = op["session_timeout"]
        group.update_member(new_member, _protocols(op), rebalance_timeout, op["session_timeout"], respond)

        if group.state is S.STABLE:
            if group.protocol_name == group.select_protocol():
                # no rebalance: persist the new member id and hand back the current generation
                record = new_group_metadata_record(group)
                if op.get("api_version", 0) >= 9:
                    is_leader = group.is_leader(new_member_id)
                    response = group.join_response(new_member_id, with_members=is_leader, skip_assignment=is_leader)
                else:
                    # the old leader id is returned so a static leader does not reassign
                    response = group.join_response(new_member_id, with_members=False, leader=current_leader or "")
                group.complete_join_future(new_member, response)
                return [record]
            return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        if group.state is S.COMPLETING_REBALANCE:
            # the leader may already have assigned to the old member id: rebalance
            return self._prepare_rebalance(group, now_ms)
        return self._maybe_complete_join_phase(group, now_ms)

    # ------------------------------------------------------------- rebalance
    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now_ms: int) -> list[Record]:
        if group.can_rebalance():
            return self._prepare_rebalance(group, now_ms)
        return self._maybe_complete_join_phase(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> list[Record]:
        """Move the group to PreparingRebalance and arm the join timer."""
        if group.state is S.COMPLETING_REBALANCE:
            # parked syncs are answered REBALANCE_IN_PROGRESS; their members rejoin
            for member in group.members.values():
                member.assignment = b""
            self._propagate_assignment(group, Errors.REBALANCE_IN_PROGRESS)  # type: ignore[attr-defined]
        group.pending_sync_members.clear()
        self.timer.cancel(sync_key(*group.key))

        is_initial = group.state is S.EMPTY
        if is_initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_initial_join(group, delay, remaining)
        group.transition_to(S.PREPARING_REBALANCE, now_ms)
        self._rebalance_started.setdefault(group.key, now_ms)  # type: ignore[attr-defined]
        log.info("preparing to rebalance group %s/%s (generation %d)", *group.key, group.generation_id)
        return NO_RECORDS if is_initial else self._maybe_complete_join_else_schedule(group, now_ms)

    def _schedule_initial_join(self, group: ClassicGroup, delay: int, remaining: int) -> None:
        org_id, group_id = group.key
        self.timer.schedule(
            join_key(org_id, group_id), delay,
            lambda now: self._try_complete_initial_rebalance_else_schedule(org_id, group_id, delay, remaining, now),
        )

    def _try_complete_initial_rebalance_else_schedule(
        self, org_id: str, group_id: str, delay: int, remaining: int, now_ms: int,
    ) -> list[Record]:
        group = self._group(org_id, group_id)
        if group is None or group.state is not S.PREPARING_REBALANCE:
            return NO_RECORDS
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            new_delay = min(self.config.initial_rebalance_delay_ms, remaining)
            self._schedule_initial_join(group, new_delay, max(remaining - delay, 0))
            return NO_RECORDS
        return self._complete_join(group, now_ms)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup, now_ms: int) -> list[Record]:
        if group.has_all_members_joined():
            return self._complete_join(group, now_ms)
        self._schedule_join_timeout(group)
        return NO_RECORDS

    def _schedule_join_timeout(self, group: ClassicGroup) -> None:
        org_id, group_id = group.key
        self.timer.schedule(
            join_key(org_id, group_id), group.rebalance_timeout_ms(),
            lambda now: self._complete_join_by_key(org_id, group_id, now),
        )

    def _complete_join_by_key(self, org_id: str, group_id: str, now_ms: int) -> list[Record]:
        group = self._group(org_id, group_id)
        if group is None or group.state is not S.PREPARING_REBALANCE:
            return NO_RECORDS
        return self._complete_join(group, now_ms)

    def _maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int) -> list[Record]:
        """Complete the join phase if every member has joined (never early on an initial rebalance)."""
        if group.state is not S.PREPARING_REBALANCE or group.previous_state is S.EMPTY:
            return NO_RECORDS
        if not group.has_all_members_joined():
            return NO_RECORDS
        return self._complete_join(group, now_ms)

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> list[Record]:
        """End the join phase: drop dynamic members that did not rejoin, bump the generation,
        answer every parked JoinGroup and wait for SyncGroup (or become Empty)."""
        self.timer.cancel(join_key(*group.key))
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                group.remove(member.member_id)
                self._cancel_heartbeat(group, member.member_id)

        if group.state is S.DEAD:
            return NO_RECORDS
        if not group.maybe_elect_new_joined_leader() and group.members:
            # only static members that have not rejoined are left: wait another round
            log.info("group %s/%s could not complete rebalance: no member rejoined", *group.key)
            self._schedule_join_timeout(group)
            return NO_RECORDS

        group.init_next_generation(now_ms)
        if group.state is S.EMPTY:
            self._rebalance_started.pop(group.key, None)  # type: ignore[attr-defined]
            log.info("group %s/%s is now empty (generation %d)", group.org_id, group.group_id, group.generation_id)
            return [new_group_metadata_record(group)]

        log.info("group %s/%s generation %d: %d members, leader %s",
                 group.org_id, group.group_id, group.generation_id, len(group.members), group.leader_id)
        self.emit("rebalance-complete", org_id=group.org_id, group_id=group.group_id,  # type: ignore[attr-defined]
                  generation_id=group.generation_id, leader_id=group.leader_id or "")
        for member in list(group.members.values()):
            response = group.join_response(member.member_id, with_members=group.is_leader(member.member_id))
            group.complete_join_future(member, response)
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)
        return NO_RECORDS

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        org_id, group_id = group.key
        generation = group.generation_id
        self.timer.schedule(
            sync_key(org_id, group_id), group.rebalance_timeout_ms(),
            lambda now: self._expire_pending_sync(org_id, group_id, generation, now),
        )

    def _expire_pending_sync(self, org_id: str, group_id: str, generation: int, now_ms: int) -> list[Record]:
        """Members that did not SyncGroup within the rebalance timeout are removed."""
        group = self._group(org_id, group_id)
        if group is None or group.generation_id != generation:
            return NO_RECORDS
        if group.state not in (S.COMPLETING_REBALANCE, S.STABLE) or group.has_received_sync_from_all_members():
            return NO_RECORDS
        for member_id in list(group.pending_sync_members):
            group.remove(member_id)
            self._cancel_heartbeat(group, member_id)
        return self._prepare_rebalance(group, now_ms)
