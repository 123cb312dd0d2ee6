"""Classic group and member data (Kafka's ``ClassicGroup`` / ``ClassicGroupMember``).

How this works: a ``ClassicGroup`` holds the membership of one (org, group):
members in join order, the static-member map (instance id -> member id),
members that were handed an id but have not joined yet (pending join), members
that still owe a SyncGroup (pending sync), a count of members parked in
JoinGroup, and per-protocol vote counts. A member parked in JoinGroup or
SyncGroup holds the ``respond`` callable of that request; ``complete_join_future``
/ ``complete_sync_future`` answer it exactly once and clear it. The group
never talks to timers or the WAL: ``GroupCoordinator`` drives it.

Membership and parked requests are soft state changed by the coordinator's
handlers, as in Kafka; the durable image of a group is its GROUP_METADATA record
(see ``record_helpers``), rebuilt by ``ClassicGroup.from_record`` on recovery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rafka.shard.groups.errors import Errors
from rafka.shard.groups.record_helpers import CONSUMER_PROTOCOL_TYPE, parse_subscription_topics
from rafka.shard.groups.state import ClassicGroupState, check_transition

Respond = Callable[[dict[str, Any]], None]
Protocols = list[tuple[str, bytes]]

S = ClassicGroupState


class ClassicGroupMember:
    """One member of a classic group and its parked JoinGroup/SyncGroup, if any."""

    __slots__ = (
        "assignment",
        "awaiting_join",
        "awaiting_sync",
        "client_host",
        "client_id",
        "group_instance_id",
        "is_new",
        "member_id",
        "protocol_type",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
    )

    def __init__(
        self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
        rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str, protocols: Protocols,
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = assignment
        self.awaiting_join: Respond | None = None
        self.awaiting_sync: Respond | None = None
        self.is_new = False

    @property
    def is_static(self) -> bool:
        """True if the member uses static membership (has a group instance id)."""
        return self.group_instance_id is not None

    def protocol_names(self) -> set[str]:
        """The names of the protocols the member supports."""
        return {name for name, _ in self.protocols}

    def metadata(self, protocol_name: str | None) -> bytes:
        """The member's metadata for ``protocol_name`` (empty if it does not support it)."""
        for name, meta in self.protocols:
            if name == protocol_name:
                return meta
        return b""

    def matches(self, protocols: Protocols) -> bool:
        """True if ``protocols`` equals the member's protocols (names, metadata and order)."""
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """A member parked in a join/sync counts as alive, unless it is new (Kafka)."""
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None


def join_error(member_id: str, error: int) -> dict[str, Any]:
    """A JoinGroup response carrying only ``error`` for ``member_id``."""
    return {"error_code": error, "generation_id": -1, "protocol_type": None, "protocol_name": None,
            "leader": "", "skip_assignment": False, "member_id": member_id, "members": []}


def sync_error(error: int) -> dict[str, Any]:
    """A SyncGroup response carrying only ``error``."""
    return {"error_code": error, "protocol_type": None, "protocol_name": None, "assignment": b""}


