"""Transaction APIs: routed to the transaction coordinator shard of (org_id, transactional_id).

Version notes:
- InitProducerId 0–5 (here when a transactional id is given; data.py delegates).
  PRODUCER_FENCED (v4+) reads INVALID_PRODUCER_EPOCH for older versions, as in Kafka.
- AddPartitionsToTxn 0–3: the client versions (v4+ is Kafka's broker-to-broker
  batch and is not offered). A request naming an unknown topic fails those
  partitions with UNKNOWN_TOPIC_OR_PARTITION and the rest with OPERATION_NOT_ATTEMPTED.
- AddOffsetsToTxn 0–3, EndTxn 0–4, TxnOffsetCommit 0–3 (to the group's shard):
  no KIP-890 (transaction version 2) versions are offered.
- WriteTxnMarkers 1–2 (``Admin.abortTransaction``, ``kafka-transactions.sh abort``):
  writes the markers to the partitions named, where the producer has an open
  transaction; a marker older than the producer's epoch there is
  INVALID_PRODUCER_EPOCH; the coordinator is not told, as in Kafka.
- DescribeTransactions 0, ListTransactions 0–1 fan out to the owning shards;
  DescribeProducers 0 asks each partition's shard for its producers and the
  start offset of their open transaction (``kafka-transactions.sh describe-producers``).
EndTxn answers once every participant has its marker (see rafka.gateway.txn); if
a participant's shard is down, the decision is already durable, so EndTxn still
succeeds and the sweeper writes the missing markers when the shard is back.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from typing import Any

from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers.errors import Err, coordinator_error, partition_error, shard_down_error
from rafka.gateway.handlers.topics import group_call, known_partitions, topic_cache, with_refused
from rafka.gateway.txn import complete_transaction
from rafka.rail import Op

PRODUCER_FENCED = 90
INVALID_PRODUCER_EPOCH = 47
OPERATION_NOT_ATTEMPTED = 55
CONCURRENT_TRANSACTIONS = 51


def _fenced_for(code: int, version: int, fenced_from: int) -> int:
    """PRODUCER_FENCED for versions that know it, INVALID_PRODUCER_EPOCH before."""
    return INVALID_PRODUCER_EPOCH if code == PRODUCER_FENCED and version < fenced_from else code


async def _call_txn(ctx: RequestContext, op: Op, tid: str, payload: dict[str, Any]) -> tuple[dict[str, Any] | None, int]:
    if not tid:  # Kafka's TransactionCoordinator refuses an empty transactional id
        return None, Err.INVALID_REQUEST
    try:
        return await group_call(ctx, op, tid, payload), 0
    except Exception as exc:
        return None, coordinator_error(exc)


async def init_transactional_producer_id(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    """InitProducerId with a transactional id; an Ongoing transaction is fenced and aborted first."""
    payload = {"transactional_id": req["transactional_id"],
               "transaction_timeout_ms": req["transaction_timeout"],
               "producer_id": req.get("producer_id", -1), "producer_epoch": req.get("producer_epoch", -1)}
    for _attempt in range(3):
        resp, err = await _call_txn(ctx, Op.TXN_INIT_PRODUCER_ID, req["transactional_id"], payload)
        if resp is None:
            return {"throttle_time": 0, "error_code": err, "producer_id": -1, "producer_epoch": -1}
        complete = resp.pop("complete", None)
        if complete is None or not await complete_transaction(ctx.gateway.router, complete, ctx.trace):
            break
        payload["producer_id"] = payload["producer_epoch"] = -1  # the retry after our own fence
    assert resp is not None
    resp["error_code"] = _fenced_for(resp["error_code"], ctx.api_version, 4)
    return {"throttle_time": 0, **resp}


@api(24, 0, 3, "txn.add-partitions")
async def add_partitions_to_txn(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    tid = req["v3_and_below_transactional_id"]
    topics = req.get("v3_and_below_topics") or []
    try:
        infos = await topic_cache(ctx).lookup(ctx, [t["name"] for t in topics], False)
    except Exception:
        infos = None
    errors: dict[tuple[str, int], int] = {}
    parts = []
    for t in topics:
        info = (infos or {}).get(t["name"])
        for p in t["partitions"]:
            if infos is None:
                errors[(t["name"], p)] = Err.COORDINATOR_NOT_AVAILABLE
            elif info is None or not 0 <= p < info["partitions"]:
                errors[(t["name"], p)] = Err.UNKNOWN_TOPIC_OR_PARTITION
            else:
                parts.append([t["name"], p])
    if errors:
        code = OPERATION_NOT_ATTEMPTED
    else:
        resp, err = await _call_txn(ctx, Op.TXN_ADD_PARTITIONS, tid, {
            "transactional_id": tid, "producer_id": req["v3_and_below_producer_id"],
            "producer_epoch": req["v3_and_below_producer_epoch"], "partitions": parts})
        code = _fenced_for(resp["error_code"] if resp is not None else err, ctx.api_version, 2)
    return {"throttle_time": 0, "results_by_topic_v3_and_below": [
        {"name": t["name"], "results_by_partition": [
            {"partition_index": p, "partition_error_code": errors.get((t["name"], p), code)} for p in t["partitions"]]}
        for t in topics]}


@api(25, 0, 3, "txn.add-offsets")
async def add_offsets_to_txn(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    resp, err = await _call_txn(ctx, Op.TXN_ADD_OFFSETS, req["transactional_id"], {
        k: req[k] for k in ("transactional_id", "producer_id", "producer_epoch", "group_id")})
    return {"throttle_time": 0, "error_code": _fenced_for(resp["error_code"] if resp else err, ctx.api_version, 2)}


@api(26, 0, 4, "txn.end-txn")
async def end_txn(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    resp, err = await _call_txn(ctx, Op.TXN_END, req["transactional_id"], {
        k: req[k] for k in ("transactional_id", "producer_id", "producer_epoch", "committed")})
    if resp is None:
        return {"throttle_time": 0, "error_code": err}
    complete = resp.get("complete")
    if complete is not None:
        await complete_transaction(ctx.gateway.router, complete, ctx.trace)  # else the sweeper finishes it
    return {"throttle_time": 0, "error_code": _fenced_for(resp["error_code"], ctx.api_version, 2)}


@api(28, 0, 3, "txn.offset-commit")
async def txn_offset_commit(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    router = ctx.gateway.router
    topics, unknown = await known_partitions(ctx, req["topics"])
    if not topics:
        return {"throttle_time": 0, "topics": unknown}
    payload = {k: req.get(k) for k in ("transactional_id", "group_id", "producer_id", "producer_epoch",
                                       "generation_id", "member_id", "group_instance_id")}
    payload["topics"] = topics
    if payload["generation_id"] is None:
        payload["generation_id"] = -1
    # Kafka's GroupCoordinatorService refuses an empty group id before the transaction check
    err = Err.INVALID_GROUP_ID if not req.get("group_id") else await _unverified_group(ctx, req)
    if not err:
        try:
            resp = await router.call(router.shard_for_group(ctx.org_id, req["group_id"]), Op.TXN_OFFSET_COMMIT,
                                     ctx.org_id, payload, ctx.trace)
        except Exception as exc:
            err = coordinator_error(exc)
    if err:
        resp = {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": err} for p in t["partitions"]]}
            for t in topics]}
    return {"throttle_time": 0, **resp, "topics": with_refused(unknown, resp["topics"])}


async def verify_transaction(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int, *,
                             partitions: Sequence[tuple[str, int]] = (), groups: Sequence[str] = ()
                             ) -> tuple[dict[tuple[str, int], int], dict[str, int]]:
    """KIP-890's check with the transaction coordinator that ``partitions`` and ``groups`` are in
    the producer's Ongoing transaction: the error of each one that is not, a fenced producer's
    INVALID_PRODUCER_EPOCH as Kafka's AddPartitionsToTxnManager maps it. Raises when the
    coordinator cannot answer."""
    resp = await ctx.before_op(group_call(ctx, Op.TXN_VERIFY, transactional_id, {
        "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
        "partitions": [list(k) for k in partitions], "groups": list(groups)}))

    def mapped(code: int) -> int:
        return INVALID_PRODUCER_EPOCH if code == PRODUCER_FENCED else int(code)

    return ({(t, p): mapped(code) for t, p, code in resp["errors"]},
            {g: mapped(code) for g, code in resp.get("group_errors", ())})


async def _unverified_group(ctx: RequestContext, req: dict[str, Any]) -> int:
    """KIP-890's verification of a TxnOffsetCommit: the group must be in the producer's Ongoing
    transaction. Without it a commit held up past an abort (a timeout's, which bumps the epoch)
    stays pending for good, holding the group's offsets unstable, and a later commit of the same
    producer id would commit it. The error to answer, or 0."""
    try:
        _, refused = await verify_transaction(ctx, req["transactional_id"], req["producer_id"],
                                              req["producer_epoch"], groups=[req["group_id"]])
    except Exception:  # the transaction coordinator is down: retriable
        return Err.COORDINATOR_NOT_AVAILABLE
    return refused.get(req["group_id"], 0)


@api(65, 0, 0, "txn.describe")
async def describe_transactions(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    router = ctx.gateway.router
    tids = list(req.get("transactional_ids") or [])
    by_shard: dict[int, list[str]] = {}
    for tid in tids:
        by_shard.setdefault(router.shard_for_group(ctx.org_id, tid), []).append(tid)
    shards = list(by_shard)
    results = await asyncio.gather(*(router.call(s, Op.TXN_DESCRIBE, ctx.org_id, {"transactional_ids": by_shard[s]},
                                                 ctx.trace) for s in shards), return_exceptions=True)
    found: dict[str, dict[str, Any]] = {}
    for s, res in zip(shards, results):
        for tid in by_shard[s]:
            if isinstance(res, BaseException):
                found[tid] = {"error_code": coordinator_error(res), "transactional_id": tid, "transaction_state": "",
                              "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
                              "producer_epoch": 0, "topics": []}
        if not isinstance(res, BaseException):
            for st in res["transaction_states"]:
                found[st["transactional_id"]] = st
    states = []
    for tid in tids:  # kio wants an aware datetime; Kafka sends -1 when there is no transaction
        st = dict(found[tid])
        st["transaction_start_time"] = datetime.datetime.fromtimestamp(int(st["transaction_start_time"]) / 1000,
                                                                       datetime.UTC)
        states.append(st)
    return {"throttle_time": 0, "transaction_states": states}


KNOWN_STATES = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
                "PrepareEpochFence"}


@api(66, 0, 1, "txn.list")
async def list_transactions(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    router = ctx.gateway.router
    states = list(req.get("state_filters") or [])
    payload = {"state_filters": states, "producer_id_filters": list(req.get("producer_id_filters") or []),
               "duration_filter": req.get("duration_filter", -1)}
    results = await asyncio.gather(*(router.call(s, Op.TXN_LIST, ctx.org_id, payload, ctx.trace)
                                     for s in range(router.shard_count)), return_exceptions=True)
    out: list[dict[str, Any]] = []
    error = 0
    for res in results:
        if isinstance(res, BaseException):  # as a transaction log partition still loading
            error = shard_down_error(res, Err.COORDINATOR_LOAD_IN_PROGRESS)
        else:
            out.extend(res["transaction_states"])
    return {"throttle_time": 0, "error_code": error,
            "unknown_state_filters": [s for s in states if s not in KNOWN_STATES],
            "transaction_states": sorted(out, key=lambda t: t["transactional_id"])}


@api(61, 0, 0, "txn.describe-producers")
async def describe_producers(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    from rafka.gateway.handlers.data import _split_call, _topics

    topics = req.get("topics") or []
    infos, missing = await _topics(ctx, [t["name"] for t in topics], False)
    parts = [{"topic": t["name"], "partition": p, "topic_id": infos[t["name"]]["topic_id"]}  # type: ignore[index]
             for t in topics if infos.get(t["name"]) for p in t["partition_indexes"]
             if 0 <= p < infos[t["name"]]["partitions"]]  # type: ignore[index]
    answers = await _split_call(ctx, Op.DESCRIBE_PRODUCERS, parts, {}) if parts else {}
    out = []
    for t in topics:
        prs = []
        for p in t["partition_indexes"]:
            a = answers.get((t["name"], p), {"error_code": missing if not infos.get(t["name"])
                                             else Err.UNKNOWN_TOPIC_OR_PARTITION})
            prs.append({"partition_index": p, "error_code": a.get("error_code", 0), "error_message": None,
                        "active_producers": a.get("active_producers", [])})
        out.append({"name": t["name"], "partitions": prs})
    return {"throttle_time": 0, "topics": out}


@api(27, 1, 2, "txn.write-markers")
async def write_txn_markers(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    """Commit or abort markers for a producer's open transaction on the partitions named: the
    admin's way to end a hanging transaction (one its coordinator no longer tracks)."""
    from rafka.gateway.handlers.data import _topics

    router = ctx.gateway.router
    out = []
    for m in req["markers"]:
        infos, missing = await _topics(ctx, [t["name"] for t in m["topics"]], False)
        codes: dict[tuple[str, int], int] = {}
        by_shard: dict[int, list[list[Any]]] = {}
        for t in m["topics"]:
            info = infos.get(t["name"])
            for p in t["partition_indexes"]:
                if info is None or not 0 <= p < info["partitions"]:
                    codes[(t["name"], p)] = missing if info is None else Err.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    by_shard.setdefault(router.shard_for_partition(ctx.org_id, t["name"], p), []).append([t["name"], p])
        marker = {"producer_id": m["producer_id"], "producer_epoch": m["producer_epoch"],
                  "committed": bool(m["transaction_result"]), "groups": []}
        shards = list(by_shard)
        results = await asyncio.gather(*(router.call(s, Op.TXN_WRITE_MARKERS, ctx.org_id,
                                                     {"markers": [{**marker, "partitions": by_shard[s]}]}, ctx.trace)
                                         for s in shards), return_exceptions=True)
        for s, res in zip(shards, results):
            for topic, p in by_shard[s]:
                codes[(topic, p)] = partition_error(res) if isinstance(res, BaseException) else 0
            if not isinstance(res, BaseException):
                codes.update(((topic, p), code) for topic, p, code in res.get("refused", ()))
        out.append({"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p, "error_code": codes[(t["name"], p)]}
                                               for p in t["partition_indexes"]]} for t in m["topics"]]})
    return {"markers": out}
