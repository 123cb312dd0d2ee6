"""Online migration between classic and consumer groups (group.consumer.migration.policy=bidirectional).

How this works (Kafka's GroupMetadataManager ``convertToConsumerGroup`` /
``convertToClassicGroup``, ``ConsumerGroup.fromClassicGroup`` /
``ClassicGroup.fromConsumerGroup``):

* **Upgrade.** A ConsumerGroupHeartbeat joining a non-empty classic group whose
  protocol type is "consumer" (``validate_online_upgrade``) converts it: parked
  JoinGroup/SyncGroup requests are answered REBALANCE_IN_PROGRESS, a classic
  group tombstone is written, then a consumer group with the same ``cgp_`` id
  whose group and assignment epochs are the classic generation, and one member
  per classic member — epoch = generation, Stable, its subscription read from
  its JoinGroup metadata, its current (and target) assignment read from its
  SyncGroup assignment — flagged ``classic`` (session timeout + protocols). The
  heartbeat then goes on as usual: the new member bumps the group epoch and the
  classic members are told to rejoin (see ``classic_members``).
* **Downgrade.** When a consumer-protocol member leaves (epoch -1) or is fenced
  and every other member uses the classic protocol
  (``validate_online_downgrade_with_fenced_member``), the consumer group's
  records are tombstoned and a classic GROUP_METADATA record rebuilds it as a
  Stable classic group (generation = group epoch, same ``cgp_`` id, each member's
  target assignment serialised as its classic assignment), which then prepares a
  rebalance so the classic members rejoin and get everything.

Committed offsets are keyed by group id and are never touched. Both directions
are plain records, so recovery replays them like any other change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rafka.protocol.consumer_protocol import encode_assignment, parse_assignment, parse_subscription
from rafka.shard.groups.classic import ClassicGroup, join_error, sync_error
from rafka.shard.groups.consumer.model import (
    STABLE,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    member_record,
    member_tombstone,
    metadata_record,
    metadata_tombstone,
    target_record,
    target_tombstone,
)
from rafka.shard.groups.errors import Errors
from rafka.shard.groups.record_helpers import new_group_metadata_record, new_group_tombstone
from rafka.shard.records import Record


class RequestError(Exception):
    """A request fails with a Kafka error code (and message)."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class NeedTopics(Exception):
    """The op lacks metadata of topics the handler needs; the gateway resolves them and retries."""

    def __init__(self, names: set[str]) -> None:
        super().__init__(sorted(names))
        self.names = sorted(names)


def names_to_ids(group: ConsumerGroup, by_name: dict[str, set[int]]) -> Assignment:
    """A name-keyed assignment in topic ids (topics the group has no metadata for are dropped)."""
    out: Assignment = {}
    for name, parts in by_name.items():
        info = group.topics.get(name)
        if info is not None:
            valid = {p for p in parts if 0 <= p < info[1]}
            if valid:
                out.setdefault(info[0], set()).update(valid)
    return out


def ids_to_names(group: ConsumerGroup, by_id: Assignment) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    names = group.names_by_id()
    for tid, parts in by_id.items():
        name = names.get(tid, "")
        if name and parts:
            out.setdefault(name, set()).update(parts)
    return out


def require_topics(op: dict[str, Any], known: dict[str, Any], names: set[str]) -> None:
    """Raise NeedTopics unless every name is in the op's or the group's topic metadata."""
    if op.get("topics_resolved"):
        return
    offered = op.get("topics") or {}
    missing = {n for n in names if n not in offered and n not in known}
    if missing:
        raise NeedTopics(names)


