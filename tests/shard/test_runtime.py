"""The shard runtime's replies: a pong leaves behind the replies queued before it, and only once
they are durable; replies made durable at once still wait behind earlier ones whose fsync runs;
a shard that stops sends the replies its last fsync made durable. A gateway fails what it sent
before a ping answered by a new incarnation, so a pong that overtook the reply to a write the new process ran would get that write failed (and a
producer without idempotence would retry it into a duplicate); and a pong that skipped a stuck
fsync would keep a shard that answers nothing marked up."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from rafka import telemetry
from rafka.rail import Op, Status, pack, unpack
from rafka.shard.runtime import ShardRuntime


class _State:
    """Answers every op at once; its commits are durable when the test says so."""

    def __init__(self) -> None:
        self.durable: concurrent.futures.Future[None] = concurrent.futures.Future()

    def dispatch(self, op: int, org_id: str, payload: Any, now_ms: int, respond: Any, trace: Any) -> None:
        respond({"written": payload})

    def commit(self) -> concurrent.futures.Future[None]:
        return self.durable


_METRICS: list[Any] = []


def _one_metrics(monkeypatch: Any) -> None:
    """Every ShardRuntime of this module shares one ShardMetrics (Prometheus registers each name
    once per process)."""
    from rafka.shard import runtime as runtime_module

    if not _METRICS:
        _METRICS.append(runtime_module.ShardMetrics(0))
    monkeypatch.setattr(runtime_module, "ShardMetrics", lambda _shard: _METRICS[0])


class _Router:
    """Stands in for the shard's ``zmtp.Router``: keeps what is sent."""

    def __init__(self) -> None:
        self.sent: list[list[Any]] = []

    def send(self, frames: list[bytes]) -> bool:
        self.sent.extend(unpack(frames[1]))
        return True


def _runtime(state: Any) -> tuple[ShardRuntime, _Router]:
    """A runtime over ``state`` whose replies go to a stand-in router."""
    runtime = ShardRuntime(0, "inproc://unused", lambda _rt: state)
    sock = _Router()
    runtime._router = sock  # type: ignore[assignment]
    return runtime, sock


def test_a_pong_leaves_after_the_replies_before_it_once_they_are_durable(monkeypatch: Any) -> None:
    _one_metrics(monkeypatch)

    async def main() -> None:
        state = _State()
        runtime, sock = _runtime(state)
        runtime.handle(b"gw", [7, int(Op.PRODUCE), "org", None, "batch"])
        runtime.handle(b"gw", [-1, int(Op.PING), "", None, {"layout": None, "sent": 1.5}])
        await asyncio.sleep(0.05)
        assert sock.sent == [], "nothing leaves while the write is not durable, the pong neither"
        state.durable.set_result(None)
        await asyncio.sleep(0.05)
        assert [env[0] for env in sock.sent] == [7, -1], "the reply, then the pong"
        assert sock.sent[1][2]["incarnation"] == runtime.incarnation and sock.sent[1][2]["sent"] == 1.5

    asyncio.run(main())


class _States(_State):
    """Its first commit is durable when the test says so, later ones at once (an fsync in place)."""

    def __init__(self) -> None:
        super().__init__()
        self.commits = 0

    def commit(self) -> concurrent.futures.Future[None] | None:
        self.commits += 1
        return self.durable if self.commits == 1 else None


def test_replies_durable_at_once_wait_behind_earlier_ones_whose_fsync_runs(monkeypatch: Any) -> None:
    _one_metrics(monkeypatch)

    async def main() -> None:
        state = _States()
        runtime, sock = _runtime(state)
        runtime.handle(b"gw", [7, int(Op.PRODUCE), "org", None, "first"])
        await asyncio.sleep(0.05)
        runtime.handle(b"gw", [8, int(Op.PRODUCE), "org", None, "second"])
        await asyncio.sleep(0.05)
        assert state.commits == 2
        assert sock.sent == [], "the second reply waits for the first, which is not durable yet"
        state.durable.set_result(None)
        await asyncio.sleep(0.05)
        assert [env[0] for env in sock.sent] == [7, 8]

    asyncio.run(main())


