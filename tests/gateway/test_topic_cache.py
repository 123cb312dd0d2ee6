"""The gateway's topic metadata cache: what an invalidation forgets."""

from __future__ import annotations

import pytest

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


def test_expired_entries_do_not_pile_up_with_topic_churn() -> None:
    """A long-lived gateway sees topics deleted and created again under new ids."""
    cache = TopicCache(ttl=1)
    for i in range(100_000):  # 100 s of churn, one new topic id every millisecond
        cache._store("o", {"name": f"t{i % 10}", "topic_id": f"id-{i}", "partitions": 1}, now=i / 1000)
    assert len(cache._by_id) <= 4096 and len(cache._by_name) == 10
    assert ("o", "id-99999") in cache._by_id, "live entries stay"


def test_a_zero_ttl_cache_keeps_the_answer_it_just_stored() -> None:
    """--topic-metadata-ttl-ms 0 asks the catalogue every time; a purge must not drop the
    entries of the answer being stored (a by-id lookup reads them right after)."""
    cache = TopicCache(ttl=0)
    for i in range(3000):
        cache._store("o", {"name": f"t{i}", "topic_id": f"id-{i}", "partitions": 1}, now=5.0)
    assert all(("o", f"id-{i}") in cache._by_id for i in range(3000))


def test_fresh_answers_only_when_every_name_is_cached_and_unexpired() -> None:
    """The no-coroutine path known_partitions takes for commits: an expired or missing entry, or
    another organisation's, sends the lookup to the catalogue."""
    import time

    cache = TopicCache(ttl=60)
    now = time.monotonic()
    cache._store("o", {"name": "a", "topic_id": "id-a", "partitions": 2}, now=now)
    cache._store("o", {"name": "old", "topic_id": "id-old", "partitions": 1}, now=now - 61)
    assert cache.fresh("o", ["a"]) == {"a": {"name": "a", "topic_id": "id-a", "partitions": 2}}
    assert cache.fresh("o", ["a", "old"]) is None, "expired"
    assert cache.fresh("o", ["a", "b"]) is None, "never looked up"
    assert cache.fresh("o2", ["a"]) is None, "another organisation's"


def test_commits_go_ahead_unchecked_while_the_catalogue_cannot_answer() -> None:
    """known_partitions refuses partitions the catalogue does not know; a catalogue that
    cannot answer must not stop commits."""
    import asyncio
    from types import SimpleNamespace

    from rafka.gateway.handlers.topics import known_partitions

    class Cache:
        def __init__(self, answer: dict[str, object] | None) -> None:
            self.answer = answer

        def fresh(self, org_id: str, names: list[str]) -> None:
            return None  # nothing cached: known_partitions asks the catalogue

        async def lookup(self, ctx: object, names: list[str], auto_create: bool) -> dict[str, object]:
            if self.answer is None:
                raise ConnectionError("catalogue shard down")
            return self.answer

    topics = [{"name": "a", "partitions": [{"partition_index": 0}, {"partition_index": 3}]},
              {"name": "gone", "partitions": [{"partition_index": 0}]}]
    up = SimpleNamespace(org_id="o", gateway=SimpleNamespace(topic_cache=Cache({"a": {"partitions": 2}, "gone": None})))
    known, refused = asyncio.run(known_partitions(up, topics))  # type: ignore[arg-type]
    assert known == [{"name": "a", "partitions": [{"partition_index": 0}]}]
    assert refused == [{"name": "a", "partitions": [{"partition_index": 3, "error_code": 3}]},
                       {"name": "gone", "partitions": [{"partition_index": 0, "error_code": 3}]}]
    down = SimpleNamespace(org_id="o", gateway=SimpleNamespace(topic_cache=Cache(None)))
    assert asyncio.run(known_partitions(down, topics)) == (topics, [])  # type: ignore[arg-type]


