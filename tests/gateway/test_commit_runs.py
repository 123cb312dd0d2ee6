"""Runs of OffsetCommits: ``commit_layout`` against kio's encoding for every version served, and
a real ``KafkaConnection`` answering a run with one handler call."""

from __future__ import annotations

import asyncio
import itertools
import random
import struct
import uuid
from typing import Any

import pytest

from rafka import telemetry
from rafka.gateway.commit_runs import CommitRun, commit_layout
from rafka.gateway.router import ShardUnavailable
from rafka.rail import Op
from tests.gateway.harness import Driver, decode_response, encode_request, make_gateway, split_frames
from tests.gateway.test_reply_path import TOPIC, QueueingRouter, commit

VERSIONS = range(2, 11)


def _body(version: int, rng: random.Random, offsets: list[int] | None = None) -> dict[str, Any]:
    topics = []
    n = 0
    for t in range(rng.randint(0, 3)):
        parts = []
        for p in range(rng.randint(0, 3)):
            parts.append({"partition_index": rng.choice([p, 2**31 - 1 - p]),
                          "committed_offset": rng.randint(-1, 2**63 - 1) if offsets is None else offsets[n],
                          "committed_leader_epoch": rng.choice([-1, 0, 7]),
                          "committed_metadata": rng.choice([None, "", "meta", "ünï" * rng.randint(1, 50)])})
            n += 1
        if version >= 10:  # named by id
            topics.append({"topic_id": uuid.UUID(int=rng.getrandbits(128)), "partitions": parts})
        else:
            topics.append({"name": f"topic-{t}-" + "x" * rng.randint(0, 200), "partitions": parts})
    return {"group_id": rng.choice(["g", "group-" + "y" * 300]), "generation_id_or_member_epoch": rng.randint(-1, 9),
            "member_id": rng.choice(["", "m-1"]), "group_instance_id": rng.choice([None, "static-1"]),
            "retention_time_ms": rng.choice([-1, 60_000]), "topics": topics}


def _offsets(body: dict[str, Any]) -> list[int]:
    return [p["committed_offset"] for t in body["topics"] for p in t["partitions"]]


@pytest.mark.parametrize("version", VERSIONS)
def test_layout_finds_every_committed_offset_and_only_them(version: int) -> None:
    rng = random.Random(version)
    for _ in range(200):
        body = _body(version, rng)
        frame = encode_request(8, version, body, correlation_id=rng.randint(0, 2**31 - 1))[4:]
        spans = commit_layout(frame, version)
        assert spans is not None
        holes = [(b, a) for (_a0, b), (a, _b1) in itertools.pairwise(spans)]  # the bytes between spans
        assert holes[0] == (4, 8), "the correlation id is not compared"
        assert [struct.unpack(">q", frame[a:b])[0] for a, b in holes[1:]] == _offsets(body)
        assert all(b - a == 8 for a, b in holes[1:]) and spans[-1][1] == len(frame)

        # the same commit with other offsets and another correlation id joins a run; any other change does not
        run = CommitRun(frame, version)
        again = dict(body, topics=[dict(t, partitions=[dict(p, committed_offset=rng.randint(0, 2**40))
                                                        for p in t["partitions"]]) for t in body["topics"]])
        assert run.matches(encode_request(8, version, again, correlation_id=rng.randint(0, 2**31 - 1))[4:])
        for changed in ({"member_id": body["member_id"] + "z"}, {"generation_id_or_member_epoch": 11},
                        {"group_id": body["group_id"][:-1] + "h"}):
            assert not run.matches(encode_request(8, version, dict(body, **changed))[4:])
        if body["topics"]:  # another topic (by id from v10, by name before)
            renamed = ({"topic_id": uuid.UUID(int=body["topics"][0]["topic_id"].int ^ 1)} if version >= 10
                       else {"name": body["topics"][0]["name"] + "z"})
            other = dict(body, topics=[dict(body["topics"][0], **renamed), *body["topics"][1:]])
            assert not run.matches(encode_request(8, version, other)[4:])
        if body["topics"] and body["topics"][0]["partitions"]:
            first = body["topics"][0]
            for field, value in (("committed_metadata", "other"), ("partition_index", 5), ("committed_leader_epoch", 3)):
                if version < 6 and field == "committed_leader_epoch":
                    continue
                if first["partitions"][0][field] == value:
                    continue
                part = dict(first["partitions"][0], **{field: value})
                other = dict(body, topics=[dict(first, partitions=[part, *first["partitions"][1:]]), *body["topics"][1:]])
                assert not run.matches(encode_request(8, version, other)[4:]), field


