"""A connection's requests reach the shards in the order they were sent, as Kafka handles a
connection's requests one at a time: a request that waits for a topic lookup before it can
send its op holds the requests behind it, which would otherwise find the topic cache fresh
(another connection's lookup refilled it) and send their ops first — an older commit then
overwrites a newer one, an older batch lands after a newer one."""

from __future__ import annotations

import asyncio
from typing import Any

from rafka.gateway.inline import ReplyFuture
from rafka.gateway.router import ShardUnavailable
from rafka.protocol.records import SimpleRecord, build_batch
from rafka.rail import Op
from tests.gateway.harness import Driver, FakeRouter, decode_response, encode_request, make_gateway, split_frames
from tests.gateway.test_reply_path import TOPIC, commit

LISTING = {"topics": [{"name": TOPIC, "partitions": 1, "topic_id": None, "error_code": 0}]}
COMMITTED = {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "error_code": 0}]}]}


class AnsweredByTheTest(FakeRouter):
    """Every call, topic lookups included, waits until the test answers it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[Any, dict[str, Any], ReplyFuture]] = []

    def is_alive(self, shard: int) -> bool:
        return True

    def call(self, shard: int, op: Any, org_id: str, payload: Any, trace: str | None = None) -> asyncio.Future[Any]:
        fut = ReplyFuture(asyncio.get_running_loop())
        self.sent.append((op, payload, fut))
        return fut

    def pending(self, op: Op) -> list[tuple[dict[str, Any], ReplyFuture]]:
        return [(p, f) for o, p, f in self.sent if o == op and not f.done()]

    def commits(self) -> list[int]:
        return [p["topics"][0]["partitions"][0]["committed_offset"] for o, p, _f in self.sent if o == Op.OFFSET_COMMIT]


def _two_connections() -> tuple[Any, AnsweredByTheTest, Driver, Driver]:
    """A gateway whose calls the test answers, and two client connections to it: the first
    refills the topic cache while the second's request waits for its own lookup."""
    gw = make_gateway()
    router = gw.router = AnsweredByTheTest()
    router.on_replies = gw.write_due
    return gw, router, Driver(gw), Driver(gw)


def _client_commit_waits(router: AnsweredByTheTest, other: Driver, client: Driver) -> ReplyFuture:
    """The other connection's lookup refills the cache while the client's commit (offset 10) still
    waits for its own, which is returned."""
    other.conn.data_received(commit(1, 5, group="other"))  # the cache is empty: a lookup
    client.conn.data_received(commit(1, 10))  # another lookup, answered after the first
    lookups = router.pending(Op.LIST_TOPICS)
    assert len(lookups) == 2 and router.commits() == []
    lookups[0][1].resolve(LISTING)
    assert router.commits() == [5]
    return lookups[1][1]


async def _answer_commits(gw: Any, router: AnsweredByTheTest, client: Driver) -> list[int]:
    """Answer every commit sent; the correlation ids of the responses the client got, in order."""
    for _p, fut in router.pending(Op.OFFSET_COMMIT):
        fut.resolve(COMMITTED)
    gw.write_due()
    await client.settle()
    return [decode_response(f, 8, 9)["_correlation_id"] for f in split_frames(bytes(client.transport.out))]


async def _passes(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_commit_waiting_for_its_topic_lookup_is_not_overtaken_by_the_next_one() -> None:
    async def main() -> None:
        gw, router, other, client = _two_connections()
        lookup = _client_commit_waits(router, other, client)
        client.conn.data_received(commit(2, 20))  # would find the cache fresh and go at once
        await _passes()
        assert router.commits() == [5], "the later commit is held while the earlier one waits"

        lookup.resolve(LISTING)
        await _passes()
        assert router.commits() == [5, 10, 20], "the client's commits reach the shard in the order sent"
        assert await _answer_commits(gw, router, client) == [1, 2]
        assert not client.transport.closed

    asyncio.run(main())


def test_a_run_that_waits_holds_the_frames_after_it_in_the_same_read() -> None:
    async def main() -> None:
        gw, router, other, client = _two_connections()
        other.conn.data_received(commit(1, 5, group="other"))
        # a run of two commits, then a commit of another group and one more of the first: the
        # run starts (and waits) when the third frame arrives; the frames after it must wait too
        client.conn.data_received(commit(1, 10) + commit(2, 11) + commit(3, 50, group="g2") + commit(4, 12))
        lookups = router.pending(Op.LIST_TOPICS)
        assert len(lookups) == 2
        lookups[0][1].resolve(LISTING)
        await _passes()
        assert router.commits() == [5], "nothing of the client's goes before its first run"
        lookups[1][1].resolve(LISTING)
        await _passes()
        assert router.commits() == [5, 11, 50, 12]
        assert await _answer_commits(gw, router, client) == [1, 2, 3, 4]

    asyncio.run(main())


def test_a_lookup_that_fails_still_keeps_the_order() -> None:
    """A failed lookup resumes its request a loop pass later (a catalogue shard that went down):
    the commit behind it must not go first meanwhile."""

    async def main() -> None:
        _gw, router, other, client = _two_connections()
        lookup = _client_commit_waits(router, other, client)
        lookup.set_exception(ShardUnavailable("catalogue shard down"))  # steps its request next pass
        client.conn.data_received(commit(2, 20))
        assert router.commits() == [5]
        await _passes()
        assert router.commits() == [5, 10, 20], "the commit goes ahead unchecked, still before the next"

    asyncio.run(main())


def test_a_connection_closed_while_a_request_waits_before_its_op_drops_what_it_held() -> None:
    async def main() -> None:
        _gw, router, other, client = _two_connections()
        lookup = _client_commit_waits(router, other, client)
        client.conn.data_received(commit(2, 20))
        client.transport.close()
        await _passes()
        assert lookup.cancelled(), "the waiting request was cancelled with its connection"
        assert client.conn.ordering.waiting == 0
        await _passes()
        assert router.commits() == [5], "nothing of the closed connection's is sent"

    asyncio.run(main())


def test_a_produce_waiting_for_its_topic_lookup_is_not_overtaken() -> None:
    """The same for Produce: a batch sent later must not be appended first."""

    async def main() -> None:
        _gw, router, other, client = _two_connections()

        def produce(cid: int, value: bytes) -> bytes:
            return encode_request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": 0, "records": build_batch([SimpleRecord(None, value, 1000)])}]}]},
                correlation_id=cid)

        other.conn.data_received(produce(1, b"other"))
        client.conn.data_received(produce(1, b"first"))
        lookups = router.pending(Op.LIST_TOPICS)
        assert len(lookups) == 2
        lookups[0][1].resolve(LISTING)
        client.conn.data_received(produce(2, b"second"))
        await _passes()
        lookups[1][1].resolve(LISTING)
        await _passes()
        appended = [bytes(p["partitions"][0]["records"]) for o, p, _f in router.sent if o == Op.PRODUCE]
        assert [next(v for v in (b"other", b"first", b"second") if v in batch) for batch in appended] == \
            [b"other", b"first", b"second"], "the client's batches are appended in the order sent"

    asyncio.run(main())
