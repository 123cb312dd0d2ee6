"""Driving a request's handler coroutine without an asyncio Task.

How this works: a request mostly waits for one shard reply, and some (ApiVersions,
Metadata) await nothing at all. An asyncio Task would defer the handler's first
step to the next loop pass and add its own bookkeeping to every wake-up.
``InlineRequest`` is a Future that steps the coroutine itself: the first step runs
at once, inside ``data_received``; when the coroutine awaits a future, the next
step runs from that future's done callback; a bare ``yield`` (``asyncio.sleep(0)``)
is resumed on the next loop pass. Every step runs in the request's own copy of
the context, as a Task's steps do. The future ends with the coroutine's result or
exception; ``cancel()`` closes the coroutine, so its ``finally`` blocks run.
``on_done``, when set, is called at once when a later step finishes the request
(a done callback would wait for the next loop pass); a request finished during
construction is the caller's to handle.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Callable, Coroutine


class InlineRequest(asyncio.Future):  # type: ignore[type-arg]
    """A Future that runs ``coro`` to completion, starting now."""

    def __init__(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context | None = None) -> None:
        super().__init__()
        self._coro = coro
        self._context = context if context is not None else contextvars.copy_context()
        self.on_done: Callable[[InlineRequest], None] | None = None
        self._step()

    def _step(self, _awaited: Any = None) -> None:
        if self.done():
            return
        try:
            awaited = self._context.run(self._coro.send, None)
        except StopIteration as stop:
            super().set_result(stop.value)
        except asyncio.CancelledError:
            super().cancel()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            super().set_exception(exc)
        else:
            if awaited is None:
                self.get_loop().call_soon(self._step)
            else:
                awaited._asyncio_future_blocking = False
                awaited.add_done_callback(self._step)
            return
        if self.on_done is not None:
            self.on_done(self)

    def cancel(self, msg: Any = None) -> bool:
        if self.done():
            return False
        try:
            self._context.run(self._coro.close)
        except RuntimeError:  # cancelled from inside its own step: the context is entered
            self._coro.close()
        return super().cancel(msg)
