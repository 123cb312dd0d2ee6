"""The data plane: Produce, Fetch, ListOffsets, DeleteRecords, InitProducerId.

Version notes:
- Produce 3–11: one v2 record batch per partition (a partition named twice: its
  last entry); acks=0 gets no response; zstd batches below v7 get
  UNSUPPORTED_COMPRESSION_TYPE, as in Kafka (KIP-110); transactional records need
  a transactional id.
- Fetch 4–17: v13+ names topics by id; below v10 a topic whose compression.type is
  zstd is UNSUPPORTED_COMPRESSION_TYPE, as in Kafka (its clients predate zstd); a
  fetch spanning several shards parks on each shard with its share of min_bytes;
  once the answers hold min_bytes (or one has an error) the gateway cancels the
  others, and while they hold less the shards still waiting share what is left
  (FETCH_RETARGET), so the fetch is answered as soon as the whole has min_bytes,
  never below it before max_wait; the merged answer is held to the one max_bytes.
  A fetch of nothing is answered at once. No incremental fetch sessions:
  session_id 0 tells clients so.
- ListOffsets 1–9 (under read_committed "latest" is the last stable offset, and
  a timestamp lookup finds nothing at or past it; the special timestamps -3/-4/-5
  need v7/v8/v9), DeleteRecords 0–2,
  InitProducerId 0–5 (a transactional id goes to the transaction coordinator, see
  txn.py). Transactional batches are produced like any other; Fetch with
  isolation_level 1 stops at the last stable offset and carries the aborted
  transactions.
- Fetch and ListOffsets check the client's current leader epoch against the one
  every partition has, 0 (UNKNOWN_LEADER_EPOCH above it, FENCED_LEADER_EPOCH below).
Each partition's log is owned by shard ``stable_hash(org_id, topic, partition)``;
requests are split per owning shard and the answers merged in request order.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import itertools
import logging
import uuid
from typing import Any

from rafka import ids
from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers.errors import Err, partition_error
from rafka.gateway.handlers.topics import topic_cache
from rafka.gateway.router import ShardUnavailable
from rafka.gateway.server import CLOSE_INSTEAD
from rafka.protocol.records import (
    BATCH_HEADER_SIZE,
    LEADER_EPOCH,
    CompressionType,
    CorruptRecordError,
    parse_header,
    split_batches,
)
from rafka.rail import Op

log = logging.getLogger("rafka.gateway")
_fetch_ids = itertools.count(1)
FETCH_SLACK = 1.0  # seconds past a fetch's max_wait that a stalled shard's answer is waited for
_gateway_tag = uuid.uuid4().hex[:8]


async def _topics(ctx: RequestContext, names: list[str], auto_create: bool) -> tuple[dict[str, Any], int]:
    """Topic infos by name, and the error for topics without info: UNKNOWN_TOPIC_OR_PARTITION,
    or the retriable LEADER_NOT_AVAILABLE while the catalogue's shard is down."""
    try:
        return await topic_cache(ctx).lookup(ctx, names, auto_create), Err.UNKNOWN_TOPIC_OR_PARTITION
    except Exception:
        return {}, Err.LEADER_NOT_AVAILABLE


