"""Server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

How this works: an assignor gets every member's subscribed topic ids, the
partition count of each topic and the previous target assignment, and returns
the new target ``{member_id: {topic_id: set(partitions)}}``. Both are
deterministic (members and topics sorted) so replaying the same input gives the
same target.

* ``uniform`` (Kafka's UniformAssignor, simplified): sticky — a member keeps the
  partitions of its previous target it is still subscribed to, the rest go to the
  least loaded eligible member, then partitions move from the most to the least
  loaded eligible member until no move narrows the gap (counts differ by at most
  one among members sharing a subscription).
* ``range`` (Kafka's RangeAssignor): per topic, the subscribed members sorted by
  id get contiguous ranges, the first ``n % m`` one partition more.
"""

from __future__ import annotations

Assignment = dict[str, set[int]]

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)


def assign(
    name: str,
    subscriptions: dict[str, set[str]],
    partitions: dict[str, int],
    previous: dict[str, Assignment],
) -> dict[str, Assignment]:
    """The target assignment of assignor ``name`` (``subscriptions``: member → topic ids)."""
    if name == RANGE:
        return range_assign(subscriptions, partitions)
    return uniform_assign(subscriptions, partitions, previous)


def range_assign(subscriptions: dict[str, set[str]], partitions: dict[str, int]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {m: {} for m in subscriptions}
    for tid in sorted(partitions):
        members = sorted(m for m, topics in subscriptions.items() if tid in topics)
        if not members:
            continue
        n = partitions[tid]
        quota, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            size = quota + (1 if i < extra else 0)
            if size:
                out[m][tid] = set(range(start, start + size))
            start += size
    return out


def uniform_assign(
    subscriptions: dict[str, set[str]], partitions: dict[str, int], previous: dict[str, Assignment],
) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    owner: dict[tuple[str, int], str] = {}
    count = {m: 0 for m in members}
    # 1. stickiness: keep previous partitions that are still valid
    for m in members:
        for tid, parts in sorted((previous.get(m) or {}).items()):
            if tid not in subscriptions[m] or tid not in partitions:
                continue
            for p in sorted(parts):
                if p < partitions[tid] and (tid, p) not in owner:
                    owner[(tid, p)] = m
                    count[m] += 1
    # 2. unassigned partitions go to the least loaded eligible member
    eligible_of: dict[str, list[str]] = {
        tid: [m for m in members if tid in subscriptions[m]] for tid in sorted(partitions)}
    for tid in sorted(partitions):
        eligible = eligible_of[tid]
        if not eligible:
            continue
        for p in range(partitions[tid]):
            if (tid, p) in owner:
                continue
            m = min(eligible, key=lambda x: (count[x], x))
            owner[(tid, p)] = m
            count[m] += 1
    # 3. balance: move partitions (highest first) from the most loaded members to eligible members
    # with at least two fewer, pass after pass, until a pass moves nothing
    owned_by: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
    for key, m in owner.items():
        owned_by[m].append(key)
    moved = True
    while moved:
        moved = False
        for m in sorted(members, key=lambda x: (-count[x], x)):
            kept = []
            for key in sorted(owned_by[m], key=lambda k: (k[0], -k[1])):
                target = min(eligible_of[key[0]], key=lambda x: (count[x], x))
                if count[m] - count[target] > 1:
                    owner[key] = target
                    count[m] -= 1
                    count[target] += 1
                    owned_by[target].append(key)
                    moved = True
                else:
                    kept.append(key)
            owned_by[m] = kept
    out: dict[str, Assignment] = {m: {} for m in members}
    for (tid, p), m in owner.items():
        out[m].setdefault(tid, set()).add(p)
    return out
