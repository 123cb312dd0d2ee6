"""KIP-848 consumer groups in memory, and their WAL records.

How this works: a ``ConsumerGroup`` (Kafka's ``ConsumerGroup``) holds the group
epoch, the epoch of its target assignment, a snapshot of the metadata of the
topics its members subscribe to, its members and the target assignment of each
member. A ``ConsumerMember`` holds its subscription, its member epoch (and the
previous one), its reconciliation state and its current assignment: the
partitions it owns (``assigned``) plus those it was asked to give up and has not
yet confirmed (``pending``). ``owners`` maps every partition of any member's
current assignment (assigned or pending) to that member, so a partition is never
given to a second member before the first released it.

Records (plain msgpack data, see rafka.shard.records):

* ``CONSUMER_GROUP_METADATA`` key ``(org, group)``: ``{"uid", "group_epoch",
  "assignment_epoch", "topics": {name: [topic_id, partitions]}, "regex_topics":
  {regex: [names]}, "created_ts"}`` or ``None`` (group deleted).
* ``CONSUMER_GROUP_MEMBER`` key ``(org, group, member_id)``: the member (see
  ``ConsumerMember.value``; ``classic`` is set for a member that uses the classic
  protocol inside the consumer group) or ``None`` (member removed).
* ``CONSUMER_GROUP_TARGET`` key ``(org, group, member_id)``: ``{topic_id:
  [partitions]}`` or ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rafka.shard.records import Record, RecordType

Assignment = dict[str, set[int]]

# member reconciliation states (Kafka's MemberState)
STABLE = "stable"
UNREVOKED_PARTITIONS = "unrevoked_partitions"
UNRELEASED_PARTITIONS = "unreleased_partitions"

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# group states (Kafka's ConsumerGroup.ConsumerGroupState)
EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE_GROUP = "Stable"


def pack_assignment(a: Assignment) -> dict[str, list[int]]:
    return {tid: sorted(ps) for tid, ps in sorted(a.items()) if ps}


def unpack_assignment(v: dict[str, Any] | None) -> Assignment:
    return {tid: set(ps) for tid, ps in (v or {}).items() if ps}


def partitions_of(a: Assignment) -> set[tuple[str, int]]:
    return {(tid, p) for tid, ps in a.items() for p in ps}


def _unpack_classic(v: dict[str, Any] | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {"session_timeout": int(v["session_timeout"]),
            "protocols": [[str(name), bytes(meta)] for name, meta in v.get("protocols") or []]}


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: str = STABLE
    assigned: Assignment = field(default_factory=dict)
    pending: Assignment = field(default_factory=dict)
    # a member using the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside this consumer
    # group: {"session_timeout": ms, "protocols": [[name, metadata]]}; None for a KIP-848 member
    classic: dict[str, Any] | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def classic_protocol_names(self) -> list[str]:
        return [p[0] for p in (self.classic or {}).get("protocols", [])]

    def value(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id, "rack_id": self.rack_id, "client_id": self.client_id,
            "client_host": self.client_host, "rebalance_timeout": self.rebalance_timeout_ms,
            "names": list(self.subscribed_topic_names), "regex": self.subscribed_topic_regex,
            "assignor": self.server_assignor, "epoch": self.member_epoch, "prev_epoch": self.previous_member_epoch,
            "state": self.state, "assigned": pack_assignment(self.assigned), "pending": pack_assignment(self.pending),
            "classic": self.classic,
        }

    @classmethod
    def from_value(cls, member_id: str, v: dict[str, Any]) -> ConsumerMember:
        return cls(
            member_id=member_id, instance_id=v.get("instance_id"), rack_id=v.get("rack_id"),
            client_id=v.get("client_id") or "", client_host=v.get("client_host") or "",
            rebalance_timeout_ms=v.get("rebalance_timeout", 300_000),
            subscribed_topic_names=list(v.get("names") or []), subscribed_topic_regex=v.get("regex"),
            server_assignor=v.get("assignor"), member_epoch=v.get("epoch", 0),
            previous_member_epoch=v.get("prev_epoch", -1), state=v.get("state", STABLE),
            assigned=unpack_assignment(v.get("assigned")), pending=unpack_assignment(v.get("pending")),
            classic=_unpack_classic(v.get("classic")),
        )

    def copy(self) -> ConsumerMember:
        return ConsumerMember.from_value(self.member_id, self.value())


class ConsumerGroup:
    """One KIP-848 consumer group."""

    def __init__(self, org_id: str, group_id: str, uid: str, created_ts: int = 0) -> None:
        self.org_id = org_id
        self.group_id = group_id
        self.uid = uid
        self.created_ts = created_ts
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.topics: dict[str, tuple[str, int]] = {}  # name -> (topic_id, partitions)
        self.regex_topics: dict[str, list[str]] = {}  # regex -> matching topic names
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}
        self.owners: dict[tuple[str, int], str] = {}

    @property
    def key(self) -> tuple[str, str]:
        return (self.org_id, self.group_id)

    # ------------------------------------------------------------ derived
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        for m in self.members.values():
            if m.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                continue
            if m.state != STABLE or m.member_epoch != self.assignment_epoch:
                return RECONCILING
        return STABLE_GROUP

    def subscribed_names(self, member: ConsumerMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names.update(self.regex_topics.get(member.subscribed_topic_regex, ()))
        return names

    def all_subscribed_names(self) -> set[str]:
        out: set[str] = set()
        for m in self.members.values():
            out |= self.subscribed_names(m)
        return out

    def regexes(self) -> set[str]:
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    def names_by_id(self) -> dict[str, str]:
        """Topic id → name of the topics the group knows (built once per use: one lookup per
        assigned topic would walk them all each time)."""
        return {tid: name for name, (tid, _n) in self.topics.items()}

    def preferred_assignor(self, default: str) -> str:
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        return max(sorted(votes), key=votes.__getitem__)

    # ------------------------------------------------------------ replay
    def metadata_value(self) -> dict[str, Any]:
        return {"uid": self.uid, "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "topics": {n: [tid, p] for n, (tid, p) in sorted(self.topics.items())},
                "regex_topics": {r: sorted(ns) for r, ns in sorted(self.regex_topics.items())},
                "created_ts": self.created_ts}

    def apply_metadata(self, v: dict[str, Any]) -> None:
        self.uid = v.get("uid", self.uid)
        self.group_epoch = v["group_epoch"]
        self.assignment_epoch = v["assignment_epoch"]
        self.topics = {n: (tp[0], int(tp[1])) for n, tp in (v.get("topics") or {}).items()}
        self.regex_topics = {r: list(ns) for r, ns in (v.get("regex_topics") or {}).items()}
        self.created_ts = v.get("created_ts", self.created_ts)

    def put_member(self, member: ConsumerMember) -> None:
        self.remove_member(member.member_id)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for key in partitions_of(member.assigned) | partitions_of(member.pending):
            self.owners[key] = member.member_id

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]
        for key in partitions_of(old.assigned) | partitions_of(old.pending):
            if self.owners.get(key) == member_id:
                del self.owners[key]


# ------------------------------------------------------------------ records
def metadata_record(group: ConsumerGroup) -> Record:
    return Record(RecordType.CONSUMER_GROUP_METADATA, group.key, group.metadata_value())


def metadata_tombstone(org_id: str, group_id: str) -> Record:
    return Record(RecordType.CONSUMER_GROUP_METADATA, (org_id, group_id), None)


def member_record(group: ConsumerGroup, member: ConsumerMember) -> Record:
    return Record(RecordType.CONSUMER_GROUP_MEMBER, (group.org_id, group.group_id, member.member_id), member.value())


def member_tombstone(group: ConsumerGroup, member_id: str) -> Record:
    return Record(RecordType.CONSUMER_GROUP_MEMBER, (group.org_id, group.group_id, member_id), None)


def target_record(group: ConsumerGroup, member_id: str, assignment: Assignment) -> Record:
    return Record(RecordType.CONSUMER_GROUP_TARGET, (group.org_id, group.group_id, member_id),
                  pack_assignment(assignment))


def target_tombstone(group: ConsumerGroup, member_id: str) -> Record:
    return Record(RecordType.CONSUMER_GROUP_TARGET, (group.org_id, group.group_id, member_id), None)
