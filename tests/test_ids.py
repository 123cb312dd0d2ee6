"""Routing values are pinned: a change here would silently move every group."""

from rafka import ids


def test_stable_hash_is_pinned() -> None:
    assert ids.stable_hash("default", "g1") == 13951198211773784332
    assert ids.coordinator_partition("default", "g1") == 12
    assert ids.stable_hash("") == ids.stable_hash("")


def test_parts_are_length_prefixed() -> None:
    assert ids.stable_hash("ab", "c") != ids.stable_hash("a", "bc")


def test_org_changes_the_partition_space() -> None:
    parts = {ids.coordinator_partition(org, "orders") for org in ("a", "b", "c", "d", "e", "f")}
    assert len(parts) > 1


def test_partitions_map_onto_shards_whole() -> None:
    for shards in (1, 2, 3, 8):
        owners = [ids.shard_for_partition(p, shards) for p in range(64)]
        assert set(owners) == set(range(shards))
