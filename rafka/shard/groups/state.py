"""The classic group state machine, as data.

How this works: ``ClassicGroupState`` lists the five states of a classic
(JoinGroup/SyncGroup) consumer group, each documented with what the coordinator
does in it (``action``) and what moves it on (``transition``), exactly as Kafka's
``ClassicGroupState``. ``VALID_PREVIOUS`` maps every state to the states a group
may come from; ``check_transition`` is the one place that enforces it, and
``ClassicGroup.transition_to`` calls it on every move.
"""

from __future__ import annotations

from enum import Enum
from typing import Self


class ClassicGroupState(Enum):
    """States of a classic group; the value is Kafka's display name."""

    def __new__(cls, name: str, doc: str) -> Self:
        member = object.__new__(cls)
        member._value_ = name
        member.__doc__ = doc
        return member

    EMPTY = (
        "Empty",
        """Group has no members but lingers until its offsets expire; also the state
        of "simple" groups that only use Kafka to store offsets.

        action: respond normally to join group from new members
                respond to sync group, heartbeat, leave group with UNKNOWN_MEMBER_ID
                accept offset commits with generation -1 (admin / simple consumers) only
                allow offset fetch requests
        transition: join group from a new member => PREPARING_REBALANCE
                    last offsets removed by expiration / group deleted => DEAD
        """,
    )

    PREPARING_REBALANCE = (
        "PreparingRebalance",
        """Group is waiting for its members to (re)join.

        action: respond to heartbeats and sync group with REBALANCE_IN_PROGRESS
                remove member on leave group request
                park join group requests until all expected members have joined
                allow offset commits from the previous generation
                allow offset fetch requests
        transition: some members joined by the rebalance timeout => COMPLETING_REBALANCE
                    all members left the group => EMPTY
                    group is removed => DEAD
        """,
    )

    COMPLETING_REBALANCE = (
        "CompletingRebalance",
        """Group is waiting for the leader's assignment (SyncGroup).

        action: respond to heartbeats normally
                respond to offset commits with REBALANCE_IN_PROGRESS
                park sync group requests from followers until transition to STABLE
                allow offset fetch requests
        transition: sync group with assignment received from leader => STABLE
                    join group from new member or member with new metadata => PREPARING_REBALANCE
                    leave group from existing member => PREPARING_REBALANCE
                    member failure detected => PREPARING_REBALANCE
                    group is removed => DEAD
        """,
    )

    STABLE = (
        "Stable",
        """Group is stable: every member has its assignment.

        action: respond to member heartbeats normally
                respond to sync group from any member with its current assignment
                respond to join group from followers with matching metadata with the
                  current group metadata
                allow offset commits from members of the current generation
                allow offset fetch requests
        transition: member failure detected via heartbeat => PREPARING_REBALANCE
                    leave group from existing member => PREPARING_REBALANCE
                    leader join group received => PREPARING_REBALANCE
                    follower join group with new metadata => PREPARING_REBALANCE
                    group is removed => DEAD
        """,
    )

    DEAD = (
        "Dead",
        """Group has been removed (deleted or expired); its object is no longer reachable.

        action: respond to join group, sync group, heartbeat with COORDINATOR_NOT_AVAILABLE
                respond to offset commit with COORDINATOR_NOT_AVAILABLE
        transition: none (final state)
        """,
    )

    @property
    def lower_name(self) -> str:
        """The lower-case name ListGroups' states filter matches against."""
        return self.value.lower()

    def __str__(self) -> str:
        return self.value


S = ClassicGroupState

VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
}


class IllegalStateTransition(RuntimeError):
    """A group was asked to move to a state its current state cannot reach."""


def check_transition(group_id: str, current: ClassicGroupState, target: ClassicGroupState) -> None:
    """Raise ``IllegalStateTransition`` unless ``current`` -> ``target`` is in ``VALID_PREVIOUS``."""
    if current not in VALID_PREVIOUS[target]:
        allowed = sorted(s.value for s in VALID_PREVIOUS[target])
        raise IllegalStateTransition(
            f"group {group_id!r} must be in one of {allowed} to move to {target.value}, but is {current.value}"
        )


def state_from_name(name: str) -> ClassicGroupState | None:
    """The state whose display name matches ``name`` case-insensitively, else None."""
    lowered = name.lower()
    for state in ClassicGroupState:
        if state.lower_name == lowered:
            return state
    return None
