"""Bringing a shard's logs in line with the topic catalogue after it missed ops.

How this works: DeleteTopics and AlterConfigs change the catalogue (on the
organisation's catalogue shard) and then fan out DELETE_PARTITIONS and
UPDATE_CONFIGS to the shards holding the topic's logs. A shard that is down or
stalled then misses them: it would keep a deleted topic's logs (memory, files)
and apply old retention to an idle partition until a produce told it otherwise.
As Kafka's brokers compare their logs with the metadata when they come back,
``LogReconciler`` does so for every shard that came up since it last looked
(``ShardRouter.ups``: first contact, back from down, restarted) and for every
shard a fan-out failed on (``mark``): it lists the shard's logs (LIST_LOGS),
asks each organisation's catalogue about those topics, and sends

* DELETE_PARTITIONS for logs whose topic is gone or was created again (another
  topic id), naming the log's own id and incarnation, so a newer log is never hit;
* UPDATE_CONFIGS for logs whose configs are older than the catalogue's.

Logs from before topic ids (none on a fresh install) are left alone. A pass that
fails (a shard down or loading) is retried on the next tick. The catalogue read
comes after the log listing, so any log listed belongs to a topic the catalogue
had already created: one it no longer has was deleted. Every op is idempotent, so
several gateways doing this at once is harmless.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rafka.gateway.periodic import Periodic
from rafka.rail import Op

log = logging.getLogger("rafka.gateway.reconcile")

UNKNOWN_TOPIC_OR_PARTITION = 3


def plan(logs: list[list[Any]], catalogue: dict[str, dict[str, Any]]) -> list[tuple[Op, dict[str, Any]]]:
    """The ops that bring one organisation's ``logs`` (``LogManager.summary`` rows) in line
    with its ``catalogue`` answer (LIST_TOPICS topics by name)."""
    ops: list[tuple[Op, dict[str, Any]]] = []
    for _org, topic, topic_id, incarnation, config_version, partitions in logs:
        info = catalogue.get(topic)
        if topic_id is None or info is None:
            continue  # before topic ids, or the catalogue did not answer for it
        if info["error_code"] == UNKNOWN_TOPIC_OR_PARTITION or (not info["error_code"] and info["topic_id"] != topic_id):
            ops.append((Op.DELETE_PARTITIONS, {"topic": topic, "partitions": partitions, "topic_id": topic_id,
                                               "incarnation": incarnation}))
        elif not info["error_code"] and info.get("config_version", 0) > config_version:
            ops.append((Op.UPDATE_CONFIGS, {"topic": topic, "partitions": partitions, "topic_id": topic_id,
                                            "configs": info["configs"], "config_version": info["config_version"]}))
    return ops


class LogReconciler(Periodic):
    """Checks each shard that came up, or missed a fan-out, against the catalogue; once per ``interval``."""

    def __init__(self, router: Any, interval: float = 1.0) -> None:
        super().__init__(interval)
        self.router = router
        self._checked: dict[int, int] = {}  # shard -> its ``ups`` count when last reconciled

    async def tick(self) -> int:
        return await self.reconcile_due()

    def mark(self, shard: int) -> None:
        """``shard`` missed a fan-out op: reconcile it once it answers again."""
        self._checked.pop(shard, None)

    async def reconcile_due(self) -> int:
        """Reconcile every live shard not checked since it last came up; the ops sent."""
        router = self.router
        sent = 0
        for shard in range(router.shard_count):
            if not router.is_alive(shard):
                continue
            ups = router.ups(shard)
            if self._checked.get(shard) == ups:
                continue
            try:
                sent += await self.reconcile(shard)
            except Exception as exc:  # a shard down or loading: the next tick tries again
                log.debug("reconciling shard %d's logs: %r; retrying", shard, exc)
                continue
            self._checked[shard] = ups
        return sent

    async def reconcile(self, shard: int) -> int:
        """Check ``shard``'s logs against each organisation's catalogue; the ops sent."""
        router = self.router
        listing = await router.call(shard, Op.LIST_LOGS, "", {})
        by_org: dict[str, list[list[Any]]] = {}
        for row in listing["logs"]:
            by_org.setdefault(row[0], []).append(row)
        sent = 0
        for org, logs in by_org.items():
            names = sorted({row[1] for row in logs})
            answer = await router.call(router.shard_for_catalog(org), Op.LIST_TOPICS, org,
                                       {"names": names, "auto_create": False})
            ops = plan(logs, {t["name"]: t for t in answer["topics"]})
            await asyncio.gather(*(router.call(shard, op, org, payload) for op, payload in ops))
            for op, payload in ops:
                log.info("shard %d: %s %s/%s partitions %s (%s)", shard,
                         "dropped the logs of deleted topic" if op == Op.DELETE_PARTITIONS else "updated the configs of",
                         org, payload["topic"], payload["partitions"], payload["topic_id"])
            sent += len(ops)
        return sent
