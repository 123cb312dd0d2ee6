"""Cluster-level APIs the gateway answers itself: ApiVersions, FindCoordinator, DescribeCluster.

Version notes:
- ApiVersions 0–4: v3+ flexible; an unsupported version is answered in v0 format
  by the connection (see server.py). The list comes from the handler registry.
- FindCoordinator 0–6: v4+ batches keys (``coordinator_keys``); the gateway is
  every group's and transaction's coordinator, the shards behind it own the state.
- DescribeCluster 0–1: the gateway is the only broker and the controller.
"""

from __future__ import annotations

from typing import Any

from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers import acl

CLUSTER_ID = "rafka-cluster"


def broker(ctx: RequestContext) -> dict[str, Any]:
    gw = ctx.gateway
    return {"node_id": gw.node_id, "broker_id": gw.node_id, "host": gw.advertised_host,
            "port": gw.advertised_port, "rack": None}


@api(18, 0, 4, "kafka.api-versions")
async def api_versions(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    from rafka.gateway.server import supported_api_keys

    return {"error_code": 0, "api_keys": supported_api_keys(), "throttle_time": 0,
            "supported_features": [], "finalized_features_epoch": -1, "finalized_features": []}


@api(10, 0, 6, "kafka.find-coordinator")
async def find_coordinator(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    b = broker(ctx)
    keys = req.get("coordinator_keys")
    if keys is None or ctx.api_version < 4:
        keys = [req.get("key", "")]
    coordinators = [{"key": k, "node_id": b["node_id"], "host": b["host"], "port": b["port"],
                     "error_code": 0, "error_message": None} for k in keys]
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "node_id": b["node_id"],
            "host": b["host"], "port": b["port"], "coordinators": coordinators}


@api(60, 0, 1, "kafka.describe-cluster")
async def describe_cluster(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": CLUSTER_ID, "controller_id": ctx.gateway.node_id, "brokers": [broker(ctx)],
            "cluster_authorized_operations": acl.authorized(req.get("include_cluster_authorized_operations"),
                                                            acl.CLUSTER)}
