"""RequestMeter: batched request counts and latencies equal Prometheus' own observe."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from rafka.telemetry import FLUSH_EVERY, LATENCY_BUCKETS, RequestMeter

SAMPLES = [0.0001, 0.0005, 0.0007, 0.003, 0.003, 0.2, 7.0, 45.0, 0.0]


def _pair(registry: CollectorRegistry) -> tuple[Counter, Histogram]:
    return (Counter("reqs_total", "r", ["api"], registry=registry),
            Histogram("lat_seconds", "l", ["api"], buckets=LATENCY_BUCKETS, registry=registry))


def _direct() -> bytes:
    reg = CollectorRegistry()
    requests, latency = _pair(reg)
    for api in ("a", "b"):
        for s in SAMPLES:
            requests.labels(api).inc()
            latency.labels(api).observe(s)
    return _strip_created(generate_latest(reg))


def _strip_created(text: bytes) -> bytes:
    return b"\n".join(line for line in text.splitlines() if b"_created" not in line)


def test_a_flush_gives_the_same_exposition_as_observe_within_flush_every() -> None:
    reg = CollectorRegistry()
    meter = RequestMeter(*_pair(reg))
    flushes: list[bool] = []
    flush = meter.flush
    meter.flush = lambda: (flushes.append(True), flush())  # type: ignore[method-assign]

    async def main() -> bytes:
        for api in ("a", "b"):
            tally = meter.tally(api)
            for s in SAMPLES:
                meter.record(tally, s)
                await asyncio.sleep(0)  # records over many loop passes share one flush
        before = _strip_created(generate_latest(reg))
        assert b'reqs_total{api="a"} 0.0' in before  # not written yet
        for _ in range(100):
            await asyncio.sleep(FLUSH_EVERY)
            if flushes:
                break
        assert flushes == [True], "one flush for them all"
        return _strip_created(generate_latest(reg))

    assert asyncio.run(main()) == _direct()


def test_without_a_running_loop_every_record_is_written_at_once() -> None:
    reg = CollectorRegistry()
    meter = RequestMeter(*_pair(reg))
    for api in ("a", "b"):
        for s in SAMPLES:
            meter.record(meter.tally(api), s)
    assert _strip_created(generate_latest(reg)) == _direct()
