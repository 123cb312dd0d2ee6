"""Config requests: IncrementalAlterConfigs 0–1, AlterConfigs 0–2, DescribeConfigs 1–4.

How this works: a TOPIC resource's configs live in the organisation's catalogue, which
validates and stores the overrides; the shards owning the topic's partitions then apply
them to the logs (retention, segment rolling, the size limit; a shard that is down gets
them when it is back, ``rafka.gateway.reconcile``). A GROUP resource sets a group's own
consumer.session.timeout.ms and consumer.heartbeat.interval.ms on the group's coordinator
shard (``rafka.shard.groups.config_manager``). BROKER configs come from rafka's own
flags: DescribeConfigs reports them, read-only, for this node's id (none for the cluster
default resource "", as no dynamic defaults exist) and alterations are refused.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers.errors import Err
from rafka.gateway.handlers.topics import (
    catalog_call,
    group_call,
    partitions_by_shard,
    to_log_shards,
    topic_cache,
)
from rafka.gateway.router import ShardUnavailable
from rafka.rail import Op

TOPIC, BROKER, GROUP = 2, 4, 32  # config resource types
INT64_MAX = 2**63 - 1

# The broker configs DescribeConfigs reports. A value rafka runs with that differs from Kafka's
# default is described as set in the broker's static config (STATIC_BROKER_CONFIG, with the
# default below it as a synonym), as Kafka describes a server.properties entry; the others as
# DEFAULT_CONFIG. Each carries its type in Kafka's ConfigDef (KafkaConfig, ServerLogConfigs,
# GroupCoordinatorConfig), which DescribeConfigs v3+ reports as config_type.
BOOLEAN, STRING, INT, SHORT, LONG, LIST = 1, 2, 3, 4, 5, 7
KAFKA_DEFAULTS: dict[str, tuple[str | None, int]] = {  # Kafka's name -> its default (None: none), its type
    "auto.create.topics.enable": ("true", BOOLEAN),
    "broker.id": ("-1", INT),
    "node.id": (None, INT),
    "num.partitions": ("1", INT),
    "default.replication.factor": ("1", INT),
    "min.insync.replicas": ("1", INT),
    "offsets.topic.replication.factor": ("3", SHORT),
    "offsets.topic.num.partitions": ("50", INT),
    "delete.topic.enable": ("true", BOOLEAN),
    "message.max.bytes": ("1048588", INT),
    "compression.type": ("producer", STRING),
    "log.cleanup.policy": ("delete", LIST),
    "log.retention.hours": ("168", INT),
    "log.retention.bytes": ("-1", LONG),
    "log.retention.check.interval.ms": ("300000", LONG),
    "log.cleaner.backoff.ms": ("15000", LONG),
    "log.segment.bytes": ("1073741824", INT),
    "log.roll.hours": ("168", INT),
    "log.message.timestamp.type": ("CreateTime", STRING),
    "log.message.timestamp.after.max.ms": ("3600000", LONG),
    "log.message.timestamp.before.max.ms": (str(INT64_MAX), LONG),
    "group.consumer.session.timeout.ms": ("45000", INT),
    "group.consumer.heartbeat.interval.ms": ("5000", INT),
    "group.consumer.min.session.timeout.ms": ("45000", INT),
    "group.consumer.max.session.timeout.ms": ("60000", INT),
    "group.consumer.min.heartbeat.interval.ms": ("5000", INT),
    "group.consumer.max.heartbeat.interval.ms": ("15000", INT),
    "transaction.max.timeout.ms": ("900000", INT),
    "transactional.id.expiration.ms": ("604800000", INT),
    "group.min.session.timeout.ms": ("6000", INT),
    "group.max.session.timeout.ms": ("1800000", INT),
    "group.initial.rebalance.delay.ms": ("3000", INT),
    "group.max.size": ("2147483647", INT),
    "offset.metadata.max.bytes": ("4096", INT),
    "offsets.retention.minutes": ("10080", INT),
    "offsets.retention.check.interval.ms": ("600000", LONG),
    "socket.request.max.bytes": ("104857600", INT),
    "connections.max.reauth.ms": ("0", LONG),
}
RAFKA_VALUES: dict[str, Callable[[Any], str]] = {  # where rafka's value comes from its own config
    "auto.create.topics.enable": lambda c: str(c.auto_create_topics).lower(),
    "broker.id": lambda c: str(c.node_id),
    "node.id": lambda c: str(c.node_id),
    "num.partitions": lambda c: str(c.default_partitions),
    "offsets.topic.replication.factor": lambda c: "1",
    "offsets.topic.num.partitions": lambda c: str(c.coordinator_partitions),
    "log.retention.check.interval.ms": lambda c: str(c.log_retention_check_interval_ms),
    "log.cleaner.backoff.ms": lambda c: str(c.log_cleaner_backoff_ms),
    "group.consumer.session.timeout.ms": lambda c: str(c.consumer_group_session_timeout_ms),
    "group.consumer.heartbeat.interval.ms": lambda c: str(c.consumer_group_heartbeat_interval_ms),
    "group.consumer.min.session.timeout.ms": lambda c: str(c.consumer_group_min_session_timeout_ms),
    "group.consumer.max.session.timeout.ms": lambda c: str(c.consumer_group_max_session_timeout_ms),
    "group.consumer.min.heartbeat.interval.ms": lambda c: str(c.consumer_group_min_heartbeat_interval_ms),
    "group.consumer.max.heartbeat.interval.ms": lambda c: str(c.consumer_group_max_heartbeat_interval_ms),
    "group.min.session.timeout.ms": lambda c: str(c.group_min_session_timeout_ms),
    "group.max.session.timeout.ms": lambda c: str(c.group_max_session_timeout_ms),
    "group.initial.rebalance.delay.ms": lambda c: str(c.group_initial_rebalance_delay_ms),
    "group.max.size": lambda c: str(c.group_max_size),
    "offset.metadata.max.bytes": lambda c: str(c.offset_metadata_max_bytes),
    "offsets.retention.minutes": lambda c: str(c.offsets_retention_minutes),
    "offsets.retention.check.interval.ms": lambda c: str(c.offsets_retention_check_interval_ms),
    "socket.request.max.bytes": lambda c: str(c.max_request_bytes),
    "connections.max.reauth.ms": lambda c: str(c.connections_max_reauth_ms),
    "transactional.id.expiration.ms": lambda c: str(c.transactional_id_expiration_ms),
}
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5  # DescribeConfigs config_source


def _alter_refusal(r: dict[str, Any], incremental: bool, node_id: int) -> str | None:
    """Why Kafka's broker refuses resource ``r`` before its controller sees it (INVALID_REQUEST), or None."""
    rtype, name = r["resource_type"], r["resource_name"]
    nulls = [c["name"] for c in r["configs"]
             if c.get("value") is None and (not incremental or c.get("config_operation", 0) != 1)]  # DELETE takes none
    if nulls:
        return f"Null value not supported for : {', '.join(nulls)}"
    if rtype == BROKER:  # rafka's broker configs are set in its own config file
        if name and not name.isdigit():
            return f"Node id must be an integer, but it is: {name}"
        if name not in ("", str(node_id)):
            return f"Unexpected broker id, expected {node_id}, but received {name}"
        if r["configs"]:
            return f"Cannot update these configs dynamically: Set({', '.join(c['name'] for c in r['configs'])})"
        return None
    if rtype == GROUP:
        return None if name else "Default group resources are not allowed."
    if rtype != TOPIC:
        return f"AlterConfigs is only supported for topics and brokers, but resource type is {rtype}"
    if not name:
        return "Default topic resources are not allowed."
    return None


