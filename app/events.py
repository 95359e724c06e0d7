"""Live events per collection: Redis pub/sub when ``RUBRIC_REDIS_URL`` is set, else an in-process broadcaster.

Publishers (Celery workers, the embedded worker's threads) call the sync ``publish()`` whichever
transport is active. Events are small JSON objects with a ``type``; their SSE event name is their
``event`` when they have one (``job-17``: only that job's row listens), else their ``type``. They
carry facts (a revision, a job's counters) for pages to re-fetch on, never computed results; what
each one means is in ``app/jobs/events.py``.

Subscribers are the web app's Server-Sent Event streams, and they are async: an idle stream is a
suspended coroutine waiting on its own bounded ``asyncio.Queue``, holding no thread, no database
connection and no Redis connection of its own. Per process there is at most one Redis pub/sub
connection per event loop (``_RedisHub``), fanning out to those queues. ``listen()`` remains for
sync tools and tests that watch events from a thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from functools import lru_cache
from typing import Any, Protocol

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.config import get_settings
from app.errors import TooMany

_CHANNEL = "rubric:events:{}"
# Events queued for one slow reader; past it the oldest are dropped (progress and revisions are
# superseded by the next event, so a slow tab loses stale states, and the server never grows memory).
INBOX_SIZE = 64
log = logging.getLogger(__name__)

Event = dict[str, Any]


class _Inbox(Protocol):
    def offer(self, event: Event) -> None:
        """Hand ``event`` over from any thread; never blocks and never raises."""


class _AsyncInbox:
    """One stream's bounded queue, owned by its event loop; publishers on other threads go through the loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Event] = asyncio.Queue(INBOX_SIZE)

    def offer(self, event: Event) -> None:
        try:
            self._loop.call_soon_threadsafe(self.put, event)
        except RuntimeError:  # the loop is closed: the stream is gone with it
            return

    def put(self, event: Event) -> None:
        """On the loop's thread only."""
        if self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait(event)

    async def next(self, timeout: float) -> Event | None:
        """The next event, or None after ``timeout`` seconds of quiet (the caller sends a keep-alive)."""
        try:
            async with asyncio.timeout(timeout):
                return await self._queue.get()
        except TimeoutError:
            return None


class _ThreadInbox:
    """A bounded queue for a sync listener (tools and tests watching from a thread)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Event] = queue.Queue(INBOX_SIZE)

    def offer(self, event: Event) -> None:
        while True:
            try:
                self.queue.put_nowait(event)
                return
            except queue.Full:
                with suppress(queue.Empty):
                    self.queue.get_nowait()


class _LocalBroadcaster:
    """Fan-out to every subscriber's inbox, within this process (no Redis)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[int, list[_Inbox]] = {}

    def publish(self, collection_id: int, event: Event) -> None:
        with self._lock:
            targets = list(self._subscribers.get(collection_id, []))
        for target in targets:
            target.offer(event)

    def add(self, collection_id: int, inbox: _Inbox) -> None:
        with self._lock:
            self._subscribers.setdefault(collection_id, []).append(inbox)

    def remove(self, collection_id: int, inbox: _Inbox) -> None:
        with self._lock:
            inboxes = self._subscribers.get(collection_id, [])
            if inbox in inboxes:
                inboxes.remove(inbox)
            if not inboxes:
                self._subscribers.pop(collection_id, None)

    def subscriber_count(self, collection_id: int) -> int:
        with self._lock:
            return len(self._subscribers.get(collection_id, []))

    @contextmanager
    def subscribe(self, collection_id: int) -> Iterator[queue.Queue[Event]]:
        inbox = _ThreadInbox()
        self.add(collection_id, inbox)
        try:
            yield inbox.queue
        finally:
            self.remove(collection_id, inbox)


LOCAL = _LocalBroadcaster()


@lru_cache(maxsize=4)
def _client_for(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)  # thread-safe, with its own connection pool: one per process and URL


def redis_client() -> Any:
    """The process's Redis client for ``RUBRIC_REDIS_URL``, or None in embedded mode."""
    url = get_settings().redis_url
    return _client_for(url) if url else None


def publish(collection_id: int, event: Event) -> None:
    """Send ``event`` to everyone watching the collection (never raises: events are best effort)."""
    try:
        client = redis_client()
        if client is None:
            LOCAL.publish(collection_id, event)
        else:
            client.publish(_CHANNEL.format(collection_id), json.dumps(event))
    except Exception:  # noqa: BLE001  a broken event stream must not fail a grading batch
        return


