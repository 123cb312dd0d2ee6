"""Metrics and traces, set up once per process.

How this works: metrics are prometheus-client objects created lazily so each
process registers only what it uses. Under ``rafka serve`` every child writes to a
shared multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``) and the supervisor
serves the merged view on one port; a process started alone serves its own
registry. Spans use OpenTelemetry; when no ``OTEL_EXPORTER_OTLP_*`` endpoint is
configured the tracer is a no-op and the span helpers cost a function call.
The gateway passes W3C ``traceparent`` strings to shards in the rail envelope.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from bisect import bisect_left
from collections.abc import Iterator
from functools import cache
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class _GatewayMetrics:
    def __init__(self) -> None:
        self.requests = Counter("rafka_gateway_requests_total", "Requests handled by the gateway", ["api"])
        self.errors = Counter("rafka_gateway_errors_total", "Responses with a Kafka error code, by code", ["api", "error_code"])
        self.latency = Histogram("rafka_gateway_request_latency_seconds", "Gateway handler latency", ["api"],
                                 buckets=LATENCY_BUCKETS)
        self.connections = Gauge("rafka_gateway_connections", "Open client connections", multiprocess_mode="livesum")
        self.closed_bad_input = Counter("rafka_gateway_bad_input_total", "Connections closed for bad input", ["reason"])
        self.shard_up = Gauge("rafka_gateway_shard_up", "1 when the gateway reaches the shard, 0 when it is down",
                              ["shard"], multiprocess_mode="livemin")


@cache
def gateway_metrics() -> _GatewayMetrics:
    return _GatewayMetrics()


@cache
def idle_poll_seconds() -> Any:
    """Seconds each process kept its loop polling after a message (``--idle-poll-us``)."""
    return Counter("rafka_idle_poll_seconds_total", "Time a process kept its event loop polling after a message "
                   "instead of sleeping (--idle-poll-us), work done meanwhile included", ["process"])


class RequestTally:
    """One label set's requests and latencies counted since the last flush."""

    __slots__ = ("bounds", "buckets", "count", "counter", "histogram", "total")

    def __init__(self, counter: Any, histogram: Any) -> None:
        self.counter = counter
        self.histogram = histogram
        self.bounds = histogram._upper_bounds  # ends with +Inf
        self.count = 0
        self.total = 0.0
        self.buckets = [0] * len(self.bounds)


FLUSH_EVERY = 0.01  # seconds a request's count and latency may wait to reach Prometheus


class RequestMeter:
    """Request counts and latency histograms, written to Prometheus every ``FLUSH_EVERY``.

    How this works: a Prometheus child costs a lock, a pid check and an mmap write per
    ``inc``, and a histogram ``observe`` two of them; at thousands of requests per
    second that was a tenth of a process's CPU. ``record`` only adds to plain
    integers in a ``RequestTally``; ``flush``, scheduled ``FLUSH_EVERY`` after the
    first record since the last one, adds each tally's totals to its counter and to
    the histogram's sum and buckets (the same buckets ``observe`` picks: the first
    bound ≥ the value). A flush per loop pass instead cost a sixth of the CPU of a
    synchronous commit, which crosses one pass per process. A scrape lags a reply by
    at most ``FLUSH_EVERY``; a process that stops flushes what it holds.
    """

    def __init__(self, requests: Any, latency: Any) -> None:
        self._requests = requests
        self._latency = latency
        self._tallies: dict[tuple[str, ...], RequestTally] = {}
        self._dirty: list[RequestTally] = []
        self._scheduled: asyncio.AbstractEventLoop | None = None  # the loop a flush is due on

    def tally(self, *labels: str) -> RequestTally:
        t = self._tallies.get(labels)
        if t is None:
            t = self._tallies[labels] = RequestTally(self._requests.labels(*labels), self._latency.labels(*labels))
        return t

    def record(self, t: RequestTally, seconds: float, requests: int = 1) -> None:
        """``requests`` requests took ``seconds`` each."""
        if not t.count:
            self._dirty.append(t)
        t.count += requests
        t.total += seconds * requests
        t.buckets[bisect_left(t.bounds, seconds)] += requests
        if self._scheduled is None or self._scheduled.is_closed():  # (a closed one will never run it)
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop: write through
                self.flush()
                return
            loop.call_later(FLUSH_EVERY, self.flush)
            self._scheduled = loop

    def flush(self) -> None:
        self._scheduled = None
        dirty, self._dirty = self._dirty, []
        for t in dirty:
            count, total, buckets = t.count, t.total, t.buckets
            t.count, t.total, t.buckets = 0, 0.0, [0] * len(buckets)  # reset first: a failed write loses, never repeats
            t.counter.inc(count)
            t.histogram._sum.inc(total)
            for i, n in enumerate(buckets):
                if n:
                    t.histogram._buckets[i].inc(n)


