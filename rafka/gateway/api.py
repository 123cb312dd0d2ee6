"""The gateway's handler registry and the one wrapper every request runs through.

How this works: each handler module registers its API with
``@api(key, min_version, max_version, "area.op")``; registering a key twice is an
error. ApiVersions is answered from this registry, so rafka never advertises an
API or version it cannot serve. ``run`` is the single instrumentation seam: it
counts the request, opens the ``rafka.gateway.<area>.<op>`` span, times the
handler and counts error codes, so handlers hold no telemetry code.

Request order: Kafka handles a connection's requests one at a time, so a client that
pipelines them (asynchronous commits, a producer with several requests in flight) sees
their effects in the order it sent them. The gateway starts each request's handler in
the read that brought it, so the ops of a connection's requests reach the shards in
that order, unless a handler has to wait for something before it can send its op (a
topic lookup when the gateway's cache misses, a transaction check): a later request
could then find the cache fresh and send its op first, and an older commit would
overwrite a newer one. A handler awaits such things through ``ctx.before_op``, and
while one does, its connection holds the requests behind it (``Ordering``); they are
dispatched a loop pass after the wait ends, once the waiting request has sent its op.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from rafka import telemetry

Handler = Callable[["RequestContext", dict[str, Any]], Awaitable[dict[str, Any] | None]]
T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    min_version: int
    max_version: int
    name: str  # "<area>.<op>", e.g. "group.join"
    fn: Handler


REGISTRY: dict[int, ApiSpec] = {}


def api(key: int, min_version: int, max_version: int, name: str) -> Callable[[Handler], Handler]:
    """Register ``fn`` as the handler of API ``key`` for versions min..max."""

    def deco(fn: Handler) -> Handler:
        from rafka.protocol.codec import has_request_schema

        if key in REGISTRY:
            raise ValueError(f"API key {key} registered twice")
        missing = [v for v in range(min_version, max_version + 1) if not has_request_schema(key, v)]
        if missing:
            raise ValueError(f"API key {key}: the codec has no schema for versions {missing}")
        REGISTRY[key] = ApiSpec(key, min_version, max_version, name, fn)
        return fn

    return deco


class Ordering:
    """A connection's count of requests waiting before their op; ``resume`` is called when it
    drops to 0 (the connection then dispatches the requests it held behind them)."""

    __slots__ = ("resume", "waiting")

    def __init__(self, resume: Callable[[], None]) -> None:
        self.waiting = 0
        self.resume = resume


@dataclasses.dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    org_id: str
    gateway: Any  # rafka.gateway.server.Gateway
    connection: Any  # rafka.gateway.server.KafkaConnection, the request's
    trace: str | None = None
    requests: int = 1  # the requests this call answers (a run of OffsetCommits: see commit_runs.py)

    async def before_op(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable``, something this request needs before it can send its op, while its
        connection holds the requests after it, so that none of them reaches a shard first."""
        ordering = self.connection.ordering
        ordering.waiting += 1
        try:
            return await awaitable
        finally:
            ordering.waiting -= 1
            if not ordering.waiting:
                ordering.resume()


def _error_codes(resp: dict[str, Any], out: list[int]) -> None:
    """Collect non-zero error codes anywhere in a response dict (for metrics)."""
    code = resp.get("error_code")
    if code:
        out.append(int(code))
    for v in resp.values():
        if type(v) is list and v and type(v[0]) is dict:
            for item in v:
                _error_codes(item, out)


async def run(spec: ApiSpec, ctx: RequestContext, op: dict[str, Any]) -> dict[str, Any] | None:
    """Run ``spec``'s handler with metrics and a span around it."""
    label = spec.name
    meter = telemetry.gateway_meter()
    tally = meter.tally(label)
    start = time.perf_counter()
    with telemetry.gateway_span(label, ctx) as trace:
        ctx.trace = trace
        try:
            resp = await spec.fn(ctx, op)
        except Exception:
            telemetry.gateway_metrics().errors.labels(label, "exception").inc(ctx.requests)
            raise
        finally:
            meter.record(tally, time.perf_counter() - start, ctx.requests)
    if resp is not None:
        codes: list[int] = []
        _error_codes(resp, codes)
        if codes:
            errors = telemetry.gateway_metrics().errors
            for code in set(codes):
                errors.labels(label, str(code)).inc(ctx.requests)
    return resp
