"""Event-loop selection in one place: uvloop in every process."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from time import perf_counter as _clock
from typing import Any


def run(main: Coroutine[Any, Any, Any]) -> Any:
    """Run ``main`` on uvloop."""
    import uvloop

    return uvloop.run(main)


def tune_gc() -> None:
    """Freeze what start-up allocated and make young-generation collections rare.

    A request allocates dozens of short-lived containers that reference counting
    frees; with the default threshold (700 net allocations) the cyclic GC still ran
    every few requests, scanning survivors each time (about a fifth of the gateway's
    CPU under load). A threshold of 10,000 makes it rare and still bounds cyclic garbage.
    """
    import gc

    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def set_process_name(name: str) -> None:
    """Name this process in ``ps``/``top`` (e.g. ``rafka-shard-3``)."""
    try:
        import setproctitle

        setproctitle.setproctitle(name)
    except ImportError:  # pragma: no cover - declared dependency
        pass
    try:  # the kernel's comm name, shown by `ps -e` and top
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the name is cosmetic
        pass


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (the supervisor) dies."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before we asked
            os._exit(1)
    except (OSError, AttributeError):  # not Linux: the supervisor's own shutdown still stops its children
        pass


class IdlePoll:
    """Keep a process's loop polling for a while after activity, instead of sleeping.

    How this works: a process that sleeps in epoll is woken by the kernel when a
    message arrives, and on this machine's virtual CPUs that wake-up costs about 30 µs
    (a ping-pong between two processes: 66–78 µs blocking, 5 µs polling). A
    synchronous commit crosses four such wake-ups (client → gateway → shard → gateway
    → client). ``kick()``, called where a process receives bytes, starts a callback
    that re-queues itself with ``call_soon`` until ``budget`` has passed without
    another kick: while it is queued the loop polls epoll without sleeping, so the
    reply or next request is read as soon as it lands. Each round calls
    ``sched_yield`` so a polling process gives its CPU to any runnable one on the
    same CPU (a client, the other process). Seastar's reactor, under Redpanda, does
    the same (``--idle-poll-time-us``). Budget 0 turns it off; with one usable CPU or
    less (affinity, or a container's CPU quota) it is off, as polling there can only
    delay whoever would produce the next message, or spend the quota.
    """

    def __init__(self) -> None:
        self.budget = 0.0  # seconds
        self._last = 0.0
        self._polling = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def configure(self, budget_us: int) -> None:
        self.budget = budget_us / 1e6 if usable_cpus() > 1 else 0.0

    def kick(self) -> None:
        """Bytes arrived: poll for ``budget`` from now."""
        if not self.budget:
            return
        self._last = _clock()
        if not self._polling:
            self._polling = True
            self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self._poll)

    def _poll(self) -> None:
        if _clock() - self._last < self.budget:
            os.sched_yield()
            self._loop.call_soon(self._poll)  # type: ignore[union-attr]
        else:
            self._polling = False


def usable_cpus() -> float:
    """The CPUs this process may use: its affinity, capped by a cgroup CPU quota (a container's
    ``--cpus``)."""
    cpus: float = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return cpus if quota is None else min(cpus, quota)


def _cgroup_cpu_quota() -> float | None:
    """The cgroup's CPU quota in CPUs (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``), or None when there is none."""
    v2 = _read("/sys/fs/cgroup/cpu.max")
    if v2 is not None:
        quota, _, period = v2.strip().partition(" ")
    else:
        quota = (_read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") or "-1").strip()
        period = (_read("/sys/fs/cgroup/cpu/cpu.cfs_period_us") or "100000").strip()
    try:
        return None if quota in ("max", "-1") else float(quota) / float(period)
    except (ValueError, ZeroDivisionError):
        return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


idle_poll = IdlePoll()
"""This process's idle polling, configured at start from ``--idle-poll-us``."""

__all__ = ["IdlePoll", "asyncio", "die_with_parent", "idle_poll", "run", "set_process_name", "tune_gc", "usable_cpus"]