@pytest.mark.parametrize("version", VERSIONS)
def test_layout_refuses_what_it_cannot_walk_and_never_raises(version: int) -> None:
    rng = random.Random(100 + version)
    frame = encode_request(8, version, _body(version, rng))[4:]
    assert commit_layout(frame + b"\0", version) is None, "bytes left over"
    for cut in range(len(frame)):
        assert commit_layout(frame[:cut], version) is None
    for _ in range(300):
        junk = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            junk[rng.randrange(8, len(junk))] = rng.randrange(256)
        commit_layout(bytes(junk), version)  # spans or None, never an exception
    if version >= 8:  # a tagged field in the body: the ordinary path decodes it
        assert commit_layout(frame[:-1] + b"\x01\x00\x00", version) is None


def _fetch(correlation_id: int) -> bytes:
    return encode_request(9, 7, {"group_id": "g", "topics": None, "require_stable": False},
                          correlation_id=correlation_id)


OK = {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "error_code": 0}]}]}


async def _warm(d: Driver, router: QueueingRouter) -> None:
    """One commit answered, so the topic cache knows TOPIC (its first lookup is a loop pass away)."""
    d.conn.data_received(commit(0, 0))
    for _ in range(3):
        await asyncio.sleep(0)
    router.sent[0][2].resolve(OK)
    await d.settle()
    router.sent.clear()
    d.transport.out.clear()


def _driver(**options: Any) -> tuple[Driver, QueueingRouter]:
    gw = make_gateway(**options)
    router = gw.router = QueueingRouter()
    router.on_replies = gw.write_due
    return Driver(gw), router


