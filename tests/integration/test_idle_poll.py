"""A broker polls while it is busy and sleeps when it is not: after a burst of
synchronous commits, an idle gateway and shard use next to no CPU."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from tests.integration.conftest import Rafka


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_idle_broker_stops_polling_after_a_burst(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = Rafka(tmp_path / "data", shards=1, extra=["--idle-poll-us", "1000"]).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce("idle-poll", b"x", partition=0)
        assert p.flush(15) == 0
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False})
        for n in range(1, 301):
            c.commit(offsets=[TopicPartition("idle-poll", 0, n)], asynchronous=False)
        got = c.committed([TopicPartition("idle-poll", 0)], timeout=10)
        assert got[0].offset == 300
        c.close()
        pids = [pid for name, pid in broker.children().items() if "rafka" in name or "python" in name]
        assert len(pids) == 2, broker.children()
        time.sleep(0.5)
        before = sum(map(_cpu_seconds, pids))
        time.sleep(3)
        spent = sum(map(_cpu_seconds, pids)) - before
        assert spent < 0.6, f"gateway and shard used {spent:.2f} s of CPU in 3 s idle"  # polling on: ~6 s
    finally:
        broker.stop()
