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


def test_cluster_ids_are_kafka_uuids_a_command_line_can_take() -> None:
    """As Kafka's Uuid.randomUuid: 22 characters of URL-safe base64, never the reserved ids nor one
    starting with '-' (which a command line takes for a flag)."""
    made = {ids.new_cluster_id() for _ in range(5000)}
    assert len(made) == 5000 and all(ids.is_cluster_id(c) and not c.startswith("-") for c in made)
    assert ids.derived_cluster_id("tcp://a:1", "tcp://b:1") == ids.derived_cluster_id("tcp://a:1", "tcp://b:1")
    assert ids.derived_cluster_id("tcp://a:1") != ids.derived_cluster_id("tcp://b:1")
    assert ids.is_cluster_id("MkU3OEVBNTcwNTJENDM2Qg")
    for bad in ("AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ", "-kU3OEVBNTcwNTJENDM2Qg", "Mk+3OEVBNTcwNTJENDM2Qg",
                "MkU3OEVBNTcwNTJENDM2Qh", "MkU3OEVBNTcwNTJENDM2Q", "rafka-cluster"):
        assert not ids.is_cluster_id(bad), bad
