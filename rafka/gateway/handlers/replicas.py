"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments.

How this works: every rafka partition has one replica, on the broker the gateway
names in Metadata (itself), and it is always the leader and in sync. So a leader
election is never needed and no reassignment is ever in progress; these handlers
answer as a Kafka 4 controller (ReplicationControlManager) answers for such a
cluster, with its error codes and messages, checking only that the topics and
partitions named exist in the client's organisation.
"""

from __future__ import annotations

import logging
from typing import Any

from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers.errors import Err, shard_down_error
from rafka.gateway.handlers.topics import catalog_call, topic_cache
from rafka.rail import Op

log = logging.getLogger("rafka.gateway")

ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
PREFERRED, UNCLEAN = 0, 1


async def _partition_counts(ctx: RequestContext, names: list[str]) -> dict[str, int] | int:
    """Partition count by existing topic name, or the error code when the catalogue is down."""
    try:
        infos = await topic_cache(ctx).lookup(ctx, names, False)
    except Exception as exc:
        log.warning("topic catalogue unavailable: %r", exc)
        return shard_down_error(exc)
    return {name: info["partitions"] for name, info in infos.items() if info is not None}


@api(43, 0, 2, "kafka.elect-leaders")
async def elect_leaders(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    """Kafka's ReplicationControlManager.electLeaders: never needed, the one replica leads."""
    requested = req.get("topic_partitions")
    election_type = req.get("election_type", PREFERRED)
    if election_type not in (PREFERRED, UNCLEAN):
        return _elect_refused(requested, Err.INVALID_REQUEST, f"Unknown election type {election_type}")
    if requested is None:
        # all partitions: Kafka lists every topic, leaving out the partitions that already have
        # the leader asked for (here, all of them)
        try:
            listed = await catalog_call(ctx, Op.LIST_TOPICS, {"names": None, "auto_create": False})
        except Exception as exc:
            log.warning("elect leaders: topic catalogue unavailable: %r", exc)
            return _elect_refused(None, shard_down_error(exc), None)
        return {"throttle_time": 0, "error_code": 0, "replica_election_results": [
            {"topic": t["name"], "partition_result": []} for t in listed["topics"] if not t.get("error_code")]}
    counts = await _partition_counts(ctx, [t["topic"] for t in requested])
    if isinstance(counts, int):
        return _elect_refused(requested, counts, None)
    results = []
    for t in requested:
        name, partitions = t["topic"], t.get("partitions") or []
        out = []
        for index in partitions:  # a partition named twice is answered twice, as Kafka does
            if name not in counts:
                out.append(_result(index, Err.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}"))
            elif not 0 <= index < counts[name]:
                out.append(_result(index, Err.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{index}"))
            else:
                out.append(_result(index, ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."))
        results.append({"topic": name, "partition_result": out})
    return {"throttle_time": 0, "error_code": 0, "replica_election_results": results}


def _result(index: int, code: int, message: str | None) -> dict[str, Any]:
    return {"partition_id": index, "error_code": code, "error_message": message}


def _elect_refused(requested: list[dict[str, Any]] | None, code: int, message: str | None) -> dict[str, Any]:
    """A whole request refused (ElectLeadersRequest.getErrorResponse): every partition and the top level."""
    return {"throttle_time": 0, "error_code": code, "replica_election_results": [
        {"topic": t["topic"], "partition_result": [_result(i, code, message) for i in t.get("partitions") or []]}
        for t in requested or ()]}


@api(45, 0, 1, "kafka.alter-partition-reassignments")
async def alter_partition_reassignments(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    """Kafka's alterPartitionReassignments: only the current replica list is a valid target."""
    topics = req.get("topics") or []
    counts = await _partition_counts(ctx, [t["name"] for t in topics])
    node = ctx.gateway.node_id
    responses = []
    for t in topics:
        name = t["name"]
        out = []
        for p in t.get("partitions") or []:
            index = p["partition_index"]
            if isinstance(counts, int):
                code, message = counts, None
            elif name not in counts:
                code, message = Err.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}."
            elif not 0 <= index < counts[name]:
                code, message = Err.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{index}."
            elif p.get("replicas") is None:  # a cancellation, and nothing is being reassigned
                code, message = NO_REASSIGNMENT_IN_PROGRESS, None
            else:
                message = _replicas_refusal(p["replicas"], node)
                code = Err.NONE if message is None else Err.INVALID_REPLICA_ASSIGNMENT
            out.append({"partition_index": index, "error_code": code, "error_message": message})
        responses.append({"name": name, "partitions": out})
    return {"throttle_time": 0, "allow_replication_factor_change": req.get("allow_replication_factor_change", True),
            "error_code": 0, "error_message": None, "responses": responses}


def _replicas_refusal(replicas: list[int], node: int) -> str | None:
    """Kafka's validateManualPartitionAssignment against the one registered broker, ``node``; the
    only assignment it accepts is the current one, ``[node]``, which changes nothing."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(replicas):
        if broker_id != node:
            return f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
        if broker_id == previous:
            return f"The manual partition assignment includes the broker {broker_id} more than once."
        previous = broker_id
    return None


@api(46, 0, 0, "kafka.list-partition-reassignments")
async def list_partition_reassignments(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    """Nothing is ever being reassigned; Kafka leaves out the topics and partitions named that are
    not (unknown ones included), without an error."""
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": []}
