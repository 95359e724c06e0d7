"""app/kept.py: the bounded, thread-safe, least-recently-used map behind the per-process caches."""

from __future__ import annotations

import threading

import pytest

from app import kept
from app.kept import Kept


def _sized(max_entries: int, budget: list[int]) -> Kept[str, bytes]:
    """A Kept bounded by ``budget[0]`` bytes (a list: a test shrinks it), each value measured by its length."""
    return Kept(max_entries, max_bytes=lambda: budget[0], size=len)


def test_count_bound_drops_the_least_recently_used() -> None:
    store: Kept[str, int] = Kept(2)
    store.put("a", 1)
    store.put("b", 2)
    assert store.get("a") == 1  # a get refreshes: "b" is now the least recently used
    store.put("c", 3)
    assert store.keys() == ["a", "c"]
    assert store.get("b") is None
    assert len(store) == 2 and "c" in store and list(store) == ["a", "c"]


def test_put_again_replaces_and_refreshes() -> None:
    store: Kept[str, int] = Kept(2)
    store.put("a", 1)
    store.put("b", 2)
    store.put("a", 10)
    store.put("c", 3)
    assert dict(zip(store.keys(), store.values(), strict=True)) == {"a": 10, "c": 3}


def test_get_or_compute_computes_once_per_key() -> None:
    store: Kept[str, list[int]] = Kept(4)
    calls: list[str] = []

    def compute() -> list[int]:
        calls.append("x")
        return []  # an empty result is a result: kept, not recomputed

    first = store.get_or_compute("x", compute)
    assert store.get_or_compute("x", compute) is first
    assert calls == ["x"]


def test_byte_bound_keeps_the_newest_even_over_budget() -> None:
    budget = [10]
    store = _sized(8, budget)
    store.put("a", b"1234")
    store.put("b", b"5678")
    assert store.nbytes == 8
    store.put("c", b"90")  # 10 bytes: at the budget, nothing dropped
    assert store.keys() == ["a", "b", "c"]
    store.put("d", b"x" * 25)  # alone over the budget: everything older goes, the newest stays
    assert store.keys() == ["d"]
    assert store.nbytes == 25


def test_a_shrunk_budget_applies_at_the_next_put() -> None:
    budget = [100]
    store = _sized(8, budget)
    for key in "abc":
        store.put(key, b"x" * 10)
    budget[0] = 15
    assert store.keys() == ["a", "b", "c"]  # nothing is dropped until something is put
    store.put("d", b"y")
    assert store.keys() == ["c", "d"]
    assert store.nbytes == 11


def test_pop_discard_and_clear_keep_nbytes_right() -> None:
    store = _sized(8, [1000])
    for key, size in (("a", 1), ("b", 2), ("c", 4), ("d", 8)):
        store.put(key, b"x" * size)
    assert store.pop("b") == b"xx"
    assert store.pop("b") is None
    assert store.nbytes == 13
    store.discard_where(lambda key: key in {"a", "d", "missing"})
    assert store.keys() == ["c"]
    assert store.nbytes == 4
    store.put("c", b"")  # a replaced value's bytes are no longer counted
    assert store.nbytes == 0
    store.put("e", b"x" * 3)
    store.clear()
    assert len(store) == 0 and store.nbytes == 0


def test_clear_all_clears_every_instance() -> None:
    first: Kept[str, int] = Kept(2)
    second = _sized(2, [10])
    first.put("a", 1)
    second.put("b", b"12")
    kept.clear_all()
    assert len(first) == 0 and len(second) == 0 and second.nbytes == 0


def test_a_byte_bound_needs_both_callables_and_one_entry() -> None:
    with pytest.raises(ValueError):
        Kept(0)
    with pytest.raises(ValueError):
        Kept(2, max_bytes=lambda: 10)
    with pytest.raises(ValueError):
        Kept(2, size=len)


def test_many_threads_never_exceed_the_bounds() -> None:
    store = _sized(5, [40])
    seen: list[tuple[int, int]] = []
    barrier = threading.Barrier(8)

    def work(thread: int) -> None:
        barrier.wait()  # start together, so that puts and gets interleave
        for i in range(300):
            key = f"{(thread * 7 + i) % 23}"
            if store.get(key) is None:
                store.put(key, b"x" * (1 + i % 9))
            values = store.values()  # one consistent copy, taken under the lock
            seen.append((len(values), sum(map(len, values))))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(n for n, _ in seen) <= 5
    assert max(b for _, b in seen) <= 40  # a value alone (9 bytes at most) is always within budget here
    assert store.nbytes == sum(len(v) for v in store.values())
