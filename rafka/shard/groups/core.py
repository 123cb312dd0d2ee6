"""Shared state of the group coordinator: config, timer port, groups, offsets, ids.

How this works: ``CoordinatorCore`` owns everything the handler mixins
(``join``, ``membership``, ``offsets``, ``admin``) share — the config, the
``Timer`` the runtime provides, the classic groups keyed by ``(org, group)``,
the ``OffsetStore`` and the id minting functions — plus small helpers to look
groups up and to (re)arm per-member session timers. Time only ever arrives as a
``now_ms`` argument; nothing here reads a clock, sleeps or starts a thread.

Timer keys are ``repr`` of tuples such as ``("hb", org, group, member)`` so no
two groups or orgs can collide. A timer callback receives ``now_ms`` and returns
the records to write, exactly like a handler.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

from ulid import ULID

from rafka.shard.groups.classic import ClassicGroup, ClassicGroupMember
from rafka.shard.groups.offsets_store import OffsetStore
from rafka.shard.records import Record

log = logging.getLogger("rafka.shard.groups")

Respond = Callable[[dict[str, Any]], None]
TimerCallback = Callable[[int], list[Record]]


@dataclass
class GroupConfig:
    """Coordinator settings (Kafka's ``group.*`` / ``offsets.*`` broker configs)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 0
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    new_member_join_timeout_ms: int = 300_000  # group.classic.new.member.join.timeout.ms
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    # KIP-848 consumer groups (group.consumer.*)
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    consumer_min_session_timeout_ms: int = 45_000  # group.consumer.min.session.timeout.ms (bounds a group's
    consumer_max_session_timeout_ms: int = 60_000  # group.consumer.max.session.timeout.ms  own configs)
    consumer_min_heartbeat_interval_ms: int = 5_000  # group.consumer.min.heartbeat.interval.ms
    consumer_max_heartbeat_interval_ms: int = 15_000  # group.consumer.max.heartbeat.interval.ms
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors (first = default)


TimerKey = Hashable
"""A timer's key: a tuple naming what it times (the kind first, then the ids), or a name.
A tuple costs a twentieth of a string made of its parts, and a heartbeat makes one per call."""


class Timer(Protocol):
    """The runtime's timer: events on the shard's loop, never threads."""

    def schedule(self, key: TimerKey, delay_ms: int, callback: TimerCallback) -> None:
        """Run ``callback(now_ms)`` after ``delay_ms``, replacing any timer with the same key;
        the records it returns are written like a handler's."""

    def cancel(self, key: TimerKey) -> None:
        """Forget the timer with ``key`` if any."""


def mint_group_uid(now_ms: int) -> str:
    """A new ``cgp_<ULID>`` group id (lower-case), its time part taken from ``now_ms``."""
    return "cgp_" + str(ULID.from_timestamp(now_ms / 1000)).lower()


def heartbeat_key(org_id: str, group_id: str, member_id: str) -> TimerKey:
    return ("hb", org_id, group_id, member_id)


def join_key(org_id: str, group_id: str) -> TimerKey:
    return ("join", org_id, group_id)


def sync_key(org_id: str, group_id: str) -> TimerKey:
    return ("sync", org_id, group_id)


OFFSETS_EXPIRATION_KEY: TimerKey = ("offsets-expiration",)


class CoordinatorCore:
    """State and helpers shared by the handler mixins of ``GroupCoordinator``."""

    def __init__(
        self, config: GroupConfig, timer: Timer, *,
        new_member_uuid: Callable[[], str] | None = None,
        new_group_uid: Callable[[int], str] | None = None,
    ) -> None:
        self.config = config
        self.timer = timer
        self._new_member_uuid = new_member_uuid or (lambda: str(uuid.uuid4()))
        self._new_group_uid = new_group_uid or mint_group_uid
        self.groups: dict[tuple[str, str], ClassicGroup] = {}
        self.offsets = OffsetStore()
        self.loading = True
        self.completed_rebalances = 0
        self.expired_offsets = 0
        # Observer of coordinator events, for telemetry at the edge: called as
        # on_event(name, attributes) with "rebalance-complete" (join phase done: generation_id,
        # leader_id) and "rebalance-stable" (assignment delivered: duration_ms). Never mutates state.
        self.on_event: Callable[[str, dict[str, Any]], None] | None = None
        self._rebalance_started: dict[tuple[str, str], int] = {}
        # The KIP-848 coordinator of the same shard (rafka.shard.groups.consumer), if any: the
        # classic handlers ask it whether a group id belongs to a consumer group.
        self.consumer: Any = None
        # Open transactions' offsets (set by rafka.shard.txn.install): whether one holds an offset of
        # (org, group, topic, partition), and whether one holds any of (org, group)'s.
        self.txn_pending: Callable[[str, str, str, int], bool] = lambda _org, _group, _topic, _partition: False
        self.txn_open: Callable[[str, str], bool] = lambda _org, _group: False
        # and the tombstones that delete the open transactions' offsets of (org, group), of the
        # given (topic, partition)s only unless None
        self.txn_cancel: Callable[[str, str, set[tuple[str, int]] | None], list[Record]] = lambda *_: []

    def emit(self, name: str, **attrs: Any) -> None:
        """Tell the observer (if any) about a coordinator event."""
        if self.on_event is not None:
            self.on_event(name, attrs)

    # --------------------------------------------------------------- loading
    def on_loaded(self, now_ms: int) -> None:
        """Called by the runtime once a WAL has been replayed: hand the groups it rebuilt
        to the live path (arming their members' session timers) and start the periodic
        offset expiration. May be called again after loading more WALs."""
        self.loading = False
        for group in list(self.groups.values()):
            if group.live:
                continue
            group.live = True
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)
            if len(group.members) > self.config.max_size and group.can_rebalance():
                # the max size was lowered: give the members a chance to commit and rejoin
                self._prepare_rebalance(group, now_ms)  # type: ignore[attr-defined]
        self._schedule_offsets_expiration()

    def _ensure_loaded(self, now_ms: int) -> None:
        if self.loading:
            self.on_loaded(now_ms)

    def _schedule_offsets_expiration(self) -> None:
        def run(now_ms: int) -> list[Record]:
            records = self.expire_offsets(now_ms)  # type: ignore[attr-defined]
            self._schedule_offsets_expiration()
            return records

        self.timer.schedule(OFFSETS_EXPIRATION_KEY, self.config.offsets_retention_check_interval_ms, run)

    # ---------------------------------------------------------------- lookup
    def _group(self, org_id: str, group_id: str) -> ClassicGroup | None:
        """The group, now owned by the live path (replay will no longer rebuild it)."""
        group = self.groups.get((org_id, group_id))
        if group is not None:
            group.live = True
        return group

    # ---------------------------------------------------------------- timers
    def _reschedule_heartbeat(
        self, group: ClassicGroup, member: ClassicGroupMember, timeout_ms: int | None = None,
    ) -> None:
        """(Re)arm the member's session expiry (Kafka's rescheduleClassicGroupMemberHeartbeat)."""
        org_id, group_id, member_id = group.org_id, group.group_id, member.member_id
        delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self.timer.schedule(
            heartbeat_key(org_id, group_id, member_id), delay,
            lambda now_ms: self._expire_heartbeat(org_id, group_id, member_id, now_ms),  # type: ignore[attr-defined]
        )

    def _cancel_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        self.timer.cancel(heartbeat_key(group.org_id, group.group_id, member_id))

    def _cancel_group_timers(self, group: ClassicGroup) -> None:
        """Cancel every timer of ``group`` (it is being deleted)."""
        self.timer.cancel(join_key(group.org_id, group.group_id))
        self.timer.cancel(sync_key(group.org_id, group.group_id))
        for member_id in list(group.members) + list(group.pending_join_members):
            self._cancel_heartbeat(group, member_id)
