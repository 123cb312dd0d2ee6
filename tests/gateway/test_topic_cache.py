"""The gateway's topic metadata cache: what an invalidation forgets."""

from __future__ import annotations

from rafka.gateway.handlers.topics import TopicCache


def test_invalidating_some_names_keeps_the_others_and_other_orgs() -> None:
    cache = TopicCache(ttl=60)
    for org, name, tid in (("o1", "a", "id-a"), ("o1", "b", "id-b"), ("o2", "a", "id-a2")):
        cache._store(org, {"name": name, "topic_id": tid, "partitions": 1}, now=0.0)
    cache.invalidate("o1", {"a"})
    assert set(cache._by_name) == {("o1", "b"), ("o2", "a")}
    assert set(cache._by_id) == {("o1", "id-b"), ("o2", "id-a2")}
    cache.invalidate("o1")
    assert set(cache._by_name) == {("o2", "a")} and set(cache._by_id) == {("o2", "id-a2")}