def test_a_failed_fsync_of_records_no_reply_waits_for_stops_the_shard(monkeypatch: Any) -> None:
    """A timer's records (an expired member's removal) go to the log with no reply waiting on
    them: their fsync failing on the syncer thread stops the shard all the same."""
    _one_metrics(monkeypatch)

    async def main() -> None:
        state = _State()
        runtime, _sock = _runtime(state)
        runtime.run_timer("session-expiry", lambda _now: [])
        await asyncio.sleep(0.05)
        assert not runtime.failed
        state.durable.set_exception(OSError(5, "Input/output error"))
        await asyncio.sleep(0.05)
        assert runtime.failed, "the shard stops, to restart and replay"

    asyncio.run(main())


class _Stopping(_State):
    """A state whose log is made durable by its close (the fsync a stopping shard waits for)."""

    def recover(self) -> Any:
        return iter(())

    def start(self, now_ms: int) -> None:
        pass

    def close(self) -> None:
        self.durable.set_result(None)


def test_a_stopping_shard_sends_the_replies_its_last_fsync_made_durable(tmp_path: Any, monkeypatch: Any) -> None:
    import zmq

    _one_metrics(monkeypatch)
    monkeypatch.setattr(telemetry, "FLUSH_EVERY", 60.0)  # only the stop writes the op's count
    endpoint = f"ipc://{tmp_path}/shard.sock"

    async def main() -> None:
        state = _Stopping()
        runtime = ShardRuntime(0, endpoint, lambda _rt: state)  # type: ignore[arg-type,return-value]
        serving = asyncio.create_task(runtime.serve())
        gateway = zmq.Context.instance().socket(zmq.DEALER)
        gateway.setsockopt(zmq.LINGER, 0)
        gateway.connect(endpoint)
        try:
            counted = runtime.metrics.requests.labels("data.produce", runtime.metrics.shard)
            before = counted._value.get()
            gateway.send(pack([[7, int(Op.PRODUCE), "org", None, "batch"]]))
            for _ in range(100):
                await asyncio.sleep(0.02)
                if runtime._unsent:
                    break
            assert runtime._unsent, "the reply waits for its fsync"
            runtime.stop()
            await asyncio.wait_for(serving, 5)
            assert gateway.poll(2000), "the reply left before the connection closed"
            assert [env[0] for env in unpack(gateway.recv())] == [7]
            assert counted._value.get() == before + 1, "its count was written before the shard stopped"
        finally:
            gateway.close(0)

    asyncio.run(main())


def test_a_starting_shard_drops_the_state_metrics_of_its_last_incarnation_before_replay(
        tmp_path: Any, monkeypatch: Any) -> None:
    """The endpoint merges each shard's state file: during a long replay the last process's
    groups and lag would show as current. The file goes before replay; the next is written after."""
    _one_metrics(monkeypatch)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    stale = tmp_path / "state-shard-0.prom"
    stale.write_text('rafka_group_members{shard="0"} 7.0\n')
    during_replay: list[bool] = []

    class _Replaying(_Stopping):
        def recover(self) -> Any:
            during_replay.append(stale.exists())
            yield 1

    async def main() -> None:
        state = _Replaying()
        runtime = ShardRuntime(0, f"ipc://{tmp_path}/shard.sock", lambda _rt: state)  # type: ignore[arg-type,return-value]
        serving = asyncio.create_task(runtime.serve())
        for _ in range(100):
            await asyncio.sleep(0.02)
            if during_replay:
                break
        runtime.stop()
        await asyncio.wait_for(serving, 5)

    asyncio.run(main())
    assert during_replay == [False]


