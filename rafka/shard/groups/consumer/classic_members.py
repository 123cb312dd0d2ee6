"""Classic members inside a consumer group (Kafka's ``classicGroup*ToConsumerGroup``).

How this works: once a group is a consumer group, classic consumers keep using
JoinGroup/SyncGroup/Heartbeat/LeaveGroup against it, and the server-side
assignor decides for them, as in Kafka:

* **JoinGroup** never parks. It reads the subscription (topics, owned partitions,
  rack) from the first protocol's metadata, updates the member — bumping the
  group epoch if its subscription changed —, recomputes the target assignment if
  needed and reconciles the member exactly like a heartbeat would, with the
  owned partitions of its subscription as what it owns (an eager client owns
  nothing when it rejoins). The answer carries generation = member epoch, no
  leader and no member list, so the client is a follower and just syncs.
* **SyncGroup** answers the member's current assignment (serialised as a
  ConsumerProtocolAssignment), or REBALANCE_IN_PROGRESS if the group epoch moved
  past the member's epoch and it is not busy revoking.
* **Heartbeat** answers REBALANCE_IN_PROGRESS when the member must rejoin: its
  epoch is behind the group epoch, it has partitions to revoke, or partitions it
  waits for were released; generation must equal the member epoch.
* **LeaveGroup** removes the members like a fence (group epoch bump).

A classic member's session timeout is its JoinGroup session timeout. As in
Kafka, a member told to rejoin (REBALANCE_IN_PROGRESS) must JoinGroup within its
rebalance timeout, and a member that joined must SyncGroup within it, or it is
fenced like a KIP-848 member (which may downgrade the group). Topic metadata:
the gateway resolves what the handler asks for (``NeedTopics``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rafka.protocol.consumer_protocol import encode_assignment, parse_subscription
from rafka.shard.groups.classic import join_error, sync_error
from rafka.shard.groups.consumer.migration import NeedTopics, RequestError, ids_to_names, names_to_ids, require_topics
from rafka.shard.groups.consumer.model import (
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerMember,
    member_record,
    partitions_of,
)
from rafka.shard.groups.core import Respond, TimerKey
from rafka.shard.groups.errors import Errors
from rafka.shard.groups.record_helpers import CONSUMER_PROTOCOL_TYPE
from rafka.shard.records import Record

log = logging.getLogger("rafka.shard.groups.consumer")


def join_deadline_key(org_id: str, group_id: str, member_id: str) -> TimerKey:
    return ("cg-classic-join", org_id, group_id, member_id)


def sync_deadline_key(org_id: str, group_id: str, member_id: str) -> TimerKey:
    return ("cg-classic-sync", org_id, group_id, member_id)


def _protocols(op: dict[str, Any]) -> list[list[Any]]:
    return [[p["name"], bytes(p.get("metadata") or b"")] for p in op.get("protocols") or []]


def waiting_on_unreleased_partition(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """True if a partition of the member's target is still owned by another member."""
    target = partitions_of(group.target.get(member.member_id, {}))
    for key in target - partitions_of(member.assigned):
        owner = group.owners.get(key)
        if owner is not None and owner != member.member_id:
            return True
    return False


