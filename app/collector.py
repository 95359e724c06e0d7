"""Pausing Python's cyclic garbage collector, counted, for work whose objects form no cycles.

Two kinds of work build hundreds of thousands of long- or short-lived containers that the collector
would scan again and again for nothing: a command's start-up (typer's, pydantic's and SQLAlchemy's
modules and classes, which live as long as the process) and a large import (each line's JSON, models
and row tuples, freed by reference counting line by line). Both pause the collector.

The pauses are counted, because they overlap: the CLI's start-up pause ends on a timer while the
import it started is still running, and two imports may run in two threads. The collector comes back
when the last pause ends, and only if it was enabled when the first one began (a caller that
disabled it itself keeps it disabled).

A process is also long-lived (the web server, a worker: the default) or one-shot (a CLI command, which
ends right after its answer). A one-shot process skips the work that pays back only over later requests
(app/collections/snapshot.py: a full collection after a cold build), and freezes (``gc.freeze``) what it
built while paused when the last pause ends: its cyclic garbage is not worth finding before it exits.
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
_one_shot = False


def mark_one_shot(one_shot: bool = True) -> None:
    """Declare this process one-shot (``True``: it ends after one answer) or long-lived (``False``)."""
    global _one_shot
    _one_shot = one_shot


def is_one_shot() -> bool:
    """Whether this process ends after one answer (``mark_one_shot``); long-lived unless marked."""
    return _one_shot


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
                if _one_shot:
                    # What was built while paused (a command's start-up, its snapshot) would otherwise sit in
                    # the young generation, and the first young and middle collections would walk it all
                    # (0.1-0.3 s at 10×); freezing moves the generations' lists whole and walks nothing.
                    gc.freeze()
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