class ClassicGroup:
    """The membership and rebalance state of one classic group."""

    def __init__(
        self, org_id: str, group_id: str, uid: str, *, state: ClassicGroupState = S.EMPTY,
        state_ts: int | None = None, generation_id: int = 0, protocol_type: str | None = None,
        protocol_name: str | None = None, leader_id: str | None = None,
    ) -> None:
        self.org_id = org_id
        self.group_id = group_id
        self.uid = uid
        self.state = state
        self.previous_state = S.DEAD
        self.state_ts = state_ts
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.members: dict[str, ClassicGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.pending_join_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}
        self.subscribed_topics: set[str] | None = None
        self.new_member_added = False
        self.durable: dict[str, Any] | None = None  # the last GROUP_METADATA value written for it
        self.live = False  # True once handlers own it; until then replay may rebuild it

    @property
    def key(self) -> tuple[str, str]:
        """``(org_id, group_id)``."""
        return (self.org_id, self.group_id)

    # ----------------------------------------------------------------- state
    def transition_to(self, target: ClassicGroupState, now_ms: int | None) -> None:
        """Move to ``target`` (checked against ``VALID_PREVIOUS``) and stamp the time."""
        check_transition(self.group_id, self.state, target)
        self.previous_state = self.state
        self.state = target
        if now_ms is not None:
            self.state_ts = now_ms

    def can_rebalance(self) -> bool:
        """True if the group may move to PreparingRebalance."""
        return self.state in (S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    # --------------------------------------------------------------- members
    def _count_protocols(self, member: ClassicGroupMember, delta: int) -> None:
        for name in member.protocol_names():
            count = self.supported_protocols.get(name, 0) + delta
            if count:
                self.supported_protocols[name] = count
            else:
                self.supported_protocols.pop(name, None)

    def add(self, member: ClassicGroupMember, respond: Respond | None = None, *, check: bool = True) -> None:
        """Add ``member`` (parked on ``respond`` if given); the first member sets the protocol type."""
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"static member {member.group_instance_id} is already in {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if check:
            if self.protocol_type != member.protocol_type:
                raise ValueError("the group and member protocol types must be the same")
            if not self.supports_protocols(member.protocol_type, member.protocol_names()):
                raise ValueError("none of the member's protocols is supported by the group")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, +1)
        member.awaiting_join = respond
        if respond is not None:
            self.num_awaiting_join += 1
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        """Remove a member (or a pending member); a new leader is the first remaining member.

        A request still parked for the member is answered UNKNOWN_MEMBER_ID so every
        request is answered exactly once.
        """
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.awaiting_join is not None:
                self.num_awaiting_join -= 1
                respond, member.awaiting_join = member.awaiting_join, None
                respond(join_error("", Errors.UNKNOWN_MEMBER_ID))
            if member.awaiting_sync is not None:
                respond, member.awaiting_sync = member.awaiting_sync, None
                respond(sync_error(Errors.UNKNOWN_MEMBER_ID))
            iid = member.group_instance_id
            if iid is not None and self.static_members.get(iid) == member_id:
                del self.static_members[iid]
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(
        self, member: ClassicGroupMember, protocols: Protocols, rebalance_timeout_ms: int,
        session_timeout_ms: int, respond: Respond | None,
    ) -> None:
        """Replace a member's protocols and timeouts and park it on ``respond``.

        A JoinGroup the member already had parked is superseded: it is answered
        REBALANCE_IN_PROGRESS (the client, if still there, simply joins again).
        """
        self._count_protocols(member, -1)
        member.protocols = protocols
        self._count_protocols(member, +1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        old = member.awaiting_join
        if respond is not None and old is None:
            self.num_awaiting_join += 1
        elif respond is None and old is not None:
            self.num_awaiting_join -= 1
        member.awaiting_join = respond
        if old is not None and respond is not None:
            old(join_error(member.member_id, Errors.REBALANCE_IN_PROGRESS))

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> ClassicGroupMember:
        """[Static members] Give the member of ``instance_id`` a new member id, keeping the rest.

        Requests parked under the old id are answered FENCED_INSTANCE_ID.
        """
        old = self.members.pop(old_member_id)
        self.complete_join_future(old, join_error(old_member_id, Errors.FENCED_INSTANCE_ID))
        self.complete_sync_future(old, sync_error(Errors.FENCED_INSTANCE_ID))
        new = ClassicGroupMember(
            new_member_id, old.group_instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
            old.session_timeout_ms, old.protocol_type, old.protocols, old.assignment,
        )
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        return new

    def complete_join_future(self, member: ClassicGroupMember, response: dict[str, Any]) -> bool:
        """Answer the member's parked JoinGroup, if any; True if one was answered."""
        respond = member.awaiting_join
        if respond is None:
            return False
        member.awaiting_join = None
        self.num_awaiting_join -= 1
        respond(response)
        return True

    def complete_sync_future(self, member: ClassicGroupMember, response: dict[str, Any]) -> bool:
        """Answer the member's parked SyncGroup, if any; True if one was answered."""
        respond = member.awaiting_sync
        if respond is None:
            return False
        member.awaiting_sync = None
        respond(response)
        return True

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        """Remember a member id handed out with MEMBER_ID_REQUIRED."""
        self.pending_join_members.add(member_id)

    def remove_pending_sync_member(self, member_id: str) -> None:
        self.pending_sync_members.discard(member_id)

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def has_static_member(self, instance_id: str | None) -> bool:
        return instance_id is not None and instance_id in self.static_members

    def static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        """Members that have not sent a JoinGroup during this join phase."""
        return [m for m in self.members.values() if m.awaiting_join is None]

    def has_all_members_joined(self) -> bool:
        """Every member is parked in JoinGroup and no handed-out member id is outstanding."""
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members (0 if none)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick the first member that did.

        False if there is no leader or no member rejoined.
        """
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    # ------------------------------------------------------------ validation
    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        """Kafka's ``validateMember``: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID or NONE."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return Errors.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return Errors.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return Errors.UNKNOWN_MEMBER_ID
        return Errors.NONE

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_id: int,
                               transactional: bool = False) -> int:
        """Kafka's ``ClassicGroup.validateOffsetCommit``; an error code or NONE. A transactional
        commit need not name a member (TxnOffsetCommit v0-2 cannot) and is not held back by a
        rebalance: the group's state is not enforced for it."""
        if self.state is S.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state is S.EMPTY:
            return Errors.NONE  # admin client or a consumer not using group management
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self.validate_member(member_id, instance_id)
            if error:
                return error
            if generation_id != self.generation_id:
                return Errors.ILLEGAL_GENERATION
        elif not transactional and self.state is not S.EMPTY:
            return Errors.UNKNOWN_MEMBER_ID
        if not transactional and self.state is S.COMPLETING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    # ------------------------------------------------------------- protocols
    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """True if a member with this protocol type and protocol names may join."""
        if self.state is S.EMPTY:
            return bool(protocol_type) and bool(names)
        size = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(n, 0) == size for n in names
        )

    def select_protocol(self) -> str:
        """The protocol every member supports with the most votes. Kafka counts the votes in a
        java.util.HashMap and takes the first maximum in its iteration order, so a tie goes to
        the same protocol whichever member joined first; ``java_hash_order`` gives that order.
        (Two names in one bucket keep the order of their first votes: join order here, Kafka's
        member-id order there; the usual assignor names are in distinct buckets.)"""
        size = len(self.members)
        candidates = {name for name, count in self.supported_protocols.items() if count == size}
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(java_hash_order(list(votes)), key=votes.__getitem__)

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, if the group uses the consumer protocol and it parses."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Known subscriptions decide; unknown ones count as subscribed for consumer groups (Kafka)."""
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_protocol()

    # ------------------------------------------------------------ generation
    def init_next_generation(self, now_ms: int) -> None:
        """Bump the generation, pick the protocol and move to CompletingRebalance (or Empty)."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(S.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(S.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_members(self) -> list[dict[str, Any]]:
        """All members as JoinGroup response members (the leader's view)."""
        return [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "metadata": m.metadata(self.protocol_name)}
            for m in self.members.values()
        ]

    def join_response(self, member_id: str, *, with_members: bool, leader: str | None = None,
                      skip_assignment: bool = False) -> dict[str, Any]:
        """A successful JoinGroup response for the current generation."""
        return {
            "error_code": Errors.NONE, "generation_id": self.generation_id,
            "protocol_type": self.protocol_type, "protocol_name": self.protocol_name,
            "leader": self.leader_id if leader is None else leader, "skip_assignment": skip_assignment,
            "member_id": member_id, "members": self.current_members() if with_members else [],
        }

    # -------------------------------------------------------------- recovery
    @classmethod
    def from_record(cls, org_id: str, group_id: str, value: dict[str, Any]) -> ClassicGroup:
        """Rebuild a group from a GROUP_METADATA value: Stable with its members, or Empty."""
        members = value.get("members") or []
        state_ts = value.get("state_ts", -1)
        group = cls(
            org_id, group_id, value.get("uid") or "",
            state=S.STABLE if members else S.EMPTY,
            state_ts=None if state_ts is None or state_ts < 0 else state_ts,
            generation_id=value.get("generation", 0),
            protocol_type=value.get("protocol_type") or None,
            protocol_name=value.get("protocol"),
            leader_id=value.get("leader"),
        )
        for m in members:
            rebalance_timeout = m.get("rebalance_timeout", -1)
            if rebalance_timeout is None or rebalance_timeout < 0:
                rebalance_timeout = m["session_timeout"]
            member = ClassicGroupMember(
                m["member_id"], m.get("group_instance_id"), m.get("client_id", ""), m.get("client_host", ""),
                rebalance_timeout, m["session_timeout"], group.protocol_type or "",
                [(name, bytes(meta)) for name, meta in m.get("protocols", [])], bytes(m.get("assignment") or b""),
            )
            group.add(member, check=False)
        if members:
            group.leader_id = value.get("leader")
        group.subscribed_topics = group.compute_subscribed_topics()
        group.durable = value
        return group


def java_hash_order(keys: list[str]) -> list[str]:
    """``keys`` (in insertion order) in the order a java.util.HashMap of them iterates: by bucket,
    ``(h ^ h >>> 16) & (capacity - 1)`` of String.hashCode, then insertion order within a bucket;
    the capacity starts at 16 and doubles while the keys exceed 3/4 of it."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        units = key.encode("utf-16-be")
        h = 0
        for i in range(0, len(units), 2):
            h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)  # stable: insertion order within a bucket