def listen(collection_id: int, timeout: float = 15.0) -> Iterator[Event | None]:
    """Events for one collection, for sync code in a thread; yields None after ``timeout`` seconds of quiet.

    The web app does not use this (its streams are async, see ``subscription``).
    """
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


# ---- async subscribers: one shared Redis pub/sub per event loop ------------------------------


class _RedisHub:
    """One Redis pub/sub connection for every stream of one event loop, fanned out to their inboxes.

    Invariants: ``_inboxes`` holds exactly the open streams; a channel is subscribed in Redis while
    it has an inbox (the reader repairs both directions every ``POLL`` seconds, so a lost reply or
    a reconnect cannot leave a stream deaf or a channel leaked); the hub closes its connection and
    leaves ``_HUBS`` as soon as no stream is open. ``leave`` is sync, so a cancelled stream (client
    gone, server shutting down) always gives its place back.
    """

    POLL = 0.5  # seconds; how often the reader looks up from the socket to reconcile channels

    def __init__(self, url: str) -> None:
        import redis.asyncio

        self.url = url
        self._client = redis.asyncio.Redis.from_url(url, max_connections=1)
        self._pubsub: Any = self._client.pubsub()  # untyped in redis-py
        self._inboxes: dict[bytes, set[_AsyncInbox]] = {}
        self._confirmed: dict[bytes, asyncio.Event] = {}
        self._wake = asyncio.Event()
        self._connecting = asyncio.Lock()
        self._reader = asyncio.get_running_loop().create_task(self._read(), name="rubric-events-redis")

    async def join(self, channel: bytes, inbox: _AsyncInbox) -> None:
        """Add ``inbox``; returns once Redis confirmed the channel (or after a few seconds, best effort)."""
        self._inboxes.setdefault(channel, set()).add(inbox)
        confirmed = self._confirmed.setdefault(channel, asyncio.Event())
        self._wake.set()
        if not self._subscribed(channel):
            try:
                await self._connected()
                await self._pubsub.subscribe(channel)
            except Exception:  # Redis down: the stream stays open on keep-alives; the reader resubscribes
                log.warning("live events: cannot subscribe to %r yet", channel, exc_info=True)
                return
        with suppress(TimeoutError):
            async with asyncio.timeout(5):
                await confirmed.wait()

    def leave(self, channel: bytes, inbox: _AsyncInbox) -> None:
        inboxes = self._inboxes.get(channel)
        if inboxes is not None:
            inboxes.discard(inbox)
            if not inboxes:
                del self._inboxes[channel]
        self._wake.set()

    async def _connected(self) -> None:
        """Connect once: redis-py's PubSub would take a second pooled connection for a concurrent first use."""
        async with self._connecting:
            if self._pubsub.connection is None:
                await self._pubsub.connect()

    def _subscribed(self, channel: bytes) -> bool:
        pubsub = self._pubsub
        return channel in pubsub.channels and channel not in pubsub.pending_unsubscribe_channels

    async def _read(self) -> None:
        try:
            while self._inboxes:
                try:
                    await self._reconcile()
                    if not self._pubsub.subscribed:
                        await self._idle()
                        continue
                    message = await self._pubsub.get_message(timeout=self.POLL)
                    if message is not None:
                        self._dispatch(message)
                except asyncio.CancelledError:
                    raise
                except Exception:  # a lost connection: the next read reconnects and resubscribes
                    log.warning("live events: Redis pub/sub failed; retrying", exc_info=True)
                    await asyncio.sleep(1.0)
        finally:
            key = (asyncio.get_running_loop(), self.url)
            if _HUBS.get(key) is self:
                del _HUBS[key]
            await self._pubsub.aclose()
            await self._client.aclose()

    async def _idle(self) -> None:
        """Nothing subscribed (a join is sending SUBSCRIBE): wait for the next change."""
        self._wake.clear()
        with suppress(TimeoutError):
            async with asyncio.timeout(self.POLL):
                await self._wake.wait()

    async def _reconcile(self) -> None:
        stale = [name for name in self._pubsub.channels if name not in self._inboxes]
        stale = [name for name in stale if name not in self._pubsub.pending_unsubscribe_channels]
        missing = [name for name in self._inboxes if not self._subscribed(name)]
        for name in stale:
            self._confirmed.pop(name, None)
        if stale or missing:
            await self._connected()
        if stale:
            await self._pubsub.unsubscribe(*stale)
        if missing:
            await self._pubsub.subscribe(*missing)

    def _dispatch(self, message: dict[str, Any]) -> None:
        channel = message["channel"]
        if message["type"] == "subscribe":
            self._confirmed.setdefault(channel, asyncio.Event()).set()
        if message["type"] != "message":
            return
        try:
            event = json.loads(message["data"])
        except ValueError:
            log.warning("live events: dropped a malformed message on %r", channel)
            return
        for inbox in list(self._inboxes.get(channel, ())):
            inbox.put(event)