async def _split_call(ctx: RequestContext, op: Op, parts: list[dict[str, Any]], extra: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """Send each partition to its owning shard; map (topic, partition) → shard answer."""
    router = ctx.gateway.router
    by_shard: dict[int, list[dict[str, Any]]] = {}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for p in parts:
        shard = router.shard_for_partition(ctx.org_id, p["topic"], p["partition"])
        if _unconfirmed(router, shard, p):
            out[(p["topic"], p["partition"])] = {"error_code": Err.LEADER_NOT_AVAILABLE, "unanswered": True}
            continue
        by_shard.setdefault(shard, []).append(p)
    shards = list(by_shard)
    results = await asyncio.gather(*(router.call(s, op, ctx.org_id, {**extra, "partitions": by_shard[s]}, ctx.trace)
                                     for s in shards), return_exceptions=True)
    for s, res in zip(shards, results):
        if isinstance(res, BaseException):
            for p in by_shard[s]:
                out[(p["topic"], p["partition"])] = {"error_code": partition_error(res), "unanswered": True}
        else:
            for r in res["partitions"]:
                out[(r["topic"], r["partition"])] = r
    return out


def _leader_epoch_error(epoch: int | None) -> int:
    """Kafka's Partition.checkCurrentLeaderEpoch against rafka's one epoch (-1: none given)."""
    if epoch is None or epoch == -1 or epoch == LEADER_EPOCH:
        return Err.NONE
    return Err.UNKNOWN_LEADER_EPOCH if epoch > LEADER_EPOCH else Err.FENCED_LEADER_EPOCH


def _forget_stale(ctx: RequestContext, answers: dict[tuple[str, int], dict[str, Any]]) -> list[tuple[str, int]]:
    """A shard refused partitions as named by a stale cache (a deleted incarnation of the topic):
    forget those topics, so the client's retry looks them up afresh; the partitions refused."""
    stale = [key for key, a in answers.items()
             if a.get("error_code") == Err.NOT_LEADER_OR_FOLLOWER and "unanswered" not in a]
    if stale:
        topic_cache(ctx).invalidate(ctx.org_id, {t for t, _ in stale})
    return stale


async def _answer_deleted(ctx: RequestContext, answers: dict[tuple[str, int], dict[str, Any]],
                          stale: list[tuple[str, int]],
                          resolved: list[tuple[dict[str, Any], str | None, Any, dict[str, Any]]], missing: int) -> None:
    """A Fetch's partitions refused as stale whose topic is gone now are answered as Kafka answers
    for a topic it no longer has: a deletion that reached the shard while the fetch waited there
    with UNKNOWN_TOPIC_OR_PARTITION (Kafka's delayed fetch reads by name), one the gateway's cache
    did not know of yet with ``missing`` (UNKNOWN_TOPIC_ID when asked by id, v13+, also when the
    name is another topic's now). Otherwise, or while the catalogue cannot say, the retriable
    NOT_LEADER_OR_FOLLOWER stands (the retry reads the new topic)."""
    if not stale:
        return
    infos, error = await _topics(ctx, sorted({t for t, _ in stale}), False)
    if error == Err.LEADER_NOT_AVAILABLE:  # the catalogue's shard is down
        return
    asked_ids = {name: str(topic_id) for _, name, topic_id, _ in resolved}
    for name, p in stale:
        a = answers[(name, p)]
        info = infos.get(name)
        if info is None:
            a["error_code"] = Err.UNKNOWN_TOPIC_OR_PARTITION if a.get("waited") else missing
        elif missing == Err.UNKNOWN_TOPIC_ID and info.get("topic_id") != asked_ids.get(name):
            a["error_code"] = Err.UNKNOWN_TOPIC_ID


def _incarnation(info: dict[str, Any]) -> dict[str, Any]:
    """What a partition op carries to name its topic's incarnation (see ``LogManager``), and,
    for metadata served while the catalogue is down, when the catalogue last confirmed it."""
    out = {"topic_id": info.get("topic_id"), "incarnation": info.get("incarnation", 0)}
    if "confirmed_at" in info:
        out["confirmed_at"] = info["confirmed_at"]
    return out


def _unconfirmed(router: Any, shard: int, part: dict[str, Any]) -> bool:
    """Whether ``part`` is known only from metadata the catalogue confirmed before ``shard``
    last came up: that shard may have missed the topic's deletion (TopicCache)."""
    return "confirmed_at" in part and part["confirmed_at"] < router.up_since(shard)


def _configs(info: dict[str, Any]) -> dict[str, Any]:
    """The topic's config overrides and their version, for the partition log to adopt if newer."""
    return {"configs": info.get("configs") or {}, "config_version": info.get("config_version", 0)}


def _attributes(records: bytes) -> int:
    """The low byte of the (first) v2 batch's attributes (byte 22), 0 when there is none. Kafka
    looks at the first batch only; a second batch is refused anyway (INVALID_RECORD)."""
    return records[22] if len(records) > 22 and records[16] == 2 else 0


def _zstd(records: bytes) -> bool:
    return _attributes(records) & 0x07 == CompressionType.ZSTD


def _append_time(ms: int) -> datetime.datetime | None:
    """Produce's log_append_time: the time a LogAppendTime topic stamped the batch, else null (-1)."""
    return None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def _transactional(records: bytes) -> bool:
    return bool(_attributes(records) & 0x10)


def _last_per_partition(topics: list[dict[str, Any]], partitions: str = "partition_data",
                        index: str = "index") -> list[dict[str, Any]]:
    """``topics`` with each partition once, its last entry winning, as Kafka reads a Produce or a
    DeleteRecords into a map (a partition named twice is acted on once and answered once)."""
    merged: dict[str, dict[int, dict[str, Any]]] = {}
    for t in topics:
        for p in t[partitions]:
            merged.setdefault(t["name"], {})[p[index]] = p
    return [{"name": name, partitions: list(ps.values())} for name, ps in merged.items()]


@api(0, 3, 11, "data.produce")
async def produce(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any] | None:
    acks = req["acks"]
    if sum(len(t["partition_data"]) for t in req["topic_data"]) > len(
            {(t["name"], p["index"]) for t in req["topic_data"] for p in t["partition_data"]}):
        req = {**req, "topic_data": _last_per_partition(req["topic_data"])}
    names = [t["name"] for t in req["topic_data"]]
    errors: dict[tuple[str, int], int] = {}
    parts: list[dict[str, Any]] = []
    tid = req.get("transactional_id")
    if not tid and any(_transactional(p.get("records") or b"") for t in req["topic_data"] for p in t["partition_data"]):
        # Kafka: transactional records need a transactional id (the whole request fails), and
        # an empty one fails the coordinator's verification; unverified, they would hold back
        # every read_committed reader of the partition for good
        code = Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if tid is None else Err.INVALID_REQUEST
        errors = {(t["name"], p["index"]): code for t in req["topic_data"] for p in t["partition_data"]
                  if tid is None or _transactional(p.get("records") or b"")}
    infos, missing = await _topics(ctx, names, False)  # Kafka creates topics on Metadata, never on Produce
    for t in req["topic_data"]:
        info = infos.get(t["name"])
        for p in t["partition_data"]:
            key = (t["name"], p["index"])
            if key in errors:
                continue
            if info is None or not 0 <= p["index"] < info["partitions"]:
                errors[key] = Err.UNKNOWN_TOPIC_OR_PARTITION if info else missing
                continue
            if t["name"] in ids.INTERNAL_TOPICS:  # Kafka: "Cannot append to internal topic"
                errors[key] = Err.INVALID_TOPIC_EXCEPTION
                continue
            records = p.get("records") or b""
            if ctx.api_version < 7 and _zstd(records):
                errors[key] = Err.UNSUPPORTED_COMPRESSION_TYPE
                continue
            parts.append({"topic": t["name"], "partition": p["index"], "records": records, **_incarnation(info),
                          **_configs(info)})
    if req.get("transactional_id") and parts:
        errors.update(await _unverified(ctx, req["transactional_id"], parts))
        parts = [p for p in parts if (p["topic"], p["partition"]) not in errors]
    answers = await _split_call(ctx, Op.PRODUCE, parts, {"acks": acks, "timeout_ms": req.get("timeout", 0)}) if parts else {}
    _forget_stale(ctx, answers)
    if acks == 0:
        failed = {k: c for k, a in answers.items() if (c := a.get("error_code", 0))} | errors
        if not failed:
            return None
        # Kafka closes the connection, so a fire-and-forget producer refreshes its metadata
        log.info("closing connection from client %s: produce with acks=0 failed: %s", ctx.client_id,
                 ", ".join(f"{t}-{p} error {c}" for (t, p), c in failed.items()))
        return {CLOSE_INSTEAD: True}
    responses = []
    for t in req["topic_data"]:
        prs = []
        for p in t["partition_data"]:
            key = (t["name"], p["index"])
            a = answers.get(key, {"error_code": errors.get(key, Err.UNKNOWN_SERVER_ERROR)})
            prs.append({"index": p["index"], "error_code": a.get("error_code", 0), "base_offset": a.get("base_offset", -1),
                        "log_append_time": _append_time(a.get("log_append_time_ms", -1)), "log_start_offset": a.get("log_start_offset", -1),
                        "record_errors": a.get("record_errors", []), "error_message": a.get("error_message")})
        responses.append({"name": t["name"], "partition_responses": prs})
    return {"responses": responses, "throttle_time": 0}


async def _unverified(ctx: RequestContext, transactional_id: str, parts: list[dict[str, Any]]) -> dict[Any, int]:
    """Transactional batches for partitions not in their producer's Ongoing transaction, with
    the error to answer (KIP-890's verification, on by default in Kafka 4): a late write after
    an abort, or one never added, would otherwise block read_committed readers for good."""
    by_producer: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for p in parts:
        records = p["records"]
        if len(records) < BATCH_HEADER_SIZE:
            continue  # the shard refuses it as corrupt
        header = parse_header(records)
        if header.is_transactional:
            by_producer.setdefault((header.producer_id, header.producer_epoch), []).append((p["topic"], p["partition"]))
    from rafka.gateway.handlers.txn import verify_transaction

    out: dict[Any, int] = {}
    for (pid, epoch), keys in by_producer.items():
        try:
            out.update((await verify_transaction(ctx, transactional_id, pid, epoch, partitions=keys))[0])
        except Exception:  # the coordinator is down: retriable for a producer, as Kafka maps it
            out.update((k, Err.NOT_ENOUGH_REPLICAS) for k in keys)
    return out


async def _resolve_fetch_topics(ctx: RequestContext, req: dict[str, Any]) -> list[tuple[dict[str, Any], str | None, Any, dict[str, Any]]]:
    """(request topic, topic name or None, topic id, topic info or {}) for each requested topic."""
    out = []
    cache = topic_cache(ctx)
    if ctx.api_version >= 13:
        by_id = await cache.by_ids(ctx, [str(t["topic_id"]) for t in req["topics"]])
        for t in req["topics"]:
            info = by_id[str(t["topic_id"])]
            out.append((t, info["name"] if info else None, t["topic_id"], info or {}))
    else:
        infos = await cache.lookup(ctx, [t["topic"] for t in req["topics"]], False)
        for t in req["topics"]:
            info = infos.get(t["topic"])
            out.append((t, t["topic"] if info else None, uuid.UUID(info["topic_id"]) if info else None, info or {}))
    return out


async def _parked_fetch(ctx: RequestContext, parts: list[dict[str, Any]], extra: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """Fetch from every owning shard, each holding out for its share of ``min_bytes``. When the
    answers so far hold ``min_bytes``, or one has a partition error, cancel the others' waits
    (Kafka answers at once then too); when they hold less, the shards still waiting share what
    is left to make up (FETCH_RETARGET), so the fetch is never answered below ``min_bytes`` before
    ``max_wait``. A shard that has not answered ``FETCH_SLACK`` after ``max_wait`` is answered for
    with a retriable error: a fetch only reads, so nothing is lost by not waiting for a stalled
    shard."""
    router = ctx.gateway.router
    loop = asyncio.get_running_loop()
    by_shard: dict[int, list[dict[str, Any]]] = {}
    for p in parts:
        by_shard.setdefault(router.shard_for_partition(ctx.org_id, p["topic"], p["partition"]), []).append(p)
    fetch_id = f"{_gateway_tag}:{next(_fetch_ids)}"
    min_bytes = extra["min_bytes"]
    share = {**extra, "fetch_id": fetch_id, "min_bytes": max(1, -(-min_bytes // len(by_shard))) if min_bytes > 0 else 0}
    futs = {router.call(s, Op.FETCH, ctx.org_id, {**share, "partitions": ps}, ctx.trace): s
            for s, ps in by_shard.items()}
    deadline = loop.time() + extra["max_wait_ms"] / 1000 + FETCH_SLACK

    def cancel(shard: int) -> None:
        _quietly(router.call(shard, Op.FETCH_CANCEL, ctx.org_id, {"fetch_id": fetch_id}, ctx.trace))

    pending = set(futs)
    cancelled = False
    answered = 0  # bytes of records the shards have answered with
    while pending:
        done, pending = await asyncio.wait(pending, timeout=max(0.0, deadline - loop.time()),
                                           return_when=asyncio.FIRST_COMPLETED)
        if not done:
            break
        # a shard that is down fails at once: that ends no wait, its partitions answer after max_wait
        answers = [p for f in done if not f.exception() for p in f.result()["partitions"]]
        answered += sum(len(p.get("records") or b"") for p in answers)
        if cancelled or not pending:
            continue
        if any(p.get("error_code") for p in answers) or (answered and answered >= min_bytes):
            cancelled = True
            for f in pending:
                cancel(futs[f])
        elif answered:
            left = {"fetch_id": fetch_id, "min_bytes": max(1, -(-(min_bytes - answered) // len(pending)))}
            for f in pending:
                _quietly(router.call(futs[f], Op.FETCH_RETARGET, ctx.org_id, left, ctx.trace))
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for f, s in futs.items():
        if not f.done():
            _quietly(f)
            cancel(s)
            exc: BaseException | None = ShardUnavailable(f"shard {s} did not answer a fetch in time")
        else:
            exc = f.exception()
        if exc is not None:
            for p in by_shard[s]:
                out[(p["topic"], p["partition"])] = {"error_code": partition_error(exc), "unanswered": True}  # type: ignore[arg-type]
        else:
            for r in f.result()["partitions"]:
                out[(r["topic"], r["partition"])] = r
    if len(by_shard) > 1:
        _spend_max_bytes(parts, out, extra["max_bytes"])
    return out


def _quietly(fut: asyncio.Future[Any]) -> None:
    """Nobody waits for ``fut``: retrieve its outcome when it comes, so asyncio logs nothing."""
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())


def _spend_max_bytes(parts: list[dict[str, Any]], out: dict[tuple[str, int], dict[str, Any]], max_bytes: int) -> None:
    """Hold answers from several shards to the request's one ``max_bytes``, in request order, as
    Kafka's readFromLog does: the first partition with data may overrun it; later ones keep the
    whole batches that still fit."""
    spent = 0
    for p in parts:
        a = out.get((p["topic"], p["partition"]))
        records = a.get("records") if a else None
        if not records:
            continue
        if spent and spent + len(records) > max_bytes:
            kept = 0
            try:
                for batch in split_batches(records):
                    if spent + kept + len(batch) > max_bytes:
                        break
                    kept += len(batch)
            except CorruptRecordError:  # not ours to judge here: pass it on whole, as the shard read it
                kept = len(records)
            records = a["records"] = records[:kept]  # type: ignore[index]
        spent += len(records)


@api(1, 4, 17, "data.fetch")
async def fetch(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    """A Fetch waits for its connection's Fetch before it (``KafkaConnection.fetch_turn``),
    holding the requests after it so their ops still reach the shards in request order."""
    wait, release = ctx.connection.fetch_turn()
    try:
        if wait is not None:
            await ctx.before_op(wait)
        return await _fetch(ctx, req)
    finally:
        release()


async def _fetch(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    if req.get("session_epoch", -1) not in (0, -1):  # incremental: rafka never opened a session (KIP-227)
        return {"throttle_time": 0, "error_code": Err.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []}
    try:
        resolved = await _resolve_fetch_topics(ctx, req)
    except Exception:  # the catalogue's shard is down: a retriable error for every partition
        return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
            {"topic": t.get("topic"), "topic_id": t.get("topic_id"), "partitions": [
                {"partition_index": p["partition"], "error_code": Err.NOT_LEADER_OR_FOLLOWER, "high_watermark": -1,
                 "last_stable_offset": -1, "log_start_offset": -1, "records": b""} for p in t["partitions"]]}
            for t in req["topics"]]}
    parts = []
    refused: dict[tuple[str, int], dict[str, Any]] = {}
    unknown = False  # like any partition error, an unknown topic or partition ends the long poll
    for t, name, topic_id, info in resolved:
        if name is None:
            unknown = unknown or bool(t["partitions"])
            continue
        for p in t["partitions"]:
            if not 0 <= p["partition"] < info["partitions"]:
                unknown = True  # Kafka: UNKNOWN_TOPIC_OR_PARTITION
                continue
            part = {"topic": name, "partition": p["partition"], "fetch_offset": p["fetch_offset"],
                    "partition_max_bytes": p["partition_max_bytes"], **_incarnation(info),
                    "topic_id": str(topic_id) if topic_id else None}
            if epoch_error := _leader_epoch_error(p.get("current_leader_epoch")):
                refused[(name, p["partition"])] = {"error_code": epoch_error}
            elif ctx.api_version < 10 and (info.get("configs") or {}).get("compression.type") == "zstd":
                refused[(name, p["partition"])] = {"error_code": Err.UNSUPPORTED_COMPRESSION_TYPE}
            elif _unconfirmed(ctx.gateway.router, ctx.gateway.router.shard_for_partition(ctx.org_id, name, p["partition"]),
                              part):
                refused[(name, p["partition"])] = {"error_code": Err.NOT_LEADER_OR_FOLLOWER}
            else:
                parts.append(part)
    extra = {"max_wait_ms": 0 if refused or unknown else req.get("max_wait", 0), "min_bytes": req.get("min_bytes", 1),
             "max_bytes": req.get("max_bytes", 2**31 - 1), "isolation_level": req.get("isolation_level", 0)}
    answers = await _parked_fetch(ctx, parts, extra) if parts else {}
    missing = Err.UNKNOWN_TOPIC_ID if ctx.api_version >= 13 else Err.UNKNOWN_TOPIC_OR_PARTITION
    await _answer_deleted(ctx, answers, _forget_stale(ctx, answers), resolved, missing)
    answers.update(refused)
    responses = []
    for t, name, topic_id, _ in resolved:
        prs = []
        for p in t["partitions"]:
            a = (answers.get((name, p["partition"]), {"error_code": Err.UNKNOWN_TOPIC_OR_PARTITION})
                 if name else {"error_code": missing})
            prs.append({"partition_index": p["partition"], "error_code": a.get("error_code", 0),
                        "high_watermark": a.get("high_watermark", -1), "last_stable_offset": a.get("last_stable_offset", -1),
                        "log_start_offset": a.get("log_start_offset", -1),
                        "aborted_transactions": a.get("aborted_transactions"), "preferred_read_replica": -1,
                        "records": a.get("records") or b""})
        responses.append({"topic": t.get("topic", name), "topic_id": topic_id, "partitions": prs})
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}


# ListOffsets' special timestamps and the version each came with (Kafka's
# isListOffsetsTimestampUnsupported): max timestamp (KIP-734), earliest local (KIP-1005),
# latest tiered (KIP-1005)
_SPECIAL_TIMESTAMP_SINCE = {-3: 7, -4: 8, -5: 9}


@api(2, 1, 9, "data.list-offsets")
async def list_offsets(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    infos, missing = await _topics(ctx, [t["name"] for t in req["topics"]], False)
    named = collections.Counter((t["name"], p["partition_index"]) for t in req["topics"] for p in t["partitions"])
    refused = {k: {"error_code": Err.INVALID_REQUEST} for k, n in named.items() if n > 1}  # Kafka: each one
    parts = []
    for t in req["topics"]:
        info = infos.get(t["name"])
        for p in t["partitions"] if info else ():
            key = (t["name"], p["partition_index"])
            if not 0 <= key[1] < info["partitions"] or key in refused:  # type: ignore[index]
                continue
            if code := _leader_epoch_error(p.get("current_leader_epoch")):
                refused[key] = {"error_code": code}
            elif ctx.api_version < _SPECIAL_TIMESTAMP_SINCE.get(p["timestamp"], 0):
                refused[key] = {"error_code": Err.UNSUPPORTED_VERSION}
            else:
                parts.append({"topic": key[0], "partition": key[1], "timestamp": p["timestamp"],
                              **_incarnation(info)})  # type: ignore[arg-type]
    answers = await _split_call(ctx, Op.LIST_OFFSETS, parts, {"isolation_level": req.get("isolation_level", 0)}) if parts else {}
    _forget_stale(ctx, answers)
    answers.update(refused)
    topics = []
    for t in req["topics"]:
        prs = []
        for p in t["partitions"]:
            a = answers.get((t["name"], p["partition_index"]), {"error_code": missing})
            offset = a.get("offset", -1)
            prs.append({"partition_index": p["partition_index"], "error_code": a.get("error_code", 0),
                        "timestamp": a.get("timestamp", -1), "offset": offset,
                        "leader_epoch": LEADER_EPOCH if offset >= 0 else -1})
        topics.append({"name": t["name"], "partitions": prs})
    return {"throttle_time": 0, "topics": topics}


@api(23, 2, 4, "data.offset-for-leader-epoch")
async def offset_for_leader_epoch(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    """The end offset of a leader epoch (KIP-101/320), as Kafka's LeaderEpochFileCache.endOffsetFor:
    rafka's partitions have one epoch, ``LEADER_EPOCH``, so it ends at the log end offset, and any
    other epoch is undefined (-1, -1). Each entry is answered on its own, as Kafka does."""
    infos, missing = await _topics(ctx, [t["topic"] for t in req["topics"]], False)
    wanted = {}  # the partitions whose log end offset an entry needs
    for t in req["topics"]:
        info = infos.get(t["topic"])
        for p in t["partitions"] if info else ():
            if 0 <= p["partition"] < info["partitions"] and p["leader_epoch"] == LEADER_EPOCH:  # type: ignore[index]
                wanted[(t["topic"], p["partition"])] = {"topic": t["topic"], "partition": p["partition"],
                                                        "timestamp": -1, **_incarnation(info)}  # type: ignore[arg-type]
    answers = await _split_call(ctx, Op.LIST_OFFSETS, list(wanted.values()), {"isolation_level": 0}) if wanted else {}
    _forget_stale(ctx, answers)
    topics = []
    for t in req["topics"]:
        info = infos.get(t["topic"])
        prs = []
        for p in t["partitions"]:
            out = {"partition": p["partition"], "error_code": 0, "leader_epoch": -1, "end_offset": -1}
            if info is None or not 0 <= p["partition"] < info["partitions"]:
                out["error_code"] = missing
            elif code := _leader_epoch_error(p.get("current_leader_epoch")):
                out["error_code"] = code
            elif p["leader_epoch"] == LEADER_EPOCH:
                a = answers.get((t["topic"], p["partition"]), {"error_code": Err.UNKNOWN_TOPIC_OR_PARTITION})
                if a.get("error_code"):
                    out["error_code"] = a["error_code"]
                else:
                    out.update(leader_epoch=LEADER_EPOCH, end_offset=a["offset"])
            prs.append(out)
        topics.append({"topic": t["topic"], "partitions": prs})
    return {"throttle_time": 0, "topics": topics}


@api(21, 0, 2, "data.delete-records")
async def delete_records(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    req = {**req, "topics": _last_per_partition(req["topics"], "partitions", "partition_index")}
    infos, missing = await _topics(ctx, [t["name"] for t in req["topics"]], False)
    parts = [{"topic": t["name"], "partition": p["partition_index"], "offset": p["offset"],
              **_incarnation(infos[t["name"]]), **_configs(infos[t["name"]])}  # type: ignore[arg-type]
             for t in req["topics"] if infos.get(t["name"]) for p in t["partitions"]
             if 0 <= p["partition_index"] < infos[t["name"]]["partitions"]]  # type: ignore[index]
    answers = await _split_call(ctx, Op.DELETE_RECORDS, parts, {}) if parts else {}
    _forget_stale(ctx, answers)
    topics = []
    for t in req["topics"]:
        prs = []
        for p in t["partitions"]:
            a = answers.get((t["name"], p["partition_index"]), {"error_code": missing})
            prs.append({"partition_index": p["partition_index"], "low_watermark": a.get("low_watermark", -1),
                        "error_code": a.get("error_code", 0)})
        topics.append({"name": t["name"], "partitions": prs})
    return {"throttle_time": 0, "topics": topics}


@api(22, 0, 5, "data.init-producer-id")
async def init_producer_id(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    if req.get("transactional_id") == "":  # Kafka's TransactionCoordinator: empty is not null
        return {"throttle_time": 0, "error_code": Err.INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
    if req.get("transactional_id"):
        from rafka.gateway.handlers.txn import init_transactional_producer_id

        return await init_transactional_producer_id(ctx, req)
    router = ctx.gateway.router
    try:
        resp = await router.call(router.shard_for_group(ctx.org_id, ids.PRODUCER_IDS_KEY), Op.INIT_PRODUCER_ID,
                                 ctx.org_id, {"transactional_id": None}, ctx.trace)
    except Exception:
        return {"error_code": Err.COORDINATOR_NOT_AVAILABLE, "producer_id": -1, "producer_epoch": -1}
    return {"throttle_time": 0, **resp}
