"""Event-loop selection in one place: uvloop in every process."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from time import perf_counter as _clock
from typing import Any


def run(main: Coroutine[Any, Any, Any]) -> Any:
    """Run ``main`` on uvloop."""
    import uvloop

    return uvloop.run(main)


def tune_gc() -> None:
    """Freeze what start-up allocated and make young-generation collections rare.

    A request allocates dozens of short-lived containers that reference counting
    frees, but a young collection comes after so many allocations net of frees, and
    requests in flight are net allocations: with the default threshold (700) the cyclic
    GC ran every few requests, with 10,000 still ~20 times a second with 10,000 heartbeats
    in flight (measured: ~13 % of the gateway's CPU, freeing nothing: every object it
    scanned belonged to a request in flight). 100,000 leaves collections to real growth,
    and still bounds cyclic garbage. Shards take the same (measured there: no pass during
    the commit benchmarks either way).
    """
    import gc

    gc.freeze()
    gc.set_threshold(100_000, 20, 20)


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
    """Keep a process's loop polling for a while after a message, instead of sleeping.

    How this works: a process that sleeps in epoll is woken by the kernel when a
    message arrives, and on this machine's virtual CPUs that wake-up costs about 30 µs
    (a ping-pong between two processes: 66–78 µs blocking, 5 µs polling). A
    synchronous commit crosses four such wake-ups (client → gateway → shard → gateway
    → client). ``kick()``, called where a process receives a whole message (a Kafka
    request, a rail batch), starts a callback that re-queues itself with ``call_soon``
    until ``budget`` has passed without another kick: while it is queued the loop
    polls epoll without sleeping, so the reply or next request is read as soon as it
    lands. Each round calls ``sched_yield`` so a polling process gives its CPU to any
    runnable one on the same CPU (a client, the other process). Seastar's reactor,
    under Redpanda, does the same (``--idle-poll-time-us``). Budget 0 turns it off,
    and so does a machine where polling can only take CPU from whoever would send the
    next message: one usable CPU, or a cgroup CPU quota (a container's ``--cpus``,
    systemd's ``CPUQuota=``) below the CPUs it may run on, which polling would spend
    and then be throttled for a whole period. ``on_poll`` is told how long each
    episode kept the loop awake (the work done meanwhile included), every second of
    a long one.
    """

    def __init__(self) -> None:
        self.budget = 0.0  # seconds
        self.on_poll: Callable[[float], None] | None = None
        self._last = 0.0
        self._started = 0.0
        self._polling = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def configure(self, budget_us: int, on_poll: Callable[[float], None] | None = None) -> None:
        self.budget = budget_us / 1e6 if polling_pays() else 0.0
        self.on_poll = on_poll

    def kick(self) -> None:
        """A message arrived: poll for ``budget`` from now."""
        if not self.budget:
            return
        self._last = now = _clock()
        if not self._polling or not self._loop.is_running():  # type: ignore[union-attr]  # (its episode ended with it)
            loop = self._loop = running_loop(self._loop)
            self._polling = True
            self._started = now
            loop.call_soon(self._poll)

    def _poll(self) -> None:
        now = _clock()
        if now - self._last < self.budget:
            if now - self._started >= 1.0 and self.on_poll is not None:  # a long episode: told each second
                self.on_poll(now - self._started)
                self._started = now
            os.sched_yield()
            self._loop.call_soon(self._poll)  # type: ignore[union-attr]
            return
        self._polling = False
        if self.on_poll is not None:
            self.on_poll(now - self._started)


def polling_pays() -> bool:
    """More than one CPU to run on, and no cgroup CPU quota below them."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return cpus > 1 and (quota is None or quota >= cpus)


def cgroup_cpu_quota() -> float | None:
    """The tightest CPU quota, in CPUs, of this process's cgroup and its ancestors (cgroup v2
    ``cpu.max``; v1 ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``), or None when none is set."""
    quotas = []
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        _hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # cgroup v2
            for d in _ancestors("/sys/fs/cgroup", path):
                quota, _, period = (_read(f"{d}/cpu.max") or "max").strip().partition(" ")
                quotas.append(_ratio(quota, period or "100000"))
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own mount
            for mount in dict.fromkeys((f"/sys/fs/cgroup/{controllers}", "/sys/fs/cgroup/cpu")):  # either may exist
                quotas += [_ratio((_read(f"{d}/cpu.cfs_quota_us") or "-1").strip(),
                                  (_read(f"{d}/cpu.cfs_period_us") or "100000").strip()) for d in _ancestors(mount, path)]
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def _ancestors(mount: str, path: str) -> list[str]:
    """``mount/path`` and each directory above it up to ``mount`` (inside a container the mount is
    its own cgroup, and ``path`` names it on the host: the directories that exist are read)."""
    parts = [p for p in path.split("/") if p]
    return [os.path.join(mount, *parts[:n]) for n in range(len(parts), -1, -1)]


def _ratio(quota: str, period: str) -> float | None:
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


def running_loop(known: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop:
    """The running loop: ``known`` while it runs, else looked up (on 3.11 each lookup costs a
    ``getpid()`` system call, so hot paths keep the loop they found)."""
    if known is not None and known.is_running():
        return known
    return asyncio.get_running_loop()


class Soon:
    """``fn``, run at the end of the read that asked for it, else on the next loop pass.

    How this works: work that many events share (a gateway sending each shard the ops
    queued for it, or writing the responses a reply message completed; a shard committing
    its log and releasing the replies) is asked for with ``soon()``, which queues one loop
    callback. The reader that caused it calls the object itself once its read has been
    handled, so the work is not a loop pass late, and the queued callback then finds
    nothing due.
    """

    __slots__ = ("_due", "_fn", "_loop")

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn = fn
        self._due = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def soon(self) -> None:
        if not self._due:
            self._due = True
            loop = self._loop = running_loop(self._loop)
            loop.call_soon(self._on_pass)

    def _on_pass(self) -> None:
        if self._due:
            self()

    def __call__(self) -> None:
        self._due = False
        self._fn()


__all__ = ["IdlePoll", "Soon", "asyncio", "cgroup_cpu_quota", "die_with_parent", "idle_poll", "polling_pays", "run", "running_loop", "set_process_name", "tune_gc"]