@cache
def gateway_meter() -> RequestMeter:
    """The gateway's per-API request counter and latency histogram."""
    metrics = gateway_metrics()
    return RequestMeter(metrics.requests, metrics.latency)


@cache
def _tracer() -> Any:
    if not any(k.startswith("OTEL_EXPORTER_OTLP") for k in os.environ):
        return None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = os.environ.get("OTEL_SERVICE_NAME", "rafka")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("rafka")


def shutdown_tracing() -> None:
    """Flush spans before the process exits."""
    if _tracer() is None:
        return
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    shutdown = getattr(provider, "shutdown", None)
    if shutdown:
        shutdown()


def _traceparent(span: Any) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


_NO_SPAN = contextlib.nullcontext(None)


def gateway_span(name: str, ctx: Any) -> Any:
    """A ``rafka.gateway.<name>`` span; entering it gives its traceparent for the rail (None when off).

    With tracing off this returns a shared null context: the per-request cost is one cached call.
    """
    if _tracer() is None:
        return _NO_SPAN
    return _gateway_span(name, ctx)


@contextlib.contextmanager
def _gateway_span(name: str, ctx: Any) -> Iterator[str | None]:
    tracer = _tracer()
    with tracer.start_as_current_span(f"rafka.gateway.{name}") as span:
        span.set_attribute("rafka.org_id", ctx.org_id)
        span.set_attribute("kafka.api_version", ctx.api_version)
        if ctx.requests > 1:  # a run of OffsetCommits answered by one handler call
            span.set_attribute("rafka.requests", ctx.requests)
        yield _traceparent(span)


@contextlib.contextmanager
def shard_span(name: str, traceparent: str | None, **attrs: Any) -> Iterator[Any]:
    """A ``rafka.shard.<name>`` span, child of the gateway span in ``traceparent``."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent}) if traceparent else None
    with tracer.start_as_current_span(f"rafka.shard.{name}", context=parent) as span:
        for k, v in attrs.items():
            span.set_attribute(k, v)
        yield span


def start_shard_span(name: str, traceparent: str | None) -> Any:
    """Start (not enter) a ``rafka.shard.<name>`` span under the gateway's span; None when off.

    The runtime ends it when the op is answered, so a parked JoinGroup's span covers its wait.
    """
    tracer = _tracer()
    if tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent}) if traceparent else None
    return tracer.start_span(f"rafka.shard.{name}", context=parent)


def event_span(name: str, parent_span: Any, **attrs: Any) -> None:
    """Record an instant child span (e.g. ``rafka.shard.coordinator.rebalance-complete``)."""
    tracer = _tracer()
    if tracer is None:
        return
    from opentelemetry import trace

    ctx = trace.set_span_in_context(parent_span) if parent_span is not None else None
    span = tracer.start_span(f"rafka.shard.{name}", context=ctx)
    for k, v in attrs.items():
        span.set_attribute(k, v)
    span.end()
