"""Progress inside one model call: backends say how far they are without changing how they batch.

A job's batch is one ``method.grade`` call, and a backend splits it its own way (token-budget
batches on a GPU, concurrent requests over HTTP, encoder batches). Slicing the call from outside
would change those batches (throughput, and the padding that moves the last float digits), so
the backend reports instead: ``tracker(total)`` gives it a counter to advance after each unit of
work it finishes. The counter reaches whoever is listening in this context (``reporting``), and
costs nothing when nobody is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Listener = Callable[[float], None]  # hears the share of the current call that is done, in [0, 1)
_listener: ContextVar[Listener | None] = ContextVar("grading_progress", default=None)


@contextmanager
def reporting(listener: Listener) -> Iterator[None]:
    """Within this block, backends' trackers report to ``listener`` (on their own threads too)."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def tracker(total: int) -> Callable[[int], None]:
    """A thread-safe counter of ``total`` units: ``advance(n)`` after each n finished units.

    Call it before handing work to other threads (a context variable does not follow them). The
    listener hears ``done / total`` while work remains; the end is left to the caller's commit.
    """
    listener = _listener.get()
    if listener is None or total <= 0:
        return _ignore
    lock = threading.Lock()
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        with lock:
            done += n
            share = done / total
        if share < 1:
            listener(share)

    return advance


def _ignore(_: int) -> None:
    return None
