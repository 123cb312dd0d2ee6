"""A broker polls while it is busy and sleeps when it is not: a burst of synchronous commits
shows as polling time in /metrics (and none with --idle-poll-us 0), and afterwards an idle
gateway and shard use next to no CPU."""

from __future__ import annotations

import os
import re
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from rafka.loops import polling_pays
from tests.integration.conftest import Rafka


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _polled(broker: Rafka) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(r'^rafka_idle_poll_seconds_total\{process="([^"]+)"\} (\S+)$',
                                                   text, re.MULTILINE)}


def _commits(broker: Rafka, n: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce("idle-poll", b"x", partition=0)
    assert p.flush(15) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    for k in range(1, n + 1):
        c.commit(offsets=[TopicPartition("idle-poll", 0, k)], asynchronous=False)
    assert c.committed([TopicPartition("idle-poll", 0)], timeout=10)[0].offset == n
    c.close()


@pytest.mark.skipif(not polling_pays(), reason="one usable CPU or a CPU quota: rafka never polls here")
def test_a_busy_broker_polls_and_an_idle_one_sleeps(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=1, extra=["--idle-poll-us", "1000"]).start()
    try:
        _commits(broker, 300)
        time.sleep(0.2)  # the last episodes end
        polled = _polled(broker)
        assert polled.get("gateway", 0) > 0 and polled.get("shard-0", 0) > 0, polled
        pids = list(broker.children().values())
        assert len(pids) == 2, broker.children()
        before = sum(map(_cpu_seconds, pids))
        time.sleep(3)
        spent = sum(map(_cpu_seconds, pids)) - before
        assert spent < 0.6, f"gateway and shard used {spent:.2f} s of CPU in 3 s idle"  # polling on: ~6 s
    finally:
        broker.stop()


def test_idle_poll_us_0_never_polls(tmp_path: Path) -> None:
    broker = Rafka(tmp_path / "data", shards=1, extra=["--idle-poll-us", "0"]).start()
    try:
        _commits(broker, 50)
        assert _polled(broker) == {"gateway": 0.0, "shard-0": 0.0}
    finally:
        broker.stop()
