"""Consumer-group APIs: routed to the shard that owns (org_id, group_id).

Version notes:
- JoinGroup 0–9 (v4+ MEMBER_ID_REQUIRED, v5 group_instance_id), SyncGroup 0–5
  (v5 protocol type/name), Heartbeat 0–4, LeaveGroup 0–5 (v3+ batch of members;
  v0–2 carry one member_id and answer with a single error code).
- OffsetCommit 2–10, OffsetFetch 1–10 (v8+ several groups per request; older
  versions one group with a top-level error from v2; v10 names topics by id, KIP-848:
  see ``_named_by_id``), OffsetDelete 0.
- DescribeGroups 0–6, ListGroups 0–5 (v4 states filter, v5 types filter) and
  DeleteGroups 0–2 fan out to the owning shards and merge the answers.
A call to a shard that is down or loading answers NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS so clients look the coordinator up again and retry.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers import acl
from rafka.gateway.handlers.consumer_groups import resolve_topics
from rafka.gateway.handlers.errors import Err, coordinator_error, shard_down_error
from rafka.gateway.handlers.topics import group_call, known_now, known_partitions, topic_cache, with_refused
from rafka.gateway.router import ShardUnavailable
from rafka.rail import Op


async def _call_or_error(ctx: RequestContext, op: Op, group_id: str, payload: dict[str, Any]) -> tuple[dict[str, Any] | None, int]:
    """Call the shard owning ``group_id``: (reply, 0), or (None, the coordinator error to answer)."""
    payload["api_version"] = ctx.api_version
    try:
        return await group_call(ctx, op, group_id, payload), 0
    except Exception as exc:
        return None, coordinator_error(exc)


@api(11, 0, 9, "group.join")
async def join_group(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    req["client_id"] = ctx.client_id or ""
    req["client_host"] = ctx.client_host
    if req.get("rebalance_timeout") is None:
        req["rebalance_timeout"] = req["session_timeout"]  # v0: the session timeout bounds the rebalance
    resp, err = await _call_or_error(ctx, Op.JOIN_GROUP, req["group_id"], req)
    need = resp.pop("need_topics", None) if resp is not None else None
    if need is not None:  # a classic member joining a consumer group: resolve its topics and retry
        try:
            req["topics"] = await resolve_topics(ctx, need)
            req["topics_resolved"] = True
        except ShardUnavailable:
            req["topics_resolved"] = True  # join with the group's last known metadata
        resp, err = await _call_or_error(ctx, Op.JOIN_GROUP, req["group_id"], req)
        if resp is not None:
            resp.pop("need_topics", None)
    if resp is None:
        return {"error_code": err, "generation_id": -1, "member_id": req.get("member_id", ""), "leader": "",
                "protocol_name": None, "members": []}
    return resp


@api(14, 0, 5, "group.sync")
async def sync_group(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    resp, err = await _call_or_error(ctx, Op.SYNC_GROUP, req["group_id"], req)
    return resp if resp is not None else {"error_code": err, "assignment": b""}


@api(12, 0, 4, "group.heartbeat")
async def heartbeat(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    resp, err = await _call_or_error(ctx, Op.HEARTBEAT, req["group_id"], req)
    return resp if resp is not None else {"error_code": err}


@api(13, 0, 5, "group.leave")
async def leave_group(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    if ctx.api_version < 3:
        req["members"] = [{"member_id": req.pop("member_id", ""), "group_instance_id": None, "reason": None}]
    resp, err = await _call_or_error(ctx, Op.LEAVE_GROUP, req["group_id"], req)
    if resp is None:
        return {"error_code": err, "members": []}
    if ctx.api_version < 3 and not resp.get("error_code") and resp.get("members"):
        resp["error_code"] = resp["members"][0].get("error_code", 0)
    return resp


async def _named_by_id(ctx: RequestContext, topics: list[dict[str, Any]]
                       ) -> tuple[list[dict[str, Any]], dict[str, uuid.UUID], list[dict[str, Any]]]:
    """How v10 of OffsetCommit and OffsetFetch works: topics are named by id (KIP-848), so a
    commit meant for a deleted topic is refused rather than landing on a new topic of the same
    name, once this gateway's topic cache has seen the deletion (within
    ``--topic-metadata-ttl-ms``; versions 2–9 have no such check at all). Each id is looked up
    in the topic cache: (the topics whose id a topic has, named as earlier versions name them;
    their ids by name; the others, whose partitions Kafka answers UNKNOWN_TOPIC_ID). Offsets
    are kept by name, as before, not with the topic id as Kafka 4.1's records keep it."""
    infos = await topic_cache(ctx).by_ids(ctx, [str(t["topic_id"]) for t in topics if t.get("topic_id")])
    named: list[dict[str, Any]] = []
    ids: dict[str, uuid.UUID] = {}
    unknown: list[dict[str, Any]] = []
    for t in topics:
        topic_id = t.get("topic_id")  # the zero id is None here
        info = infos.get(str(topic_id)) if topic_id else None
        if info is None:
            unknown.append(t)
        else:
            named.append({**{k: v for k, v in t.items() if k != "topic_id"}, "name": info["name"]})
            ids[info["name"]] = topic_id
    return named, ids, unknown


