"""KIP-848 consumer groups: ConsumerGroupHeartbeat 0–1 and ConsumerGroupDescribe 0–1.

The group lives on the shard of ``stable_hash(org_id, group_id)`` next to classic
groups of that id. Server-side assignment needs topic metadata owned by the
catalogue shard, so the gateway resolves what the group subscribes to and passes
it in the op: ``topics`` ``{name: {"topic_id", "partitions"} | None}`` for the
request's ``subscribed_topic_names`` plus the names the group's other members
subscribe to (learnt from the shard's previous replies), and ``regex_topics``
``{regex: [names]}`` for regex subscriptions (v1), each a full match against the
organisation's whole topic list. Regexes are RE2's syntax (google-re2), as Kafka's
RE2/J: lookarounds and backreferences are INVALID_REGULAR_EXPRESSION.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from typing import Any

import re2

from rafka.gateway.api import RequestContext, api
from rafka.gateway.handlers import acl
from rafka.gateway.handlers.errors import coordinator_error
from rafka.gateway.handlers.topics import catalog_call, topic_cache
from rafka.gateway.router import ShardUnavailable
from rafka.rail import Op

INVALID_REGULAR_EXPRESSION = 128
_ALL_TOPICS_TTL = 1.0


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad regex is its error, not ours to log


@functools.lru_cache(maxsize=1024)
def compile_regex(regex: str) -> tuple[Any, str | None]:
    """The compiled RE2 pattern, or None and Kafka's INVALID_REGULAR_EXPRESSION message."""
    try:
        return re2.compile(regex, _RE2_OPTIONS), None
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return None, f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {why}."


_SUBSCRIPTIONS_CAP = 50_000  # groups whose subscriptions a gateway remembers (hints: relearnt on a miss)


def _subscriptions(ctx: RequestContext) -> dict[tuple[str, str], dict[str, list[str]]]:
    """What each group subscribes to, from the shard's last reply: the names and regexes to
    resolve for the group's next heartbeat. An entry is only a hint (the shard keeps the last
    metadata of names not resolved, and its next reply teaches the entry again), so a group
    subscribed to nothing, or gone, loses its entry, and the map is emptied at a cap."""
    gw = ctx.gateway
    subs = getattr(gw, "consumer_group_subscriptions", None)
    if subs is None:
        subs = gw.consumer_group_subscriptions = {}
    return subs  # type: ignore[no-any-return]


async def _all_topics(ctx: RequestContext) -> list[dict[str, Any]]:
    """The organisation's topics (cached for a second per gateway)."""
    gw = ctx.gateway
    cache = getattr(gw, "consumer_group_all_topics", None)
    if cache is None:
        cache = gw.consumer_group_all_topics = {}
    now = time.monotonic()
    hit = cache.get(ctx.org_id)
    if hit and hit[0] > now:
        return hit[1]  # type: ignore[no-any-return]
    resp = await ctx.before_op(catalog_call(ctx, Op.LIST_TOPICS, {"names": None, "auto_create": False}))
    topics = [t for t in resp["topics"] if not t.get("error_code")]
    cache[ctx.org_id] = (now + _ALL_TOPICS_TTL, topics)
    return topics


async def resolve_topics(ctx: RequestContext, names: list[str]) -> dict[str, Any]:
    """``{name: {"topic_id", "partitions"} | None}`` for a shard that asked for them (``need_topics``:
    a classic group being upgraded, or a classic member joining a consumer group)."""
    found = await topic_cache(ctx).lookup(ctx, names, False)
    out: dict[str, Any] = {}
    for n in names:
        t = found.get(n)
        out[n] = {"topic_id": t.get("topic_id"), "partitions": t.get("partitions", 0)} if t and t.get("topic_id") else None
    return out


def _error(code: int, message: str | None) -> dict[str, Any]:
    """A failed heartbeat's answer: as Kafka's, the error alone (member id null, epoch 0)."""
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


