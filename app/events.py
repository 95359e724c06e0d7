"""Live events per collection: Redis pub/sub when ``RUBRIC_REDIS_URL`` is set, else an in-process broadcaster.

Publishers (workers, the embedded worker) and subscribers (the web app's SSE streams) use the same
two functions whichever transport is active. Events are small JSON objects with a ``type``.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from app.config import get_settings

_CHANNEL = "rubric:events:{}"


class _LocalBroadcaster:
    """Fan-out to every subscriber's queue, within this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[int, list[queue.Queue[dict[str, Any]]]] = {}

    def publish(self, collection_id: int, event: dict[str, Any]) -> None:
        with self._lock:
            targets = list(self._subscribers.get(collection_id, []))
        for target in targets:
            target.put(event)

    @contextmanager
    def subscribe(self, collection_id: int) -> Iterator[queue.Queue[dict[str, Any]]]:
        inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self._subscribers.setdefault(collection_id, []).append(inbox)
        try:
            yield inbox
        finally:
            with self._lock:
                self._subscribers[collection_id].remove(inbox)


LOCAL = _LocalBroadcaster()


@lru_cache(maxsize=4)
def _client_for(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)  # thread-safe, with its own connection pool: one per process and URL


def redis_client() -> Any:
    """The process's Redis client for ``RUBRIC_REDIS_URL``, or None in embedded mode."""
    url = get_settings().redis_url
    return _client_for(url) if url else None


def publish(collection_id: int, event: dict[str, Any]) -> None:
    """Send ``event`` to everyone watching the collection (never raises: events are best effort)."""
    try:
        client = redis_client()
        if client is None:
            LOCAL.publish(collection_id, event)
        else:
            client.publish(_CHANNEL.format(collection_id), json.dumps(event))
    except Exception:  # noqa: BLE001  a broken event stream must not fail a grading batch
        return


def listen(collection_id: int, timeout: float = 15.0) -> Iterator[dict[str, Any] | None]:
    """Events for one collection; yields None after ``timeout`` seconds of quiet (SSE keep-alives)."""
    client = redis_client()
    if client is None:
        with LOCAL.subscribe(collection_id) as inbox:
            while True:
                try:
                    yield inbox.get(timeout=timeout)
                except queue.Empty:
                    yield None
        return
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(_CHANNEL.format(collection_id))
    try:
        while True:
            message = pubsub.get_message(timeout=timeout)
            yield json.loads(message["data"]) if message else None
    finally:
        pubsub.close()
