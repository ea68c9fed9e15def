"""Running the tasks of one connection side by side until the first of them ends.

Reconnect loops (a driver's link, the publisher's broker connection) catch the error that ends
a connection and try again. Inside such a loop an ``asyncio.TaskGroup`` is the wrong tool on
Python 3.11: when a child fails in the same loop iteration as the parent is cancelled (the
broker drops the connection just as SIGTERM arrives), the group takes the one CancelledError
thrown into it for its own abort and raises only the child's error, and a 3.11 group that
cancels its parent from ``__aexit__`` never uncancels it, so ``Task.cancelling()`` cannot tell
the two apart afterwards. The loop catches the child's error and reconnects forever; the
daemon never stops. ``first_to_end`` never cancels its caller, so a cancellation of the caller
always comes out of it as CancelledError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping

__all__ = ["first_to_end"]


def _retrieve(task: asyncio.Task[object]) -> None:
    # Marks the exception of a task we cancelled while it failed as seen (no asyncio warning);
    # the one that matters is raised by first_to_end itself.
    if not task.cancelled():
        task.exception()


async def first_to_end(coros: Mapping[str, Coroutine[object, object, object]]) -> None:
    """Run each coroutine as a task named by its key until the first one ends; cancel the rest
    and wait for them. Raises what a task that failed raised (the first in ``coros`` order when
    several ended together), returns if the first to end returned. A cancellation of the caller
    propagates as CancelledError, whatever the tasks did meanwhile."""
    tasks = [asyncio.create_task(coro, name=name) for name, coro in coros.items()]
    for task in tasks:
        task.add_done_callback(_retrieve)
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
    for task in tasks:
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            raise error
