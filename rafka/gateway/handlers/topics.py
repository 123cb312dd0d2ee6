"""Metadata and topic administration: the catalogue lives on one shard per organisation.

Version notes:
- Metadata 0–12: v0 an empty topic list means all topics, v1+ null means all;
  v4+ ``allow_auto_topic_creation``; v10+ topic ids. The gateway is the only broker,
  the controller and every partition's leader.
The catalogue of an organisation is owned by the shard of ``stable_hash(org_id,
"\\0topics")``, so every gateway sees the same topics.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers.errors import Err, coordinator_error
from rafka.gateway.handlers.kafka import CLUSTER_ID, broker
from rafka.rail import Op

log = logging.getLogger("rafka.gateway")


async def catalog_call(ctx: RequestContext, op: Op, payload: dict[str, Any]) -> dict[str, Any]:
    """Call the shard that owns this organisation's topic catalogue."""
    router = ctx.gateway.router
    return await router.call(router.shard_for_catalog(ctx.org_id), op, ctx.org_id, payload, ctx.trace)  # type: ignore[no-any-return]


def _topic_entry(ctx: RequestContext, t: dict[str, Any]) -> dict[str, Any]:
    node = ctx.gateway.node_id
    topic_id = t.get("topic_id")
    return {
        "error_code": t.get("error_code", 0),
        "name": t["name"],
        "topic_id": uuid.UUID(topic_id) if topic_id else uuid.UUID(int=0),
        "is_internal": False,
        "partitions": [{"error_code": 0, "partition_index": p, "leader_id": node, "leader_epoch": 0,
                        "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
                       for p in range(t.get("partitions", 0))],
        "topic_authorized_operations": -2147483648,
    }


@api(3, 0, 12, "kafka.metadata")
async def metadata(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    requested = req.get("topics")
    names: list[str] | None
    if requested is None or (ctx.api_version == 0 and not requested):
        names = None
    else:
        names = [t.get("name") for t in requested if t.get("name")]
    auto_create = bool(req.get("allow_auto_topic_creation", True)) and ctx.gateway.config.auto_create_topics
    payload = {"names": names, "auto_create": auto_create and names is not None,
               "default_partitions": ctx.gateway.config.default_partitions}
    try:
        resp = await catalog_call(ctx, Op.LIST_TOPICS, payload)
        topics = [_topic_entry(ctx, t) for t in resp["topics"]]
    except Exception as exc:
        log.warning("metadata: topic catalogue unavailable: %r", exc)
        code = Err.LEADER_NOT_AVAILABLE if coordinator_error(exc) else Err.UNKNOWN_SERVER_ERROR
        topics = [{"error_code": code, "name": n, "topic_id": uuid.UUID(int=0), "partitions": []}
                  for n in (names or [])]
    return {"throttle_time": 0, "brokers": [broker(ctx)], "cluster_id": CLUSTER_ID,
            "controller_id": ctx.gateway.node_id, "topics": topics,
            "cluster_authorized_operations": -2147483648}
