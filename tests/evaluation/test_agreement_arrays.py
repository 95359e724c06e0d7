"""The array form of the κ tables counts exactly what the per-passage ``confusion`` loop counts."""

from __future__ import annotations

import random

from app.evaluation.agreement import LabelledPassage, _PassageArrays, confusion, confusion_of


def _random_passages(seed: int, n: int) -> list[LabelledPassage]:
    rng = random.Random(seed)
    return [
        LabelledPassage(rng.randint(-1, 6), tuple(rng.randint(-3, 4) for _ in range(rng.randint(0, 3))))
        for _ in range(n)
    ]


def _sets(rng: random.Random) -> frozenset[int]:
    return frozenset(v for v in range(-3, 7) if rng.random() < 0.4)


def test_arrays_match_the_loop_on_random_passages_and_sets() -> None:
    rng = random.Random(7)
    for seed in range(20):
        passages = _random_passages(seed, rng.randint(0, 200))
        arrays = _PassageArrays.of(passages)
        for _ in range(10):
            labels, relevances = _sets(rng), _sets(rng)
            assert confusion_of(arrays.predicted(labels), arrays.truth(relevances)) == confusion(
                passages, labels, relevances
            )


def test_no_passages_give_an_empty_confusion() -> None:
    arrays = _PassageArrays.of([])
    assert confusion_of(arrays.predicted(frozenset({1})), arrays.truth(frozenset({3}))) == confusion(
        [], frozenset({1}), frozenset({3})
    )
