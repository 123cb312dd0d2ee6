"""RequestMeter: batched request counts and latencies equal Prometheus' own observe."""

from __future__ import annotations

import asyncio

import pytest
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


def test_a_loop_that_closed_with_a_flush_due_does_not_stop_the_next_from_flushing() -> None:
    reg = CollectorRegistry()
    meter = RequestMeter(*_pair(reg))

    async def record() -> None:
        meter.record(meter.tally("a"), 0.001)

    asyncio.run(record())  # closes with its flush still due
    before = _strip_created(generate_latest(reg))
    assert b'reqs_total{api="a"} 0.0' in before

    async def record_and_wait() -> None:
        await record()
        for _ in range(100):
            await asyncio.sleep(FLUSH_EVERY)
            if b'reqs_total{api="a"} 2.0' in _strip_created(generate_latest(reg)):
                return
        raise AssertionError("never flushed")

    asyncio.run(record_and_wait())


def test_a_stopping_gateway_writes_the_counts_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last requests before a gateway stops are counted (their flush was still due)."""
    from rafka import telemetry
    from tests.gateway.harness import Driver, encode_request, make_gateway

    monkeypatch.setattr(telemetry, "FLUSH_EVERY", 60.0)  # only the stop writes the request's count

    async def main() -> None:
        gw = make_gateway()
        d = Driver(gw)
        counter = telemetry.gateway_metrics().requests.labels("kafka.api-versions")
        telemetry.gateway_meter().flush()  # what earlier in-process gateways of the run left due
        before = counter._value.get()
        d.conn.data_received(encode_request(18, 3, {"client_software_name": "t", "client_software_version": "1"}))
        assert d.transport.out, "answered at once"
        await gw.shutdown(1)
        assert counter._value.get() == before + 1

    asyncio.run(main())