async def _alter_configs(ctx: RequestContext, resources: list[dict[str, Any]], incremental: bool,
                         validate_only: bool) -> list[dict[str, Any]]:
    """One AlterConfigsResourceResponse per resource, in request order."""
    seen = Counter((r["resource_type"], r["resource_name"]) for r in resources)

    async def one(r: dict[str, Any]) -> dict[str, Any]:
        rtype, name = r["resource_type"], r["resource_name"]
        out = {"resource_type": rtype, "resource_name": name, "error_code": Err.NONE, "error_message": None}
        refusal = "Each resource must appear at most once." if seen[(rtype, name)] > 1 else \
            _alter_refusal(r, incremental, ctx.gateway.node_id)
        if refusal is not None:
            return {**out, "error_code": Err.INVALID_REQUEST, "error_message": refusal}
        if rtype == BROKER:
            return out
        changes = [[c["name"], c.get("config_operation", 0), c.get("value")] for c in r["configs"]]
        if rtype == GROUP:
            try:
                resp = await group_call(ctx, Op.ALTER_GROUP_CONFIGS, name,
                                        {"group": name, "configs": changes, "incremental": incremental,
                                         "validate_only": validate_only})
            except ShardUnavailable:
                return {**out, "error_code": Err.REQUEST_TIMED_OUT, "error_message": "the group's coordinator is unavailable"}
            return {**out, "error_code": resp["error_code"], "error_message": resp.get("error_message")}
        payload = {"name": name, "incremental": incremental, "validate_only": validate_only, "configs": changes}
        try:
            resp = await catalog_call(ctx, Op.ALTER_CONFIGS, payload)
        except ShardUnavailable:
            return {**out, "error_code": Err.REQUEST_TIMED_OUT, "error_message": "the topic catalogue is unavailable"}
        if resp["error_code"] or validate_only:
            return {**out, "error_code": resp["error_code"], "error_message": resp.get("error_message")}
        topic_cache(ctx).invalidate(ctx.org_id)  # produces carry the new configs from now on
        # the logs take them at once too (the retention of a partition nobody produces to); stored
        # already, so a shard that does not answer takes them when it is back, as in Kafka
        update = {"topic": name, "configs": resp["configs"], "config_version": resp["config_version"],
                  "topic_id": resp.get("topic_id")}
        await to_log_shards(ctx, Op.UPDATE_CONFIGS, [(s, {**update, "partitions": ps}) for s, ps in
                                                      partitions_by_shard(ctx, name, resp["partitions"]).items()])
        return out

    return list(await asyncio.gather(*(one(r) for r in resources)))