def test_a_run_of_commits_in_one_read_is_one_op_with_the_last_offsets_and_every_request_is_answered() -> None:
    async def main() -> None:
        d, router = _driver()
        await _warm(d, router)
        meter = telemetry.gateway_meter()
        tally = meter.tally("group.offset-commit")
        before = tally.counter._value.get() + tally.count

        d.conn.data_received(b"".join(commit(cid, 100 + cid) for cid in range(1, 6)))
        assert [(op, p["topics"][0]["partitions"][0]["committed_offset"]) for op, p, _f in router.sent] == \
            [(Op.OFFSET_COMMIT, 105)], "one op, carrying the offset that stands after the run"
        router.sent[0][2].resolve({"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "error_code": 22}]}]})
        d.gw.write_due()
        answers = [decode_response(f, 8, 9) for f in split_frames(bytes(d.transport.out))]
        assert [a["_correlation_id"] for a in answers] == [1, 2, 3, 4, 5]
        assert {a["topics"][0]["partitions"][0]["error_code"] for a in answers} == {22}, "each gets the run's answer"
        assert tally.counter._value.get() + tally.count - before == 5, "every request of the run is counted"

    asyncio.run(main())


def test_other_requests_and_other_commits_end_a_run_and_keep_their_order() -> None:
    async def main() -> None:
        d, router = _driver()
        await _warm(d, router)
        d.conn.data_received(commit(1, 11) + commit(2, 12) + _fetch(3) + commit(4, 14) + commit(5, 15, metadata="meta")
                             + commit(6, 16, metadata="meta") + commit(7, 17, version=8))
        sent = [(op, p["topics"][0]["partitions"][0]["committed_offset"] if op == Op.OFFSET_COMMIT else None)
                for op, p, _f in router.sent]
        assert sent == [(Op.OFFSET_COMMIT, 12), (Op.OFFSET_FETCH, None), (Op.OFFSET_COMMIT, 14),
                        (Op.OFFSET_COMMIT, 16), (Op.OFFSET_COMMIT, 17)]
        for op, _p, fut in reversed(router.sent):  # answered out of order: written in order all the same
            fut.resolve(OK if op == Op.OFFSET_COMMIT else {"group_id": "g", "error_code": 0, "topics": []})
        d.gw.write_due()
        frames = split_frames(bytes(d.transport.out))
        versions = [9, 9, 7, 9, 9, 9, 8]
        assert [decode_response(f, 9 if i == 2 else 8, versions[i])["_correlation_id"] for i, f in enumerate(frames)] \
            == [1, 2, 3, 4, 5, 6, 7]

    asyncio.run(main())


def test_the_requests_of_a_run_count_towards_the_in_flight_cap() -> None:
    """A run takes one place in the response order, yet reading pauses at
    max_inflight_per_connection requests as it would for the same requests one by one."""
    async def main() -> None:
        d, router = _driver(max_inflight_per_connection=8)
        await _warm(d, router)
        d.conn.data_received(b"".join(commit(cid, 100 + cid) for cid in range(1, 6)))
        assert not d.transport.paused, "5 requests in flight"
        d.conn.data_received(b"".join(commit(cid, 100 + cid) for cid in range(6, 11)))
        assert len(router.sent) == 2 and d.transport.paused, "10 requests in flight, in two runs"
        router.sent[0][2].resolve(OK)
        d.gw.write_due()
        assert not d.transport.paused, "the first run's 5 answered and written"
        router.sent[1][2].resolve(OK)
        d.gw.write_due()
        answers = [decode_response(f, 8, 9) for f in split_frames(bytes(d.transport.out))]
        assert [a["_correlation_id"] for a in answers] == list(range(1, 11))

    asyncio.run(main())


def test_a_run_whose_coordinator_is_down_answers_every_request_with_the_error() -> None:
    async def main() -> None:
        d, router = _driver()
        await _warm(d, router)
        d.conn.data_received(commit(1, 1) + commit(2, 2) + commit(3, 3))
        router.sent[0][2].set_exception(ShardUnavailable("down"))
        await d.settle()
        answers = [decode_response(f, 8, 9) for f in split_frames(bytes(d.transport.out))]
        assert [(a["_correlation_id"], a["topics"][0]["partitions"][0]["error_code"]) for a in answers] == \
            [(1, 16), (2, 16), (3, 16)]  # NOT_COORDINATOR

    asyncio.run(main())


def test_a_run_cut_by_a_closed_connection_leaves_nothing_behind() -> None:
    async def main() -> None:
        d, router = _driver()
        await _warm(d, router)
        d.conn.data_received(commit(1, 1) + commit(2, 2))
        d.transport.close()
        await asyncio.sleep(0)
        router.sent[0][2].resolve(OK)
        await asyncio.sleep(0)
        assert d.conn.idle() and d.transport.writes_after_close == 0

    asyncio.run(main())


def test_commits_the_walk_refuses_are_answered_one_by_one() -> None:
    """A body with a tagged field (the walk accepts none) neither joins nor opens a run."""
    def tagged(frame: bytes) -> bytes:
        body = frame[4:-1] + b"\x01\x05\x01\x00"  # one unknown tagged field (tag 5, one byte) at the body's end
        return struct.pack(">i", len(body)) + body

    async def main() -> None:
        d, router = _driver()
        await _warm(d, router)
        d.conn.data_received(tagged(commit(1, 1)) + tagged(commit(2, 2)) + commit(3, 3) + commit(4, 4))
        assert [p["topics"][0]["partitions"][0]["committed_offset"] for _op, p, _f in router.sent] == [1, 2, 4]
        for _op, _p, fut in router.sent:
            fut.resolve(OK)
        d.gw.write_due()
        assert [decode_response(f, 8, 9)["_correlation_id"] for f in split_frames(bytes(d.transport.out))] == [1, 2, 3, 4]

    asyncio.run(main())


def test_a_bad_commit_closes_the_connection_before_the_frames_after_it_run() -> None:
    """The run's frame is decoded only when the next frame ends the run: bad input there closes
    the connection, and nothing after it is handled."""
    async def main() -> None:
        d, router = _driver()
        await _warm(d, router)
        bad = commit(1, 1, metadata="ab").replace(b"\x03ab", b"\x03\xff\xfe")  # not UTF-8
        d.conn.data_received(bad + _fetch(2))
        assert d.closed and router.sent == []

    asyncio.run(main())


def test_the_walk_knows_only_the_versions_it_was_written_for() -> None:
    frame = commit(1, 1)[4:]
    assert commit_layout(frame, 9) is not None
    assert commit_layout(frame, 11) is None and commit_layout(frame, 1) is None