def test_the_last_listing_survives_invalidation_and_purges_and_learns_deletions() -> None:
    """What Metadata for every topic answers while the catalogue's shard is down: the last full
    listing, kept current by later lookups, not emptied by an invalidation or a purge (an empty
    answer makes pattern subscribers drop their partitions)."""
    cache = TopicCache(ttl=0)
    assert cache.last_known("o", None) is None, "no listing yet: nothing to repeat"
    cache.listed("o", [{"name": f"t{i}", "topic_id": f"id-{i}", "partitions": 1} for i in range(600)])
    cache.invalidate("o")
    for i in range(5000):  # another organisation's churn purges every expired entry
        cache._store("p", {"name": f"x{i}", "topic_id": f"px-{i}", "partitions": 1}, now=10.0 + i)
    assert len(cache.last_known("o", None) or []) == 600
    assert [t["name"] for t in cache.last_known("o", ["t5", "t7"]) or []] == ["t5", "t7"]
    assert cache.last_known("o", ["t5", "never"]) is None, "a name never seen is not made up"
    cache._store("o", {"name": "t5", "topic_id": None, "partitions": 0, "error_code": 3}, now=20_000.0)
    cache._store("o", {"name": "new", "topic_id": "id-new", "partitions": 2}, now=20_000.0)
    names = {t["name"] for t in cache.last_known("o", None) or []}
    assert "t5" not in names and "new" in names and len(names) == 600
    cache.listed("o", [{"name": "t1", "topic_id": "id-1", "partitions": 1}])  # the rest deleted elsewhere
    assert [t["name"] for t in cache.last_known("o", None) or []] == ["t1"]
    assert ("o", "id-2") not in cache._by_id and ("o", "t2") not in cache._by_name


def test_ids_cost_one_listing_per_request_and_unknown_ones_none_for_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    """OffsetCommit/OffsetFetch v10 and Fetch v13+ name topics by id. Ids without a fresh entry are
    looked up together, and an id the listing lacks (a deleted topic's, which a consumer that
    missed the deletion names in every commit and fetch) is not listed again for ``ttl``; while
    the catalogue cannot answer, the last listing does."""
    import asyncio
    from types import SimpleNamespace

    from rafka.gateway.handlers import topics as handlers
    from rafka.gateway.router import ShardUnavailable

    listing = [{"name": "a", "topic_id": "id-a", "partitions": 1}, {"name": "b", "topic_id": "id-b", "partitions": 2}]
    calls: list[object] = []
    down = False

    async def catalog_call(ctx: object, op: object, payload: dict[str, object]) -> dict[str, object]:
        calls.append(payload)
        if down:
            raise ShardUnavailable("catalogue shard down")
        return {"topics": listing}

    async def passthrough(aw: object) -> object:
        return await aw  # type: ignore[misc]

    monkeypatch.setattr(handlers, "catalog_call", catalog_call)
    cache = TopicCache(ttl=60)
    ctx = SimpleNamespace(org_id="o", before_op=passthrough)
    got = asyncio.run(cache.by_ids(ctx, ["id-a", "id-x", "id-y", "id-a"]))  # type: ignore[arg-type]
    assert got == {"id-a": listing[0], "id-x": None, "id-y": None} and len(calls) == 1
    assert asyncio.run(cache.by_ids(ctx, ["id-y", "id-b", "id-x"]))["id-b"] == listing[1]  # type: ignore[arg-type]
    assert len(calls) == 1, "known and known-unknown ids ask nothing"
    down = True
    cache = TopicCache(ttl=0)
    with pytest.raises(ShardUnavailable):
        asyncio.run(cache.by_ids(ctx, ["id-a"]))  # type: ignore[arg-type]
    cache.listed("o", listing)
    got = asyncio.run(cache.by_ids(ctx, ["id-b", "id-z"]))  # type: ignore[arg-type]
    assert got["id-b"] is not None and got["id-b"]["name"] == "b" and "confirmed_at" in got["id-b"]
    assert got["id-z"] is None


def test_an_offset_fetch_v10_of_every_topic_leaves_out_topics_that_no_longer_exist() -> None:
    import asyncio
    import uuid
    from types import SimpleNamespace

    from rafka.gateway.handlers.groups import _with_topic_ids

    class Cache:
        async def lookup(self, ctx: object, names: list[str], auto_create: bool) -> dict[str, object]:
            return {"kept": {"name": "kept", "topic_id": str(uuid.UUID(int=7))}, "gone": None}

    ctx = SimpleNamespace(org_id="o", gateway=SimpleNamespace(topic_cache=Cache()))
    answer = [{"name": "kept", "partitions": []}, {"name": "gone", "partitions": []}]
    assert asyncio.run(_with_topic_ids(ctx, answer, None)) == [  # type: ignore[arg-type]
        {"name": "kept", "partitions": [], "topic_id": uuid.UUID(int=7)}]
