"""Cluster-level APIs the gateway answers itself: ApiVersions, FindCoordinator, DescribeCluster.

Version notes:
- ApiVersions 0–4: v3+ flexible; an unsupported version is answered in v0 format
  by the connection (see server.py). The list comes from the handler registry.
- FindCoordinator 0–6: v4+ batches keys (``coordinator_keys``); the gateway is
  every group's and transaction's coordinator, the shards behind it own the state.
  A key whose shard is down answers COORDINATOR_NOT_AVAILABLE with no node, as Kafka
  answers for a coordinator partition without a live leader: clients look again
  after their backoff instead of sending each group op to a coordinator that fails it.
- DescribeCluster 0–1: the gateway is the only broker and the controller.
- DescribeAcls, CreateAcls, DeleteAcls 1–3: rafka has no ACLs (a client may do
  everything within its organisation), so each answers as a Kafka without an
  authorizer: SECURITY_DISABLED, "No Authorizer is configured." (AclApis).
"""

from __future__ import annotations

import re
from typing import Any

from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers import acl
from rafka.gateway.handlers.errors import Err


def broker(ctx: RequestContext) -> dict[str, Any]:
    gw = ctx.gateway
    return {"node_id": gw.node_id, "broker_id": gw.node_id, "host": gw.advertised_host,
            "port": gw.advertised_port, "rack": None}


# KIP-511: what ApiVersions v3+ accepts as client_software_name and _version
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
INVALID_REQUEST = 42
MISMATCHED_ENDPOINT_TYPE = 114
UNSUPPORTED_ENDPOINT_TYPE = 115
SECURITY_DISABLED = 54
NO_AUTHORIZER = "No Authorizer is configured."
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
GROUP_COORDINATOR, TRANSACTION_COORDINATOR = 0, 1


@api(18, 0, 4, "kafka.api-versions")
async def api_versions(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    from rafka.gateway.server import supported_api_keys

    if ctx.api_version >= 3 and not all(_SOFTWARE.fullmatch(req.get(f) or "") for f in
                                        ("client_software_name", "client_software_version")):
        return {"error_code": INVALID_REQUEST, "api_keys": [], "throttle_time": 0}
    return {"error_code": 0, "api_keys": supported_api_keys(), "throttle_time": 0,
            "supported_features": [], "finalized_features_epoch": -1, "finalized_features": []}


@api(10, 0, 6, "kafka.find-coordinator")
async def find_coordinator(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    b = broker(ctx)
    keys = req.get("coordinator_keys")
    if keys is None or ctx.api_version < 4:
        keys = [req.get("key", "")]
    key_type = req.get("key_type", GROUP_COORDINATOR)
    if key_type not in (GROUP_COORDINATOR, TRANSACTION_COORDINATOR):
        # Kafka's CoordinatorType.forId refuses the type: the request's error response (no share groups here)
        top = _no_coordinator(INVALID_REQUEST, f"Unknown coordinator type received: {key_type}")
        answers = [top] * len(keys)
    else:
        router = ctx.gateway.router
        here = {"node_id": b["node_id"], "host": b["host"], "port": b["port"], "error_code": 0, "error_message": None}
        down = _no_coordinator(Err.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.")  # Kafka's message
        answers = [here if router.is_alive(router.shard_for_group(ctx.org_id, k)) else down for k in keys]
        top = answers[0] if answers else here  # v0–3 ask for one key and get its answer at the top
    return {"throttle_time": 0, **top, "coordinators": [{"key": k, **a} for k, a in zip(keys, answers)]}


def _no_coordinator(error_code: int, message: str) -> dict[str, Any]:
    return {"node_id": -1, "host": "", "port": -1, "error_code": error_code, "error_message": message}


@api(60, 0, 1, "kafka.describe-cluster")
async def describe_cluster(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    wanted = req.get("endpoint_type", BROKER_ENDPOINT)
    if wanted != BROKER_ENDPOINT:  # as Kafka's AuthHelper on a broker listener (KIP-919)
        if wanted == CONTROLLER_ENDPOINT:
            error = (MISMATCHED_ENDPOINT_TYPE,
                     "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
        else:
            error = (UNSUPPORTED_ENDPOINT_TYPE, f"Unsupported endpoint type {wanted}")
        return {"throttle_time": 0, "error_code": error[0], "error_message": error[1], "endpoint_type": 1,
                "cluster_id": "", "controller_id": -1, "brokers": [], "cluster_authorized_operations": acl.OMITTED}
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": ctx.gateway.cluster_id, "controller_id": ctx.gateway.node_id, "brokers": [broker(ctx)],
            "cluster_authorized_operations": acl.authorized(req.get("include_cluster_authorized_operations"),
                                                            acl.CLUSTER)}


@api(29, 1, 3, "kafka.describe-acls")
async def describe_acls(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER, "resources": []}


@api(30, 1, 3, "kafka.create-acls")
async def create_acls(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [{"error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER}
                                            for _ in req["creations"]]}


@api(31, 1, 3, "kafka.delete-acls")
async def delete_acls(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time": 0, "filter_results": [
        {"error_code": SECURITY_DISABLED, "error_message": NO_AUTHORIZER, "matching_acls": []} for _ in req["filters"]]}
