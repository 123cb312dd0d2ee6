"""Driving a request's handler coroutine without an asyncio Task.

How this works: a request mostly waits for one shard reply, and some (ApiVersions,
Metadata) await nothing at all. An asyncio Task would defer the handler's first
step to the next loop pass and add its own bookkeeping to every wake-up.
``InlineRequest`` is a Future that steps the coroutine itself: the first step runs
at once, inside ``data_received``; when the coroutine awaits a future, the next
step runs from that future's done callback; a bare ``yield`` (``asyncio.sleep(0)``)
is resumed on the next loop pass. Every step runs in the request's own copy of
the context, as a Task's steps do. The future ends with the coroutine's result or
exception; ``cancel()`` works as a Task's: the awaited future is cancelled and the
coroutine gets ``CancelledError`` at its ``await``, so its ``finally`` blocks run.
Unlike a Task, a handler has no current task: ``asyncio.timeout()`` and
``TaskGroup`` are not available to handlers (``asyncio.wait_for`` is, on 3.11).
``on_done``, when set, is called at once when a later step finishes the request
(a done callback would wait for the next loop pass); a request finished during
construction is the caller's to handle. Likewise a ``ReplyFuture`` (what the router
hands out for a shard's reply) steps the request awaiting it as soon as ``resolve``
sets its result, inside the read that brought the reply, not on the next loop pass;
it holds that request itself rather than a done callback, and steps it on the next
loop pass when it fails or is cancelled instead, as a done callback would.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any


class ReplyFuture(asyncio.Future):  # type: ignore[type-arg]
    """A Future that steps the ``InlineRequest`` awaiting it: at once when ``resolve`` sets
    its result, on the next loop pass when it fails or is cancelled. (Complete it with
    ``resolve``: ``set_result`` would leave that request waiting.)"""

    __slots__ = ("waiter",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self.waiter: InlineRequest | None = None

    def resolve(self, result: Any) -> None:
        """Set the result; the waiting request's next step runs now."""
        self.set_result(result)
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            waiter._step(self)

    def set_exception(self, exception: Any) -> None:
        super().set_exception(exception)
        self._step_waiter_soon()

    def cancel(self, msg: Any = None) -> bool:
        if not super().cancel(msg):
            return False
        self._step_waiter_soon()
        return True

    def _step_waiter_soon(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            self.get_loop().call_soon(waiter._step, self)


class InlineRequest(asyncio.Future):  # type: ignore[type-arg]
    """A Future that runs ``coro`` to completion, starting now."""

    __slots__ = ("_context", "_coro", "_must_cancel", "_waiting", "on_done")

    def __init__(self, coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop,
                 context: contextvars.Context | None = None) -> None:
        super().__init__(loop=loop)  # named: finding the running loop costs a getpid() syscall on 3.11
        self._coro = coro
        self._context = context if context is not None else contextvars.copy_context()
        self._waiting: asyncio.Future[Any] | None = None  # what the coroutine awaits
        self._must_cancel = False
        self.on_done: Callable[[InlineRequest], None] | None = None
        self._step()

    def _step(self, _awaited: Any = None) -> None:
        if self.done():
            return
        self._waiting = None
        try:
            if self._must_cancel:
                self._must_cancel = False
                awaited = self._context.run(self._coro.throw, asyncio.CancelledError())
            else:
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
                self._waiting = awaited
                if type(awaited) is ReplyFuture:
                    awaited.waiter = self
                else:
                    awaited.add_done_callback(self._step)
                if self._must_cancel and awaited.cancel():  # cancelled during this step
                    self._must_cancel = False
            return
        if self.on_done is not None:
            self.on_done(self)

    def cancel(self, msg: Any = None) -> bool:
        """Cancel like a Task: the awaited future is cancelled, so the coroutine gets
        ``CancelledError`` at its ``await`` on its next step (its cleanup runs there)."""
        if self.done():
            return False
        waiting = self._waiting
        if waiting is not None and waiting.cancel():
            return True
        self._must_cancel = True  # the next step throws CancelledError in
        return True