@api(68, 0, 1, "group.consumer-heartbeat")
async def consumer_group_heartbeat(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    group_id = req.get("group_id") or ""
    payload = dict(req)
    payload["api_version"] = ctx.api_version
    payload["client_id"] = ctx.client_id or ""
    payload["client_host"] = ctx.client_host
    if req.get("topic_partitions") is not None:
        payload["topic_partitions"] = [{"topic_id": str(tp["topic_id"]), "partitions": list(tp["partitions"])}
                                       for tp in req["topic_partitions"]]
    known = _subscriptions(ctx).get((ctx.org_id, group_id), {})
    names = set(req.get("subscribed_topic_names") or []) | set(known.get("names", []))
    regexes = set(known.get("regexes", []))
    own_regex = req.get("subscribed_topic_regex")
    if own_regex:
        why = compile_regex(own_regex)[1]
        if why is not None:
            return _error(INVALID_REGULAR_EXPRESSION, why)
        regexes.add(own_regex)
    topics: dict[str, Any] = {}
    regex_topics: dict[str, list[str]] = {}
    try:
        if regexes:
            listing = await _all_topics(ctx)
            for regex in regexes:
                pattern = compile_regex(regex)[0]
                if pattern is None:
                    continue
                matched = [t for t in listing if pattern.fullmatch(t["name"])]
                regex_topics[regex] = [t["name"] for t in matched]
                for t in matched:
                    topics[t["name"]] = {"topic_id": t.get("topic_id"), "partitions": t.get("partitions", 0)}
        wanted = [n for n in names if n not in topics]
        if wanted:
            found = await topic_cache(ctx).lookup(ctx, wanted, False)
            for n in wanted:
                t = found.get(n)
                topics[n] = {"topic_id": t.get("topic_id"), "partitions": t.get("partitions", 0)} if t else None
    except ShardUnavailable:  # catalogue unavailable: the shard keeps its last known metadata
        topics, regex_topics = {}, {}
    payload["topics"] = {n: v for n, v in topics.items() if v is None or v.get("topic_id")}
    payload["regex_topics"] = regex_topics
    router = ctx.gateway.router
    try:
        resp = await router.call(router.shard_for_group(ctx.org_id, group_id), Op.CONSUMER_GROUP_HEARTBEAT,
                                 ctx.org_id, payload, ctx.trace)
        need = resp.pop("need_topics", None)
        if need is not None:  # upgrading a classic group: the shard needs its members' topics too
            payload["topics"] = {**payload["topics"], **await resolve_topics(ctx, need)}
            payload["topics_resolved"] = True
            resp = await router.call(router.shard_for_group(ctx.org_id, group_id), Op.CONSUMER_GROUP_HEARTBEAT,
                                     ctx.org_id, payload, ctx.trace)
            resp.pop("need_topics", None)
    except Exception as exc:
        return _error(coordinator_error(exc), None)
    subscribed = resp.pop("subscribed", None)
    subscriptions = _subscriptions(ctx)
    if subscribed and (subscribed.get("names") or subscribed.get("regexes")):
        if len(subscriptions) >= _SUBSCRIPTIONS_CAP:
            subscriptions.clear()
        subscriptions[(ctx.org_id, group_id)] = subscribed
    else:  # the group is gone, or subscribes to nothing
        subscriptions.pop((ctx.org_id, group_id), None)
    assignment = resp.get("assignment")
    if assignment is not None:
        for tp in assignment["topic_partitions"]:
            tp["topic_id"] = uuid.UUID(tp["topic_id"])
    resp["throttle_time"] = 0
    return resp


@api(69, 0, 1, "group.consumer-describe")
async def consumer_group_describe(ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
    router = ctx.gateway.router

    async def one(group_id: str) -> dict[str, Any]:
        try:
            resp: dict[str, Any] = await router.call(
                router.shard_for_group(ctx.org_id, group_id), Op.CONSUMER_GROUP_DESCRIBE, ctx.org_id,
                {"group_id": group_id, "api_version": ctx.api_version}, ctx.trace)
        except Exception as exc:
            return {"error_code": coordinator_error(exc), "group_id": group_id,
                    "group_state": "", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                    "members": [], "authorized_operations": acl.OMITTED}
        if not resp.get("error_code"):
            resp["authorized_operations"] = operations
        for m in resp.get("members", []):
            for key in ("assignment", "target_assignment"):
                for tp in m[key]["topic_partitions"]:
                    tp["topic_id"] = uuid.UUID(tp["topic_id"])
        return resp

    operations = acl.authorized(req.get("include_authorized_operations"), acl.GROUP)
    groups = await asyncio.gather(*(one(g) for g in req["group_ids"]))
    return {"throttle_time": 0, "groups": list(groups)}