@api(44, 0, 1, "kafka.incremental-alter-configs")
async def incremental_alter_configs(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time": 0, "responses": await _alter_configs(ctx, req["resources"], True, req["validate_only"])}


@api(33, 0, 2, "kafka.alter-configs")
async def alter_configs(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time": 0, "responses": await _alter_configs(ctx, req["resources"], False, req["validate_only"])}


@api(32, 1, 4, "kafka.describe-configs")
async def describe_configs(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    results = []
    with_synonyms = bool(req.get("include_synonyms"))
    for r in req["resources"]:
        keys = r.get("configuration_keys") or None  # Kafka: an empty list asks for every config
        if r["resource_type"] == BROKER:
            results.append(_describe_broker(ctx, r["resource_name"], keys, with_synonyms))
        elif r["resource_type"] in (TOPIC, GROUP):
            name = r["resource_name"]
            try:
                if r["resource_type"] == TOPIC:
                    resp = await catalog_call(ctx, Op.DESCRIBE_CONFIGS, {"name": name, "configuration_keys": keys,
                                                                         "include_synonyms": with_synonyms})
                elif name:
                    resp = await group_call(ctx, Op.DESCRIBE_GROUP_CONFIGS, name,
                                            {"group": name, "configuration_keys": keys,
                                             "include_synonyms": with_synonyms})
                else:
                    resp = {"error_code": Err.INVALID_REQUEST, "error_message": "Group name must not be empty."}
            except Exception:
                resp = {"error_code": Err.REQUEST_TIMED_OUT, "error_message": "coordinator unavailable", "configs": []}
            for c in resp.get("configs", []):
                c.setdefault("synonyms", [])
                c["is_default"] = c.get("config_source", 5) == 5
            results.append({"error_code": resp["error_code"], "error_message": resp.get("error_message"),
                            "resource_type": r["resource_type"], "resource_name": name,
                            "configs": resp.get("configs", [])})
        else:
            results.append({"error_code": Err.INVALID_REQUEST, "error_message": "unsupported resource type",
                            "resource_type": r["resource_type"], "resource_name": r["resource_name"], "configs": []})
    return {"throttle_time": 0, "results": results}


def _describe_broker(ctx: RequestContext, name: str, keys: list[str] | None, with_synonyms: bool) -> dict[str, Any]:
    """DescribeConfigs of a BROKER resource, as Kafka's ConfigHelper answers it (no dynamic broker
    configs exist, so the synonyms are the static value and Kafka's default)."""
    out = {"error_code": Err.NONE, "error_message": None, "resource_type": BROKER, "resource_name": name,
           "configs": []}
    node = ctx.gateway.node_id
    if not name:
        return out  # the cluster default resource: only dynamic defaults, and there are none
    if not name.lstrip("-").isdigit():
        return {**out, "error_code": Err.INVALID_REQUEST,
                "error_message": f"Broker id must be an integer, but it is: {name}"}
    if int(name) != node:
        return {**out, "error_code": Err.INVALID_REQUEST,
                "error_message": f"Unexpected broker id, expected {node} or empty string, but received {name}"}
    cfg = ctx.gateway.config
    for key, (default, config_type) in sorted(KAFKA_DEFAULTS.items()):
        if keys is not None and key not in keys:
            continue
        value = RAFKA_VALUES[key](cfg) if key in RAFKA_VALUES else default
        synonyms = [{"name": key, "value": default, "source": DEFAULT_CONFIG}] if default is not None else []
        if value != default:
            synonyms.insert(0, {"name": key, "value": value, "source": STATIC_BROKER_CONFIG})
        out["configs"].append({"name": key, "value": value, "read_only": True, "config_source": synonyms[0]["source"],
                               "is_sensitive": False, "config_type": config_type, "synonyms": synonyms if with_synonyms else []})
    return out
