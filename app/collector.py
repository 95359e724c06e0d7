"""Pausing Python's cyclic garbage collector, counted, for work whose objects form no cycles.

Two kinds of work build hundreds of thousands of long- or short-lived containers that the collector
would scan again and again for nothing: a command's start-up (typer's, pydantic's and SQLAlchemy's
modules and classes, which live as long as the process) and a large import (each line's JSON, models
and row tuples, freed by reference counting line by line). Both pause the collector.

The pauses are counted, because they overlap: the CLI's start-up pause ends on a timer while the
import it started is still running, and two imports may run in two threads. The collector comes back
when the last pause ends, and only if it was enabled when the first one began (a caller that
disabled it itself keeps it disabled).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_was_enabled = False


def pause() -> Callable[[], None]:
    """Pause the collector; the returned function ends this pause (calling it again does nothing)."""
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    ended = threading.Event()

    def resume() -> None:
        global _holders
        with _lock:
            if ended.is_set():
                return
            ended.set()
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()

    return resume


@contextmanager
def paused() -> Iterator[None]:
    """The collector paused for the ``with`` block (see the module's docstring)."""
    resume = pause()
    try:
        yield
    finally:
        resume()


def _forked_child() -> None:
    """A forked child (a worker's pool process) inherits the pauses but none of the threads or timers
    that would end them: it starts with the collector as the first pause found it."""
    global _holders
    _holders = 0
    if _was_enabled:
        gc.enable()


os.register_at_fork(after_in_child=_forked_child)
