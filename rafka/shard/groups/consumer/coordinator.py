"""The KIP-848 consumer group coordinator of one shard (ConsumerGroupHeartbeat, ConsumerGroupDescribe).

How this works: mirrors the consumer-group half of Kafka's GroupMetadataManager.
A heartbeat validates the request, finds or creates the group (an Empty classic
group of the same id is replaced; a non-empty one is upgraded if its members use
the "consumer" protocol type, else GROUP_ID_NOT_FOUND — see ``migration``),
finds, creates or replaces (static membership) the member and fences stale
epochs, updates its subscription and the group's topic metadata snapshot —
bumping the group epoch when either changed — recomputes the target assignment
when the group epoch is ahead of it, and reconciles the member towards its
target (Kafka's CurrentAssignmentBuilder): partitions to give up are revoked
first and the member keeps its epoch until it confirms, by listing its owned
``topic_partitions``, that it released them; partitions still owned by another
member are withheld (UNRELEASED_PARTITIONS) until that member released them.

Classic members (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) can live in a
consumer group (``classic_members``); when the last consumer-protocol member
leaves or is fenced, the group is downgraded to a classic group (``migration``).

Every state change is a record (see ``model``): the handler applies each record
it emits at once through ``replay`` (so the rest of the handler sees it) and
returns them; the runtime replays them again after logging, which is idempotent.
Timers (session expiry, revocation deadline) go through the classic
coordinator's ``Timer`` port; time only arrives as ``now_ms``.

Topic metadata lives on another shard: the gateway resolves the names (and
regexes) it knows the group subscribes to and passes ``{"topics": {name:
{"topic_id", "partitions"} | None}, "regex_topics": {regex: [names]}}`` in the
op; names it did not resolve keep their last known metadata. Replies carry
``subscribed`` (the group's names and regexes) so the gateway knows what to
resolve next time.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from rafka.shard.groups.config_manager import GroupConfigManager
from rafka.shard.groups.consumer import assignors
from rafka.shard.groups.consumer.classic_members import ClassicMembersMixin
from rafka.shard.groups.consumer.migration import MigrationMixin, NeedTopics, RequestError
from rafka.shard.groups.consumer.model import (
    ASSIGNING,
    EMPTY,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    RECONCILING,
    STABLE,
    STABLE_GROUP,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    member_record,
    member_tombstone,
    metadata_record,
    metadata_tombstone,
    partitions_of,
    target_record,
    target_tombstone,
    unpack_assignment,
)
from rafka.shard.groups.core import GroupConfig, Respond, Timer, TimerKey, mint_group_uid
from rafka.shard.groups.errors import Errors
from rafka.shard.groups.record_helpers import CONSUMER_PROTOCOL_TYPE, group_rrl, new_group_tombstone
from rafka.shard.records import Record, RecordType

log = logging.getLogger("rafka.shard.groups.consumer")

NO_RECORDS: list[Record] = []
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
STATES = {EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP}


def session_key(org_id: str, group_id: str, member_id: str) -> TimerKey:
    return ("cg-session", org_id, group_id, member_id)


def revocation_key(org_id: str, group_id: str, member_id: str) -> TimerKey:
    return ("cg-revoke", org_id, group_id, member_id)


def _check_static_member(group: ConsumerGroup, instance_id: str, member_id: str) -> None:
    """UNKNOWN_MEMBER_ID for an instance id the group does not know, FENCED_INSTANCE_ID when
    another member holds it (Kafka's throwIfStaticMemberIsUnknown, throwIfInstanceIdIsFenced)."""
    static_id = group.static_members.get(instance_id)
    if static_id is None:
        raise RequestError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if static_id != member_id:
        raise RequestError(Errors.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                                                      f"was fenced by member {static_id}.")


def _owned(op_parts: list[dict[str, Any]] | None) -> Assignment | None:
    if op_parts is None:
        return None
    out: Assignment = {}
    for tp in op_parts:
        if tp.get("partitions"):
            out.setdefault(str(tp["topic_id"]), set()).update(tp["partitions"])
    return out


def _is_subset(a: Assignment, b: Assignment) -> bool:
    return partitions_of(a) <= partitions_of(b)


def _wire_assignment(a: Assignment) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": tid, "partitions": sorted(ps)} for tid, ps in sorted(a.items()) if ps]}


class ConsumerGroupCoordinator(ClassicMembersMixin, MigrationMixin):
    """KIP-848 groups of one shard, next to (and sharing offsets with) the classic coordinator."""

    def __init__(
        self, config: GroupConfig, timer: Timer, classic: Any = None, *,
        new_member_uuid: Callable[[], str] | None = None,
        new_group_uid: Callable[[int], str] | None = None,
    ) -> None:
        self.config = config
        self.timer = timer
        self.classic = classic  # the GroupCoordinator (classic groups and committed offsets)
        self._new_member_uuid = new_member_uuid or getattr(classic, "_new_member_uuid", None) or (
            lambda: str(uuid.uuid4()))
        self._new_group_uid = new_group_uid or getattr(classic, "_new_group_uid", None) or mint_group_uid
        self.groups: dict[tuple[str, str], ConsumerGroup] = {}
        self.configs = GroupConfigManager(config)  # per-group session timeout and heartbeat interval
        self._join_deadlines: set[str] = set()  # armed rejoin deadlines of classic members (soft state)
        self.loading = True
        if classic is not None:
            classic.consumer = self

    # ================================================================ replay
    def replay(self, record: Record) -> None:
        """Apply one CONSUMER_GROUP_* record (live path and recovery alike; idempotent)."""
        t = record.type
        org_id, group_id = record.key[0], record.key[1]
        if t == RecordType.CONSUMER_GROUP_METADATA:
            if record.value is None:
                self.groups.pop((org_id, group_id), None)
                return
            group = self.groups.get((org_id, group_id))
            if group is None:
                group = self.groups[(org_id, group_id)] = ConsumerGroup(org_id, group_id, record.value.get("uid", ""))
            group.apply_metadata(record.value)
            self._drop_phantom_classic(org_id, group_id)
            return
        group = self.groups.get((org_id, group_id))
        if group is None:
            group = self.groups[(org_id, group_id)] = ConsumerGroup(org_id, group_id, "")
        member_id = record.key[2]
        if t == RecordType.CONSUMER_GROUP_MEMBER:
            if record.value is None:
                group.remove_member(member_id)
            else:
                group.put_member(ConsumerMember.from_value(member_id, record.value))
        elif t == RecordType.CONSUMER_GROUP_TARGET:
            if record.value is None:
                group.target.pop(member_id, None)
            else:
                group.target[member_id] = unpack_assignment(record.value)

    def _drop_phantom_classic(self, org_id: str, group_id: str) -> None:
        """A classic group of the same id without members is an artefact of recovery order
        (offset records rebuild a placeholder) or was converted: the consumer group wins."""
        if self.classic is None:
            return
        cg = self.classic.groups.get((org_id, group_id))
        if cg is not None and not cg.members and not cg.live:
            del self.classic.groups[(org_id, group_id)]

    def _write(self, records: list[Record], record: Record) -> None:
        records.append(record)
        self.replay(record)

    def on_loaded(self, now_ms: int) -> None:
        """Arm every recovered member's session timer (called once the WAL is replayed)."""
        self.loading = False
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_session(group, member.member_id)
                if member.state == UNREVOKED_PARTITIONS:
                    self._schedule_revocation(group, member)

    def _ensure_loaded(self, now_ms: int) -> None:
        if self.loading:
            self.on_loaded(now_ms)

    # ============================================================= lookups
    def group(self, org_id: str, group_id: str) -> ConsumerGroup | None:
        return self.groups.get((org_id, group_id))

    def is_consumer_group(self, org_id: str, group_id: str) -> bool:
        return (org_id, group_id) in self.groups

    def has_members(self, org_id: str, group_id: str) -> bool:
        """True if ``group_id`` is a consumer group with members (classic requests go to it)."""
        group = self.groups.get((org_id, group_id))
        return group is not None and bool(group.members)

    # ================================================================ timers
    def _schedule_session(self, group: ConsumerGroup, member_id: str) -> None:
        org_id, group_id = group.key
        member = group.members.get(member_id)
        timeout = self.configs.session_timeout_ms(org_id, group_id)
        if member is not None and member.classic is not None:
            timeout = member.classic["session_timeout"]  # a classic member: its JoinGroup session timeout
        self.timer.schedule(session_key(org_id, group_id, member_id), timeout,
                            lambda now_ms: self._expire(org_id, group_id, member_id, None, now_ms))

    def _schedule_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        org_id, group_id = group.key
        epoch = member.member_epoch
        self.timer.schedule(revocation_key(org_id, group_id, member.member_id), member.rebalance_timeout_ms,
                            lambda now_ms: self._expire(org_id, group_id, member.member_id, epoch, now_ms))

    def _cancel_timers(self, group: ConsumerGroup, member_id: str) -> None:
        self.timer.cancel(session_key(group.org_id, group.group_id, member_id))
        self.timer.cancel(revocation_key(group.org_id, group.group_id, member_id))
        self._cancel_classic_deadlines(group, member_id)

    def _expire(self, org_id: str, group_id: str, member_id: str, revoking_epoch: int | None,
                now_ms: int) -> list[Record]:
        group = self.group(org_id, group_id)
        if group is None or member_id not in group.members:
            return NO_RECORDS
        member = group.members[member_id]
        if revoking_epoch is not None and (member.state != UNREVOKED_PARTITIONS
                                           or member.member_epoch != revoking_epoch):
            return NO_RECORDS
        why = "session timeout" if revoking_epoch is None else "revocation timeout"
        log.info("consumer group %s/%s: member %s fenced (%s)", org_id, group_id, member_id, why)
        records: list[Record] = []
        self._fence_member(group, member_id, now_ms, records)
        return records

    def _fence_member(self, group: ConsumerGroup, member_id: str, now_ms: int, records: list[Record]) -> None:
        """Remove a leaving or fenced member, downgrading the group to a classic group when only
        classic members would remain (Kafka's consumerGroupFenceMember)."""
        if self.classic is not None and self.validate_online_downgrade_with_fenced_member(group, member_id):
            log.info("consumer group %s/%s: downgraded to a classic group (member %s left)",
                     group.org_id, group.group_id, member_id)
            self.convert_to_classic_group(group, member_id, now_ms, records)
        else:
            self._remove_member(group, member_id, records)

    def _remove_member(self, group: ConsumerGroup, member_id: str, records: list[Record]) -> None:
        """Fence/remove a member: its partitions are free at once; the group epoch bumps."""
        self._cancel_timers(group, member_id)
        self._write(records, member_tombstone(group, member_id))
        if member_id in group.target:
            self._write(records, target_tombstone(group, member_id))
        group.group_epoch += 1
        self._write(records, metadata_record(group))

    # ============================================================= heartbeat
    def heartbeat(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle a ConsumerGroupHeartbeat (v0–1)."""
        self._ensure_loaded(now_ms)
        records: list[Record] = []
        try:
            resp = self._heartbeat(org_id, op, now_ms, records)
        except NeedTopics as exc:  # nothing changed: the gateway resolves these topics and retries
            records = []
            resp = {"error_code": Errors.NONE, "error_message": None, "member_id": op.get("member_id") or None,
                    "member_epoch": -1, "heartbeat_interval": 0, "assignment": None, "need_topics": exc.names}
        except RequestError as exc:  # Kafka sets only the error: member id null, epoch 0
            resp = {"error_code": exc.code, "error_message": exc.message, "member_id": None,
                    "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}
        group = self.group(org_id, op.get("group_id") or "")
        if group is not None:
            resp["subscribed"] = {"names": sorted({n for m in group.members.values()
                                                   for n in m.subscribed_topic_names}),
                                  "regexes": sorted(group.regexes())}
        respond(resp)
        return records

    def _validate(self, op: dict[str, Any]) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (an op without ``topic_partitions``
        owns nothing; the gateway passes the request's null as None)."""
        version = op.get("api_version", 1)
        epoch = op.get("member_epoch", 0)
        if (version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) and not op.get("member_id"):
            raise RequestError(Errors.INVALID_REQUEST, "MemberId can't be empty.")
        if not op.get("group_id"):
            raise RequestError(Errors.INVALID_REQUEST, "GroupId can't be empty.")
        if op.get("instance_id") == "":
            raise RequestError(Errors.INVALID_REQUEST, "InstanceId can't be empty.")
        if op.get("rack_id") == "":
            raise RequestError(Errors.INVALID_REQUEST, "RackId can't be empty.")
        if epoch == 0:
            if op.get("rebalance_timeout", -1) in (-1, None):
                raise RequestError(Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if op.get("topic_partitions", ()) is None or op.get("topic_partitions"):
                raise RequestError(Errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            # an empty list of names or an empty regex joins the group subscribed to nothing
            if op.get("subscribed_topic_names") is None and op.get("subscribed_topic_regex") is None:
                raise RequestError(Errors.INVALID_REQUEST, "Either SubscribedTopicNames or SubscribedTopicRegex "
                                                           "must be non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if op.get("instance_id") is None:
                raise RequestError(Errors.INVALID_REQUEST, "InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise RequestError(Errors.INVALID_REQUEST, "MemberEpoch is invalid.")
        assignor = op.get("server_assignor")
        if assignor is not None and assignor not in self.config.consumer_assignors:
            raise RequestError(Errors.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. "
                               f"Supported assignors: {', '.join(self.config.consumer_assignors)}.")

    def _get_or_create_group(self, org_id: str, group_id: str, create: bool, now_ms: int,
                             records: list[Record], op: dict[str, Any]) -> ConsumerGroup:
        group = self.group(org_id, group_id)
        if group is not None:
            return group
        classic = self.classic.groups.get((org_id, group_id)) if self.classic is not None else None
        if classic is not None and classic.members:
            if not create or not self.validate_online_upgrade(classic):
                raise RequestError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            log.info("classic group %s/%s: upgraded to a consumer group", org_id, group_id)
            return self.convert_to_consumer_group(classic, op, now_ms, records)
        if not create:
            raise RequestError(Errors.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        uid = self._new_group_uid(now_ms)
        if classic is not None:
            # an Empty classic group is replaced (its committed offsets stay), as in Kafka
            uid = classic.uid or uid
            self.classic._cancel_group_timers(classic)
            records.append(new_group_tombstone(org_id, group_id))
            self.classic.replay(records[-1])
        group = ConsumerGroup(org_id, group_id, uid, now_ms)
        self.groups[group.key] = group
        self._write(records, metadata_record(group))
        return group

    def _heartbeat(self, org_id: str, op: dict[str, Any], now_ms: int, records: list[Record]) -> dict[str, Any]:
        self._validate(op)
        group_id = op["group_id"]
        epoch = op.get("member_epoch", 0)
        member_id = op.get("member_id") or ""
        instance_id = op.get("instance_id")
        owned = _owned(op.get("topic_partitions"))
        group = self._get_or_create_group(org_id, group_id, epoch == 0, now_ms, records, op)

        if epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(group, member_id, instance_id, epoch, now_ms, records)

        # ---------------------------------------------------------- member
        if len(group.members) >= self.config.max_size and (not member_id or member_id not in group.members):
            raise RequestError(Errors.GROUP_MAX_SIZE_REACHED,  # Kafka checks before finding the member
                               f"The consumer group has reached its maximum capacity of "
                               f"{self.config.max_size} members.")
        new_member = False
        if epoch == 0:
            member = None
            if instance_id is not None:
                old_id = group.static_members.get(instance_id)
                if old_id is not None and old_id != member_id:
                    old = group.members[old_id]
                    if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise RequestError(Errors.UNRELEASED_INSTANCE_ID,
                                           f"Static member {member_id} with instance id {instance_id} cannot join "
                                           f"the group because the instance id is owned by {old_id} member.")
                    member = self._replace_static_member(group, old, member_id or self._new_member_uuid(), records)
                    member_id = member.member_id
            if member is None:
                existing = group.members.get(member_id) if member_id else None
                if existing is None:
                    member = ConsumerMember(member_id or self._new_member_uuid(), instance_id=instance_id)
                    new_member = True
                else:
                    # a member rejoining with epoch 0 (e.g. after being fenced) owns nothing any more
                    member = existing.copy()
                    member.assigned, member.pending = {}, {}
                    member.state, member.member_epoch = STABLE, 0
                    member.previous_member_epoch = existing.member_epoch
        else:
            if instance_id is not None:  # a static member is found by its instance id, as in Kafka
                _check_static_member(group, instance_id, member_id)
            member = group.members.get(member_id)
            if member is None:
                raise RequestError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            if epoch > member.member_epoch:
                raise RequestError(Errors.FENCED_MEMBER_EPOCH,
                                   f"The consumer group member has a greater member epoch ({epoch}) than the "
                                   f"one known by the group coordinator ({member.member_epoch}).")
            if epoch < member.member_epoch and (epoch != member.previous_member_epoch or owned is None
                                                or not _is_subset(owned, member.assigned)):
                raise RequestError(Errors.FENCED_MEMBER_EPOCH,
                                   f"The consumer group member has a smaller member epoch ({epoch}) than the "
                                   f"one known by the group coordinator ({member.member_epoch}).")
            member = member.copy()

        # ---------------------------------------------------- subscription
        original = group.members.get(member.member_id)
        before = member.value() if original is None else original.value()
        member.client_id = op.get("client_id") or ""  # every heartbeat's, as Kafka's (a restarted pod's new name and IP)
        member.client_host = op.get("client_host") or ""
        if op.get("rack_id") is not None:
            member.rack_id = op["rack_id"]
        if op.get("rebalance_timeout") is not None and op["rebalance_timeout"] >= 0:
            member.rebalance_timeout_ms = op["rebalance_timeout"]
        if op.get("server_assignor") is not None:
            member.server_assignor = op["server_assignor"] or None
        if op.get("subscribed_topic_names") is not None:
            member.subscribed_topic_names = sorted(set(op["subscribed_topic_names"]))
        if op.get("subscribed_topic_regex") is not None:
            member.subscribed_topic_regex = op["subscribed_topic_regex"] or None
        bump = new_member or (before["names"] != member.subscribed_topic_names
                              or before["regex"] != member.subscribed_topic_regex
                              or before["assignor"] != member.server_assignor)
        if new_member or member.value() != before:
            self._write(records, member_record(group, member))

        self._advance_epoch(group, op, records, bump)

        # ------------------------------------------------- reconciliation
        member = group.members[member.member_id]
        updated = self._reconcile(group, member, owned)
        self._apply_reconciliation(group, member, updated, records)

        # Kafka sends the assignment on a join, on a full request (what clients send after an
        # error: rebalance timeout, subscription and owned partitions all set) and when it changed
        full = (op.get("rebalance_timeout", -1) != -1 and owned is not None
                and (op.get("subscribed_topic_names") is not None or op.get("subscribed_topic_regex") is not None))
        send = epoch == 0 or new_member or full or updated.assigned != member.assigned
        return {"error_code": Errors.NONE, "error_message": None, "member_id": updated.member_id,
                "member_epoch": updated.member_epoch,
                "heartbeat_interval": self.configs.heartbeat_interval_ms(*group.key),
                "assignment": _wire_assignment(updated.assigned) if send else None}

    def _apply_reconciliation(self, group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
                              records: list[Record]) -> None:
        """Write the reconciled member, arm or cancel its revocation deadline, renew its session."""
        if updated.value() != member.value():
            self._write(records, member_record(group, updated))
        if updated.state == UNREVOKED_PARTITIONS:
            if member.state != UNREVOKED_PARTITIONS or member.member_epoch != updated.member_epoch:
                self._schedule_revocation(group, updated)
        else:
            self.timer.cancel(revocation_key(group.org_id, group.group_id, updated.member_id))
        self._schedule_session(group, updated.member_id)

    def _replace_static_member(self, group: ConsumerGroup, old: ConsumerMember, new_id: str,
                               records: list[Record]) -> ConsumerMember:
        """A static member rejoining under a new member id takes over the old one's epoch and partitions."""
        member = old.copy()
        member.member_id = new_id
        member.member_epoch = max(old.previous_member_epoch, 0)
        target = group.target.get(old.member_id)
        self._cancel_timers(group, old.member_id)
        self._write(records, member_tombstone(group, old.member_id))
        if target is not None:
            self._write(records, target_tombstone(group, old.member_id))
            self._write(records, target_record(group, new_id, target))
        self._write(records, member_record(group, member))
        return group.members[new_id]

    def _leave(self, group: ConsumerGroup, member_id: str, instance_id: str | None, epoch: int,
               now_ms: int, records: list[Record]) -> dict[str, Any]:
        if instance_id is not None:
            _check_static_member(group, instance_id, member_id)
        member = group.members.get(member_id)
        if member is None:
            raise RequestError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                                                         f"{group.group_id}.")
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # temporary leave: the member keeps its assignment until it rejoins or its session expires
            left = member.copy()
            left.previous_member_epoch = member.member_epoch
            left.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            self._write(records, member_record(group, left))
            self.timer.cancel(revocation_key(group.org_id, group.group_id, member_id))
            self._schedule_session(group, member_id)
        else:
            self._fence_member(group, member_id, now_ms, records)
        return {"error_code": Errors.NONE, "error_message": None, "member_id": member_id, "member_epoch": epoch,
                "heartbeat_interval": 0, "assignment": None}

    def _advance_epoch(self, group: ConsumerGroup, op: dict[str, Any], records: list[Record], bump: bool) -> None:
        """Bump the group epoch when membership, subscriptions or topic metadata changed, then
        compute a new target assignment if the group epoch is ahead of it."""
        if self._merge_topics(group, op) or bump:
            group.group_epoch += 1
            self._write(records, metadata_record(group))
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, records)

    def _merge_topics(self, group: ConsumerGroup, op: dict[str, Any]) -> bool:
        """Fold the gateway's topic metadata into the group's snapshot; True if a subscribed topic changed."""
        changed = False
        for regex, names in (op.get("regex_topics") or {}).items():
            names = sorted(set(names))
            if group.regex_topics.get(regex) != names and regex in group.regexes():
                group.regex_topics[regex] = names
                changed = True
        for regex in list(group.regex_topics):
            if regex not in group.regexes():
                del group.regex_topics[regex]
        subscribed = group.all_subscribed_names()
        for name, info in (op.get("topics") or {}).items():
            new = None if not info else (str(info["topic_id"]), int(info["partitions"]))
            if group.topics.get(name) != new:
                if new is None:
                    group.topics.pop(name, None)
                else:
                    group.topics[name] = new
                if name in subscribed:
                    changed = True
        for name in [n for n in group.topics if n not in subscribed]:
            del group.topics[name]
        return changed

    def _compute_target(self, group: ConsumerGroup, records: list[Record]) -> None:
        subscriptions: dict[str, set[str]] = {}
        partitions: dict[str, int] = {}
        for m in group.members.values():
            tids = set()
            for name in group.subscribed_names(m):
                info = group.topics.get(name)
                if info is not None and info[1] > 0:
                    tids.add(info[0])
                    partitions[info[0]] = info[1]
            subscriptions[m.member_id] = tids
        name = group.preferred_assignor(self.config.consumer_assignors[0])
        target = assignors.assign(name, subscriptions, partitions, group.target)
        for member_id, assignment in target.items():
            assignment = {t: ps for t, ps in assignment.items() if ps}
            if group.target.get(member_id) != assignment:
                self._write(records, target_record(group, member_id, assignment))
        for member_id in [m for m in group.target if m not in target]:
            self._write(records, target_tombstone(group, member_id))
        group.assignment_epoch = group.group_epoch
        self._write(records, metadata_record(group))

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None) -> ConsumerMember:
        """Kafka's CurrentAssignmentBuilder: the member's next epoch, state and assignment."""
        target_epoch = group.assignment_epoch
        target = group.target.get(member.member_id, {})
        m = member.copy()
        if m.state == UNREVOKED_PARTITIONS:
            if owned is None or partitions_of(owned) & partitions_of(m.pending):
                return m  # still owns partitions it must give up
            m.pending = {}
        elif m.state == STABLE and m.member_epoch == target_epoch:
            return m
        current = partitions_of(m.assigned)
        wanted = partitions_of(target)
        keep = current & wanted
        revoke = current - wanted
        newly, unreleased = set(), set()
        for key in wanted - current:
            owner = group.owners.get(key)
            if owner is not None and owner != m.member_id:
                unreleased.add(key)
            else:
                newly.add(key)

        def to_assignment(keys: set[tuple[str, int]]) -> Assignment:
            out: Assignment = {}
            for tid, p in keys:
                out.setdefault(tid, set()).add(p)
            return out

        if revoke:
            m.state = UNREVOKED_PARTITIONS
            m.assigned = to_assignment(keep)
            m.pending = to_assignment(revoke)
            return m
        if m.member_epoch != target_epoch:
            m.previous_member_epoch = m.member_epoch
            m.member_epoch = target_epoch
        m.assigned = to_assignment(keep | newly)
        m.pending = {}
        m.state = UNRELEASED_PARTITIONS if unreleased else STABLE
        return m

    # ============================================================ describe
    def describe(self, org_id: str, op: dict[str, Any], now_ms: int, respond: Respond) -> list[Record]:
        """Handle ConsumerGroupDescribe for one group."""
        self._ensure_loaded(now_ms)
        group_id = op.get("group_id") or ""
        group = self.group(org_id, group_id)
        if group is None:
            classic = self.classic.groups.get((org_id, group_id)) if self.classic is not None else None
            message = (f"Group {group_id} is not a consumer group." if classic is not None
                       else f"Group {group_id} not found.")
            respond({"error_code": Errors.GROUP_ID_NOT_FOUND, "error_message": message, "group_id": group_id,
                     "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
                     "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            return NO_RECORDS

        names = group.names_by_id()

        def wire(a: Assignment) -> dict[str, Any]:
            return {"topic_partitions": [{"topic_id": tid, "topic_name": names.get(tid, ""),
                                          "partitions": sorted(ps)} for tid, ps in sorted(a.items()) if ps]}

        members = [{
            "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
            "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": list(m.subscribed_topic_names), "subscribed_topic_regex": m.subscribed_topic_regex or "",
            "assignment": wire(m.assigned), "target_assignment": wire(group.target.get(m.member_id, {})),
            "member_type": 0 if m.uses_classic_protocol else 1,  # KIP-1099: 0 = classic, 1 = consumer
        } for m in group.members.values()]
        respond({"error_code": Errors.NONE, "error_message": None, "group_id": group_id,
                 "group_state": group.state(), "group_epoch": group.group_epoch,
                 "assignment_epoch": group.assignment_epoch,
                 "assignor_name": group.preferred_assignor(self.config.consumer_assignors[0]),
                 "members": members, "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                 "group_uid": group.uid, "rrl": group_rrl(org_id, group_id)})
        return NO_RECORDS

    # ================================================ hooks for the classic coordinator
    def validate_offset_commit(self, org_id: str, group_id: str, member_id: str, instance_id: str | None,
                               member_epoch: int, api_version: int, transactional: bool = False) -> int | None:
        """None if ``group_id`` is not a consumer group; else an error code (NONE = accept). A
        transactional commit naming no member is accepted (Kafka's ConsumerGroup.validateOffsetCommit)."""
        group = self.group(org_id, group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:
            return Errors.NONE  # admin client or a consumer without group management
        if transactional and member_epoch == -1 and not member_id and instance_id is None:
            return Errors.NONE
        member = group.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if member.uses_classic_protocol:  # a classic member: its generation is its member epoch
            return Errors.NONE if member_epoch == member.member_epoch else Errors.ILLEGAL_GENERATION
        if not transactional and api_version < 9:
            return Errors.UNSUPPORTED_VERSION
        # Kafka 4's ConsumerGroup.validateMemberEpoch: any other epoch is stale, older or newer
        return Errors.NONE if member_epoch == member.member_epoch else Errors.STALE_MEMBER_EPOCH

    def validate_offset_fetch(self, org_id: str, group_id: str, member_id: str | None,
                              member_epoch: int | None) -> int | None:
        """None if not a consumer group; else an error code (NONE = accept). Kafka's
        ``ConsumerGroup.validateOffsetFetch``: a null member id with a negative epoch (the admin
        client, classic consumers) is accepted; otherwise the member must exist and the epoch
        match (a classic-protocol member's mismatch is ILLEGAL_GENERATION)."""
        group = self.group(org_id, group_id)
        if group is None:
            return None
        if member_epoch is None:
            member_epoch = -1
        if member_id is None and member_epoch < 0:
            return Errors.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return Errors.ILLEGAL_GENERATION if member.uses_classic_protocol else Errors.STALE_MEMBER_EPOCH
        return Errors.NONE

    def is_subscribed_to_topic(self, org_id: str, group_id: str, topic: str) -> bool:
        group = self.group(org_id, group_id)
        return group is not None and topic in group.all_subscribed_names()

    def group_stats(self) -> tuple[dict[str, int], int]:
        """Groups by state (every state, 0 when none) and members, for metrics."""
        by_state = dict.fromkeys((EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP), 0)
        members = 0
        for group in self.groups.values():
            by_state[group.state()] += 1
            members += len(group.members)
        return by_state, members

    def list_groups(self, org_id: str, states: set[str]) -> list[dict[str, Any]]:
        out = []
        for (org, group_id), group in self.groups.items():
            if org != org_id:
                continue
            state = group.state()
            if states and state.lower() not in states:
                continue
            out.append({"group_id": group_id, "protocol_type": CONSUMER_PROTOCOL_TYPE, "group_state": state,
                        "group_type": "consumer"})
        return out

    def describe_as_classic(self, org_id: str, group_id: str) -> dict[str, Any] | None:
        """A classic view of a consumer group (protocol type "consumer", ``group_type``
        "consumer"), or None: the admin API shows it; Kafka's DescribeGroups does not."""
        group = self.group(org_id, group_id)
        if group is None:
            return None
        members = []
        for m in group.members.values():
            meta, assignment = self.describe_classic_member(group, m) if m.uses_classic_protocol else (b"", b"")
            members.append({"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                            "client_host": m.client_host, "member_metadata": meta, "member_assignment": assignment})
        return {"error_code": Errors.NONE, "error_message": None, "group_id": group_id,
                "group_state": group.state(), "protocol_type": CONSUMER_PROTOCOL_TYPE,
                "protocol_data": group.preferred_assignor(self.config.consumer_assignors[0]), "members": members,
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                "group_uid": group.uid, "rrl": group_rrl(org_id, group_id), "group_type": "consumer"}

    def delete_group(self, org_id: str, group_id: str) -> tuple[int, list[Record]] | None:
        """DeleteGroups on a consumer group: (error, records) or None if not a consumer group.
        The caller adds the offset tombstones."""
        group = self.group(org_id, group_id)
        if group is None:
            return None
        if group.members:
            return Errors.NON_EMPTY_GROUP, NO_RECORDS
        records = [Record(RecordType.CONSUMER_GROUP_TARGET, (org_id, group_id, m), None) for m in group.target]
        records.append(metadata_tombstone(org_id, group_id))
        return Errors.NONE, records

    def release_for_classic(self, org_id: str, group_id: str) -> tuple[int, list[Record]] | None:
        """A classic JoinGroup for ``group_id``: None if not a consumer group; an empty consumer
        group is deleted (offsets stay) so a classic group can take its place; otherwise an error."""
        group = self.group(org_id, group_id)
        if group is None:
            return None
        if group.members:
            return Errors.INCONSISTENT_GROUP_PROTOCOL, NO_RECORDS
        records: list[Record] = []
        for m in list(group.target):
            self._write(records, target_tombstone(group, m))
        self._write(records, metadata_tombstone(org_id, group_id))
        return Errors.NONE, records

    def stats(self) -> dict[str, Any]:
        return {"consumer_groups": len(self.groups),
                "consumer_members": sum(len(g.members) for g in self.groups.values())}
