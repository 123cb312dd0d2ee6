"""A gateway's background passes (transaction sweeps, log reconciliation).

How this works: ``Periodic.start`` runs ``tick`` once per ``interval`` seconds on the
gateway's loop until ``stop``; a tick that raises is logged and the next one runs as
usual, so a shard being down never ends the pass.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("rafka.gateway")


class Periodic:
    """Calls ``tick`` every ``interval`` seconds between ``start`` and ``stop``."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def tick(self) -> Any:
        raise NotImplementedError

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.tick()
            except Exception:
                log.exception("%s pass failed", type(self).__name__)
