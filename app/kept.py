"""Kept results: a small bounded, thread-safe, least-recently-used map for per-process caches.

Several analyses keep their last results in the process (the agreement analysis, the per-query
correlation, the review queue's order, …) because recomputing them on every page view costs
hundreds of milliseconds at TREC RAG scale. They all need the same four steps under one lock
(get and mark used, put, evict the least recently used, clear), bounded either by how many
results they keep or by how many bytes those results hold.

Every ``Kept`` registers itself so that :func:`clear_all` can forget every kept result at once:
a test that restores a database copy in place reuses the seed's ids, revisions and structure
tokens, so results kept for the seed would otherwise answer for the copy.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_registry: weakref.WeakSet[Kept[object, object]] = weakref.WeakSet()


class Kept(Generic[K, V]):
    """At most ``max_entries`` results (with ``size``, also at most ``max_bytes()`` bytes), oldest use dropped first.

    The bound is enforced in :meth:`put`, under the lock, so no reader ever sees more kept than the
    bound allows. With a byte bound, the most recently put result always stays however large it
    is: the caller that put it is about to use it, and dropping it would only make it recompute.
    ``size`` is called once per put (results are immutable once kept) and its figure remembered.
    """

    def __init__(
        self,
        max_entries: int,
        *,
        max_bytes: Callable[[], int] | None = None,
        size: Callable[[V], int] | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError("a Kept keeps at least one result")
        if (max_bytes is None) != (size is None):
            raise ValueError("a byte bound needs both max_bytes and size")
        self.max_entries = max_entries
        self._max_bytes = max_bytes  # a callable: the budget is a setting a test may change
        self._size = size
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        _registry.add(self)  # type: ignore[arg-type]

    def get(self, key: K) -> V | None:
        """The result kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key`` as the most recently used, dropping the oldest past the bounds."""
        nbytes = 0 if self._size is None else self._size(value)
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous[1]
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            self._evict()

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The kept result for ``key``, else ``compute()`` kept and returned.

        ``compute`` runs outside the lock (it may take seconds, and other keys must stay readable);
        two callers missing the same key at once both compute, and the later put wins, which is
        harmless because a key names its result. A kept None reads as a miss, so caches never keep None.
        """
        found = self.get(key)
        if found is not None:
            return found
        value = compute()
        self.put(key, value)
        return value

    def pop(self, key: K) -> V | None:
        """Forget ``key``'s result and return it (None when nothing was kept)."""
        with self._lock:
            found = self._entries.pop(key, None)
            if found is None:
                return None
            self._bytes -= found[1]
            return found[0]

    def discard_where(self, predicate: Callable[[K], bool]) -> None:
        """Forget every result whose key satisfies ``predicate``."""
        with self._lock:
            for key in [k for k in self._entries if predicate(k)]:
                self._bytes -= self._entries.pop(key)[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def values(self) -> list[V]:
        """The kept results, least recently used first (a copy: safe to iterate without the lock)."""
        with self._lock:
            return [value for value, _ in self._entries.values()]

    def keys(self) -> list[K]:
        with self._lock:
            return list(self._entries)

    @property
    def nbytes(self) -> int:
        """The sizes of the kept results as ``size`` measured them when they were put (0 without ``size``)."""
        with self._lock:  # inside ``put`` the bytes briefly exceed the bound, before its eviction
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def _evict(self) -> None:
        while len(self._entries) > self.max_entries:
            self._drop_oldest()
        if self._max_bytes is not None:
            budget = self._max_bytes()
            while len(self._entries) > 1 and self._bytes > budget:
                self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, (_, nbytes) = self._entries.popitem(last=False)
        self._bytes -= nbytes


def clear_all() -> None:
    """Forget every result kept by every :class:`Kept` of this process."""
    for kept in list(_registry):
        kept.clear()
