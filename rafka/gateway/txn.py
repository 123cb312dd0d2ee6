"""The gateway as transaction-marker courier, and the sweeper that finishes transactions.

How this works: shards never talk to each other, so when a transaction
coordinator shard has *decided* a transaction (PrepareCommit/PrepareAbort,
durable in its WAL) it hands the gateway a completion ``{org_id,
transactional_id, producer_id, producer_epoch, committed, partitions, groups}``.
``complete_transaction`` sends one WRITE_TXN_MARKERS op to every shard owning a
participant partition or group, and only when all of them have written their
markers durably, COMPLETE_TXN to the coordinator shard. Every step is
idempotent, so a failure anywhere (a shard killed mid-commit) just leaves the
transaction prepared for the sweeper to finish. Within a gateway one
completion runs at a time; the sweeper only picks up transactions prepared
for a while, which keeps couriers of different gateways apart in practice.

``TxnSweeper`` asks every live shard once a second for transactions that need
finishing (TXN_SWEEP): prepared ones older than ``min_age_ms`` — so it does not
race the EndTxn that is finishing them right now — and Ongoing ones past their
timeout, which the shard has just moved to PrepareAbort with a bumped epoch.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rafka.gateway.periodic import Periodic
from rafka.rail import Op

log = logging.getLogger("rafka.gateway.txn")


_inflight: dict[tuple[Any, ...], asyncio.Future[bool]] = {}


async def complete_transaction(router: Any, completion: dict[str, Any], trace: str | None = None) -> bool:
    """Write the markers of ``completion`` everywhere, then complete it; False if a step failed.

    Within one gateway a completion runs once at a time: a second caller (the
    sweeper while EndTxn is at it) waits for the first instead of sending its
    own markers, which could otherwise land after the producer's next
    transaction has begun.
    """
    key = (completion["org_id"], completion["transactional_id"], completion["producer_id"],
           completion["producer_epoch"], completion["committed"])
    running = _inflight.get(key)
    if running is not None:
        return await asyncio.shield(running)
    fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    _inflight[key] = fut
    try:
        ok = await _complete(router, completion, trace)
    except BaseException:
        ok = False
        raise
    finally:
        del _inflight[key]
        fut.set_result(ok)
    return ok


async def _complete(router: Any, completion: dict[str, Any], trace: str | None) -> bool:
    org_id = completion["org_id"]
    by_shard: dict[int, dict[str, Any]] = {}

    def marker(shard: int) -> dict[str, Any]:
        return by_shard.setdefault(shard, {"producer_id": completion["producer_id"],
                                           "producer_epoch": completion["producer_epoch"],
                                           "committed": completion["committed"], "partitions": [], "groups": []})

    for topic, partition in completion["partitions"]:
        marker(router.shard_for_partition(org_id, topic, partition))["partitions"].append([topic, partition])
    for group_id in completion["groups"]:
        marker(router.shard_for_group(org_id, group_id))["groups"].append(group_id)
    shards = list(by_shard)
    results = await asyncio.gather(*(router.call(s, Op.TXN_WRITE_MARKERS, org_id, {"markers": [by_shard[s]]}, trace)
                                     for s in shards), return_exceptions=True)
    failed = [s for s, r in zip(shards, results) if isinstance(r, BaseException)]
    if failed:
        log.warning("transaction %r: markers not written on shards %s yet; the sweeper will retry",
                    completion["transactional_id"], failed)
        return False
    op = {k: completion[k] for k in ("transactional_id", "producer_id", "producer_epoch", "committed")}
    try:
        await router.call(router.shard_for_group(org_id, completion["transactional_id"]), Op.TXN_COMPLETE,
                          org_id, op, trace)
    except Exception as exc:
        log.warning("transaction %r: completion failed (%s); the sweeper will retry",
                    completion["transactional_id"], exc)
        return False
    return True


class TxnSweeper(Periodic):
    """Finishes prepared and timed-out transactions on every shard, once per ``interval``."""

    def __init__(self, router: Any, interval: float = 1.0, min_age_ms: int = 2000) -> None:
        super().__init__(interval)
        self.router = router
        self.min_age_ms = min_age_ms

    async def tick(self) -> int:
        return await self.sweep_once()

    async def sweep_once(self) -> int:
        """One pass over the live shards; the number of transactions completed."""
        router = self.router
        calls = [router.call(s, Op.TXN_SWEEP, "", {"min_age_ms": self.min_age_ms})
                 for s in range(router.shard_count) if router.is_alive(s)]
        done = 0
        for answer in asyncio.as_completed(calls):  # each shard's as it comes: a stalled one holds up no other's
            try:
                res = await answer
            except Exception as exc:
                log.debug("sweep of a shard failed: %s", exc)  # down or restarting: the next pass
                continue
            for completion in res.get("complete", []):
                if await complete_transaction(router, completion):
                    done += 1
                    log.info("completed transaction %r (%s) left prepared or timed out",
                             completion["transactional_id"], "commit" if completion["committed"] else "abort")
        return done
