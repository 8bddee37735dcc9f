"""A streamed reply read on a thread of its own, so that a cancel is noticed at once.

The reading thread blocks on the socket and stamps each event's arrival as it comes (the
stream's timing stays the server's, whatever the consumer does between events: naming a
token through the server's tokenize endpoint, a pane's repaint); the consumer waits on a
queue in slices of :data:`POLL_S` and leaves when ``cancel`` is set. Leaving (a cancel, the
consumer stopping early, an error) shuts the socket down, which wakes the reading thread and
tells the server to stop generating: a server that queues requests (llama-cpp-python started
with ``--interrupt_requests False``) would otherwise finish the abandoned one first.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from llm_lens.core.engines.openai.client import Endpoint, Event

POLL_S = 0.05  # how often the consumer looks at ``cancel`` while no event has come
_DONE = object()


def background_events(
    endpoint: Endpoint, path: str, body: dict[str, Any], cancel: threading.Event
) -> Iterator[Event]:
    """:meth:`Endpoint.stream`'s events, read on a thread; returns early once ``cancel`` is
    set (within :data:`POLL_S`), and re-raises the reader's :class:`ServerError` in order,
    after the events that came before it."""
    items: queue.SimpleQueue[Any] = queue.SimpleQueue()
    closers: list[Callable[[], None]] = []
    stop = threading.Event()

    def read() -> None:
        try:
            for event in endpoint.stream(path, body, closers.append):
                items.put(event)
                if stop.is_set():
                    break
            items.put(_DONE)
        except BaseException as exc:  # noqa: BLE001 (handed to the consumer, raised there)
            items.put(exc)

    reader = threading.Thread(target=read, name="llm-lens served stream", daemon=True)
    reader.start()
    try:
        while not cancel.is_set():
            try:
                item = items.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        for close in closers:
            close()
