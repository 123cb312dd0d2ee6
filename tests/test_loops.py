"""Idle polling: after a message the loop stays awake for its budget, then sleeps again; it is
off where polling could only take CPU from others; the gateway and the rail kick it per whole
message, not per chunk of bytes."""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path

import pytest
import uvloop

from rafka import loops, zmtp
from rafka.loops import IdlePoll
from tests.gateway.harness import Driver, encode_request, make_gateway


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(loops, "_clock", c)
    return c


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Polling rounds so far (each yields the CPU once)."""
    count = [0]

    def counted() -> None:
        count[0] += 1

    monkeypatch.setattr(os, "sched_yield", counted)
    return count


async def _ticks(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _poll_reporting_to(episodes: list[float]) -> IdlePoll:
    """A 1 ms budget; each episode's length goes to ``episodes``."""
    poll = IdlePoll()
    poll.budget = 0.001
    poll.on_poll = episodes.append
    return poll


def test_polls_until_its_budget_passes_without_a_kick(clock: _Clock, rounds: list[int]) -> None:
    episodes: list[float] = []
    poll = _poll_reporting_to(episodes)

    async def go() -> None:
        poll.kick()
        await _ticks()
        assert poll._polling and rounds[0] >= 10, "the loop goes round instead of sleeping"
        clock.now += 0.0006
        poll.kick()  # a message within the budget starts it again
        clock.now += 0.0006
        await _ticks()
        assert poll._polling, "1.2 ms after the first kick, 0.6 ms after the second"
        clock.now += 0.0006
        await _ticks()
        assert not poll._polling
        assert episodes == [pytest.approx(0.0018)]
        after = rounds[0]
        await _ticks()
        assert rounds[0] == after, "asleep: no more rounds"

    uvloop.run(go())


def test_a_long_episode_is_reported_each_second(clock: _Clock, rounds: list[int]) -> None:
    """Under steady load the loop never sleeps: the time it polled must still show as it goes."""
    episodes: list[float] = []
    poll = _poll_reporting_to(episodes)

    async def go() -> None:
        poll.kick()
        for _ in range(2500):  # 2.5 s of messages 1 ms apart less a hair
            clock.now += 0.00099
            poll.kick()
            await asyncio.sleep(0)
        assert poll._polling and len(episodes) == 2 and sum(episodes) == pytest.approx(2.0, abs=0.01)

    uvloop.run(go())


def test_budget_zero_never_polls(rounds: list[int]) -> None:
    poll = IdlePoll()

    async def go() -> None:
        poll.kick()
        await _ticks()

    uvloop.run(go())
    assert rounds[0] == 0 and not poll._polling


def test_a_loop_that_closed_mid_episode_does_not_stop_the_next_from_polling(clock: _Clock, rounds: list[int]) -> None:
    poll = IdlePoll()
    poll.budget = 0.001

    async def kick_and_leave() -> None:
        poll.kick()

    async def kick_and_watch() -> None:
        poll.kick()
        before = rounds[0]
        await _ticks()
        assert rounds[0] > before

    uvloop.run(kick_and_leave())
    uvloop.run(kick_and_watch())


def _files(monkeypatch: pytest.MonkeyPatch, files: dict[str, str], cpus: int = 4) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cpus)))
    monkeypatch.setattr(loops, "_read", files.get)


@pytest.mark.parametrize(("files", "quota"), [
    ({}, None),
    ({"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "max 100000\n"}, None),
    ({"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "50000 100000\n"}, 0.5),  # docker --cpus 0.5
    # systemd CPUQuota=200% on the service, a looser limit on its slice: the tightest counts
    ({"/proc/self/cgroup": "0::/system.slice/rafka.service\n",
      "/sys/fs/cgroup/system.slice/rafka.service/cpu.max": "200000 100000\n",
      "/sys/fs/cgroup/system.slice/cpu.max": "300000 100000\n"}, 2.0),
    # cgroup v1, the container's own cgroup mounted at the root under a host path
    ({"/proc/self/cgroup": "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
      "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "150000\n",
      "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 1.5),
    ({"/proc/self/cgroup": "3:cpu,cpuacct:/\n", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n"}, None),
])
def test_cgroup_cpu_quota(monkeypatch: pytest.MonkeyPatch, files: dict[str, str], quota: float | None) -> None:
    _files(monkeypatch, files)
    assert loops.cgroup_cpu_quota() == quota


@pytest.mark.parametrize(("cpus", "cpu_max", "polls"), [
    (4, None, True),
    (1, None, False),  # polling could only delay whoever sends the next message
    (4, "200000 100000", False),  # a quota below the CPUs: polling spends it and is throttled
    (4, "400000 100000", True),
])
def test_polling_is_off_where_it_takes_cpu_from_others(monkeypatch: pytest.MonkeyPatch, cpus: int,
                                                       cpu_max: str | None, polls: bool) -> None:
    files = {"/proc/self/cgroup": "0::/\n"}
    if cpu_max:
        files["/sys/fs/cgroup/cpu.max"] = cpu_max
    _files(monkeypatch, files, cpus)
    poll = IdlePoll()
    poll.configure(500)
    assert (poll.budget == 0.0005) is polls and (poll.budget == 0.0) is not polls


class _Kicks:
    def __init__(self) -> None:
        self.n = 0

    def kick(self) -> None:
        self.n += 1


def test_the_gateway_kicks_per_whole_request_not_per_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow sender's bytes (a large produce over a slow link) must not keep the gateway polling."""
    from rafka.gateway import server

    kicks = _Kicks()
    monkeypatch.setattr(server, "idle_poll", kicks)

    async def go() -> None:
        d = Driver(make_gateway())
        frame = encode_request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        for i in range(len(frame) - 1):
            d.conn.data_received(frame[i : i + 1])
        assert kicks.n == 0, "no whole request yet"
        await d.feed(frame[-1:])
        assert kicks.n == 1 and len(d.new_frames()) == 1

    uvloop.run(go())


def test_the_rail_kicks_per_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    kicks = _Kicks()
    monkeypatch.setattr(zmtp, "idle_poll", kicks)

    async def go() -> None:
        got: list[list[bytes]] = []
        router = zmtp.Router(got.append, lambda: None)
        endpoint = f"ipc://{tmp_path}/k.sock"
        await router.bind(endpoint)
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "k.sock"))
        try:
            writer.write(zmtp.GREETING + zmtp.ready(b"DEALER"))
            await reader.readexactly(len(zmtp.GREETING))
            message = b"\x00" + struct.pack("B", 200) + b"x" * 200  # one short frame, no MORE
            for byte in message[:-1]:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.001)
            assert kicks.n == 0 and not got
            writer.write(message[-1:])
            for _ in range(200):
                if got:
                    break
                await asyncio.sleep(0.005)
            assert len(got) == 1 and kicks.n == 1
        finally:
            writer.close()
            router.close()

    uvloop.run(go())