class MigrationMixin:
    """Conversions between the classic and the consumer group of one group id."""

    # provided by ConsumerGroupCoordinator
    config: Any
    classic: Any
    groups: dict[tuple[str, str], ConsumerGroup]
    _new_group_uid: Callable[[int], str]
    if TYPE_CHECKING:
        def _write(self, records: list[Record], record: Record) -> None: ...
        def _merge_topics(self, group: ConsumerGroup, op: dict[str, Any]) -> bool: ...
        def _schedule_session(self, group: ConsumerGroup, member_id: str) -> None: ...
        def _cancel_timers(self, group: ConsumerGroup, member_id: str) -> None: ...

    # ------------------------------------------------------------ upgrade
    def validate_online_upgrade(self, classic: ClassicGroup) -> bool:
        """Kafka's validateOnlineUpgrade (the migration policy is always bidirectional here)."""
        return classic.uses_consumer_protocol() and len(classic.members) <= self.config.max_size

    def convert_to_consumer_group(self, classic: ClassicGroup, op: dict[str, Any], now_ms: int,
                                  records: list[Record]) -> ConsumerGroup:
        """Replace the non-empty classic group by a consumer group holding its members."""
        org_id, group_id = classic.key
        members: list[tuple[Any, Any, dict[str, set[int]]]] = []
        names: set[str] = set()
        for m in classic.members.values():
            sub = parse_subscription(m.metadata(classic.protocol_name) if classic.protocol_name
                                     else (m.protocols[0][1] if m.protocols else b""))
            assigned = parse_assignment(m.assignment)
            if sub is None or assigned is None:
                raise _not_upgradable(group_id)
            members.append((m, sub, assigned))
            names |= set(sub.topics) | set(assigned)
        require_topics(op, {}, names | set(op.get("subscribed_topic_names") or []))

        for m in list(classic.members.values()):  # parked requests: rejoin the converted group
            classic.complete_join_future(m, join_error(m.member_id, Errors.REBALANCE_IN_PROGRESS))
            classic.complete_sync_future(m, sync_error(Errors.REBALANCE_IN_PROGRESS))
        self.classic._cancel_group_timers(classic)
        tombstone = new_group_tombstone(org_id, group_id)
        records.append(tombstone)
        self.classic.replay(tombstone)

        group = ConsumerGroup(org_id, group_id, classic.uid or self._new_group_uid(now_ms), now_ms)
        group.group_epoch = group.assignment_epoch = classic.generation_id
        self.groups[group.key] = group
        for m, sub, _ in members:  # the topic snapshot needs the subscriptions first
            group.members[m.member_id] = ConsumerMember(m.member_id, subscribed_topic_names=sorted(set(sub.topics)))
        self._merge_topics(group, op)
        group.members.clear()
        self._write(records, metadata_record(group))
        for m, sub, assigned in members:
            member = ConsumerMember(
                m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscribed_topic_names=sorted(set(sub.topics)), member_epoch=classic.generation_id,
                previous_member_epoch=classic.generation_id, state=STABLE,
                assigned=names_to_ids(group, assigned),
                classic={"session_timeout": m.session_timeout_ms,
                         "protocols": [[name, meta] for name, meta in m.protocols]})
            self._write(records, member_record(group, member))
            if member.assigned:
                self._write(records, target_record(group, member.member_id, member.assigned))
            self._schedule_session(group, member.member_id)
        return group

    # ---------------------------------------------------------- downgrade
    def validate_online_downgrade_with_fenced_member(self, group: ConsumerGroup, member_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember."""
        others = [m for m in group.members.values() if m.member_id != member_id]
        if not others or not all(m.uses_classic_protocol for m in others) or len(others) > self.config.max_size:
            return False
        return self._common_protocol(group, member_id)  # the classic group needs a protocol all support

    def validate_online_downgrade_with_replaced_member(self, group: ConsumerGroup, replaced_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithReplacedMemberId: a classic static member replaces the
        last consumer-protocol member (checked after the replacement, so every member is classic)."""
        return (all(m.uses_classic_protocol for m in group.members.values() if m.member_id != replaced_id)
                and 0 < len(group.members) <= self.config.max_size and self._common_protocol(group, replaced_id))

    def _common_protocol(self, group: ConsumerGroup, except_id: str) -> bool:
        others = [m for m in group.members.values() if m.member_id != except_id]
        if not others:
            return False
        common = set(others[0].classic_protocol_names())
        for m in others[1:]:
            common &= set(m.classic_protocol_names())
        return bool(common)

    def convert_to_classic_group(self, group: ConsumerGroup, leaving_id: str | None, now_ms: int,
                                 records: list[Record], *, rebalance: bool = True) -> Any:
        """Replace the consumer group by a classic group of its remaining (classic) members, then
        rebalance it so they rejoin (unless a static member was just replaced: ``rebalance=False``).
        Returns the live classic group."""
        org_id, group_id = group.key
        remaining = [m for m in group.members.values() if m.member_id != leaving_id]
        value = {"uid": group.uid, "protocol_type": "consumer", "generation": group.group_epoch,
                 "protocol": None, "leader": remaining[0].member_id, "state_ts": now_ms,
                 "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                              "client_id": m.client_id, "client_host": m.client_host,
                              "session_timeout": (m.classic or {})["session_timeout"],
                              "rebalance_timeout": m.rebalance_timeout_ms,
                              "protocols": (m.classic or {})["protocols"], "assignment": b""}
                             for m in remaining]}
        converted = ClassicGroup.from_record(org_id, group_id, value)
        converted.protocol_name = converted.select_protocol()
        converted.subscribed_topics = converted.compute_subscribed_topics()
        for cm in converted.members.values():
            sub = parse_subscription(cm.metadata(converted.protocol_name))
            cm.assignment = encode_assignment(ids_to_names(group, group.target.get(cm.member_id, {})),
                                              sub.version if sub is not None else 0)
        converted.state_ts = now_ms

        for member_id in list(group.members):
            self._cancel_timers(group, member_id)
            self._write(records, member_tombstone(group, member_id))
        for member_id in list(group.target):
            self._write(records, target_tombstone(group, member_id))
        self._write(records, metadata_tombstone(org_id, group_id))
        record = new_group_metadata_record(converted)
        records.append(record)
        self.classic.replay(record)

        classic = self.classic._group(org_id, group_id)  # live from now on
        for cm in classic.members.values():
            self.classic._reschedule_heartbeat(classic, cm)
        if rebalance:
            records.extend(self.classic._prepare_rebalance(classic, now_ms))
        return classic


def _not_upgradable(group_id: str) -> Exception:
    return RequestError(Errors.GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {group_id} to consumer "
                                                   "group because the embedded consumer protocol is malformed.")
