"""Compact in-memory storage of committed offsets.

How this works: offsets are kept per group as ``{topic: partitions}``. Each
committed partition is ONE ``bytes`` object packing
``offset:i64 | leader_epoch:i32 | commit_ts:i64 | metadata (UTF-8)`` — about
53 bytes for empty metadata, with no boxed ints or per-entry tuples. Partitions
of a topic live in a list indexed by partition number (a pointer per slot) while
they are dense, and fall back to a dict for sparse or huge indexes so a hostile
partition number cannot allocate a huge list. The result is ~60 bytes per
committed offset instead of ~165 for a dict of tuples.

An offset committed with its own retention (OffsetCommit v2–4 ``retention_time``)
also has an entry in ``expiring``, ``{group: {(topic, partition): expire_ts}}``; it
is rare, so it lives apart and costs the other offsets nothing.

Only ``GroupCoordinator.replay`` writes here (OFFSET_COMMIT records and their
tombstones); handlers only read. ``count`` is kept up to date so metrics never
walk the store.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

# (committed_offset, leader_epoch, metadata, commit_timestamp_ms)
OffsetEntry = tuple[int, int, str, int]
Partitions = list[bytes | None] | dict[int, bytes]

_HEAD = struct.Struct(">qiq")
_HEAD_SIZE = _HEAD.size
_DENSE_SLACK = 64  # a list may grow to 2 * filled + this many slots


def pack_entry(offset: int, leader_epoch: int, metadata: str, commit_ts: int) -> bytes:
    """Pack one committed offset into its stored form."""
    head = _HEAD.pack(offset, leader_epoch, commit_ts)
    return head + metadata.encode("utf-8") if metadata else head


def unpack_entry(raw: bytes) -> OffsetEntry:
    """``(offset, leader_epoch, metadata, commit_ts)`` from the stored form."""
    offset, epoch, ts = _HEAD.unpack_from(raw)
    return offset, epoch, raw[_HEAD_SIZE:].decode("utf-8") if len(raw) > _HEAD_SIZE else "", ts


def entry_commit_ts(raw: bytes) -> int:
    """The commit timestamp of a stored entry, without decoding the rest."""
    return _HEAD.unpack_from(raw)[2]


class OffsetStore:
    """Committed offsets of every group of one coordinator."""

    __slots__ = ("_groups", "count", "expiring")

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], dict[str, Partitions]] = {}
        self.count = 0
        self.expiring: dict[tuple[str, str], dict[tuple[str, int], int]] = {}

    # ----------------------------------------------------------------- writes
    def put(self, group_key: tuple[str, str], topic: str, partition: int, raw: bytes,
            expire_ts: int | None = None) -> None:
        """Store (or overwrite) one partition's packed entry (see ``pack_entry``) of the group
        ``(org_id, group_id)``, with its own expiry time if it has one; recovery calls this a
        million times, so the common cases (the next partition in order, an overwrite) come first."""
        if expire_ts is not None or self.expiring:
            self.set_expiry(group_key, topic, partition, expire_ts)
        topics = self._groups.get(group_key)
        if topics is None:
            topics = self._groups[group_key] = {}
        parts = topics.get(topic)
        if parts is None:
            parts = topics[topic] = []
        if type(parts) is list:
            size = len(parts)
            if partition == size:  # partitions committed in order
                parts.append(raw)
                self.count += 1
                return
            if 0 <= partition < size:
                if parts[partition] is None:
                    self.count += 1
                parts[partition] = raw
                return
            filled = size - parts.count(None)
            if 0 <= partition < 2 * filled + _DENSE_SLACK:
                parts.extend([None] * (partition - size))
                parts.append(raw)
                self.count += 1
                return
            parts = topics[topic] = {i: e for i, e in enumerate(parts) if e is not None}
        if partition not in parts:
            self.count += 1
        parts[partition] = raw

    def put_run(self, group_key: tuple[str, str], topic: str, first: int, raws: list[bytes]) -> None:
        """Store the entries of partitions ``first``, ``first + 1``, ... of one topic of a group that
        has a stored offset already (recovery's runs): into its dense list in one step when they
        overwrite or extend it and the group has no offset with its own expiry (which these would
        end), else one ``put`` each."""
        parts = self._groups[group_key].get(topic)
        if type(parts) is list and 0 <= first <= len(parts) and group_key not in self.expiring:
            end = first + len(raws)
            replaced = parts[first:end]
            self.count += len(raws) - len(replaced) + replaced.count(None)
            parts[first:end] = raws
            return
        for partition, raw in enumerate(raws, first):
            self.put(group_key, topic, partition, raw)

    def set_expiry(self, group_key: tuple[str, str], topic: str, partition: int, expire_ts: int | None) -> None:
        """Give one stored offset its own expiry time, or (None) take it away."""
        if expire_ts is not None:
            self.expiring.setdefault(group_key, {})[(topic, partition)] = expire_ts
            return
        own = self.expiring.get(group_key)
        if own is not None:
            own.pop((topic, partition), None)
            if not own:
                del self.expiring[group_key]

    def own_expiries(self, group_key: tuple[str, str]) -> dict[tuple[str, int], int]:
        """``{(topic, partition): expire_ts}`` of the group's offsets committed with their own retention."""
        return self.expiring.get(group_key, {})

    def expire_ts(self, org_id: str, group_id: str, topic: str, partition: int) -> int | None:
        """The offset's own expiry time, if it was committed with one."""
        return self.own_expiries((org_id, group_id)).get((topic, partition))

    def delete(self, org_id: str, group_id: str, topic: str, partition: int) -> None:
        """Forget one partition's committed offset (no-op if absent)."""
        if self.expiring:
            self.set_expiry((org_id, group_id), topic, partition, None)
        topics = self._groups.get((org_id, group_id))
        parts = None if topics is None else topics.get(topic)
        if parts is None or topics is None:
            return
        if isinstance(parts, list):
            if not 0 <= partition < len(parts) or parts[partition] is None:
                return
            parts[partition] = None
            while parts and parts[-1] is None:
                parts.pop()
        else:
            if parts.pop(partition, None) is None:
                return
        self.count -= 1
        if not parts:
            del topics[topic]
            if not topics:
                del self._groups[(org_id, group_id)]

    # ------------------------------------------------------------------ reads
    def get(self, org_id: str, group_id: str, topic: str, partition: int) -> OffsetEntry | None:
        """One partition's committed offset, or None."""
        topics = self._groups.get((org_id, group_id))
        parts = None if topics is None else topics.get(topic)
        if parts is None:
            return None
        if isinstance(parts, list):
            raw = parts[partition] if 0 <= partition < len(parts) else None
        else:
            raw = parts.get(partition)
        return None if raw is None else unpack_entry(raw)

    def has_offsets(self, org_id: str, group_id: str) -> bool:
        return (org_id, group_id) in self._groups

    def topics(self, org_id: str, group_id: str) -> list[str]:
        """Topics of a group that have committed offsets, in first-commit order."""
        return list(self._groups.get((org_id, group_id), ()))

    def raw_partitions(self, org_id: str, group_id: str, topic: str) -> Iterator[tuple[int, bytes]]:
        """``(partition, packed entry)`` of one topic of a group (snapshot)."""
        topics = self._groups.get((org_id, group_id))
        parts = None if topics is None else topics.get(topic)
        if parts is None:
            return iter(())
        if isinstance(parts, list):
            return iter([(i, raw) for i, raw in enumerate(parts) if raw is not None])
        return iter(sorted(parts.items()))

    def partitions(self, org_id: str, group_id: str, topic: str) -> Iterator[tuple[int, OffsetEntry]]:
        """``(partition, entry)`` of one topic of a group, by partition."""
        for index, raw in self.raw_partitions(org_id, group_id, topic):
            yield index, unpack_entry(raw)

    def group_keys(self) -> list[tuple[str, str]]:
        """``(org, group)`` of every group that has committed offsets."""
        return list(self._groups)

    def group_count(self) -> int:
        """Number of groups that have at least one committed offset."""
        return len(self._groups)