def test_an_envelope_with_a_bad_id_or_op_is_dropped_and_the_rest_of_its_batch_served(
        monkeypatch: Any, caplog: Any) -> None:
    _one_metrics(monkeypatch)

    async def main() -> None:
        state = _State()
        state.durable.set_result(None)
        runtime, sock = _runtime(state)
        runtime._handle_message(b"gw", pack([[1, int(Op.PRODUCE), "org", None, "a"], [2, [1], "org", None, "b"],
                                              ["x", int(Op.PRODUCE), "org", None, "c"],
                                              [3, int(Op.PRODUCE), "org", None, "d"]]))
        await asyncio.sleep(0.05)
        assert [env[0] for env in sock.sent] == [1, 3]

    with caplog.at_level("ERROR", logger="rafka.shard"):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records].count("dropping a bad envelope") == 2


def test_an_op_too_large_for_one_log_entry_is_refused_and_the_shard_serves_on(tmp_path: Any, monkeypatch: Any) -> None:
    """An OffsetCommit of many partitions under a long group id could make a write-ahead-log
    entry recovery cannot read (over 256 MiB from a 210 KB request that listed one partition
    thousands of times, which is now stored once): the shard treated it as a failed disk and
    exited, taking every organisation's groups on it down. Now nothing is written, that op alone
    fails, and the next commit is stored."""
    from rafka.config import Config
    from rafka.shard import wal as wal_module
    from rafka.shard.state import build_state

    monkeypatch.setattr(wal_module, "MAX_ENTRY", 50_000)  # stands for 256 MiB
    _one_metrics(monkeypatch)

    def commit(group: str, partitions: int) -> dict[str, Any]:
        return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "api_version": 9,
                "topics": [{"name": "t", "partitions": [{"partition_index": i, "committed_offset": 5}
                                                        for i in range(partitions)]}]}

    async def main() -> None:
        cfg = Config(data_dir=str(tmp_path), shards=1, coordinator_partitions=4)
        runtime = ShardRuntime(0, "inproc://unused", lambda rt: build_state(cfg, 0, rt))
        sock = _Router()
        runtime._router = sock  # type: ignore[assignment]
        runtime.handle(b"gw", [1, int(Op.OFFSET_COMMIT), "org", None, commit("g" * 3000, 100)])
        runtime.handle(b"gw", [2, int(Op.OFFSET_COMMIT), "org", None, commit("g", 1)])
        await asyncio.sleep(0.1)
        replies = {env[0]: env for env in sock.sent}
        assert not runtime.failed
        assert replies[1][1] == int(Status.FAILED) and "EntryTooLarge" in replies[1][2]
        assert replies[2][1] == int(Status.OK)
        assert replies[2][2]["topics"][0]["partitions"][0]["error_code"] == 0
        assert runtime.state.groups.offsets.get("org", "g", "t", 0) is not None
        assert runtime.state.groups.offsets.get("org", "g" * 3000, "t", 0) is None
        runtime.state.close()

    asyncio.run(main())


class _Counting(_State):
    """Durable at once; counts its commits (each a write and, with fsync on, a flush)."""

    def __init__(self) -> None:
        super().__init__()
        self.commits = 0

    def commit(self) -> None:
        self.commits += 1


def test_the_ops_of_one_rail_read_share_one_flush_and_their_replies_leave_with_it(monkeypatch: Any) -> None:
    """The end of a rail read flushes: its replies leave then, not a loop pass later, and the
    flush the replies had scheduled for the loop pass is not made a second time."""
    _one_metrics(monkeypatch)

    async def main() -> None:
        state = _Counting()
        runtime, sock = _runtime(state)
        runtime._handle_message(b"gw", pack([[1, int(Op.OFFSET_COMMIT), "org", None, "a"],
                                              [2, int(Op.OFFSET_COMMIT), "org", None, "b"]]))
        runtime._flush()  # what zmtp's on_read calls when the read has been handled
        assert [env[0] for env in sock.sent] == [1, 2] and state.commits == 1
        for _ in range(3):
            await asyncio.sleep(0)
        assert state.commits == 1, "no second flush from the loop pass"
        runtime.run_timer("expiry", lambda _now: [])  # a timer's records still flush on the loop pass
        await asyncio.sleep(0)
        assert state.commits == 2

    asyncio.run(main())