@api(8, 2, 10, "group.offset-commit")
async def offset_commit(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    if ctx.api_version >= 10:
        return await _offset_commit_by_id(ctx, req)
    return await _offset_commit_by_name(ctx, req)


async def _offset_commit_by_name(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    # the hottest request: its topics checked without a coroutine when they are cached
    topics, unknown = known_now(ctx, req["topics"]) or await known_partitions(ctx, req["topics"])
    if not topics:
        return {"topics": unknown}  # Kafka answers without asking the coordinator
    if unknown:
        req = {**req, "topics": topics}
    resp, err = await _call_or_error(ctx, Op.OFFSET_COMMIT, req["group_id"], req)
    if resp is None:
        resp = {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": err} for p in t["partitions"]]} for t in topics]}
    resp["topics"] = with_refused(unknown, resp["topics"])
    return resp


def _commit_refused(topic: dict[str, Any], code: int) -> dict[str, Any]:
    return {"topic_id": topic["topic_id"], "partitions": [
        {"partition_index": p["partition_index"], "error_code": code} for p in topic["partitions"]]}


async def _offset_commit_by_id(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    try:
        named, ids, unknown = await _named_by_id(ctx, req["topics"])
    except ShardUnavailable as exc:  # the catalogue's shard is down and the id is not cached
        return {"topics": [_commit_refused(t, coordinator_error(exc)) for t in req["topics"]]}
    # named as earlier versions name them; the by-name path checks the partitions (a cache hit)
    resp = await _offset_commit_by_name(ctx, {**req, "topics": named}) if named else {"topics": []}
    for t in resp["topics"]:
        t["topic_id"] = ids[t["name"]]
    resp["topics"] += [_commit_refused(t, Err.UNKNOWN_TOPIC_ID) for t in unknown]
    return resp


async def _fetch_one_group(ctx: RequestContext, group: dict[str, Any], require_stable: bool) -> dict[str, Any]:
    by_id = ctx.api_version >= 10
    topics, ids, unknown = group.get("topics"), None, []
    try:
        if by_id and topics is not None:
            topics, ids, unknown = await _named_by_id(ctx, topics)
        payload = {"group_id": group["group_id"], "topics": topics, "require_stable": require_stable,
                   "member_id": group.get("member_id"), "member_epoch": group.get("member_epoch", -1)}
        resp, err = await _call_or_error(ctx, Op.OFFSET_FETCH, group["group_id"], payload)
        if resp is not None and by_id:
            resp["topics"] = await _with_topic_ids(ctx, resp["topics"], ids) + [_fetch_refused(t) for t in unknown]
    except ShardUnavailable as exc:  # v10: the catalogue's shard is down and a topic is not cached
        resp, err = None, coordinator_error(exc)
    if resp is None:
        return {"group_id": group["group_id"], "error_code": err, "topics": []}
    return resp


def _fetch_refused(topic: dict[str, Any]) -> dict[str, Any]:
    return {"topic_id": topic["topic_id"], "partitions": [
        {"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": Err.UNKNOWN_TOPIC_ID} for i in topic.get("partition_indexes") or []]}


async def _with_topic_ids(ctx: RequestContext, topics: list[dict[str, Any]], ids: dict[str, uuid.UUID] | None
                          ) -> list[dict[str, Any]]:
    """An OffsetFetch v10 answer's topics with their ids: those of the request, or for a fetch
    of every topic, the topics' own; a topic that no longer exists is left out (its offsets
    go with it anyway, unless they raced the deletion)."""
    if ids is None:
        infos = await topic_cache(ctx).lookup(ctx, [t["name"] for t in topics], False)
        ids = {name: uuid.UUID(info["topic_id"]) for name, info in infos.items() if info and info.get("topic_id")}
    return [{**t, "topic_id": ids[t["name"]]} for t in topics if t["name"] in ids]


@api(9, 1, 10, "group.offset-fetch")
async def offset_fetch(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    require_stable = bool(req.get("require_stable", False))
    if ctx.api_version >= 8:
        groups = await asyncio.gather(*(_fetch_one_group(ctx, g, require_stable) for g in req["groups"]))
        return {"throttle_time": 0, "groups": list(groups)}
    one = await _fetch_one_group(ctx, {"group_id": req["group_id"], "topics": req.get("topics")}, require_stable)
    return {"throttle_time": 0, "topics": one.get("topics", []), "error_code": one.get("error_code", 0)}


@api(47, 0, 0, "group.offset-delete")
async def offset_delete(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    topics, unknown = await known_partitions(ctx, req["topics"])  # Kafka checks them against its metadata
    resp, err = await _call_or_error(ctx, Op.OFFSET_DELETE, req["group_id"], {**req, "topics": topics})
    if resp is None:
        return {"error_code": err, "topics": []}
    resp["topics"] = with_refused(unknown, resp.get("topics") or [])
    return resp


@api(15, 0, 6, "group.describe")
async def describe_groups(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    async def one(group_id: str) -> dict[str, Any]:
        resp, err = await _call_or_error(ctx, Op.DESCRIBE_GROUP, group_id,
                                         {"group_id": group_id, "api_version": ctx.api_version})
        if resp is None:
            return {"error_code": err, "group_id": group_id, "group_state": "", "protocol_type": "",
                    "protocol_data": "", "members": [], "authorized_operations": acl.OMITTED}
        if resp.get("group_type") == "consumer":  # Kafka describes only classic groups here
            resp = {"error_code": 0, "error_message": None, "group_id": group_id, "group_state": "Dead",
                    "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": acl.OMITTED}
            if ctx.api_version >= 6:
                resp["error_code"] = Err.GROUP_ID_NOT_FOUND
                resp["error_message"] = f"Group {group_id} is not a classic group."
            return resp
        if not resp.get("error_code"):
            resp["authorized_operations"] = operations
        return resp

    operations = acl.authorized(req.get("include_authorized_operations"), acl.GROUP)

    groups = await asyncio.gather(*(one(g) for g in req["groups"]))
    return {"throttle_time": 0, "groups": list(groups)}


@api(16, 0, 5, "group.list")
async def list_groups(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    router = ctx.gateway.router
    payload = {"states_filter": req.get("states_filter") or [], "types_filter": req.get("types_filter") or [],
               "api_version": ctx.api_version}
    calls = [router.call(s, Op.LIST_GROUPS, ctx.org_id, payload, ctx.trace) for s in range(router.shard_count)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    groups: list[dict[str, Any]] = []
    error = 0
    for r in results:
        if isinstance(r, BaseException):
            # a shard that is down or restarting is a coordinator still loading: Kafka fails the
            # whole request with the retriable COORDINATOR_LOAD_IN_PROGRESS then
            error = shard_down_error(r, Err.COORDINATOR_LOAD_IN_PROGRESS)
            continue
        groups.extend(r.get("groups", []))
    if error:
        return {"error_code": error, "groups": []}
    groups.sort(key=lambda g: g["group_id"])
    return {"throttle_time": 0, "error_code": 0, "groups": groups}


@api(42, 0, 2, "group.delete")
async def delete_groups(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    async def one(group_id: str) -> dict[str, Any]:
        resp, err = await _call_or_error(ctx, Op.DELETE_GROUP, group_id, {"group_id": group_id})
        return resp if resp is not None else {"group_id": group_id, "error_code": err}

    results = await asyncio.gather(*(one(g) for g in dict.fromkeys(req["groups_names"])))  # each name once, as Kafka
    return {"throttle_time": 0, "results": list(results)}


__all__ = ["Err"]
