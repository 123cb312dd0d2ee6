"""Shared helpers for benchmarks: start rafka or the librdkafka mock cluster, print tables."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker(str):
    """A bootstrap address that also knows the pid and data directory of the `rafka serve` behind it."""

    pid: int
    data_dir: Path

    def __new__(cls, address: str, pid: int, data_dir: str = "") -> Self:
        self = super().__new__(cls, address)
        self.pid = pid
        self.data_dir = Path(data_dir)
        return self

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return str, (str(self),)  # a client process gets the plain address


@contextmanager
def rafka(*flags: str, shards: int = 1) -> Iterator[Broker]:
    """A `rafka serve` subprocess; yields its bootstrap address."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="rafka-bench-") as data:
        proc = subprocess.Popen([sys.executable, "-m", "rafka", "serve", "--port", str(port), "--metrics-port", "0",
                                 "--shards", str(shards), "--data-dir", data, "--log-level", "WARNING", *flags],
                                cwd=ROOT, start_new_session=True)
        try:
            _wait_port(port)
            time.sleep(1.0)  # shards connected
            yield Broker(f"127.0.0.1:{port}", proc.pid, data)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def cpu_seconds(root: int) -> float:
    """CPU seconds (user + system, every thread) used so far by process ``root`` and its
    descendants (for a `rafka serve`: the supervisor, the gateway and the shards)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, cpu seconds)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        stats[int(pid)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)  # ppid, utime + stime
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, (parent, _cpu) in stats.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(stats[pid][1] for pid in tree if pid in stats)


def _wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"port {port} not listening")


@contextmanager
def mock_cluster() -> Iterator[str]:
    """librdkafka's in-process mock cluster (C); yields its bootstrap address."""
    from confluent_kafka import Producer

    found = threading.Event()
    address: list[str] = []

    class Logger:
        def log(self, level: int, fmt: str, *args: object) -> None:
            msg = fmt % args if args else fmt
            m = re.search(r"Mock cluster enabled.*?(127\.0\.0\.1:\d+)", msg)
            if m and not address:
                address.append(m.group(1))
                found.set()

    import logging

    logger = logging.getLogger("mock")
    logger.log = Logger().log  # type: ignore[method-assign]
    handle = Producer({"test.mock.num.brokers": 1, "debug": "generic", "logger": logger})
    handle.poll(0)
    if not found.wait(10):
        raise RuntimeError("mock cluster address not found in librdkafka's log")
    try:
        yield address[0]
    finally:
        handle.flush(1)
        del handle


def produce_all(producer: Any, topic: str, payload: bytes, count: int, partitions: int = 0) -> None:
    """Queue ``count`` records on a confluent-kafka producer, waiting while its queue is full
    (with ``partitions``, record i to partition i % partitions)."""
    for i in range(count):
        where = {"partition": i % partitions} if partitions else {}
        while True:
            try:
                producer.produce(topic, payload, **where)
                break
            except BufferError:
                producer.poll(0.01)


def table(rows: list[list[object]], header: list[str]) -> str:
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