class ClassicMembersMixin:
    """JoinGroup / SyncGroup / Heartbeat / LeaveGroup of classic members of a consumer group."""

    config: Any
    timer: Any
    _join_deadlines: set[str]
    _new_member_uuid: Callable[[], str]
    if TYPE_CHECKING:
        def group(self, org_id: str, group_id: str) -> ConsumerGroup | None: ...
        def _ensure_loaded(self, now_ms: int) -> None: ...
        def _write(self, records: list[Record], record: Record) -> None: ...
        def _merge_topics(self, group: ConsumerGroup, op: dict[str, Any]) -> bool: ...
        def _compute_target(self, group: ConsumerGroup, records: list[Record]) -> None: ...
        def _advance_epoch(self, group: ConsumerGroup, op: dict[str, Any], records: list[Record],
                           bump: bool) -> None: ...
        def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Any) -> ConsumerMember: ...
        def _apply_reconciliation(self, group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
                                  records: list[Record]) -> None: ...
        def _schedule_session(self, group: ConsumerGroup, member_id: str) -> None: ...
        def _remove_member(self, group: ConsumerGroup, member_id: str, records: list[Record]) -> None: ...
        def _replace_static_member(self, group: ConsumerGroup, old: ConsumerMember, new_id: str,
                                   records: list[Record]) -> ConsumerMember: ...
        def _fence_member(self, group: ConsumerGroup, member_id: str, now_ms: int, records: list[Record]) -> None: ...
        def validate_online_downgrade_with_replaced_member(self, group: ConsumerGroup, replaced_id: str) -> bool: ...
        def convert_to_classic_group(self, group: ConsumerGroup, leaving_id: str | None, now_ms: int,
                                     records: list[Record], *, rebalance: bool = True) -> Any: ...

    # ----------------------------------------------------------- deadlines
    def _schedule_join_deadline_if_absent(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent: rejoin within the rebalance timeout."""
        key = join_deadline_key(group.org_id, group.group_id, member.member_id)
        if key not in self._join_deadlines:
            self._join_deadlines.add(key)
            self._schedule_deadline(group, member, key, "rejoin")

    def _schedule_sync_deadline(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Kafka's scheduleConsumerGroupSyncTimeout: SyncGroup within the rebalance timeout."""
        self._schedule_deadline(group, member, sync_deadline_key(group.org_id, group.group_id, member.member_id),
                                "sync")

    def _schedule_deadline(self, group: ConsumerGroup, member: ConsumerMember, key: TimerKey, what: str) -> None:
        org_id, group_id, member_id = group.org_id, group.group_id, member.member_id

        def fire(now_ms: int) -> list[Record]:
            self._join_deadlines.discard(key)
            current = self.group(org_id, group_id)
            if current is None or member_id not in current.members:
                return []
            log.info("consumer group %s/%s: classic member %s fenced (did not %s in time)",
                     org_id, group_id, member_id, what)
            records: list[Record] = []
            self._fence_member(current, member_id, now_ms, records)
            return records

        self.timer.schedule(key, member.rebalance_timeout_ms, fire)

    def _cancel_classic_deadlines(self, group: ConsumerGroup, member_id: str) -> None:
        key = join_deadline_key(group.org_id, group.group_id, member_id)
        self._join_deadlines.discard(key)
        self.timer.cancel(key)
        self.timer.cancel(sync_deadline_key(group.org_id, group.group_id, member_id))

    # ---------------------------------------------------------------- join
    def classic_group_join(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """A JoinGroup to a non-empty consumer group (answered at once)."""
        self._ensure_loaded(now_ms)
        records: list[Record] = []
        try:
            response = self._classic_group_join(org_id, op, now_ms, records)
        except NeedTopics as exc:
            response = join_error(op.get("member_id") or "", Errors.NONE) | {"need_topics": exc.names}
        except RequestError as exc:
            response = join_error(op.get("member_id") or "", exc.code)
        respond(response)
        return records

    def _classic_group_join(self, org_id: str, op: dict[str, Any], now_ms: int,
                            records: list[Record]) -> dict[str, Any]:
        group = self.group(org_id, op["group_id"])
        assert group is not None
        member_id = op.get("member_id") or ""
        instance_id = op.get("group_instance_id")
        unknown = not member_id
        if unknown:
            member_id = self._new_member_uuid()
        protocols = _protocols(op)
        static_id = group.static_members.get(instance_id) if instance_id is not None else None
        if member_id not in group.members and static_id is None and len(group.members) >= self.config.max_size:
            raise RequestError(Errors.GROUP_MAX_SIZE_REACHED)
        if not self._supports_classic_protocols(group, member_id, op.get("protocol_type"), protocols):
            raise RequestError(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if unknown and instance_id is None and op.get("api_version", 0) >= 4:
            return join_error(member_id, Errors.MEMBER_ID_REQUIRED)
        sub = parse_subscription(protocols[0][1])
        if sub is None:
            raise RequestError(Errors.INCONSISTENT_GROUP_PROTOCOL)
        require_topics(op, group.topics, set(sub.topics) | set(sub.owned_partitions))

        # get, create or replace (static) the member
        new_member = False
        if static_id is not None and static_id != member_id:
            if not unknown:
                raise RequestError(Errors.FENCED_INSTANCE_ID)
            member = self._replace_static_member(group, group.members[static_id], member_id, records).copy()
        elif member_id in group.members:
            member = group.members[member_id].copy()
        else:
            member = ConsumerMember(member_id, instance_id=instance_id, member_epoch=0)
            new_member = True
        before = None if new_member else group.members[member_id].value()
        member.instance_id = instance_id
        if sub.rack_id is not None:
            member.rack_id = sub.rack_id
        if op.get("rebalance_timeout") is not None and op["rebalance_timeout"] >= 0:
            member.rebalance_timeout_ms = op["rebalance_timeout"]
        member.server_assignor = None
        member.subscribed_topic_names = sorted(set(sub.topics))
        member.subscribed_topic_regex = None
        member.client_id = op.get("client_id") or ""
        member.client_host = op.get("client_host") or ""
        member.classic = {"session_timeout": op["session_timeout"], "protocols": protocols}
        bump = new_member or (before is not None and (before["names"] != member.subscribed_topic_names
                                                      or before["regex"] is not None
                                                      or before["assignor"] is not None))
        if before is None or member.value() != before:
            self._write(records, member_record(group, member))
        self._advance_epoch(group, op, records, bump)

        current = group.members[member_id]
        updated = self._reconcile(group, current, names_to_ids(group, sub.owned_partitions))
        self._apply_reconciliation(group, current, updated, records)
        key = join_deadline_key(group.org_id, group.group_id, member_id)
        self._join_deadlines.discard(key)
        self.timer.cancel(key)
        generation = updated.member_epoch
        if static_id is not None and static_id != member_id and \
                self.validate_online_downgrade_with_replaced_member(group, static_id):
            # the last consumer-protocol (static) member was replaced by this classic one: downgrade,
            # without a rebalance; the member syncs against the classic group's generation
            log.info("consumer group %s/%s: downgraded to a classic group (static member %s replaced)",
                     org_id, op["group_id"], static_id)
            generation = self.convert_to_classic_group(group, None, now_ms, records, rebalance=False).generation_id
        else:
            self._schedule_sync_deadline(group, updated)
        return {"error_code": Errors.NONE, "generation_id": generation,
                "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocol_name": protocols[0][0], "leader": "",
                "skip_assignment": False, "member_id": member_id, "members": []}

    def _supports_classic_protocols(self, group: ConsumerGroup, member_id: str, protocol_type: str | None,
                                    protocols: list[list[Any]]) -> bool:
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            return False
        others = [m for m in group.members.values() if m.uses_classic_protocol and m.member_id != member_id]
        names = {p[0] for p in protocols}
        return not others or any(all(n in m.classic_protocol_names() for m in others) for n in names)

    # ------------------------------------------------------------ validate
    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                raise RequestError(Errors.UNKNOWN_MEMBER_ID)
            if known != member_id:
                raise RequestError(Errors.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None or not member.uses_classic_protocol:
            raise RequestError(Errors.UNKNOWN_MEMBER_ID)
        return member

    # ---------------------------------------------------------------- sync
    def classic_group_sync(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """A SyncGroup to a consumer group: the member's current assignment."""
        self._ensure_loaded(now_ms)
        group = self.group(org_id, op["group_id"])
        try:
            if group is None or not group.members:
                raise RequestError(Errors.UNKNOWN_MEMBER_ID)
            member = self._classic_member(group, op.get("member_id") or "", op.get("group_instance_id"))
            if op.get("generation_id") != member.member_epoch:
                raise RequestError(Errors.ILLEGAL_GENERATION)
            protocol_name = member.classic_protocol_names()[0]
            if (op.get("protocol_type") not in (None, CONSUMER_PROTOCOL_TYPE)
                    or op.get("protocol_name") not in (None, protocol_name)):
                raise RequestError(Errors.INCONSISTENT_GROUP_PROTOCOL)
            if group.group_epoch > member.member_epoch and member.state != UNREVOKED_PARTITIONS:
                self._schedule_join_deadline_if_absent(group, member)
                raise RequestError(Errors.REBALANCE_IN_PROGRESS)
        except RequestError as exc:
            respond(sync_error(exc.code))
            return []
        self.timer.cancel(sync_deadline_key(group.org_id, group.group_id, member.member_id))
        self._schedule_session(group, member.member_id)
        sub = parse_subscription((member.classic or {})["protocols"][0][1])
        assignment = encode_assignment(ids_to_names(group, member.assigned), sub.version if sub else 0)
        respond({"error_code": Errors.NONE, "protocol_type": CONSUMER_PROTOCOL_TYPE,
                 "protocol_name": protocol_name, "assignment": assignment})
        return []

    # ----------------------------------------------------------- heartbeat
    def classic_group_heartbeat(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """A Heartbeat to a consumer group: REBALANCE_IN_PROGRESS when the member must rejoin."""
        self._ensure_loaded(now_ms)
        group = self.group(org_id, op["group_id"])
        try:
            if group is None:
                raise RequestError(Errors.UNKNOWN_MEMBER_ID)
            member = self._classic_member(group, op.get("member_id") or "", op.get("group_instance_id"))
            if op.get("generation_id") != member.member_epoch:
                raise RequestError(Errors.ILLEGAL_GENERATION)
        except RequestError as exc:
            respond({"error_code": exc.code})
            return []
        self._schedule_session(group, member.member_id)
        rejoin = (member.member_epoch < group.group_epoch or member.state == UNREVOKED_PARTITIONS
                  or (member.state == UNRELEASED_PARTITIONS and not waiting_on_unreleased_partition(group, member)))
        if rejoin:
            self._schedule_join_deadline_if_absent(group, member)
        respond({"error_code": Errors.REBALANCE_IN_PROGRESS if rejoin else Errors.NONE})
        return []

    # --------------------------------------------------------------- leave
    def classic_group_leave(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """A LeaveGroup to a consumer group: each known member is removed (group epoch bump); each
        answer echoes the identity the request gave, as Kafka's classicGroupLeaveToConsumerGroup."""
        self._ensure_loaded(now_ms)
        group = self.group(org_id, op["group_id"])
        assert group is not None
        records: list[Record] = []
        results = []
        for identity in op.get("members") or []:
            member_id = identity.get("member_id") or ""
            instance_id = identity.get("group_instance_id")
            error = Errors.NONE
            leaving = member_id
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    error = Errors.UNKNOWN_MEMBER_ID
                elif member_id and member_id != known:
                    error = Errors.FENCED_INSTANCE_ID
                else:
                    leaving = known
            elif member_id not in group.members:
                error = Errors.UNKNOWN_MEMBER_ID
            if not error:
                self._remove_member(group, leaving, records)
            results.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": error})
        respond({"error_code": Errors.NONE, "members": results})
        return records

    def describe_classic_member(self, group: ConsumerGroup, member: ConsumerMember) -> tuple[bytes, bytes]:
        """DescribeGroups' (metadata, assignment) of a classic member of a consumer group."""
        protocols = (member.classic or {}).get("protocols") or [["", b""]]
        sub = parse_subscription(protocols[0][1])
        return protocols[0][1], encode_assignment(ids_to_names(group, member.assigned), sub.version if sub else 0)
