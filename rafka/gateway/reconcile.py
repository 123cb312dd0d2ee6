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
  topic id, a newer incarnation), naming the log's own id and incarnation, so a
  newer log is never hit;
* UPDATE_CONFIGS for logs whose configs are older than the catalogue's.

A log is dropped only on proof: the catalogue must have numbered the log's
creation (its version is at least the log's incarnation). A catalogue that never
saw the topic — the wrong shard asked, records lost, an in-memory catalogue
restarted — proves nothing, and the log stays. The catalogue read comes after the
log listing, so a topic it saw created and no longer has was deleted. Logs from
before incarnations are never dropped. A pass that fails (a shard down, or too
old to know LIST_LOGS; an organisation's catalogue shard down, after the other
organisations are done) is retried with a growing delay, or at once when the shard
comes up again, with one warning once it keeps failing; a shard still loading is
simply tried on the next tick. Every op is idempotent, so several gateways doing this
at once is harmless; only the one whose op changed something logs it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rafka.gateway.periodic import Periodic
from rafka.gateway.router import ShardLoading
from rafka.rail import Op

log = logging.getLogger("rafka.gateway.reconcile")

UNKNOWN_TOPIC_OR_PARTITION = 3
MAX_BACKOFF = 60.0


def plan(logs: list[list[Any]], catalogue: dict[str, Any]) -> list[tuple[Op, dict[str, Any]]]:
    """The ops that bring one organisation's ``logs`` (``LogManager.summary`` rows) in line
    with its ``catalogue`` (a LIST_TOPICS answer: ``{topics, version}``)."""
    topics = {t["name"]: t for t in catalogue["topics"]}
    seen_up_to = catalogue.get("version", 0)
    ops: list[tuple[Op, dict[str, Any]]] = []
    for _org, topic, topic_id, incarnation, config_version, partitions in logs:
        info = topics.get(topic)
        if topic_id is None or info is None:
            continue  # before topic ids, or the catalogue did not answer for it
        known = 0 < incarnation <= seen_up_to  # this catalogue numbered the log's creation
        if info["error_code"] == UNKNOWN_TOPIC_OR_PARTITION:
            gone = known
        else:
            gone = known and not info["error_code"] and info["topic_id"] != topic_id \
                and info.get("incarnation", 0) > incarnation
        if gone:
            ops.append((Op.DELETE_PARTITIONS, {"topic": topic, "partitions": partitions, "topic_id": topic_id,
                                               "incarnation": incarnation}))
        elif not info["error_code"] and info["topic_id"] == topic_id and info.get("config_version", 0) > config_version:
            ops.append((Op.UPDATE_CONFIGS, {"topic": topic, "partitions": partitions, "topic_id": topic_id,
                                            "configs": info["configs"], "config_version": info["config_version"]}))
    return ops


class LogReconciler(Periodic):
    """Checks each shard that came up, or missed a fan-out, against the catalogue; once per ``interval``."""

    def __init__(self, router: Any, interval: float = 1.0) -> None:
        super().__init__(interval)
        self.router = router
        self._checked: dict[int, tuple[int, int]] = {}  # shard -> (ups, marks) when last reconciled
        self._marks: dict[int, int] = {}
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, tuple[float, int]] = {}  # shard -> (not before, its ups then)

    async def tick(self) -> int:
        return await self.reconcile_due()

    def mark(self, shard: int) -> None:
        """``shard`` missed a fan-out op: reconcile it once it answers again."""
        self._marks[shard] = self._marks.get(shard, 0) + 1
        self._retry_at.pop(shard, None)

    async def reconcile_due(self) -> int:
        """Reconcile every live shard not checked since it came up or was marked; the ops sent."""
        router = self.router
        sent = 0
        for shard in range(router.shard_count):
            if not router.is_alive(shard):
                continue
            state = (router.ups(shard), self._marks.get(shard, 0))
            not_before, ups_then = self._retry_at.get(shard, (0.0, state[0]))
            if self._checked.get(shard) == state or (ups_then == state[0] and time.monotonic() < not_before):
                continue  # checked, or backing off (until it comes up again)
            try:
                sent += await self.reconcile(shard)
            except ShardLoading:
                continue  # a shard replaying its log: the next tick
            except Exception as exc:  # a shard down, refused or too old to list its logs: later
                failures = self._failures[shard] = self._failures.get(shard, 0) + 1
                delay = min(self.interval * 2.0 ** min(failures, 16), MAX_BACKOFF)
                self._retry_at[shard] = (time.monotonic() + delay, state[0])
                if failures == 5:
                    log.warning("could not check shard %d's logs against the catalogue %d times (%r); "
                                "still retrying", shard, failures, exc)
                continue
            self._failures.pop(shard, None)
            self._checked[shard] = state
        return sent

    async def reconcile(self, shard: int) -> int:
        """Check ``shard``'s logs against each organisation's catalogue; the ops sent."""
        router = self.router
        listing = await router.call(shard, Op.LIST_LOGS, "", {})
        by_org: dict[str, list[list[Any]]] = {}
        for row in listing["logs"]:
            by_org.setdefault(row[0], []).append(row)
        sent = 0
        failed: Exception | None = None
        for org, logs in by_org.items():
            names = sorted({row[1] for row in logs})
            try:
                catalogue = await router.call(router.shard_for_catalog(org), Op.LIST_TOPICS, org,
                                              {"names": names, "auto_create": False})
            except Exception as exc:  # that org's catalogue shard is down: the others go on, the pass is retried
                failed = exc
                continue
            ops = plan(logs, catalogue)
            answers = await asyncio.gather(*(router.call(shard, op, org, payload) for op, payload in ops))
            for (op, payload), answer in zip(ops, answers):
                if answer.get("partitions"):  # another gateway may have been first
                    log.info("shard %d %s of %s/%s partitions %s (topic id %s)", shard,
                             "dropped the logs" if op == Op.DELETE_PARTITIONS else "updated the configs",
                             org, payload["topic"], answer["partitions"], payload["topic_id"])
            sent += len(ops)
        if failed is not None:
            raise failed
        return sent