_HUBS: dict[tuple[asyncio.AbstractEventLoop, str], _RedisHub] = {}


def _hub(url: str) -> _RedisHub:
    key = (asyncio.get_running_loop(), url)
    hub = _HUBS.get(key)
    if hub is None:
        hub = _HUBS[key] = _RedisHub(url)
    return hub


@asynccontextmanager
async def subscription(collection_id: int) -> AsyncIterator[_AsyncInbox]:
    """An inbox of the collection's events for one async stream; leaving it (however) unsubscribes."""
    inbox = _AsyncInbox()
    url = get_settings().redis_url
    if not url:
        LOCAL.add(collection_id, inbox)
        try:
            yield inbox
        finally:
            LOCAL.remove(collection_id, inbox)
        return
    hub = _hub(url)
    channel = _CHANNEL.format(collection_id).encode()
    try:
        await hub.join(channel, inbox)
        yield inbox
    finally:
        hub.leave(channel, inbox)


# ---- Server-Sent Events for the web app ------------------------------------------------------


class StreamSlots:
    """Open streams per user in this process; ``take`` refuses past the limit (thread-safe).

    Re-entrant lock: a response's finaliser gives its slot back, and the garbage collector may
    run it on a thread that is inside ``take`` already.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._open: dict[str, int] = {}

    def take(self, user: str, limit: int) -> None:
        with self._lock:
            if self._open.get(user, 0) >= limit:
                raise TooMany(
                    f"too many live-event streams open: at most {limit} per user; "
                    "close other workbench tabs and reload this one",
                    retry_after=5,
                )
            self._open[user] = self._open.get(user, 0) + 1

    def give_back(self, user: str) -> None:
        with self._lock:
            left = self._open.get(user, 0) - 1
            if left > 0:
                self._open[user] = left
            else:
                self._open.pop(user, None)

    def count(self, user: str) -> int:
        with self._lock:
            return self._open.get(user, 0)


STREAM_SLOTS = StreamSlots()


def _frame(event: Event) -> str:
    name = event.get("event", event["type"])
    return f"event: {name}\ndata: {json.dumps(event)}\n\n"


async def _sse(collection_id: int, keepalive: float) -> AsyncGenerator[str, None]:
    async with subscription(collection_id) as inbox:
        yield "retry: 2000\n\n"  # subscribed before the first byte: a client that sees it misses nothing
        while True:
            event = await inbox.next(keepalive)
            yield ": keep-alive\n\n" if event is None else _frame(event)


class EventStreamResponse(StreamingResponse):
    """SSE of one collection's events for ``user``, who holds one slot of ``STREAM_SLOTS`` until it ends.

    The slot is given back and the subscription closed however the response ends: client gone
    (Starlette cancels the body on ``http.disconnect``), server shutdown (uvicorn cancels the task
    after its graceful-shutdown timeout), an error, a cancellation before the body started, or a
    response that is never sent at all (the finaliser).
    """

    def __init__(self, collection_id: int, user: str) -> None:
        self._body = _sse(collection_id, get_settings().stream_keepalive_seconds)
        self._user: str | None = user
        super().__init__(
            self._body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._give_back()
            # Run the body's cleanup now: a body cancelled while parked at a yield is not closed by
            # Starlette. Its cleanup never awaits, so a pending cancellation cannot cut it short.
            with suppress(RuntimeError):
                await self._body.aclose()

    def _give_back(self) -> None:
        user, self._user = self._user, None
        if user is not None:
            STREAM_SLOTS.give_back(user)

    def __del__(self) -> None:
        self._give_back()


def open_event_stream(collection_id: int, user: str) -> EventStreamResponse:
    """Take one of ``user``'s stream slots (``TooMany`` past the limit) and answer with the stream."""
    STREAM_SLOTS.take(user, get_settings().max_streams_per_user)
    return EventStreamResponse(collection_id, user)
